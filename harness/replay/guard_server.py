"""The shipped guard behind the replay protocol: ``python -m harness.replay.guard_server``.

``git:REF`` replays run this module from a checkout of REF, so the guard of another commit answers with its own
code (``harness.guard.session``) and its own default policy; it also shows the protocol end to end
(docs/replay-protocol.md). The ``hello`` message's ``policy`` (a ``GuardPolicy`` as JSON) is used when given,
else this checkout's ``DEFAULT_GUARD``. Reads stdin until it closes; writes one line per message.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from harness.guard.policy import DEFAULT_GUARD, GuardPolicy
from harness.guard.receipt import CommandRun, FileChange
from harness.guard.verdict import TestVerdict
from harness.replay.engine import SessionGuard
from harness.replay.session import RecordedResult, ReplayCall, ReplaySession, host_event

PROTOCOL = 1


def _answer(out: IO[str], value: dict[str, Any]) -> None:
    out.write(json.dumps(value, ensure_ascii=False) + "\n")
    out.flush()


def _stop(note: Any, receipt: Any = None) -> dict[str, Any]:
    value: dict[str, Any] = {"decision": "stop", "reason": note.detail, "text": note.text, "family": note.reason}
    if receipt is not None:
        value["receipt"] = receipt.model_dump(mode="json")
    return value


def serve(inp: IO[str], out: IO[str]) -> int:
    policy = DEFAULT_GUARD
    guard: SessionGuard | None = None
    session: ReplaySession | None = None
    stop: Any = None
    continuing = False
    current_round = 0
    for line in inp:
        if not line.strip():
            continue
        message = json.loads(line)
        kind = message.get("type")
        if kind == "hello":
            if message.get("policy") is not None:
                policy = GuardPolicy.model_validate(message["policy"])
            _answer(out, {"type": "hello", "protocol": PROTOCOL, "name": f"harness guard ({policy.name})"})
        elif kind == "session":
            session = ReplaySession(source="", name=str(message.get("session", "")), sha256="",
                                    prompt=str(message.get("prompt", "")), workspace=str(message.get("workspace", "")),
                                    rounds=())
            guard, stop, continuing, current_round = SessionGuard(policy, session), None, False, 0
            _answer(out, {"decision": "ok"})
        elif guard is None or session is None:
            _answer(out, {"decision": "error", "text": "no session begun"})
        elif kind == "round":
            current_round = int(message.get("round", 0))
            stop = guard.on_round(current_round, 0)
            _answer(out, _stop(stop) if stop is not None else {"decision": "allow"})
        elif kind == "call":
            call = ReplayCall(str(message["id"]), str(message["tool"]), message.get("arguments"), None)
            refused = guard.before_call(int(message["call"]), call)
            if refused is None:
                _answer(out, {"decision": "allow"})
            elif refused.stop is not None:
                stop = refused.stop
                _answer(out, {**_stop(refused.stop), "rule": refused.rule, "text": refused.text,
                              "stop_text": refused.stop.text})
            else:
                _answer(out, {"decision": "refuse", "rule": refused.rule, "reason": refused.reason,
                              "text": refused.text})
        elif kind == "result":
            call = ReplayCall(str(message["id"]), str(message["tool"]), message.get("arguments"), None)
            test = TestVerdict.model_validate(message["test"]) if message.get("test") else None
            result = RecordedResult(view=message.get("result") or {}, ran=bool(message.get("ran", True)),
                                    text=str(message.get("text", "")), exit_code=message.get("exit_code"), test=test,
                                    path=message.get("path"), cwd=message.get("cwd"))
            index = int(message["call"])
            if result.ran:
                response = f"round-{current_round}" if current_round > 0 else f"call-{index}"
                event: FileChange | CommandRun | None = host_event(call, result, session.workspace, index, response)
                if event is not None:
                    guard.record(event)
            note = guard.after_result(index, call, result)
            if note is not None:
                stop = note
            answer = _stop(note) if note is not None else {"decision": "allow"}
            _answer(out, {**answer, "deferrals": guard.deferrals()})
        elif kind == "cut":
            continuing = bool(message.get("continuing"))
            action = guard.on_cut(continuing)
            _answer(out, {"decision": action})
            if action == "continue":
                continuing = True
        elif kind == "end":
            receipt = guard.receipt(stop, str(message.get("final_text") or ""), continuing)
            _answer(out, {"decision": "ok", "receipt": receipt.model_dump(mode="json")})
            guard = session = None
        else:
            _answer(out, {"decision": "error", "text": f"unknown message type {kind!r}"})
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.stdin, sys.stdout))
