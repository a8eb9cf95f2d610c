"""Counterfactual edits of recorded sessions (``fleet replay --edit``, docs/replay.md).

``SESSION:CALL=RESULT`` replaces call CALL's recorded result; ``SESSION:CALL+=TOOL:RESULT`` (or ``+=@call.json``)
inserts a call after call CALL (0: before the first), as the model's next reply; ``SESSION:CALL=drop`` drops the
call. CALL is 1-based, counted in the session as the earlier edits left it. SESSION is the session's name or its
run label, or ``*`` for every session.

A RESULT is ``ok``, ``failed``, inline JSON, or ``@FILE`` with JSON: ``{"isError": bool, "details": {...},
"text": "..."}``, the result as the run-progress budget reads it (``details`` as the agent recorded it, e.g. an
inspection receipt). An inserted call as JSON is ``{"tool": ..., "arguments": {...}, "result": RESULT}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from harness.core.files import FileProblem, read_regular_file
from harness.core.errors import ReplayError
from harness.guard.results import SHELL_TOOLS, selected_call
from harness.guard.verdict import is_test_command, recognize
from harness.core.nesting import loads_json
from harness.replay.session import RecordedResult, ReplayCall, ReplayRound, ReplaySession

__all__ = ["Edit", "check_edit", "parse_edit", "resolve_edit", "apply_edits"]

_EDIT = re.compile(r"^(?P<session>.+?):(?P<call>\d+)(?P<op>\+?=)(?P<value>.*)$", re.S)
_TAIL = re.compile(r"^:(?P<call>\d+)(?P<op>\+?=)(?P<value>.*)$", re.S)
_MAX_EDIT_FILE = 4 << 20
"""An edit's @FILE holds one result or call: a few kilobytes (a pixel-fleet inspection receipt is under 10)."""
_SHORT = {"ok": {"isError": False, "details": {"status": "ok"}},
          "failed": {"isError": True, "details": {"status": "failed"}}}


@dataclass(frozen=True)
class Edit:
    text: str
    """As given (recorded with the outcome)."""
    session: str
    call: int
    kind: Literal["replace", "insert", "drop"]
    tool: str = ""
    arguments: Mapping[str, Any] | None = None
    result: Mapping[str, Any] | None = None


def _json(text: str, where: str, edit: str) -> Any:
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = read_regular_file(path, _MAX_EDIT_FILE, "an edit's file").decode("utf-8")
        except FileProblem as exc:
            raise ReplayError("--edit", edit, f"{path}: cannot read: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ReplayError("--edit", edit, f"{path}: cannot read: byte {exc.start}: not UTF-8") from None
        where = str(path)
    try:
        return loads_json(text)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ReplayError("--edit", edit, f"{where}: not valid JSON ({exc})") from None


def _result(text: str, edit: str) -> Mapping[str, Any]:
    value = _SHORT.get(text) if text in _SHORT else _json(text, "the result", edit)
    if not isinstance(value, dict) or not isinstance(value.get("isError", False), bool) or not isinstance(
            value.get("details", {}), dict) or not isinstance(value.get("text", ""), str):
        raise ReplayError("--edit", edit, 'a result is {"isError": bool, "details": {...}, "text": "..."}, '
                          "ok or failed")
    return value


def check_edit(text: str) -> None:
    """The form of one ``--edit`` value (which session it names is settled once the sessions are read)."""
    if _EDIT.match(text) is None:
        raise ReplayError("--edit", text, "expected SESSION:CALL=RESULT, SESSION:CALL+=TOOL:RESULT or SESSION:CALL=drop")


def parse_edit(text: str, session: str | None = None) -> Edit:
    """One ``--edit`` value, read as naming ``session`` (default: the shortest name it can be read with); a bad one
    is one ``ReplayError`` line naming it."""
    check_edit(text)
    if session is not None and text.startswith(session) and (tail := _TAIL.match(text[len(session):])):
        call, op, value = int(tail["call"]), tail["op"], tail["value"]
    else:
        match = _EDIT.match(text)
        assert match is not None
        session, call, op, value = match["session"], int(match["call"]), match["op"], match["value"]
    if op == "=":
        if call < 1:
            raise ReplayError("--edit", text, "calls are counted from 1")
        if value == "drop":
            return Edit(text, session, call, "drop")
        return Edit(text, session, call, "replace", result=_result(value, text))
    if value.startswith(("@", "{")):
        spec = _json(value, "the call", text)
        if not isinstance(spec, dict) or not isinstance(spec.get("tool"), str) or not spec["tool"]:
            raise ReplayError("--edit", text, 'an inserted call is {"tool": ..., "arguments": {...}, "result": ...}')
        arguments = spec.get("arguments", {})
        if not isinstance(arguments, dict):
            raise ReplayError("--edit", text, "the inserted call's arguments must be a JSON object")
        result = spec.get("result", "ok")
        return Edit(text, session, call, "insert", spec["tool"], arguments,
                    _result(result if isinstance(result, str) else json.dumps(result), text))
    tool, _, result_text = value.partition(":")
    if not tool:
        raise ReplayError("--edit", text, "an inserted call needs a tool: SESSION:CALL+=TOOL:RESULT")
    return Edit(text, session, call, "insert", tool, {}, _result(result_text or "ok", text))


def _recorded(call_name: str, arguments: Mapping[str, Any] | None, value: Mapping[str, Any]) -> RecordedResult:
    details = value.get("details", {})
    exit_code = details.get("exitCode") if isinstance(details.get("exitCode"), int) else None
    text = str(value.get("text", ""))
    selected, inner = selected_call(call_name, arguments)
    if selected != call_name:
        # A Tool Search call is read as the tool it selects: a wrapped test run is a test run.
        inner_details = details.get("result", {}).get("details", {}) if isinstance(details.get("result"), Mapping) \
            else {}
        if exit_code is None and isinstance(inner_details, Mapping) and isinstance(inner_details.get("exitCode"), int):
            exit_code = inner_details["exitCode"]
        call_name, arguments = selected, inner
    command = (arguments or {}).get("command")
    test = None
    if call_name in SHELL_TOOLS and isinstance(command, str) and is_test_command(command) and text:
        test = recognize(text, exit_code, command)
    return RecordedResult(view={"isError": bool(value.get("isError", False)), "details": dict(details)}, text=text,
                          exit_code=exit_code, test=test, path=details.get("path") if isinstance(
                              details.get("path"), str) else None)


def _apply(session: ReplaySession, edit: Edit, serial: int) -> ReplaySession:
    rounds = [list(rnd.calls) for rnd in session.rounds]
    places = [(r, c) for r, calls in enumerate(rounds) for c in range(len(calls))]
    if edit.kind == "insert":
        if edit.call > len(places):
            raise ReplayError("--edit", edit.text, f"session {session.name} has {len(places)} calls")
        call = ReplayCall(f"fleet-edit-{serial}", edit.tool, dict(edit.arguments or {}),
                          _recorded(edit.tool, edit.arguments, edit.result or {}), inserted=True)
        at = places[edit.call - 1][0] + 1 if edit.call else 0
        new = list(session.rounds)
        new.insert(at, ReplayRound(number=0, calls=(call,)))
        return session.with_rounds(new, edit.text)
    if edit.call > len(places):
        raise ReplayError("--edit", edit.text, f"session {session.name} has {len(places)} calls")
    r, c = places[edit.call - 1]
    if edit.kind == "drop":
        del rounds[r][c]
        if not rounds[r]:  # the reply made only this call: without it, the model never sent that reply
            return session.with_rounds([replace(rnd, calls=tuple(calls)) for i, (rnd, calls)
                                        in enumerate(zip(session.rounds, rounds)) if i != r], edit.text)
    else:
        old = rounds[r][c]
        rounds[r][c] = replace(old, result=_recorded(old.name, old.arguments, edit.result or {}))
    return session.with_rounds([replace(rnd, calls=tuple(calls)) for rnd, calls in zip(session.rounds, rounds)],
                               edit.text)


def resolve_edit(text: str, sessions: Sequence[ReplaySession]) -> Edit:
    """The edit as naming the longest session name (or label, or ``*``) it starts with: a name may itself hold
    ``:2=`` (a file named ``a:2=ok.jsonl``)."""
    names = sorted({"*", *(s.name for s in sessions), *(s.label for s in sessions if s.label)}, key=len, reverse=True)
    for name in names:
        if text.startswith(name) and _TAIL.match(text[len(name):]):
            return parse_edit(text, name)
    return parse_edit(text)


def apply_edits(sessions: Sequence[ReplaySession], edits: Sequence[Edit | str]) -> list[ReplaySession]:
    """The sessions with every edit applied in order; an edit naming no session is an error."""
    out = list(sessions)
    for serial, given in enumerate(edits, start=1):
        edit = resolve_edit(given, out) if isinstance(given, str) else given
        hits = [i for i, s in enumerate(out) if edit.session in ("*", s.name, s.label)]
        if not hits:
            names = ", ".join(s.name for s in out[:5]) + (" ..." if len(out) > 5 else "")
            raise ReplayError("--edit", edit.text, f"no session named {edit.session!r} (there are: {names})")
        for i in hits:
            out[i] = _apply(out[i], edit, serial)
    return out
