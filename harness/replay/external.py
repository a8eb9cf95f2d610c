"""An external guard: a process that speaks the replay protocol on stdin/stdout (docs/replay-protocol.md).

One JSON object per line each way, in lockstep: the harness sends a message, the guard answers it with exactly
one line. A guard can be written in any language (``docs/examples/guard-budget.mjs`` is one in JavaScript), and
``git:REF`` replays run another commit's own guard this way (``harness.replay.guard_server``), so every policy
that is not in this process goes through this one road.

A guard that exits, answers with something that is not one JSON object, answers a decision the message does not
allow, reports an error (``{"decision": "error", "text": ...}``), or takes longer than the replay's guard timeout
(``FLEET_REPLAY_GUARD_TIMEOUT``, default 60 s) to answer is one ``ReplayError`` line naming the guard, the session
and the call, with the last line it wrote on stderr.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any, Literal

from harness.core.errors import ReplayError, one_line
from harness.guard.receipt import CommandRun, FileChange
from harness.guard.turn import completed_receipt
from harness.replay.engine import Refused, StopNote
from harness.replay.session import RecordedResult, ReplayCall, ReplaySession
from harness.core.transcript import OwnerReceipt

__all__ = ["PROTOCOL", "DEFAULT_TIMEOUT", "GuardProcess", "ExternalGuard", "encode_line"]

PROTOCOL = 1
_REASON = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""A stop reason is a stable code, printed in tables and JSON: nothing that could pass for another line."""
DEFAULT_TIMEOUT = 60.0
"""Seconds a guard has to answer one message (the ``replay_guard_timeout_s`` setting's default)."""
_FAMILIES = ("run_progress", "recursive_delete", "output_limit", "coding_loop")
_MAX_LINE = 16 * 1024 * 1024


def encode_line(value: Mapping[str, Any]) -> bytes:
    """One protocol line: the object as UTF-8 JSON and a newline. A string that is not valid Unicode (a lone
    surrogate a recording can hold as ``\\ud800``) cannot be UTF-8, so then the whole line is written with
    ``\\u`` escapes instead: still UTF-8 (ASCII), and it reads back as the same value."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True).encode("ascii") + b"\n"


class GuardProcess:
    """One running external guard, used for many sessions in turn."""

    def __init__(self, name: str, argv: Sequence[str], policy: Mapping[str, Any] | None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.name = name
        self.timeout = timeout
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._stderr, env=dict(env) if env is not None else None, cwd=cwd)
        except OSError as exc:
            raise ReplayError(name, "", f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout
        os.set_blocking(self._out.fileno(), False)
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._out, selectors.EVENT_READ)
        self.where = "hello"
        hello = self.ask({"type": "hello", "protocol": PROTOCOL, "policy": policy})
        if hello.get("protocol") != PROTOCOL:
            self.fail(f"speaks protocol {hello.get('protocol')!r}, not {PROTOCOL}")
        self.guard_name = str(hello.get("name") or name)

    def _last_stderr(self) -> str:
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 4096))
        lines = [line for line in self._stderr.read().decode("utf-8", "replace").splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def fail(self, problem: str) -> None:
        if self._more_waiting():
            # A wrong answer with more lines behind it: the guard answers some message more than once, and the
            # line read was a stale one; that, not the decision read, is what its author needs to hear.
            problem = f"wrote more than one line for one message ({problem})"
        err = self._last_stderr()
        self.close()
        raise ReplayError(self.name, self.where, problem + (f" (its stderr: {one_line(err)[:300]})" if err else ""))

    def _readline(self) -> bytes:
        deadline = time.monotonic() + self.timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.proc.kill()  # it is not reading either: no grace period to wait out
                self.fail(f"gave no answer in {self.timeout:g} s")
            if not self._selector.select(left):
                continue
            chunk = self._out.read(1 << 16)
            if not chunk:
                try:  # its output closed: it is exiting, so wait a moment for the code the line can name
                    code: int | None = self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    code = None
                self.fail("closed its output" + (f" and exited {code}" if code is not None else ""))
            self._buffer += chunk or b""
            if len(self._buffer) > _MAX_LINE:
                self.fail(f"answered a line of over {_MAX_LINE} bytes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def ask(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """Send one message; its one answer, a JSON object."""
        self._no_unasked_line()
        try:
            self._in.write(encode_line(message))
            self._in.flush()
        except (BrokenPipeError, OSError):
            code = self.proc.poll()
            self.fail("stopped reading its input" + (f" (exited {code})" if code is not None else ""))
        raw = self._readline()
        try:
            answer = json.loads(raw.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            self.fail(f"answered a line that is not JSON: {one_line(raw.decode('utf-8', 'replace'))[:120]!r}")
        if not isinstance(answer, dict):
            self.fail("answered JSON that is not an object")
        return answer

    def _more_waiting(self, grace: float = 0.1) -> bool:
        """Whether the guard has written more than was read (waiting up to ``grace`` s: only on an error path)."""
        try:
            if not self._buffer.strip() and self.proc.stdout is not None and self._selector.select(grace):
                self._buffer += self._out.read(1 << 16) or b""
        except (OSError, ValueError):
            return False
        return bool(self._buffer.strip())

    def check_quiet(self, grace: float) -> None:
        """After the last message: nothing more may come (a guard that answered the last ``end`` twice)."""
        if self._more_waiting(grace):
            self.fail("answered more lines than it was sent messages")

    def kill(self) -> None:
        """End the guard at once (its replay is being stopped)."""
        if self.proc.poll() is None:
            self.proc.kill()

    def _no_unasked_line(self) -> None:
        """Lockstep: nothing may be waiting before a message is sent (a guard that answers twice)."""
        if not self._buffer and self._selector.select(0):
            chunk = self._out.read(1 << 16)
            self._buffer += chunk or b""
        if self._buffer.strip():
            self.fail(f"wrote more than one line for one message (then: "
                      f"{one_line(self._buffer.decode('utf-8', 'replace'))[:80]!r})")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._in.close()
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._selector.close()
        self._stderr.close()


def _decision(proc: GuardProcess, answer: Mapping[str, Any], allowed: tuple[str, ...]) -> str:
    decision = answer.get("decision")
    if decision == "error":  # any message may be answered so: the guard cannot go on, and says why
        text = answer.get("text")
        proc.fail("reported an error" + (f": {one_line(text)[:300]}" if isinstance(text, str) and text else ""))
    if decision not in allowed:
        proc.fail(f"answered decision {decision!r}; expected one of {', '.join(allowed)}")
    return str(decision)


def _text(proc: GuardProcess, answer: Mapping[str, Any], key: str, default: str = "") -> str:
    value = answer.get(key, default)
    if not isinstance(value, str):
        proc.fail(f"answered {key} that is not a string")
    return str(value)


def _code(proc: GuardProcess, answer: Mapping[str, Any], key: str, default: str) -> str:
    """A rule or reason: a stable code, printed in tables and JSON, so nothing that could pass for another line."""
    value = _text(proc, answer, key, default) or default
    if not _REASON.fullmatch(value):
        proc.fail(f"answered a {key} that is not a short code (letters, digits, _ . : -): {one_line(value)[:80]!r}")
    return value


class ExternalGuard:
    """One session under an external guard (the ``Guard`` protocol of ``harness.replay.engine``)."""

    def __init__(self, proc: GuardProcess, session: ReplaySession) -> None:
        self.proc = proc
        self.session = session
        self.events: list[FileChange | CommandRun] = []
        self.stop_receipt: OwnerReceipt | None = None
        self.cut_text = ""
        self._deferrals = 0
        proc.where = f"session {session.name}"
        _decision(proc, proc.ask({"type": "session", "session": session.name, "prompt": session.prompt,
                                  "workspace": session.workspace}), ("ok",))

    def _stop(self, answer: Mapping[str, Any]) -> StopNote:
        reason = _code(self.proc, answer, "reason", "stopped")
        family = answer.get("family")
        self._keep_receipt(answer)
        text = _text(self.proc, answer, "stop_text") if "stop_text" in answer else _text(self.proc, answer, "text")
        return StopNote(family if family in _FAMILIES else "external", reason, text)

    def _keep_receipt(self, answer: Mapping[str, Any]) -> None:
        # The first stop is the run's (the engine keeps the first), so its receipt is kept: a later answer (a
        # call after the stop, answered stop again) neither replaces nor clears it.
        given = self._receipt(answer.get("receipt"))
        if self.stop_receipt is None:
            self.stop_receipt = given

    def _receipt(self, value: object) -> OwnerReceipt | None:
        if value is None:
            return None
        try:
            return OwnerReceipt.model_validate(value)
        except ValueError as exc:
            self.proc.fail(f"answered a receipt that does not validate: {one_line(str(exc))[:200]}")
        return None

    def on_round(self, number: int, calls_so_far: int) -> StopNote | None:
        self.proc.where = f"session {self.session.name} round after call {calls_so_far}"
        answer = self.proc.ask({"type": "round", "round": number})
        return self._stop(answer) if _decision(self.proc, answer, ("allow", "stop")) == "stop" else None

    def before_call(self, index: int, call: ReplayCall) -> Refused | None:
        self.proc.where = f"session {self.session.name} call {index}"
        answer = self.proc.ask({"type": "call", "call": index, "id": call.call_id, "tool": call.name,
                                "arguments": call.arguments})
        decision = _decision(self.proc, answer, ("allow", "refuse", "stop"))
        if decision == "allow":
            return None
        text = _text(self.proc, answer, "text")
        rule = _code(self.proc, answer, "rule", "external")
        if decision == "refuse":
            return Refused(rule, _code(self.proc, answer, "reason", "refused"), text)
        stop = self._stop(answer)
        return Refused(rule, stop.detail, text, stop)

    def after_result(self, index: int, call: ReplayCall, result: RecordedResult) -> StopNote | None:
        self.proc.where = f"session {self.session.name} call {index}"
        answer = self.proc.ask({
            "type": "result", "call": index, "id": call.call_id, "tool": call.name, "arguments": call.arguments,
            "result": dict(result.view), "text": result.text, "ran": result.ran, "exit_code": result.exit_code,
            "path": result.path, "cwd": result.cwd,
            "test": result.test.model_dump(mode="json") if result.test is not None else None})
        if "deferrals" in answer:
            deferrals = answer["deferrals"]
            if not isinstance(deferrals, int) or isinstance(deferrals, bool) or not 0 <= deferrals <= 1_000_000:
                self.proc.fail(f"answered deferrals that are not a count: {one_line(repr(deferrals))[:80]}")
            self._deferrals = int(deferrals)
        return self._stop(answer) if _decision(self.proc, answer, ("allow", "stop")) == "stop" else None

    def record(self, event: FileChange | CommandRun) -> None:
        self.events.append(event)

    def on_cut(self, continuing: bool) -> Literal["continue", "deliver", "report"]:
        self.proc.where = f"session {self.session.name} cut reply"
        answer = self.proc.ask({"type": "cut", "continuing": continuing})
        decision = _decision(self.proc, answer, ("continue", "deliver", "report"))
        self.cut_text = _text(self.proc, answer, "text")
        if decision == "report":
            self._keep_receipt(answer)
        return decision  # type: ignore[return-value]

    def receipt(self, stop: StopNote | None, text: str, continuing: bool) -> OwnerReceipt:
        self.proc.where = f"session {self.session.name} end"
        answer = self.proc.ask({
            "type": "end", "stopped": stop is not None,
            "stop": {"family": stop.reason, "reason": stop.detail, "text": stop.text} if stop is not None else None,
            "final_text": None if stop else text})
        _decision(self.proc, answer, ("ok",))
        given = self._receipt(answer.get("receipt")) or self.stop_receipt
        if given is not None:
            return given
        if stop is not None:
            # A reported cut: the guard's text for it, when it gave one (the stop's own text is the harness's).
            shown = self.cut_text if stop.reason == "output_limit" and self.cut_text else stop.text
            return OwnerReceipt(status="failed", text=shown, source="agent_guard", reasons=(stop.detail,))
        return completed_receipt(self.events, text)

    def deferrals(self) -> int:
        return self._deferrals
