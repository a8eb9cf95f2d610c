"""Import OpenCode sessions (``opencode run``; docs/agents-opencode.md) as normalized transcripts.

Three sources, told apart by their content:

* the **session store**, ``opencode.db`` (SQLite; ``$XDG_DATA_HOME/opencode/``): tables ``session``,
  ``message`` and ``part``, each row's ``data`` a JSON object. One run per session; this is what the
  adapter reads after an attempt (with its ``-wal`` beside it, as collected);
* an **export**, ``opencode export SESSION`` (one JSON object ``{"info", "messages": [{"info", "parts"}]}``);
* the **event stream** of ``opencode run --format json`` (JSONL: ``step_start``, ``text``, ``reasoning``,
  ``tool_use``, ``step_finish``, ``error``), which carries the parts but not the prompt or the messages.

All three hold the same *parts*, so one reader turns them into a ``RecordedRun``'s model rounds: a
``step-start`` opens a round, ``text`` and ``reasoning`` parts are its reply, ``tool`` parts its calls with
their results, and ``step-finish`` its finish reason and tokens. A part type, tool state or event type this
importer does not know is an error naming the file and the row or line (``part prt_...``, ``line 7``): nothing
is dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.core.nesting import loads_json
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
from harness.core.transcript import GuardDecision, ModelError, ToolCallRecord, Usage

__all__ = ["FORMAT", "AGENT", "read_sessions", "read_store", "import_to_folder", "final_text_of_stream",
           "endpoint_failure", "root_sessions"]

FORMAT = "opencode"
AGENT = "opencode"

SHELL_TOOLS = frozenset({"bash"})
FILE_TOOLS = frozenset({"read", "write", "edit", "multiedit", "patch", "apply_patch"})
WRITE_TOOLS = frozenset({"write"})
_PART_TYPES = frozenset({"text", "reasoning", "tool", "step-start", "step-finish", "retry", "snapshot", "patch",
                         "compaction", "file", "agent", "subtask"})
"""Parts the reader knows; only the first six carry anything the transcript holds (the others are the
agent's own bookkeeping: file snapshots, attachments, compaction markers) and are read and left out."""
_STREAM_EVENTS = {"step_start": "step-start", "step_finish": "step-finish", "text": "text", "reasoning": "reasoning",
                  "tool_use": "tool"}
_TOOL_STATES = frozenset({"pending", "running", "completed", "error"})
_REFUSALS = (
    ("The user rejected permission to use this specific tool call", "permission_rejected"),
    ("The user has specified a rule which prevents you from using this specific tool call", "permission_denied"),
)
_TIMED_OUT = "shell tool terminated command after exceeding timeout"

_COMMON_LIMITS = [
    "ts: when the event was imported, not when it happened",
    "model_request: not stored; the conversation is the prompt, the model_response and the tool_result events",
    "model_response: latency_s is not stored per round (0), nor the model id the endpoint reported (null)",
    "tool_call arguments: the stored object, re-serialized (the model's raw argument text is not stored)",
    "run_start: harness_commit, base_url, timeouts, system_prompt and tools are not stored",
    "run_end.exit_code: not stored in the session",
]
_STREAM_LIMITS = [
    "the prompt: not in the event stream (empty)",
    "the model id and the agent version: not in the event stream",
    "run_end: only an error event says how the run ended; without one the end is taken from the last step",
    "file paths: as the tools report them (the session's folder is not in the stream, so they stay absolute)",
]


class _Reader(Reader):
    """Reads one file, naming the file and the row or line in every error."""

    def obj(self, value: object, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, f"expected a JSON object, got {type(value).__name__}")
        return value

    def json_obj(self, text: object, where: str) -> dict[str, Any]:
        if not isinstance(text, str):
            self.fail(where, "expected JSON text")
        try:
            return self.obj(loads_json(text), where)
        except json.JSONDecodeError as exc:
            self.fail(where, f"not valid JSON ({exc.msg}, column {exc.colno})")

    def text(self, obj: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
        value = obj.get(key, default)
        if not isinstance(value, str):
            self.fail(f"{where}.{key}", "missing" if key not in obj else f"expected a string, got {type(value).__name__}")
        return value


# --------------------------------------------------------------------------------------------------
# The sources, as (session info, [(message info, [(part, where)])])


_Part = tuple[dict[str, Any], str]
_Message = tuple[dict[str, Any], list[_Part]]


class _Source:
    """One session as read: its info, messages with their parts, and stream-level errors."""

    def __init__(self, info: dict[str, Any], messages: list[_Message], *, kind: str, errors: list[dict[str, Any]],
                 raw: bytes) -> None:
        self.info, self.messages, self.kind, self.errors, self.raw = info, messages, kind, errors, raw


def _sqlite_sessions(path: Path, reader: _Reader) -> list[_Source]:
    """Every session of a session store, in creation order. The database is opened read-only through a
    copy (with its ``-wal`` beside it), so a store still written by a running agent is never touched."""
    try:
        with store_copy(path, "opencode.db") as con:
            return _read_tables(con, reader)
    except sqlite3.DatabaseError as exc:
        reader.fail("", f"not a readable SQLite session store ({exc})")


def _read_tables(con: sqlite3.Connection, reader: _Reader) -> list[_Source]:
    tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in ("session", "message", "part"):
        if table not in tables:
            reader.fail(f"table {table}", "missing: this is not an OpenCode session store")
    parts: dict[str, list[_Part]] = {}
    for row in con.execute("SELECT id, message_id, data FROM part ORDER BY message_id, id"):
        where = f"part {row['id']}"
        parts.setdefault(row["message_id"], []).append((reader.json_obj(row["data"], f"{where}: data"), where))
    messages: dict[str, list[_Message]] = {}
    for row in con.execute("SELECT id, session_id, time_created, data FROM message ORDER BY session_id, time_created, id"):
        where = f"message {row['id']}"
        info = reader.json_obj(row["data"], f"{where}: data")
        info = {**info, "id": row["id"]}
        messages.setdefault(row["session_id"], []).append((info, parts.pop(row["id"], [])))
    for message_id, orphans in parts.items():
        reader.fail(orphans[0][1], f"belongs to message {message_id}, which is not in the store")
    sources = []
    columns = [c[1] for c in con.execute("PRAGMA table_info(session)")]
    for column in ("id", "directory", "version", "time_created"):
        if column not in columns:
            reader.fail(f"table session: column {column}", "missing")
    for row in con.execute("SELECT * FROM session ORDER BY time_created, id"):
        info = {key: row[key] for key in row.keys()}
        raw = {"session": info, "messages": [{"info": m, "parts": [p for p, _ in ps]}
                                             for m, ps in messages.get(row["id"], [])]}
        sources.append(_Source(info, messages.pop(row["id"], []), kind="store", errors=[],
                               raw=(json.dumps(raw, indent=2, ensure_ascii=False) + "\n").encode()))
    for session_id, stray in messages.items():
        reader.fail(f"message {stray[0][0]['id']}", f"belongs to session {session_id}, which is not in the store")
    return sources


def _export_session(data: dict[str, Any], raw: bytes, reader: _Reader) -> _Source:
    info = reader.obj(data.get("info"), "info")
    messages = data.get("messages")
    if not isinstance(messages, list):
        reader.fail("messages", "missing: an OpenCode export holds info and messages")
    read: list[_Message] = []
    for i, message in enumerate(messages):
        message = reader.obj(message, f"messages[{i}]")
        minfo = reader.obj(message.get("info"), f"messages[{i}].info")
        parts = message.get("parts")
        if not isinstance(parts, list):
            reader.fail(f"messages[{i}].parts", "missing")
        read.append((minfo, [(reader.obj(p, f"messages[{i}].parts[{j}]"), f"messages[{i}].parts[{j}]")
                             for j, p in enumerate(parts)]))
    flat = {"id": info.get("id"), "directory": info.get("directory"), "version": info.get("version"),
            "title": info.get("title"), "parent_id": info.get("parentID"),
            "time_created": (info.get("time") or {}).get("created"), "time_updated": (info.get("time") or {}).get("updated"),
            "model": json.dumps(info["model"]) if isinstance(info.get("model"), dict) else None}
    return _Source(flat, read, kind="export", errors=[], raw=raw)


def _stream_sessions(text: str, reader: _Reader) -> list[_Source]:
    """The ``--format json`` event stream: parts grouped by session and message, in stream order."""
    by_session: dict[str, dict[str, Any]] = {}
    for where, line, value in reader.json_lines(text):
        event = reader.obj(value, where)
        kind = reader.text(event, "type", where)
        session_id = reader.text(event, "sessionID", where)
        state = by_session.setdefault(session_id, {"messages": {}, "errors": [], "lines": []})
        state["lines"].append(line)
        if kind == "error":
            state["errors"].append(reader.obj(event.get("error"), f"{where}.error"))
            continue
        if kind not in _STREAM_EVENTS:
            reader.fail(f"{where}.type", f"unknown event type {kind!r} (the {FORMAT} importer reads "
                        f"{', '.join(sorted([*_STREAM_EVENTS, 'error']))})")
        part = reader.obj(event.get("part"), f"{where}.part")
        message_id = reader.text(part, "messageID", f"{where}.part")
        state["messages"].setdefault(message_id, []).append((part, f"{where}.part"))
    sources = []
    for session_id, state in by_session.items():
        messages = [({"id": mid, "role": "assistant"}, parts) for mid, parts in state["messages"].items()]
        sources.append(_Source({"id": session_id}, messages, kind="stream", errors=state["errors"],
                               raw=("\n".join(state["lines"]) + "\n").encode()))
    return sources


def _sources(src: Path, reader: _Reader) -> tuple[list[_Source], bytes]:
    data = reader.read_bytes(src, "the session store (opencode.db), an export (.json) or an event stream (.jsonl)")
    if data.startswith(SQLITE_MAGIC):
        return _sqlite_sessions(src, reader), data
    text = reader.decode_text(data)
    # The event stream has one JSON object per line; an export is one (pretty-printed) object.
    first = text.lstrip().split("\n", 1)[0]
    try:
        head = loads_json(first)
        if isinstance(head, dict) and "info" in head and "messages" in head:
            return [_export_session(head, data, reader)], data
    except json.JSONDecodeError:
        try:
            whole = loads_json(text)
        except json.JSONDecodeError as exc:
            cut = exc.pos >= len(text.rstrip())
            reader.fail(f"line {exc.lineno} column {exc.colno}", f"not valid JSON ({exc.msg})"
                        + ("; the file ends early: is it cut short?" if cut else ""))
        return [_export_session(reader.obj(whole, "(top level)"), data, reader)], data
    return _stream_sessions(text, reader), data


# --------------------------------------------------------------------------------------------------
# Parts -> rounds


def _ms(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _relative(path: str, workspace: str) -> str:
    if workspace and posixpath.isabs(path):
        rel = relative_inside(path, workspace)
        return path if rel is None else rel
    return posixpath.normpath(path)


def _usage(tokens: object) -> Usage | None:
    if not isinstance(tokens, dict):
        return None
    cache = typed(tokens.get("cache"), dict, {})

    def n(value: object) -> int:
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    prompt = n(tokens.get("input")) + n(cache.get("read")) + n(cache.get("write"))
    completion = n(tokens.get("output")) + n(tokens.get("reasoning"))
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def _finish(reason: object) -> str | None:
    return reason.replace("-", "_") if isinstance(reason, str) else None


def _call(part: dict[str, Any], where: str, workspace: str, reader: _Reader) -> RecordedCall:
    name = reader.text(part, "tool", where)
    call_id = reader.text(part, "callID", where)
    state = reader.obj(part.get("state"), f"{where}.state")
    status = reader.text(state, "status", f"{where}.state")
    if status not in _TOOL_STATES:
        reader.fail(f"{where}.state.status", f"unknown tool state {status!r} (expected one of {', '.join(sorted(_TOOL_STATES))})")
    arguments = state.get("input", {})
    if not isinstance(arguments, dict):
        reader.fail(f"{where}.state.input", f"expected a JSON object, got {type(arguments).__name__}")
    call = RecordedCall(call_id=call_id, name=name, arguments=arguments,
                        arguments_text=json.dumps(arguments, ensure_ascii=False), shell=name in SHELL_TOOLS)
    timing = typed(state.get("time"), dict, {})
    start, end = _ms(timing.get("start")), _ms(timing.get("end"))
    if start is not None and end is not None:
        call.duration_s = max(0.0, (end - start) / 1000)
    if status in ("pending", "running"):
        call.finished = False
        return call
    metadata = typed(state.get("metadata"), dict, {})
    details: dict[str, Any] = {"status": status}
    if status == "completed":
        call.text = reader.text(state, "output", f"{where}.state")
        call.agent_is_error = False
        if metadata:
            details["metadata"] = {k: v for k, v in metadata.items() if k != "output"}
    else:
        call.text = reader.text(state, "error", f"{where}.state")
        call.agent_is_error = True
        call.refusal_reason = next((code for opening, code in _REFUSALS if call.text.startswith(opening)), None)
        if call.refusal_reason is not None:
            call.ran, call.refusal = False, call.text
    if isinstance(state.get("title"), str):
        details["title"] = state["title"]
    call.agent_details = details
    if name == "invalid":
        # OpenCode answers a call of an unknown tool, or with arguments it cannot parse, through its own
        # "invalid" tool; what the model called is in the input.
        call.bad_input = True
        if isinstance(arguments.get("tool"), str):
            call.name = arguments["tool"]
        call.arguments = None
        call.arguments_error = arguments.get("error") if isinstance(arguments.get("error"), str) else "invalid tool call"
    if call.shell:
        command = arguments.get("command")
        call.command = command if isinstance(command, str) else None
        exit_code = metadata.get("exit")
        call.exit_code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
        call.timed_out = call.exit_code is None and _TIMED_OUT in call.text
        call.output = typed(metadata.get("output"), str, None)
        workdir = arguments.get("workdir")
        if workspace:
            call.cwd = posixpath.normpath(posixpath.join(workspace, workdir)) if isinstance(workdir, str) else workspace
        call.truncated = metadata.get("truncated") is True
    if name in FILE_TOOLS:
        target = metadata.get("filepath") or arguments.get("filePath") or arguments.get("path")
        if isinstance(target, str):
            call.path = _relative(target, workspace)
        if name in WRITE_TOOLS and isinstance(arguments.get("content"), str):
            call.bytes = len(arguments["content"].encode("utf-8"))
    return settle_by_flags(call)


def _retry_error(part: dict[str, Any]) -> ModelError:
    error = typed(part.get("error"), dict, {})
    data = typed(error.get("data"), dict, {})
    status = typed(data.get("statusCode"), int, None)
    message = str(data.get("message") or error.get("name") or "retried")
    return ModelError(round=0, attempt=int(part.get("attempt") or 0), kind="http" if status else "connection",
                      status=status, message=message, retry_in_s=None)


def _rounds(messages: list[_Message], workspace: str, reader: _Reader
            ) -> tuple[list[RecordedRound], list[RecordedCall], list[str]]:
    """The assistant messages' parts as rounds and their calls; returns those and the user messages' texts."""
    rounds: list[tuple[RecordedRound, list[RecordedCall]]] = []
    users: list[str] = []
    pending_errors: list[ModelError] = []
    for info, parts in messages:
        role = info.get("role")
        if role == "user":
            users.append("".join(p.get("text", "") for p, _ in parts if p.get("type") == "text"
                                 and isinstance(p.get("text"), str)))
        elif role != "assistant":
            reader.fail(f"message {info.get('id')}: data.role", f"unknown role {role!r}")
        current: RecordedRound | None = None
        for part, where in parts:
            kind = reader.text(part, "type", where)
            if kind not in _PART_TYPES:
                reader.fail(f"{where}.type", f"unknown part type {kind!r} (the {FORMAT} importer reads "
                            f"{', '.join(sorted(_PART_TYPES))})")
            if role == "user":
                continue
            if kind == "retry":
                pending_errors.append(_retry_error(part))
                continue
            if kind not in ("text", "reasoning", "tool", "step-start", "step-finish"):
                continue
            if current is None or kind == "step-start":
                current = RecordedRound(number=len(rounds) + 1, errors=pending_errors, attempts=1)
                pending_errors = []
                rounds.append((current, []))
            if kind == "text":
                text = reader.text(part, "text", where)
                current.text = f"{current.text}\n{text}" if current.text else text
            elif kind == "reasoning":
                text = reader.text(part, "text", where)
                current.reasoning = f"{current.reasoning}\n{text}" if current.reasoning else text
            elif kind == "tool":
                rounds[-1][1].append(_call(part, where, workspace, reader))
            elif kind == "step-finish":
                current.finish_reason = _finish(part.get("reason"))
                current.usage = _usage(part.get("tokens"))
                current = None
    calls: list[RecordedCall] = []
    for rnd, made in rounds:
        rnd.after_calls = len(calls)
        rnd.tool_calls = [ToolCallRecord(id=c.call_id, name=c.name, arguments=c.arguments_text) for c in made]
        for call in made:
            call.round = rnd.number
            if call.refusal_reason is not None:
                call.guard.append(GuardDecision(round=rnd.number, rule="tool_policy", decision="refuse",
                                                call_id=call.call_id, reason=call.refusal_reason, text=call.text))
        calls.extend(made)
    return [rnd for rnd, _ in rounds], calls, users


# --------------------------------------------------------------------------------------------------
# How the run ended


def endpoint_failure(error: Mapping[str, Any]) -> str | None:
    """The transcript reason (``model_http_500``, ``model_connection``) when an OpenCode error says the
    model endpoint failed; None for any other error."""
    if error.get("name") != "APIError":
        return None
    data = typed(error.get("data"), dict, {})
    status = data.get("statusCode")
    if isinstance(status, int) and not isinstance(status, bool):
        return f"model_http_{status}"
    message = str(data.get("message") or "").lower()
    if "timed out" in message or "timeout" in message:
        return "model_timeout"
    if "connect" in message:
        return "model_connection"
    return "model_protocol"


def _error_message(error: Mapping[str, Any]) -> str:
    data = typed(error.get("data"), dict, {})
    return str(data.get("message") or error.get("name") or "unknown error")


def _ending(source: _Source, rounds: list[RecordedRound], calls: list[RecordedCall]
            ) -> tuple[RunOutcome | None, str | None, str | None]:
    assistant = [info for info, _ in source.messages if info.get("role") == "assistant"]
    errors = [e for e in (info.get("error") for info in assistant) if isinstance(e, dict)] + source.errors
    if errors:
        error = errors[-1]
        why = endpoint_failure(error)
        if why:
            return "infrastructure", why, _error_message(error)
        if error.get("name") == "MessageAbortedError":
            return "interrupted", "aborted", _error_message(error)
        if error.get("name") == "MessageOutputLengthError":
            return "stopped", "output_limit", _error_message(error)
        return "agent_error", str(error.get("name") or "error"), _error_message(error)
    if not rounds:
        return None, None, None
    last = rounds[-1]
    made = [c for c in calls if c.round == last.number]
    refused = next((c for c in made if c.refusal_reason), None)
    if refused is not None and last.finish_reason == "tool_calls":
        # OpenCode ends the run when its permission policy refuses a call: the run stopped there.
        return "stopped", refused.refusal_reason, refused.text
    unfinished = any(not c.finished for c in made)
    completed = source.kind == "stream" or all(isinstance((info.get("time") or {}).get("completed"), (int, float))
                                               for info in assistant[-1:])
    if unfinished or last.finish_reason in (None, "tool_calls") or not completed:
        return "interrupted", "ended_mid_round", "the session ends before the model's last reply was complete"
    if last.finish_reason == "length":
        # A text-only reply cut at the output limit ends `opencode run` with exit 0 and no error: the owner got
        # a cut answer, which is not a completed run.
        return "stopped", "output_limit", "the last reply was cut at the model's output limit"
    return "completed", None, None


# --------------------------------------------------------------------------------------------------
# Sessions


def _session(source: _Source, file: str, sha256: str, reader: _Reader) -> RecordedRun:
    info = source.info
    workspace = typed(info.get("directory"), str, "")
    rounds, calls, users = _rounds(source.messages, workspace, reader)
    limits = list(_COMMON_LIMITS)
    if source.kind == "stream":
        limits += _STREAM_LIMITS
    if len(users) > 1:
        limits.append(f"{len(users) - 1} later user message(s): not in the transcript (only the first is the prompt)")
    model = ""
    stored = info.get("model")
    if isinstance(stored, str) and stored.startswith("{"):
        try:
            model = str(loads_json(stored).get("id") or "")
        except (ValueError, AttributeError):
            model = ""
    if not model:
        model = next((m["modelID"] for m, _ in source.messages if isinstance(m.get("modelID"), str)), "")
    outcome, reason, message = _ending(source, rounds, calls)
    created, updated = _ms(info.get("time_created")), _ms(info.get("time_updated"))
    final = next((r.text for r in reversed(rounds) if r.text.strip()), None)
    facts = {k: info.get(k) for k in ("title", "parent_id", "slug") if info.get(k) is not None}
    facts["session_id"] = info.get("id")
    if source.kind != "stream" and info.get("parent_id"):
        limits.append(f"a subagent session (parent {info['parent_id']})")
    label = str(info.get("id") or "session")
    run = RecordedRun(
        format=FORMAT, file=file, sha256=sha256, label=label, agent=AGENT, prompt=users[0] if users else "",
        calls=calls, rounds=rounds, limits=limits, run_id=label,
        agent_version=typed(info.get("version"), str, ""),
        model=model, workspace=workspace, outcome=outcome, reason=reason, message=message,
        duration_s=max(0.0, (updated - created) / 1000) if created is not None and updated is not None else 0.0,
        final_text=final, delivered=final, facts=facts, raw=source.raw,
    )
    run.end_stop = closing_stop(run)
    return run


def read_sessions(src: str | os.PathLike[str], name: str | None = None) -> list[RecordedRun]:
    """Every session in ``src`` (a session store, an export or an event stream), oldest first. ``name`` is
    how the file is named in errors and in ``run_start.imported.file`` (default: the path as given)."""
    path = Path(src)
    reader = _Reader(name or str(src))
    sources, data = _sources(path, reader)
    digest = hashlib.sha256(data).hexdigest()
    if not sources:
        reader.fail("", "holds no session")
    return [_session(s, reader.file, digest, reader) for s in sources]


def read_store(files: Mapping[str, bytes], db_name: str) -> list[RecordedRun]:
    """The sessions of a session store given as collected bytes (``db_name`` and its ``-wal``)."""
    with tempfile.TemporaryDirectory(prefix="fleet-opencode-") as tmp:
        db = Path(tmp) / "opencode.db"
        db.write_bytes(files[db_name])
        if f"{db_name}-wal" in files:
            Path(f"{db}-wal").write_bytes(files[f"{db_name}-wal"])
        sessions = read_sessions(db, name=db_name)
    return sessions


def final_text_of_stream(stdout: bytes) -> str | None:
    """What the owner got from ``opencode run --format json``: the text of the last step that has text
    (the rule the importer uses for the model's last reply). Lines that are not events are skipped."""
    rounds: list[list[str]] = []
    step_open = False
    for line in stdout.decode("utf-8", "replace").splitlines():
        try:
            event = loads_json(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "step_start" or (kind == "text" and not step_open):
            rounds.append([])
            step_open = True
        if kind == "text":
            part = typed(event.get("part"), dict, {})
            if isinstance(part.get("text"), str):
                rounds[-1].append(part["text"])
        elif kind == "step_finish":
            step_open = False
    return next(("\n".join(texts) for texts in reversed(rounds) if "\n".join(texts).strip()), None)


def import_to_folder(src: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Read the whole file first, then write one attempt-like folder per session under ``out_dir``."""
    return write_runs(read_sessions(src), out_dir)


def root_sessions(sessions: list[RecordedRun]) -> list[RecordedRun]:
    """The sessions that are not a subagent's, oldest first."""
    return [s for s in sessions if not s.facts.get("parent_id")]
