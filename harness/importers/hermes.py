"""Import Hermes Agent sessions (``hermes -z``; docs/agents-hermes.md) as normalized transcripts.

Two sources, told apart by their content:

* the **session store**, ``state.db`` (SQLite; ``$HERMES_HOME/state.db``): table ``sessions`` (model,
  system prompt, working folder, token totals, end reason) and table ``messages`` (OpenAI chat messages:
  ``user``, ``assistant`` with ``tool_calls``, ``tool`` with ``tool_call_id``). One run per session. This is
  what the adapter reads after an attempt;
* an **export**, ``hermes sessions export FILE`` (JSONL: one session per line, with its ``messages``).

Each assistant message is one model round of the ``RecordedRun``; the ``tool`` messages after it are its calls'
results. A tool
result is the JSON text Hermes gave the model (``{"output", "exit_code", "error"}`` for ``terminal``): a
non-zero ``exit_code`` is a failed call whatever else it says; ``error`` or ``success: false`` is the
agent's own failure signal (``agent_is_error``), and the parsed object is kept as ``agent_details``. A role,
a result for no call or a call with no result where the run went on is an error naming the file and the
row (``messages row 12``) or line: nothing is dropped.

Hermes keeps no record of a failed model endpoint in its store (``-z`` prints "API call failed after N
retries: ..." and exits 0), so the adapter passes that output and the ``--usage-file`` report beside the
store (``read_attempt``).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.core.nesting import loads_json
from harness.core.errors import TranscriptImportError
from harness.importers.events import write_runs
from harness.importers.reader import SQLITE_MAGIC, Reader, store_copy, typed
from harness.importers.recorded import (
    RecordedCall,
    RecordedRound,
    RecordedRun,
    RunOutcome,
    closing_stop,
    settle_by_flags,
)
from harness.core.paths import relative_inside
from harness.core.transcript import ToolCallRecord, Usage

__all__ = ["FORMAT", "AGENT", "read_sessions", "read_attempt", "import_to_folder", "endpoint_failure"]

FORMAT = "hermes"
AGENT = "hermes"

SHELL_TOOLS = frozenset({"terminal"})
FILE_TOOLS = frozenset({"write_file", "patch", "read_file"})
_CONTENT_JSON_PREFIX = "\x00json:"
_ROLES = frozenset({"system", "user", "assistant", "tool"})
_UNKNOWN_TOOL = re.compile(r"^Tool '[^']*' does not exist\.")
_BAD_ARGUMENTS = "Error: Invalid JSON arguments"
_ENDPOINT_FAILED = re.compile(r"^(API call failed|Invalid API response) after \d+ retries: (?P<why>.*)", re.S)

_COMMON_LIMITS = [
    "ts: when the event was imported, not when it happened",
    "model_request: not stored; the conversation is the prompt, the model_response and the tool_result events",
    "model_response: usage, latency and the model id the endpoint reported are not stored per round "
    "(the run's token totals are in run_end)",
    "tool_result.details.duration_s: not stored (0)",
    "tool_result.details.cwd of terminal calls: Hermes does not store it; followed from call to call through "
    "workdir and a leading 'cd DIR' (a later cd in a command is not seen)",
    "run_start: agent_version, harness_commit, context, max_output, timeouts and tools are not stored",
    "run_end.exit_code and duration: not stored (duration_s is the session's start to end)",
    "tool_result.agent_is_error: Hermes stores no error flag; it is the result's own 'error' or 'success: false'",
]


def _text(content: object) -> str:
    """A message's content as text (Hermes stores multimodal content as ``\\x00json:`` + a list of parts)."""
    if isinstance(content, str) and content.startswith(_CONTENT_JSON_PREFIX):
        text = content
        try:
            content = loads_json(text[len(_CONTENT_JSON_PREFIX):])
        except ValueError:
            return text
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


# --------------------------------------------------------------------------------------------------
# The sources: (session row, [(message row, where)])

_Message = tuple[dict[str, Any], str]


def _no_blobs(row: dict[str, Any], where: str, reader: Reader) -> dict[str, Any]:
    """``row`` when every value is text, a number or NULL, as Hermes writes them; a blob (a damaged or foreign
    store) is an error naming the row and column, since the row is kept as JSON beside the transcript."""
    for column, value in row.items():
        if isinstance(value, bytes):
            reader.fail(f"{where}.{column}", f"a blob of {len(value)} bytes where Hermes stores text or a number")
    return row


def _store(path: Path, reader: Reader) -> list[tuple[dict[str, Any], list[_Message], bytes]]:
    try:
        with store_copy(path, "state.db") as con:
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table in ("sessions", "messages"):
                if table not in tables:
                    reader.fail(f"table {table}", "missing: this is not a Hermes session store")
            columns = {c[1] for c in con.execute("PRAGMA table_info(messages)")}
            active = " AND active = 1" if "active" in columns else ""
            out = []
            for row in con.execute("SELECT * FROM sessions ORDER BY started_at, id"):
                session = _no_blobs(dict(row), f"sessions row {row['id']}", reader)
                messages = [(_no_blobs(dict(m), f"messages row {m['id']}", reader), f"messages row {m['id']}")
                            for m in con.execute(
                                f"SELECT * FROM messages WHERE session_id = ?{active} ORDER BY id", (session["id"],))]
                raw = {**session, "messages": [m for m, _ in messages]}
                out.append((session, messages, (json.dumps(raw, indent=2, ensure_ascii=False) + "\n").encode()))
            orphan = con.execute("SELECT m.id, m.session_id FROM messages m LEFT JOIN sessions s "
                                 "ON s.id = m.session_id WHERE s.id IS NULL LIMIT 1").fetchone()
            if orphan is not None:
                reader.fail(f"messages row {orphan['id']}", f"belongs to session {orphan['session_id']}, "
                            "which is not in the store")
            return out
    except sqlite3.DatabaseError as exc:
        reader.fail("", f"not a readable SQLite session store ({exc})")


def _export(text: str, reader: Reader) -> list[tuple[dict[str, Any], list[_Message], bytes]]:
    out = []
    for where, line, session in reader.json_lines(text):
        if not isinstance(session, dict):
            reader.fail(where, f"expected a session object, got {type(session).__name__}")
        for key in ("id", "messages"):
            if key not in session:
                reader.fail(f"{where}.{key}", "missing: a Hermes export holds one session per line with its messages")
        if not isinstance(session["messages"], list):
            reader.fail(f"{where}.messages", "expected a list")
        messages = []
        for i, message in enumerate(session["messages"]):
            if not isinstance(message, dict):
                reader.fail(f"{where}.messages[{i}]", f"expected an object, got {type(message).__name__}")
            messages.append((message, f"{where}.messages[{i}]"))
        out.append(({k: v for k, v in session.items() if k != "messages"}, messages, (line + "\n").encode()))
    return out


# --------------------------------------------------------------------------------------------------
# Messages -> rounds


def _tool_calls(message: dict[str, Any], where: str, reader: Reader) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    if calls in (None, "", "[]"):
        return []
    if isinstance(calls, str):
        try:
            calls = loads_json(calls)
        except json.JSONDecodeError as exc:
            reader.fail(f"{where}.tool_calls", f"not valid JSON ({exc.msg})")
    if not isinstance(calls, list):
        reader.fail(f"{where}.tool_calls", f"expected a list, got {type(calls).__name__}")
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not isinstance(call.get("id"), str):
            reader.fail(f"{where}.tool_calls[{i}]", "expected {id, function: {name, arguments}}")
    return calls


def _relative(path: str, workspace: str) -> str:
    if workspace and not posixpath.isabs(path):
        return posixpath.normpath(path)
    if workspace:
        rel = relative_inside(path, workspace)
        return path if rel is None else rel
    return path


_LEADING_CD = re.compile(r"^\s*cd\s+(?:--\s+)?(?P<dir>'[^']*'|\"[^\"]*\"|[^\s;&|]+)\s*(?:&&|;|$)")


def _next_cwd(cwd: str, command: str | None) -> str:
    """Hermes' terminal keeps its folder between commands (a ``workdir`` or a ``cd`` sticks). The folder is
    followed through a leading ``cd DIR``; other changes (a ``cd`` later in a command, ``pushd``) are not
    seen, which the transcript's limits say."""
    m = _LEADING_CD.match(command or "")
    if not m or not cwd:
        return cwd
    target = m.group("dir").strip("'\"")
    if target.startswith(("~", "$")):
        return cwd
    return posixpath.normpath(posixpath.join(cwd, target))


def _new_call(raw: dict[str, Any], workspace: str, cwd: str = "") -> RecordedCall:
    function = raw["function"]
    text = function.get("arguments") if isinstance(function.get("arguments"), str) else json.dumps(function.get("arguments"))
    try:
        parsed = loads_json(text)
        arguments, error = (parsed, None) if isinstance(parsed, dict) else (None, "arguments are not a JSON object")
    except json.JSONDecodeError as exc:
        arguments, error = None, f"invalid JSON: {exc.msg}"
    call = RecordedCall(call_id=raw["id"], name=function["name"], arguments=arguments, arguments_text=text,
                        arguments_error=error, shell=function["name"] in SHELL_TOOLS, finished=False)
    if call.shell and arguments:
        command = arguments.get("command")
        call.command = command if isinstance(command, str) else None
        workdir = arguments.get("workdir")
        base = cwd or workspace
        if base:
            call.cwd = posixpath.normpath(posixpath.join(base, workdir)) if isinstance(workdir, str) else base
    return call


def _result(call: RecordedCall, content: str, workspace: str) -> None:
    """The call's result: what Hermes gave the model, read into the call (``settle_by_flags``)."""
    call.finished = True
    call.text = content
    try:
        # Hermes may append a note after the result's JSON ("\n\n[Tool loop warning: ...]"): read the JSON only.
        data, _ = json.JSONDecoder().raw_decode(content.lstrip())
    except ValueError:
        data = None
    if not isinstance(data, dict):
        call.bad_input = bool(_UNKNOWN_TOOL.match(content)) or content.startswith(_BAD_ARGUMENTS)
        settle_by_flags(call)
        return
    error = data.get("error")
    call.agent_is_error = bool(error) or data.get("success") is False
    call.agent_details = {k: v for k, v in data.items() if k not in ("output", "content")}
    if call.shell:
        exit_code = data.get("exit_code")
        call.exit_code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
        call.output = typed(data.get("output"), str, None)
        call.timed_out = call.exit_code is None and isinstance(error, str) and "timed out" in error.lower()
        call.truncated = data.get("truncated") is True
    if call.name in FILE_TOOLS:
        target = data.get("resolved_path") or (call.arguments or {}).get("path")
        if isinstance(target, str):
            call.path = _relative(target, workspace)
        if call.name == "write_file" and isinstance(data.get("bytes_written"), int):
            call.bytes = data["bytes_written"]
    settle_by_flags(call)


def _rounds(messages: list[_Message], workspace: str, reader: Reader
            ) -> tuple[list[RecordedRound], list[RecordedCall], list[str], dict[str, Any] | None]:
    """Rounds, their calls, the user messages' texts, and the last message (how the session ends)."""
    rounds: list[RecordedRound] = []
    calls: list[RecordedCall] = []
    users: list[str] = []
    open_calls: dict[str, RecordedCall] = {}
    last: dict[str, Any] | None = None
    cwd = workspace  # the terminal's folder, carried from command to command as Hermes does
    for message, where in messages:
        role = message.get("role")
        if role not in _ROLES:
            reader.fail(f"{where}.role", f"unknown role {role!r} (expected one of {', '.join(sorted(_ROLES))})")
        if role in ("user", "assistant") and open_calls:
            waiting = next(iter(open_calls))
            reader.fail(where, f"a {role} message while call {waiting} has no result")
        last = message
        if role == "user":
            users.append(_text(message.get("content")))
        elif role == "assistant":
            reasoning = message.get("reasoning") or message.get("reasoning_content")
            finish = message.get("finish_reason")
            rnd = RecordedRound(number=len(rounds) + 1, after_calls=len(calls), text=_text(message.get("content")),
                                reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
                                finish_reason=finish if isinstance(finish, str) else None, attempts=1)
            for raw in _tool_calls(message, where, reader):
                call = _new_call(raw, workspace, cwd)
                call.round = rnd.number
                if call.shell and call.cwd:
                    cwd = _next_cwd(call.cwd, call.command)
                rnd.tool_calls.append(ToolCallRecord(id=call.call_id, name=call.name, arguments=call.arguments_text))
                calls.append(call)
                open_calls[call.call_id] = call
            rounds.append(rnd)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                reader.fail(f"{where}.tool_call_id", f"{call_id!r} answers no call of the round before it")
            _result(open_calls.pop(call_id), _text(message.get("content")), workspace)
    return rounds, calls, users, last


# --------------------------------------------------------------------------------------------------
# How the run ended


_HTTP_ERROR = re.compile(r"^(?:HTTP |Error code:? ?)?[45]\d\d\b")


def endpoint_failure(final_output: str, run_failed: bool = False) -> tuple[str, str] | None:
    """(reason, message) when Hermes' final output says the model endpoint failed: after its retries ("API call
    failed after N retries: ..."), or at once on an HTTP error it does not retry (a 4xx: Hermes prints only
    "HTTP 404: ..." and exits 0; ``run_failed`` is its run report's ``failed`` flag, which then says so)."""
    text = final_output.strip()
    match = _ENDPOINT_FAILED.match(text)
    if match:
        why = match.group("why").strip()
    elif run_failed and _HTTP_ERROR.match(text):
        why = text
    else:
        return None
    status = re.search(r"\b(?:HTTP |status(?: code)?:? ?|Error code: )([45]\d\d)\b", why, re.I)
    if status:
        reason = f"model_http_{status.group(1)}"
    elif re.search(r"timed? ?out|timeout", why, re.I):
        reason = "model_timeout"
    elif re.search(r"connect", why, re.I):
        reason = "model_connection"
    else:
        reason = "model_protocol"
    return reason, final_output.strip()


_CUT_OUTPUT = re.compile(r"^(?:First response|Response) truncated due to output length limit$")
"""What ``hermes -z`` prints when the model's reply was cut at the output limit and not recovered (a cut tool call
is never stored, so only this says so)."""


def _ending(rounds: list[RecordedRound], calls: list[RecordedCall], last: dict[str, Any] | None
            ) -> tuple[RunOutcome | None, str | None, str | None]:
    if last is None or last.get("role") in ("user", "system"):
        return None, None, None  # no reply was stored: how the run ended is not in the store
    if last.get("role") == "tool" or any(not c.finished for c in calls if c.round == rounds[-1].number):
        return "interrupted", "ended_mid_round", "the session ends after a tool result, without the model's reply"
    if rounds[-1].finish_reason == "length":
        # Hermes asks for a continuation of a cut text reply up to four times, storing each cut part; the run
        # ending on one means the last was cut too: the run's stop, as for every agent.
        return "stopped", "output_limit", "the last reply was cut at the model's output limit"
    return "completed", None, None


def _session(row: dict[str, Any], messages: list[_Message], raw: bytes, file: str, sha256: str,
             reader: Reader) -> RecordedRun:
    cwd = row.get("cwd")
    workspace = cwd if isinstance(cwd, str) else ""
    rounds, calls, users, last = _rounds(messages, workspace, reader)
    limits = list(_COMMON_LIMITS)
    if len(users) > 1:
        limits.append(f"{len(users) - 1} later user message(s): not in the transcript (only the first is the prompt)")
    if row.get("parent_session_id"):
        limits.append(f"continues session {row['parent_session_id']} (after {row.get('end_reason') or 'a split'} there)")
    outcome, reason, message = _ending(rounds, calls, last)
    started, ended = row.get("started_at"), row.get("ended_at")
    duration = float(ended) - float(started) if isinstance(started, (int, float)) and isinstance(ended, (int, float)) else 0.0

    def n(key: str) -> int:
        value = row.get(key)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    prompt_tokens = n("input_tokens") + n("cache_read_tokens") + n("cache_write_tokens")
    completion_tokens = n("output_tokens") + n("reasoning_tokens")
    final = next((r.text for r in reversed(rounds) if r.text.strip()), None)
    facts = {"session_id": row.get("id")}
    facts.update({k: row[k] for k in ("title", "parent_session_id", "end_reason", "source") if row.get(k) is not None})
    label = str(row.get("id") or "session")
    run = RecordedRun(
        format=FORMAT, file=file, sha256=sha256, label=label, agent=AGENT, prompt=users[0] if users else "",
        calls=calls, rounds=rounds, limits=limits, run_id=label, model=row.get("model") or "",
        base_url=row.get("billing_base_url") or "", workspace=workspace,
        system_prompt=row.get("system_prompt") or "", outcome=outcome, reason=reason, message=message,
        duration_s=max(0.0, duration),
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                    total_tokens=prompt_tokens + completion_tokens),
        final_text=final, delivered=final, facts=facts, raw=raw,
    )
    run.end_stop = closing_stop(run)
    return run


def read_sessions(src: str | os.PathLike[str], name: str | None = None) -> list[RecordedRun]:
    """Every session in ``src`` (a ``state.db`` or a ``hermes sessions export`` JSONL), oldest first.
    ``name`` is how the file is named in errors and ``run_start.imported.file`` (default: the path)."""
    path = Path(src)
    reader = Reader(name or str(src))
    data = reader.read_bytes(path, "the session store (state.db) or an export (.jsonl)")
    sources = _store(path, reader) if data.startswith(SQLITE_MAGIC) else _export(reader.decode_text(data), reader)
    if not sources:
        reader.fail("", "holds no session")
    digest = hashlib.sha256(data).hexdigest()
    return [_session(row, messages, raw, reader.file, digest, reader) for row, messages, raw in sources]


def read_attempt(files: Mapping[str, bytes], db_name: str, final_output: bytes | None,
                 usage_report: bytes | None) -> RecordedRun | None:
    """The run of one attempt: the session store as collected (``db_name`` and its ``-wal``), with what
    ``hermes -z`` printed (``final_output``) and its ``--usage-file`` report. None when no session was stored."""
    with tempfile.TemporaryDirectory(prefix="fleet-hermes-") as tmp:
        db = Path(tmp) / "state.db"
        db.write_bytes(files[db_name])
        if f"{db_name}-wal" in files:
            Path(f"{db}-wal").write_bytes(files[f"{db_name}-wal"])
        try:
            sessions = read_sessions(db, name=db_name)
        except TranscriptImportError as exc:
            if exc.problem == "holds no session":
                return None
            raise
    report: dict[str, Any] = {}
    if usage_report:
        try:
            parsed = loads_json(usage_report)
            report = parsed if isinstance(parsed, dict) else {}
        except ValueError:
            report = {}
    wanted = report.get("session_id")
    roots = [s for s in sessions if not s.facts.get("parent_session_id")]
    session = next((s for s in sessions if s.label == wanted), None) or (roots[-1] if roots else sessions[-1])
    later = [s.label for s in sessions if s.facts.get("parent_session_id") == session.label]
    if later:
        session.limits.append(f"the run went on in session(s) {', '.join(later)} (context compression): "
                              "their messages are not in this transcript")
    output = (final_output or b"").decode("utf-8", "replace")
    failed = endpoint_failure(output, report.get("failed") is True)
    if failed is not None and report.get("completed") is not True:
        session.outcome, session.reason, session.message = "infrastructure", failed[0], failed[1]
    elif _CUT_OUTPUT.match(output.strip()) and report.get("completed") is not True:
        session.outcome, session.reason, session.message = "stopped", "output_limit", output.strip()
    elif session.outcome is None and report.get("failed") is True:
        session.outcome, session.reason = "agent_error", "failed"
        session.message = output.strip() or "hermes -z reported a failed run"
    if output.strip():
        session.final_text = session.delivered = output.rstrip("\n")
    session.end_stop = closing_stop(session)  # how the run ended may have changed
    return session


def import_to_folder(src: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Read the whole file first, then write one attempt-like folder per session under ``out_dir``."""
    return write_runs(read_sessions(src), out_dir)
