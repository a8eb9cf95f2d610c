"""OpenClaw sessions as the harness's transcripts: what both stores share (docs/agents-openclaw.md).

OpenClaw records a session as a stream of **entries**: a header (``type: session``, ``version`` 3 or 4, ``id``,
``cwd``, ``timestamp``), then entries with ``id``/``parentId``: ``message`` (``user``, ``assistant`` with
``text``/``thinking``/``toolCall`` blocks, ``toolResult``), ``model_change``, ``thinking_level_change``,
``compaction``, ``custom`` extension state and a few more. The JSONL store (``openclaw_jsonl``) holds one entry
per line; the SQLite store (``openclaw_sqlite``) one per ``transcript_events`` row. Each store module reads its
entries, each with where it was found ("line 7", "transcript_events session S seq 7"), and this module turns
one session into a ``RecordedRun`` (``harness.importers.events.to_events`` makes its transcript).

Mapping: each assistant message is a model round (``model_request`` with the messages recorded since the last
one, then ``model_response``, or ``model_error`` when the endpoint failed); each ``toolCall`` block is a
``tool_call`` and its ``toolResult`` a ``tool_result``, whose ``is_error``/``details.status`` count a non-zero
exit code as failed whatever OpenClaw flagged (``isError`` and ``details`` are kept as ``agent_is_error`` and
``agent_details``). The last assistant message's ``stopReason`` decides ``run_end``; ``length`` (the final
reply cut at the output limit) is the run's stop, rule and reason ``output_limit``, as for every agent.

Nothing is guessed or dropped in silence: an entry this importer does not translate is counted in
``run_start.imported.limits``, and the whole session is kept beside the transcript. Input that is not an
OpenClaw session (an unknown entry type, a missing or mistyped key it reads, an unsupported version) raises
``TranscriptImportError`` naming the file and the line or row.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, Literal, NoReturn

from harness.core.errors import TranscriptImportError
from harness.importers.reader import Reader, typed
from harness.importers.recorded import RecordedCall, RecordedRound, RecordedRun, output_limit_stop, settle_by_details
from harness.core.transcript import ModelError, StopEvent, ToolCallRecord, Usage

__all__ = ["AGENT", "SESSION_VERSIONS", "Entry", "SessionSource", "read_session", "check_label"]

AGENT = "openclaw"
SESSION_VERSIONS = (3, 4)
"""Session versions read: 3 (the JSONL store, and sessions imported from it into SQLite), 4 (SQLite sessions)."""

STOP_REASONS = ("stop", "length", "toolUse", "error", "aborted")
_FINISH = {"stop": "stop", "length": "length", "toolUse": "tool_calls", "error": "error", "aborted": "aborted"}
ENTRY_TYPES = ("session", "message", "thinking_level_change", "model_change", "compaction", "reset",
               "branch_summary", "custom", "custom_message", "label", "session_info", "leaf")
"""OpenClaw's own list of session entry types (``sessionEntryTypeSchema``, plus tree ``leaf`` markers)."""
_UNTRANSLATED_ROLES = ("custom", "bashExecution", "hookMessage")
_CONTEXT_WORDS = re.compile(r"context|too long|maximum.{0,40}tokens|n_ctx|exceeds", re.I)
_CONNECTION_CODE = re.compile(r"^(E[A-Z0-9_]+|UND_ERR[A-Z0-9_]*)$")
_HTTP_STATUS = re.compile(r"^([1-5]\d\d)\b")
_FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

_LIMITS = [
    "ts: when the event was imported, not when it happened (the entries' own timestamps stay in the session)",
    "run_start: the system prompt, tools, endpoint, limits and harness fields are not recorded; model is the "
    "first model_change's provider/modelId, workspace the session's cwd",
    "model_request: messages_added are the messages as the session recorded them (OpenClaw adds its runtime "
    "context when it sends them); max_tokens, stream and the prompt estimate are not recorded (0, false)",
    "model_response: latency_s and attempts are not recorded (0)",
    "run_end: exit_code is not recorded; duration_s is from the header's timestamp to the last entry's",
]


@dataclass(frozen=True)
class Entry:
    """One session entry as stored, and where: ``line 7`` or ``transcript_events session S seq 7``."""

    where: str
    data: dict[str, Any]


@dataclass
class SessionSource:
    """One session as a store module read it."""

    format: str
    file: str
    sha256: str
    entries: list[Entry]
    facts: dict[str, Any] = field(default_factory=dict)
    """What the store itself records beside the entries (the agent's version, the database schema)."""
    agent_version: str = ""


def _fail(file: str, where: str, problem: str) -> NoReturn:
    raise TranscriptImportError(file, where, problem)


def check_label(file: str, where: str, session_id: str) -> str:
    """A session id names the run's folder: it must be a plain file name."""
    if not _FOLDER_NAME.match(session_id):
        _fail(file, where, f"session id {session_id!r} cannot name a run's folder (letters, digits, '.', '_', '-')")
    return session_id


_KIND_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "true or false", int: "an integer",
               float: "a number", type(None): "null"}


def _type_name(value: object) -> str:
    return _KIND_NAMES.get(type(value), type(value).__name__)


class _Reader(Reader):
    """Reads one session file or store, naming the place of every problem; ``get`` checks a key's type."""

    def get(self, obj: dict[str, Any], key: str, kinds: type | tuple[type, ...], where: str, *,
            required: bool = True) -> Any:
        """``obj[key]`` if it has one of ``kinds`` (bool is never an int here); a missing optional key is None."""
        if key not in obj:
            if required:
                self.fail(where, f"{key}: missing")
            return None
        value = obj[key]
        allowed = kinds if isinstance(kinds, tuple) else (kinds,)
        if not any(type(value) is kind for kind in allowed):
            expected = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in allowed)
            self.fail(where, f"{key}: expected {expected}, got {_type_name(value)}")
        return value


def _text_of(content: object, reader: _Reader, where: str, key: str) -> tuple[str, str | None]:
    """(text, reasoning) of a message's content: a string, or blocks of text / thinking (others are refused)."""
    if isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        reader.fail(where, f"{key}: expected a string or a list of blocks, got {_type_name(content)}")
    texts: list[str] = []
    thoughts: list[str] = []
    for i, block in enumerate(content):
        at = f"{key}[{i}]"
        if not isinstance(block, dict):
            reader.fail(where, f"{at}: expected an object, got {_type_name(block)}")
        kind = reader.get(block, "type", str, where=f"{where}: {at}")
        if kind == "text":
            texts.append(reader.get(block, "text", str, where=f"{where}: {at}"))
        elif kind == "thinking":
            thoughts.append(reader.get(block, "thinking", str, where=f"{where}: {at}"))
        elif kind == "image":
            texts.append("[image]")
        elif kind != "toolCall":
            reader.fail(where, f"{at}.type: {kind!r} blocks are not read (text, thinking, image, toolCall)")
    return "".join(texts), ("".join(thoughts) if thoughts else None)


@dataclass
class _Round:
    number: int
    calls: list[dict[str, Any]]
    """The assistant message's toolCall blocks, in order, not yet answered."""


def _usage(raw: object) -> Usage | None:
    if not isinstance(raw, dict):
        return None

    def n(key: str) -> int:
        value = raw.get(key)
        return value if type(value) is int else 0

    prompt = n("input") + n("cacheRead") + n("cacheWrite")
    output = n("output")
    return Usage(prompt_tokens=prompt, completion_tokens=output, total_tokens=n("totalTokens") or prompt + output)


def _endpoint_error(message: dict[str, Any]) -> tuple[Literal["http", "timeout", "connection"], int | None, str] | None:
    """(kind, HTTP status, reason) when an ``error`` stop is the endpoint's failure; None when it is not (e.g.
    "Provider returned an incomplete or malformed tool call": the model's own reply)."""
    code = message.get("errorCode")
    kind_of = message.get("errorType")
    text = str(message.get("errorMessage") or "")
    if isinstance(code, int) and not isinstance(code, bool):
        code = str(code)
    status_text = code if isinstance(code, str) and code.isdigit() else None
    leading = _HTTP_STATUS.match(text)  # "500 CUDA out of memory", "400 This model's maximum context ..."
    if status_text is None and leading:
        status_text = leading.group(1)
    if status_text is not None:
        return "http", int(status_text), f"model_http_{int(status_text)}"
    if isinstance(code, str) and _CONNECTION_CODE.match(code):
        kind: Literal["timeout", "connection"] = "timeout" if "TIMEDOUT" in code or "TIMEOUT" in code else "connection"
        return kind, None, f"model_{kind}"
    diagnostics = message.get("diagnostics")
    if isinstance(diagnostics, list) and any(isinstance(d, dict) and d.get("type") == "provider_transport_failure"
                                             for d in diagnostics):
        return "connection", None, "model_connection"
    if isinstance(kind_of, str) and kind_of:
        if "timeout" in kind_of:
            return "timeout", None, "model_timeout"
        return "http", None, f"model_{re.sub(r'[^a-z0-9]+', '_', kind_of.lower())}"
    if re.search(r"\b(connection (error|refused)|ECONNREFUSED|fetch failed)\b", text, re.I):
        return "connection", None, "model_connection"
    return None


def _context_overflow(message: dict[str, Any], status: int | None) -> bool:
    """The endpoint refused the prompt as longer than its context: the run is full, not the fleet broken."""
    if message.get("errorCode") == "context_length_exceeded":
        return True
    return status in (400, 413) and bool(_CONTEXT_WORDS.search(str(message.get("errorMessage") or "")))


def _tool_message(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _relative(path: str | None, cwd: str) -> str | None:
    """A file tool's absolute path inside the workspace, as the transcript keeps it: relative to the workspace."""
    if path is None or not cwd or not path.startswith("/"):
        return path
    try:
        return str(PurePosixPath(path).relative_to(PurePosixPath(cwd)))
    except ValueError:
        return path


def _seconds(start: object, end: object) -> float:
    try:
        a = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        b = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return round(max(0.0, (b - a).total_seconds()), 3)


def _header(source: SessionSource, reader: _Reader) -> tuple[Entry, int, str, str]:
    """(the header entry, session version, session id, cwd), checked: the header first, a version this reads."""
    if not source.entries:
        reader.fail("", "no session entries")
    head = source.entries[0]
    if head.data.get("type") != "session":
        reader.fail(head.where, "expected the session header (type 'session') first, "
                                f"got type {head.data.get('type')!r}")
    version = reader.get(head.data, "version", int, head.where, required=False)
    if version is None:
        version = 1
    if version not in SESSION_VERSIONS:
        reader.fail(head.where, f"session version {version} is not supported (this importer reads "
                                f"{' and '.join(map(str, SESSION_VERSIONS))}; `openclaw doctor --fix` migrates older "
                                "sessions)")
    session_id = reader.get(head.data, "id", str, head.where)
    cwd = reader.get(head.data, "cwd", str, head.where, required=False) or ""
    return head, version, session_id, cwd


@dataclass
class _SessionRead:
    """What reading one session's entries has gathered so far; each entry type and message role has a small
    handler (``_ENTRY_HANDLERS``, ``_MESSAGE_HANDLERS``) that adds to it."""

    reader: _Reader
    cwd: str
    last_ts: object = None
    rounds: list[RecordedRound] = field(default_factory=list)
    calls: list[RecordedCall] = field(default_factory=list)
    """Every call in the order the session recorded it: at its result, or (no result) when the model moved on."""
    limits: list[str] = field(default_factory=lambda: list(_LIMITS))
    untranslated: Counter[str] = field(default_factory=Counter)
    models: list[dict[str, Any]] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    prompt: str | None = None
    pending: list[dict[str, Any]] = field(default_factory=list)
    """Messages recorded since the last model request (its ``messages_added``)."""
    current: _Round | None = None
    by_id: dict[str, tuple[dict[str, Any], int]] = field(default_factory=dict)
    """Call id -> (its toolCall block, its round)."""
    answered: dict[str, str] = field(default_factory=dict)
    """Call id -> where its result is."""
    last_assistant: tuple[Entry, dict[str, Any]] | None = None

    def flush_unanswered(self) -> None:
        """Calls of the current round that got no result: recorded as calls with no result, a limit line each."""
        round_ = self.current
        if round_ is None:
            return
        for block in round_.calls:
            arguments = block["arguments"] if isinstance(block.get("arguments"), dict) else None
            self.calls.append(RecordedCall(call_id=block["id"], name=block["name"], arguments=arguments,
                                           arguments_error=None if arguments is not None
                                           else "the arguments are not a JSON object",
                                           round=round_.number, finished=False))
            self.limits.append(f"call {block['id']} ({block['name']}, round {round_.number}): no result is recorded")
        round_.calls = []

    def read(self, entry: Entry) -> None:
        """One entry after the header, by its type."""
        data, where = entry.data, entry.where
        kind = self.reader.get(data, "type", str, where)
        if kind not in ENTRY_TYPES:
            self.reader.fail(where, f"type: unknown entry type {kind!r} (OpenClaw's are {', '.join(ENTRY_TYPES)})")
        if isinstance(data.get("timestamp"), str):
            self.last_ts = data["timestamp"]
        _ENTRY_HANDLERS.get(kind, _untranslated_entry)(self, entry, kind)


def _second_header(s: _SessionRead, entry: Entry, kind: str) -> None:
    s.reader.fail(entry.where, "a second session header: one session per file (or per session id)")


def _model_change(s: _SessionRead, entry: Entry, kind: str) -> None:
    data, where = entry.data, entry.where
    s.models.append({"at": where, "provider": s.reader.get(data, "provider", str, where),
                     "modelId": s.reader.get(data, "modelId", str, where)})


def _thinking_level_change(s: _SessionRead, entry: Entry, kind: str) -> None:
    s.thinking.append(str(s.reader.get(entry.data, "thinkingLevel", str, entry.where)))


def _compaction(s: _SessionRead, entry: Entry, kind: str) -> None:
    s.compactions.append({"at": entry.where, "tokensBefore": entry.data.get("tokensBefore"),
                          "firstKeptEntryId": entry.data.get("firstKeptEntryId")})


def _untranslated_entry(s: _SessionRead, entry: Entry, kind: str) -> None:
    data = entry.data
    s.untranslated[f"{kind} {data['customType']}" if kind == "custom" and isinstance(data.get("customType"), str)
                   else kind] += 1


def _message(s: _SessionRead, entry: Entry, kind: str) -> None:
    message = s.reader.get(entry.data, "message", dict, entry.where)
    role = s.reader.get(message, "role", str, f"{entry.where}: message")
    handler = _MESSAGE_HANDLERS.get(role)
    if handler is None:
        s.reader.fail(f"{entry.where}: message", f"role: unknown message role {role!r} (user, assistant, toolResult, "
                                                 f"{', '.join(_UNTRANSLATED_ROLES)})")
    handler(s, entry, message)


def _user(s: _SessionRead, entry: Entry, message: dict[str, Any]) -> None:
    at = f"{entry.where}: message"
    text, _ = _text_of(s.reader.get(message, "content", (str, list), at), s.reader, at, "content")
    if s.prompt is None:
        s.prompt = text
    else:
        s.untranslated["user message after the prompt (kept in model_request.messages_added)"] += 1
    s.pending.append({"role": "user", "content": text})


def _tool_call_blocks(s: _SessionRead, content: object, at: str) -> list[dict[str, Any]]:
    """An assistant message's toolCall blocks, each with an id not seen before, a name and arguments."""
    blocks: list[dict[str, Any]] = []
    for i, block in enumerate(content if isinstance(content, list) else []):
        if block.get("type") != "toolCall":
            continue
        bat = f"{at}: content[{i}]"
        call_id = s.reader.get(block, "id", str, bat)
        s.reader.get(block, "name", str, bat)
        if "arguments" not in block:
            s.reader.fail(bat, "arguments: missing")
        if call_id in s.by_id:
            s.reader.fail(bat, f"id: {call_id!r} is also the id of an earlier call")
        blocks.append(block)
    return blocks


def _assistant(s: _SessionRead, entry: Entry, message: dict[str, Any]) -> None:
    """A model round: its request (the messages since the last one), then its reply or the endpoint's error."""
    at = f"{entry.where}: message"
    s.flush_unanswered()
    content = s.reader.get(message, "content", (str, list), at)
    stop = s.reader.get(message, "stopReason", str, at)
    if stop not in STOP_REASONS:
        s.reader.fail(at, f"stopReason: {stop!r} is not one of {', '.join(STOP_REASONS)}")
    text, reasoning = _text_of(content, s.reader, at, "content")
    blocks = _tool_call_blocks(s, content, at)
    number = len(s.rounds) + 1
    s.current = _Round(number, list(blocks))
    for block in blocks:
        s.by_id[block["id"]] = (block, number)
    endpoint = _endpoint_error(message) if stop == "error" else None
    round_ = RecordedRound(
        number=number, after_calls=len(s.calls), request=s.pending, usage=_usage(message.get("usage")),
        replied=endpoint is None, text=text, reasoning=reasoning, finish_reason=_FINISH[stop],
        tool_calls=[ToolCallRecord(id=b["id"], name=b["name"],
                                   arguments=b["partialArgs"] if isinstance(b.get("partialArgs"), str)
                                   else json.dumps(b["arguments"], ensure_ascii=False))
                    for b in blocks],
        model=message["model"] if isinstance(message.get("model"), str) else None,
    )
    if endpoint is not None:
        # The endpoint failed instead of answering: the round's error, in place of a reply.
        kind_, status, _ = endpoint
        round_.errors.append(ModelError(round=number, attempt=0, kind=kind_, status=status,
                                        message=str(message.get("errorMessage") or ""), retry_in_s=None))
    s.rounds.append(round_)
    s.pending = [{"role": "assistant", "content": text or None,
                  **({"tool_calls": [{"id": b["id"], "type": "function",
                                      "function": {"name": b["name"],
                                                   "arguments": json.dumps(b["arguments"], ensure_ascii=False)}}
                                     for b in blocks]} if blocks else {})}]
    s.last_assistant = (entry, message)


def _tool_result(s: _SessionRead, entry: Entry, message: dict[str, Any]) -> None:
    """A call's result: its tool_call (from the round that made it) and its tool_result."""
    where, at, reader = entry.where, f"{entry.where}: message", s.reader
    call_id = reader.get(message, "toolCallId", str, at)
    name = reader.get(message, "toolName", str, at)
    is_error = reader.get(message, "isError", bool, at)
    text, _ = _text_of(reader.get(message, "content", list, at), reader, at, "content")
    details = reader.get(message, "details", (dict, type(None)), at, required=False)
    if call_id in s.answered:
        reader.fail(at, f"toolCallId: {call_id!r} already has a result ({s.answered[call_id]})")
    s.answered[call_id] = where
    if call_id in s.by_id:
        block, round_ = s.by_id[call_id]
        if s.current is not None:
            s.current.calls = [b for b in s.current.calls if b["id"] != call_id]
        arguments = block["arguments"] if isinstance(block["arguments"], dict) else None
        called_as = block["name"] if block["name"] != name else None
        arguments_error = None if arguments is not None else "the arguments are not a JSON object"
    else:
        # OpenClaw keeps the result of a call to a tool it does not have, but not the assistant message
        # that made it: that message was a model round of its own, which the session does not hold.
        round_, arguments, called_as = len(s.rounds) + 1, None, None
        s.rounds.append(RecordedRound(number=round_, after_calls=len(s.calls), replied=False))
        arguments_error = "not recorded: the session holds this call's result, not the assistant message that made it"
        s.limits.append(f"call {call_id} ({name}): only its result is recorded ({where}); the model round "
                        f"that made it (round {round_}) and its arguments are not")
    call = settle_by_details(RecordedCall(
        call_id=call_id, name=name, called_as=called_as, arguments=arguments, arguments_error=arguments_error,
        round=round_, text=text,
        agent_is_error=is_error, agent_details=details,
        output=details["aggregated"] if details and isinstance(details.get("aggregated"), str) else None,
    ))
    call.path = _relative(call.path, s.cwd)
    s.calls.append(call)
    s.pending.append(_tool_message(call_id, text))


def _untranslated_message(s: _SessionRead, entry: Entry, message: dict[str, Any]) -> None:
    s.untranslated[f"message {message['role']}"] += 1


_EntryHandler = Callable[[_SessionRead, Entry, str], None]
_ENTRY_HANDLERS: dict[str, _EntryHandler] = {
    "session": _second_header, "model_change": _model_change, "thinking_level_change": _thinking_level_change,
    "compaction": _compaction, "message": _message,
}
"""Entry type -> its handler; every other type of ``ENTRY_TYPES`` is counted as not translated."""
_MESSAGE_HANDLERS: dict[str, Callable[[_SessionRead, Entry, dict[str, Any]], None]] = {
    "user": _user, "assistant": _assistant, "toolResult": _tool_result,
    **{role: _untranslated_message for role in _UNTRANSLATED_ROLES},
}
"""Message role -> its handler; an unknown role is an error naming the entry."""


def read_session(source: SessionSource, raw: bytes) -> RecordedRun:
    """One session as a ``RecordedRun``. ``raw`` is the session as kept beside the transcript (``session.json``)."""
    reader = _Reader(source.file)
    head, version, session_id, cwd = _header(source, reader)
    started = head.data.get("timestamp")
    s = _SessionRead(reader=reader, cwd=cwd, last_ts=started)
    for entry in source.entries[1:]:
        s.read(entry)
    s.flush_unanswered()

    limits = s.limits
    for what, count in sorted(s.untranslated.items()):
        limits.append(f"not translated (kept in the session): {count} x {what}")
    if s.compactions:
        limits.append(f"{len(s.compactions)} compaction(s): the model context was summarized; the entries before it "
                      "are still in the session and in this transcript")
    first_model = s.models[0] if s.models else None
    run = RecordedRun(
        format=source.format, file=source.file, sha256=source.sha256,
        label=check_label(source.file, head.where, session_id), prompt=s.prompt or "", calls=s.calls, limits=limits,
        rounds=s.rounds, agent=AGENT, run_id=session_id, agent_version=source.agent_version,
        model=f"{first_model['provider']}/{first_model['modelId']}" if first_model else "", workspace=cwd,
        item=session_id, duration_s=_seconds(started, s.last_ts), raw=raw,
    )
    stop_reason, error = _ending(run, s.last_assistant)
    facts: dict[str, Any] = {
        "session_id": session_id, "session_version": version, "cwd": cwd, "agent_version": source.agent_version,
        "models": s.models, "thinking_levels": s.thinking, "compactions": s.compactions,
        "final_stop_reason": stop_reason, "final_error": error, **source.facts,
    }
    run.facts = {k: v for k, v in facts.items() if v not in (None, "", [])}
    return run


def _ending(run: RecordedRun, last: tuple[Entry, dict[str, Any]] | None) -> tuple[str | None, str | None]:
    """How the run ended, from the last assistant message's ``stopReason``: ``outcome``, ``reason``, ``message``,
    the stop that ended it, the final reply and what the owner got. Returns (the stopReason, its error)."""
    if last is None:
        run.outcome, run.reason, run.message = "interrupted", "no_reply", "the session holds no model reply"
        return None, None
    entry, message = last
    stop = message["stopReason"]
    error = typed(message.get("errorMessage"), str, None)
    text = next((r.text for r in reversed(run.rounds) if r.replied), None)
    rounds = len(run.rounds)
    run.final_text = text
    if stop == "error":
        endpoint = _endpoint_error(message)
        if endpoint is not None:
            run.final_text = None
            kind, status, reason = endpoint
            if _context_overflow(message, status):
                run.end_stop = StopEvent(round=rounds, rule="context", reason="context_full",
                                         text=f"context full: {error}")
                run.outcome, run.reason, run.message = "stopped", "context_full", error
            else:
                run.outcome, run.reason = "infrastructure", reason
                run.message = f"the model endpoint failed ({entry.where}): {error or kind}"
        else:
            run.outcome, run.reason = "agent_error", "stop_reason_error"
            run.message = f"OpenClaw ended the run on an error ({entry.where}): {error or 'no message'}"
    elif stop == "aborted":
        run.outcome, run.reason, run.message = "interrupted", "aborted", error or "the run was aborted"
    elif stop == "toolUse":
        run.outcome, run.reason = "interrupted", "no_final_reply"
        run.message = "the session ends after tool calls, without a final reply"
    elif stop == "length":
        # The final reply was cut at the output limit: the run's stop, as for every agent (the owner still got
        # the text OpenClaw delivered).
        run.end_stop = output_limit_stop(rounds)
        run.outcome, run.reason = "stopped", "output_limit"
        run.message = "the last reply was cut at the output limit (stopReason length)"
        run.delivered = text
    else:
        run.outcome = "completed"
        run.delivered = text
    return stop, error
