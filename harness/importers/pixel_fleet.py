"""Import the recorded ODS Pixel fleet sessions (``shared/fixtures/pixel-fleet/*.json``, docs/importers.md).

The files come in four shapes, told apart by their keys:

* a **session**: ``calls[]`` of ``{id, tool, arguments, result: {isError, text, details}}``, with
  ``prompt``, ``finalAssistant`` and ``delivered`` (tower2, tower3);
* a **trace**: ``calls[]`` of ``{id, tool, args, recorded: {state, isError, resultHead}}`` (bfb62a2b: a
  write's content is recorded only as its length, ``contentChars``);
* a **tail**: ``calls[]`` of ``{n, entries, id, name, arguments, result | blocked}`` with the result as
  ``{content: [{type, text}], details, isError}`` (the strixy unittest tail: not every call of the run);
* a **replay**: ``sessions[]``, each ``{label, host, ..., calls[]}`` of ``{n, entry, round, id, tool,
  selected, persistedIsError, args | argsSha256, envelope, result, text, stopped}`` (round 106-107).

Every key is read or refused: an unknown key, a missing one or a wrong type raises
``TranscriptImportError(file, key, problem)`` naming the JSON path (``calls[3].tool``). The run's
recording is kept whole beside the transcript (``session.json``), so nothing is lost in translation.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.nesting import loads_json
from harness.importers.events import write_runs
from harness.importers.pixel_guard import classify, plan_guard, receipt_source
from harness.importers.reader import Reader
from harness.importers.recorded import (
    RecordedCall,
    RecordedRound,
    RecordedRun,
    output_limit_stop,
    settle_by_details,
    verdict_of,
)
from harness.core.transcript import OwnerReceipt, ReceiptStatus, Usage

__all__ = ["FORMAT", "read_runs", "import_to_folder"]

FORMAT = "pixel-fleet"
AGENT = "pixel"

_TOP_KEYS = {
    "calls": list, "evidence": str, "prompt": str, "submittedUserText": str, "sessionId": str, "runId": str,
    "finalAssistant": dict, "delivered": (dict, str), "sessionFileSha256": str, "executionHost": str,
    "fixtureNotes": list, "session": dict, "finalStopReason": str,
}
_SESSION_KEYS = {"label": str, "calls": list, "host": str, "round": int, "main": str, "sessionId": str,
                 "sessionKey": str, "runId": str, "prompt": str}
_SHAPES: dict[str, dict[str, Any]] = {
    "session": {"id": str, "tool": str, "arguments": dict, "result": dict},
    "trace": {"id": str, "tool": str, "args": dict, "recorded": dict},
    "tail": {"n": int, "entries": list, "id": str, "name": str, "arguments": dict, "result": dict, "blocked": str,
             "guardNote": bool},
    "replay": {"n": int, "entry": int, "round": int, "id": str, "tool": str, "selected": str, "persistedIsError": bool,
               "args": dict, "argsSha256": str, "envelope": bool, "result": dict, "live": (bool, str), "text": str,
               "stopped": bool},
}
_REQUIRED = {"session": ("id", "tool", "arguments", "result"), "trace": ("id", "tool", "args", "recorded"),
             "tail": ("n", "id", "name", "arguments"), "replay": ("n", "id", "tool", "round")}

_COMMON_LIMITS = [
    "run_start: only run_id, agent and prompt are recorded; the other fields are empty",
    "ts: when the event was imported, not when it happened",
    "run_end: exit_code, duration_s and usage are not recorded",
    "model rounds: only the final reply (when recorded) appears as a model_response, with no usage or latency",
]
_LIMITS = {
    "session": ["round: not recorded (0)", "tool_result.text: the tool output followed by any ODS suffix"],
    "trace": ["round: not recorded (0)",
              "write content: recorded only as its length (arguments.contentChars)",
              "tool_result.text: only the start of the persisted result (recorded.resultHead)",
              "agent_details.status: the Portal task event state (recorded.state)"],
    "tail": ["the tail of the run only: calls between those recorded (debug runs, reads, other edits) are not here",
             "round: the session entry of the call (entries[0])",
             "tool_result.text: the guard's appended '[ODS Pixel execution] ...' note was removed (guardNote)",
             "a refused call carries only its refusal text"],
    "replay": ["arguments: only the SHA-256 of the canonical arguments (argsSha256), except preview inspections",
               "tool_result.text: the start of the result where recorded, else empty",
               "agent_details: only the subset of the result that the run-progress budget reads",
               "a call marked stopped never ran: its result was not recorded"],
}
_FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true or false",
               type(None): "null"}


def _kind(value: object) -> str:
    if value is None:
        return "null"
    for kind, name in _TYPE_NAMES.items():
        if type(value) is kind:
            return name
    return "a number" if isinstance(value, float) else type(value).__name__


class _Reader(Reader):
    """Reads one file, naming the file and the JSON path in every error."""

    def check(self, obj: dict[str, Any], where: str, allowed: dict[str, Any], required: tuple[str, ...]) -> None:
        """Every key known and of its type; every required key present."""
        for key, value in obj.items():
            path = f"{where}.{key}" if where else key
            if key not in allowed:
                self.fail(path, f"unknown key (the {FORMAT} importer does not read it)")
            kinds = allowed[key] if isinstance(allowed[key], tuple) else (allowed[key],)
            if not any(type(value) is kind for kind in kinds):
                expected = " or ".join(_TYPE_NAMES[kind] for kind in kinds)
                self.fail(path, f"expected {expected}, got {_kind(value)}")
        for key in required:
            if key not in obj:
                self.fail(f"{where}.{key}" if where else key, "missing")

    def obj(self, value: object, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, f"expected an object, got {_kind(value)}")
        return value

    def label(self, value: str, where: str) -> str:
        if not _FOLDER_NAME.match(value):
            self.fail(where, f"{value!r} cannot name a run's folder (letters, digits, '.', '_', '-')")
        return value


def _load(src: Path, reader: _Reader) -> tuple[dict[str, Any], bytes]:
    try:
        raw = src.read_bytes()
    except FileNotFoundError:
        reader.fail("", "file not found")
    except OSError as exc:
        reader.fail("", f"cannot read: {exc.strerror or exc}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reader.fail("", f"not UTF-8 text (byte {exc.start})")
    try:
        data = loads_json(text)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated")
        reader.fail(f"line {exc.lineno} column {exc.colno}",
                    f"not valid JSON ({exc.msg})" + ("; the file ends early: is it cut short?" if cut else ""))
    if not isinstance(data, dict):
        reader.fail("", f"expected a JSON object at the top, got {_kind(data)}")
    return data, raw


def _shape(call: dict[str, Any]) -> str:
    if "recorded" in call:
        return "trace"
    if {"n", "entries", "blocked", "guardNote"} & call.keys():
        return "tail"
    return "session"


def _session_call(call: dict[str, Any], where: str, reader: _Reader) -> RecordedCall:
    result = call["result"]
    reader.check(result, f"{where}.result", {"isError": bool, "text": str, "details": dict}, ("text",))
    details = result.get("details")
    blocked = details is not None and details.get("status") == "blocked"
    text = result["text"]
    return settle_by_details(RecordedCall(
        call_id=call["id"], name=call["tool"], arguments=call["arguments"], text=text,
        agent_is_error=result.get("isError"), agent_details=details, ran=not blocked,
        refusal=(text or str(details.get("reason", ""))) if blocked and details is not None else None,
        output=details.get("aggregated") if details and isinstance(details.get("aggregated"), str) else None,
    ))


def _trace_call(call: dict[str, Any], where: str, reader: _Reader) -> RecordedCall:
    recorded = call["recorded"]
    reader.check(recorded, f"{where}.recorded", {"state": (str, type(None)), "isError": bool, "resultHead": str},
                 ("state", "isError", "resultHead"))
    head, state = recorded["resultHead"], recorded["state"]
    refused = state == "blocked" or classify(head)[0] != "unrecognized"
    return settle_by_details(RecordedCall(
        call_id=call["id"], name=call["tool"], arguments=call["args"], text=head, agent_is_error=recorded["isError"],
        agent_details={"status": state} if state is not None else None, ran=not refused,
        refusal=head if refused else None,
    ))


def _tail_call(call: dict[str, Any], where: str, reader: _Reader) -> RecordedCall:
    entries = call.get("entries", [])
    for i, entry in enumerate(entries):
        if type(entry) is not int:
            reader.fail(f"{where}.entries[{i}]", f"expected an integer, got {_kind(entry)}")
    common = {"call_id": call["id"], "name": call["name"], "arguments": call["arguments"],
              "round": entries[0] if entries else 0, "recorded_n": call["n"]}
    if ("result" in call) == ("blocked" in call):
        reader.fail(f"{where}.result", "a call holds either a result or its refusal (blocked), not both or neither")
    if "blocked" in call:
        return settle_by_details(RecordedCall(**common, text=call["blocked"], ran=False, refusal=call["blocked"]))
    result = call["result"]
    reader.check(result, f"{where}.result", {"content": list, "details": dict, "isError": bool}, ("content",))
    texts = []
    for i, block in enumerate(result["content"]):
        block = reader.obj(block, f"{where}.result.content[{i}]")
        reader.check(block, f"{where}.result.content[{i}]", {"type": str, "text": str}, ("type", "text"))
        if block["type"] != "text":
            reader.fail(f"{where}.result.content[{i}].type", f"{block['type']!r} blocks are not read (only text)")
        texts.append(block["text"])
    text, details = "".join(texts), result.get("details")
    blocked = details is not None and details.get("status") == "blocked"
    return settle_by_details(RecordedCall(
        **common, text=text, agent_is_error=result.get("isError"), agent_details=details, ran=not blocked,
        refusal=text if blocked else None,
        output=details.get("aggregated") if details and isinstance(details.get("aggregated"), str) else None,
    ))


def _replay_call(call: dict[str, Any], where: str, reader: _Reader) -> RecordedCall:
    if ("args" in call) == ("argsSha256" in call):
        reader.fail(f"{where}.args", "a call holds either its arguments (args) or their digest (argsSha256)")
    args = call["args"] if "args" in call else {"argsSha256": call["argsSha256"]}
    selected = call.get("selected")
    arguments = {"id": selected, "args": args} if call["tool"] == "tool_call" and selected else args
    common = {"call_id": call["id"], "name": call["tool"], "arguments": arguments, "round": call["round"],
              "recorded_n": call["n"], "text": call.get("text", ""), "agent_is_error": call.get("persistedIsError")}
    if call.get("stopped"):
        if "result" in call:
            reader.fail(f"{where}.result", "a call marked stopped never ran, so it cannot hold a result")
        return settle_by_details(RecordedCall(**common, ran=False, refused_by_budget_stop=True))
    if "result" not in call:
        reader.fail(f"{where}.result", "missing (only a call marked stopped has none)")
    result = call["result"]
    reader.check(result, f"{where}.result", {"isError": bool, "details": dict}, ())
    if call.get("envelope"):
        if not selected:
            reader.fail(f"{where}.selected", "missing: an envelope's result belongs to the selected tool")
        details: dict[str, Any] | None = {"tool": {"name": selected}, "result": result}
    else:
        details = result.get("details")
    if common["agent_is_error"] is None:
        common["agent_is_error"] = result.get("isError")
    blocked = not call.get("envelope") and details is not None and details.get("status") == "blocked"
    refusal = (call.get("text") or str(details.get("reason", ""))) if blocked and details is not None else None
    return settle_by_details(RecordedCall(**common, agent_details=details, ran=not blocked, refusal=refusal))


_READERS: dict[str, Callable[[dict[str, Any], str, _Reader], RecordedCall]] = {
    "session": _session_call, "trace": _trace_call, "tail": _tail_call, "replay": _replay_call}


def _calls(items: list[Any], where: str, reader: _Reader, fixed: str | None) -> tuple[list[RecordedCall], str]:
    """The calls of one run; ``fixed`` is their shape when the file's layout says it, else each call's keys do."""
    calls: list[RecordedCall] = []
    shape = fixed
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        call = reader.obj(item, at)
        kind = fixed or _shape(call)
        if shape is not None and kind != shape:
            reader.fail(at, f"a {kind} call among {shape} calls (one file holds one kind)")
        shape = kind
        reader.check(call, at, _SHAPES[kind], _REQUIRED[kind])
        calls.append(_READERS[kind](call, at, reader))
    seen: dict[str, int] = {}
    for i, recorded in enumerate(calls):
        if not recorded.call_id:
            reader.fail(f"{where}[{i}].id", "empty: results are told apart by their call's id")
        if recorded.call_id in seen:
            reader.fail(f"{where}[{i}].id", f"{recorded.call_id!r} is also the id of {where}[{seen[recorded.call_id]}]")
        seen[recorded.call_id] = i
    return calls, shape or "session"


def _single(data: dict[str, Any], raw: bytes, src: Path, sha: str, reader: _Reader) -> RecordedRun:
    reader.check(data, "", _TOP_KEYS, ("calls",))
    calls, shape = _calls(data["calls"], "calls", reader, None)
    final = data.get("finalAssistant", {})
    reader.check(final, "finalAssistant", {"stopReason": str, "text": str, "errorMessage": str}, ())
    delivered = data.get("delivered")
    text, status, grade = None, None, None
    if isinstance(delivered, dict):
        reader.check(delivered, "delivered", {"text": str, "productOutcome": str, "grade": str}, ("text",))
        text, status, grade = delivered["text"], delivered.get("productOutcome"), delivered.get("grade")
        if status is not None and status not in ("passed", "failed", "pending", "none"):
            reader.fail("delivered.productOutcome", f"{status!r} is not passed, failed, pending or none")
    elif isinstance(delivered, str):
        text = delivered
    notes = data.get("fixtureNotes", [])
    for i, note in enumerate(notes):
        if type(note) is not str:
            reader.fail(f"fixtureNotes[{i}]", f"expected a string, got {_kind(note)}")
    session = data.get("session", {})
    reader.check(session, "session", {"id": str, "sha256": str}, ())
    session_id = data.get("sessionId") or session.get("id")
    label = reader.label(session_id, "sessionId" if "sessionId" in data else "session.id") if session_id else "run-1"
    facts = {"session_id": session_id, "session_file_sha256": data.get("sessionFileSha256") or session.get("sha256"),
             "execution_host": data.get("executionHost"), "recorded_grade": grade, "evidence": data.get("evidence"),
             "source_notes": notes}
    run = RecordedRun(
        format=FORMAT, file=str(src), sha256=sha, label=label,
        prompt=data.get("submittedUserText", data.get("prompt", "")),
        calls=calls, limits=_COMMON_LIMITS + _LIMITS[shape], agent=AGENT, run_id=data.get("runId", ""),
        final_text=final.get("text"), delivered=text,
        facts={k: v for k, v in facts.items() if v not in (None, [])}, raw=raw,
    )
    return _ending(run, final.get("stopReason", data.get("finalStopReason")), final.get("errorMessage"),
                   status)


def _ending(run: RecordedRun, stop_reason: str | None, error: str | None, outcome: ReceiptStatus | None
            ) -> RecordedRun:
    """What the recording says of the run beside its calls: the guard's refusals and stop (``pixel_guard``), the
    final reply (the only model round recorded, after the last call), a final reply cut at the output limit,
    the owner receipt (when the product ``outcome`` is recorded) and how the run ended."""
    tests = [verdict_of(call) for call in run.calls]
    plan = plan_guard(run.calls, tests)
    for index, call in enumerate(run.calls):
        call.guard, call.guard_after = plan.before.get(index, []), plan.after.get(index, [])
    last_round = max((call.round for call in run.calls), default=0)
    if run.final_text is not None:
        run.rounds.append(RecordedRound(number=last_round, after_calls=len(run.calls), text=run.final_text,
                                        finish_reason=stop_reason))
    stop = plan.stop
    if stop is None and stop_reason == "length":
        # The final reply was cut at the output limit (stopReason length): that ended the run. A guard stop
        # recorded earlier stays the run's one stop.
        stop = run.end_stop = output_limit_stop(last_round)
    if run.delivered is not None and outcome is not None:
        latest = next((t for t in reversed(tests) if t is not None), None)
        run.receipt = OwnerReceipt(status=outcome, text=run.delivered, source=receipt_source(run), test=latest)
    if stop is not None:
        run.outcome, run.reason = "stopped", stop.reason
    elif stop_reason == "aborted":
        run.outcome = "interrupted"
    elif run.final_text is not None or stop_reason is not None:
        run.outcome = "completed"
    run.message = error or (f"the last model call ended: {stop_reason}"
                            if stop_reason and run.outcome not in (None, "completed") else None)
    run.usage = Usage()  # not recorded: run_end says 0 (the limits say so)
    return run


def _sessions(data: dict[str, Any], src: Path, sha: str, reader: _Reader) -> list[RecordedRun]:
    reader.check(data, "", {"evidence": str, "sessions": list}, ("sessions",))
    runs: list[RecordedRun] = []
    for i, item in enumerate(data["sessions"]):
        where = f"sessions[{i}]"
        session = reader.obj(item, where)
        reader.check(session, where, _SESSION_KEYS, ("label", "calls"))
        label = reader.label(session["label"], f"{where}.label")
        if any(run.label == label for run in runs):
            reader.fail(f"{where}.label", f"{label!r} names two sessions")
        calls, _ = _calls(session["calls"], f"{where}.calls", reader, "replay")
        facts = {"session_id": session.get("sessionId"), "session_key": session.get("sessionKey"),
                 "round": session.get("round"), "main": session.get("main"), "evidence": data.get("evidence")}
        recording = {"evidence": data.get("evidence"), "session": session}
        runs.append(_ending(RecordedRun(
            format=FORMAT, file=str(src), sha256=sha, label=label, prompt=session.get("prompt", ""), calls=calls,
            limits=_COMMON_LIMITS + _LIMITS["replay"], agent=AGENT, run_id=session.get("runId", ""),
            host=session.get("host", ""), facts={k: v for k, v in facts.items() if v is not None},
            raw=json.dumps(recording, ensure_ascii=False, indent=1).encode("utf-8"),
        ), None, None, None))
    return runs


def read_runs(src: str | os.PathLike[str]) -> list[RecordedRun]:
    """Every run recorded in one pixel-fleet file. Bad input raises ``TranscriptImportError``."""
    path = Path(src)
    reader = _Reader(str(src))
    data, raw = _load(path, reader)
    sha = hashlib.sha256(raw).hexdigest()
    if "sessions" in data:
        return _sessions(data, path, sha, reader)
    if "calls" not in data:
        reader.fail("calls", f"missing: a {FORMAT} file holds calls, or sessions that each hold calls")
    return [_single(data, raw, path, sha, reader)]


def import_to_folder(src: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Read ``src`` and write one attempt-like folder per run under ``out_dir`` (``out_dir/<run>/``).

    The whole file is read and checked before anything is written."""
    return write_runs(read_runs(src), out_dir)
