"""The shipped guard behind the replay protocol: ``python -m harness.replay.guard_server``.

``git:REF`` replays run this module from a checkout of REF, so the guard of another commit answers with its own
code (``harness.guard.turn``) and its own default policy; it also shows the protocol end to end
(docs/replay-protocol.md). The ``hello`` message's ``policy`` (a ``GuardPolicy`` as JSON) is used when given,
else this checkout's ``DEFAULT_GUARD``. Reads stdin (UTF-8) until it closes; writes one line per message, and a
message it cannot use (not JSON, a missing field) is answered ``{"decision": "error", "text": ...}``.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Mapping
from typing import IO, Any

from harness.guard.policy import DEFAULT_GUARD, GuardPolicy
from harness.guard.receipt import CommandRun, FileChange
from harness.guard.verdict import TestVerdict
from harness.replay.engine import SessionGuard, StopNote, response_id
from harness.replay.session import RecordedResult, ReplayCall, ReplaySession, host_event

PROTOCOL = 1
_FAMILIES = ("run_progress", "recursive_delete", "output_limit", "coding_loop")
"""The stops this guard makes (an ``end`` naming another is not one of its own: it keeps the one it saw)."""


def _answer(out: IO[str], value: dict[str, Any]) -> None:
    try:
        line = json.dumps(value, ensure_ascii=False)
        line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from the recording: escaped, as the harness's side does
        line = json.dumps(value, ensure_ascii=True)
    out.write(line + "\n")
    out.flush()


def _ended_by(message: Mapping[str, Any], tracked: StopNote | None) -> StopNote | None:
    """The stop the replay recorded, as the ``end`` message names it (else the one this server saw last)."""
    given = message.get("stop")
    if isinstance(given, Mapping) and given.get("family") in _FAMILIES:
        return StopNote(given["family"], str(given.get("reason", "")), str(given.get("text", "")))
    return tracked if message.get("stopped", tracked is not None) else None


def _stop(note: Any, receipt: Any = None) -> dict[str, Any]:
    value: dict[str, Any] = {"decision": "stop", "reason": note.detail, "text": note.text, "family": note.reason}
    if receipt is not None:
        value["receipt"] = receipt.model_dump(mode="json")
    return value


class _State:
    """The server between messages: the policy, and the session under way."""

    def __init__(self) -> None:
        self.policy = DEFAULT_GUARD
        self.guard: SessionGuard | None = None
        self.session: ReplaySession | None = None
        self.stop: StopNote | None = None
        self.continuing = False
        self.current_round = 0


def serve(inp: IO[str], out: IO[str]) -> int:
    state = _State()
    for line in inp:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            if not isinstance(message, dict):
                raise ValueError("the message is not a JSON object")
            answer = _handle(state, message)
        except (ValueError, KeyError, TypeError) as exc:  # one bad message: said, and the harness stops
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            answer = {"decision": "error", "text": f"cannot use the message: {what}"}
        _answer(out, answer)
    return 0


def _handle(state: _State, message: dict[str, Any]) -> dict[str, Any]:
    """The one answer to one message."""
    kind = message.get("type")
    if kind == "hello":
        if message.get("policy") is not None:
            state.policy = GuardPolicy.model_validate(message["policy"])
        return {"type": "hello", "protocol": PROTOCOL, "name": f"harness guard ({state.policy.name})"}
    if kind == "session":
        # A new session starts afresh, also when the last one got no ``end`` (the replay could not finish it).
        state.session = ReplaySession(source="", name=str(message.get("session", "")), sha256="",
                                      prompt=str(message.get("prompt", "")),
                                      workspace=str(message.get("workspace", "")), rounds=())
        state.guard = SessionGuard(state.policy, state.session)
        state.stop, state.continuing, state.current_round = None, False, 0
        return {"decision": "ok"}
    guard, session = state.guard, state.session
    if guard is None or session is None:
        return {"decision": "error", "text": f"a {kind!r} message before any session message"}
    if kind == "round":
        state.current_round = int(message.get("round", 0))
        note = guard.on_round(state.current_round, 0)
        if note is not None:
            state.stop = note
        return _stop(note) if note is not None else {"decision": "allow"}
    if kind == "call":
        call = ReplayCall(str(message["id"]), str(message["tool"]), message.get("arguments"), None)
        refused = guard.before_call(int(message["call"]), call)
        if refused is None:
            return {"decision": "allow"}
        if refused.stop is not None:
            state.stop = refused.stop
            return {**_stop(refused.stop), "rule": refused.rule, "text": refused.text, "stop_text": refused.stop.text}
        return {"decision": "refuse", "rule": refused.rule, "reason": refused.reason, "text": refused.text}
    if kind == "result":
        call = ReplayCall(str(message["id"]), str(message["tool"]), message.get("arguments"), None)
        test = TestVerdict.model_validate(message["test"]) if message.get("test") else None
        result = RecordedResult(view=message.get("result") or {}, ran=bool(message.get("ran", True)),
                                text=str(message.get("text", "")), exit_code=message.get("exit_code"), test=test,
                                path=message.get("path"), cwd=message.get("cwd"))
        index = int(message["call"])
        if result.ran:
            response = response_id(state.current_round, index)
            event: FileChange | CommandRun | None = host_event(call, result, session.workspace, index, response)
            if event is not None:
                guard.record(event)
        note = guard.after_result(index, call, result)
        if note is not None:
            state.stop = note
        return {**(_stop(note) if note is not None else {"decision": "allow"}), "deferrals": guard.deferrals()}
    if kind == "cut":
        state.continuing = bool(message.get("continuing"))
        action = guard.on_cut(state.continuing)
        if action == "continue":
            state.continuing = True
        elif action == "report":
            state.stop = StopNote("output_limit", "output_limit", "cut at output limit")
        return {"decision": action}
    if kind == "end":
        stop = _ended_by(message, state.stop)
        receipt = guard.receipt(stop, str(message.get("final_text") or ""), state.continuing)
        state.guard = state.session = None
        return {"decision": "ok", "receipt": receipt.model_dump(mode="json")}
    return {"decision": "error", "text": f"unknown message type {kind!r}"}


def main() -> int:
    # The protocol is UTF-8 whatever this machine's locale says; a line that is not UTF-8 is a bad message.
    inp = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="strict")
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="strict", line_buffering=False)
    try:
        return serve(inp, out)
    except UnicodeDecodeError as exc:
        _answer(out, {"decision": "error", "text": f"a line that is not UTF-8: {exc}"})
        return 1


if __name__ == "__main__":
    sys.exit(main())
