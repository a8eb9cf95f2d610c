"""Drive one recorded session through one guard, offline, as the builtin agent's loop drives a live turn.

The walk is the loop's (``workers/host/agent/loop.py``): per round, ``on_round``; a reply cut at the output limit runs
none of its calls and goes to the output-limit rule; otherwise each call is asked about before it "runs", and
its recorded result is shown to the guard after; after the round's calls, a refused deletion, a budget stop or
a coding-loop stop ends the turn. Nothing runs: a call's result is the one recorded.

Where the recording cannot answer, the replay says so instead of guessing (``unrecorded_call``): the policy lets
a call run that the recording's own guard refused (so it never ran and has no result), or lets the run go on past
the point where the recording's own guard stopped it. A call the recording's agent refused by a rule no policy
here decides (a path correction, a tool policy) stays refused, and its recorded refusal is shown to the budget as
the recording's agent showed it.

A guard is anything with the ``Guard`` protocol: the shipped ``GuardSession`` under a policy (``SessionGuard``), or
an external process speaking the JSONL protocol (``harness.replay.external``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from harness.guard.policy import GuardPolicy
from harness.guard.receipt import CommandRun, FileChange
from harness.guard.turn import GuardSession
from harness.replay.outcome import Refusal, ReplayOutcome, StopReason
from harness.replay.session import MODELED_RULES, RecordedResult, ReplayCall, ReplayRound, ReplaySession, host_event
from harness.core.transcript import OwnerReceipt

__all__ = ["StopNote", "Refused", "Guard", "SessionGuard", "replay_session", "response_id"]


@dataclass(frozen=True)
class StopNote:
    reason: StopReason
    detail: str
    text: str


@dataclass(frozen=True)
class Refused:
    rule: str
    reason: str
    text: str
    stop: StopNote | None = None
    """Set when this refusal stops the run."""


class Guard(Protocol):
    """One owner turn under a guard (a new one per session)."""

    def on_round(self, number: int, calls_so_far: int) -> StopNote | None: ...

    def before_call(self, index: int, call: ReplayCall) -> Refused | None: ...

    def after_result(self, index: int, call: ReplayCall, result: RecordedResult) -> StopNote | None: ...

    def record(self, event: FileChange | CommandRun) -> None: ...

    def on_cut(self, continuing: bool) -> Literal["continue", "deliver", "report"]: ...

    def receipt(self, stop: StopNote | None, text: str, continuing: bool) -> OwnerReceipt: ...

    def deferrals(self) -> int: ...


class SessionGuard:
    """The shipped guard (``harness.guard.turn.GuardSession``) under a policy."""

    def __init__(self, policy: GuardPolicy, session: ReplaySession) -> None:
        self.guard = GuardSession(session.prompt, session.workspace or "/workspace", policy)
        self._cut: Any = None

    def on_round(self, number: int, calls_so_far: int) -> StopNote | None:
        decision = self.guard.on_round()
        if decision is not None and decision.stop is not None:
            return StopNote("run_progress", decision.stop.reason, decision.stop.text)
        return None

    def before_call(self, index: int, call: ReplayCall) -> Refused | None:
        check = self.guard.before_call(call.name, call.arguments)
        if check.allowed:
            return None
        stop = None
        if check.stops and check.rule == "recursive_delete":
            stop = StopNote("recursive_delete", "recursive_delete", f"refused recursive delete: {check.fragment}")
        elif check.stops and check.rule == "coding_loop":
            stop = StopNote("coding_loop", "coding_loop", check.text or "")
        return Refused(check.rule or "", check.reason or "", check.text or "", stop)

    def after_result(self, index: int, call: ReplayCall, result: RecordedResult) -> StopNote | None:
        decision = self.guard.after_result(call.call_id, call.name, call.arguments, result.view, result.test,
                                           result.exit_code)
        if decision is not None and decision.stop is not None and decision.observed:
            return StopNote("run_progress", decision.stop.reason, decision.stop.text)
        return None

    def record(self, event: FileChange | CommandRun) -> None:
        self.guard.record(event)

    def on_cut(self, continuing: bool) -> Literal["continue", "deliver", "report"]:
        self._cut = self.guard.on_cut(continuing)
        return self._cut.action

    def receipt(self, stop: StopNote | None, text: str, continuing: bool) -> OwnerReceipt:
        if stop is None:
            return self.guard.completed(text)
        if stop.reason == "recursive_delete":
            return self.guard.refusal_receipt()
        if stop.reason == "coding_loop":
            return self.guard.coding_stop_receipt()
        if stop.reason == "output_limit":
            return self.guard.cut_report(self._cut, continuing)
        budget_stop = self.guard.budget_stop
        assert budget_stop is not None
        return self.guard.budget_stop_receipt(budget_stop)

    def deferrals(self) -> int:
        budget = self.guard.budget
        return int(budget.snapshot().get("deferrals", 0)) if budget is not None else 0


@dataclass
class _Walk:
    session: ReplaySession
    policy: str
    guard: Guard
    refusals: list[Refusal]
    index: int = 0
    continuing: bool = False

    def outcome(self, *, stop: StopNote | None = None, stop_call: int | None = None, text: str | None = None,
                unrecorded: int | None = None) -> ReplayOutcome:
        s = self.session
        common: dict[str, Any] = dict(
            source=s.source, session=s.name, sha256=s.sha256, policy=self.policy, calls=len(s.calls),
            refused_calls=[r.call for r in self.refusals], refusals=self.refusals, edits=list(s.edits),
            deferrals=self.guard.deferrals())
        if unrecorded is not None:
            return ReplayOutcome(stopped=False, unrecorded_call=unrecorded, **common)
        receipt = self.guard.receipt(stop, text or "", self.continuing)
        # surrogatepass: a recorded text may hold a lone surrogate ("\ud800" in its JSON); hashed, never refused.
        delivered = hashlib.sha256(receipt.text.encode("utf-8", "surrogatepass")).hexdigest()
        return ReplayOutcome(
            stopped=stop is not None, stop_reason=stop.reason if stop else None,
            # 0: stopped before any call (a first reply cut and reported): no call's result stopped it.
            stop_detail=stop.detail if stop else None, stop_call=stop_call if stop and stop_call else None,
            stop_text=stop.text if stop else None, receipt_status=receipt.status, receipt_source=receipt.source,
            delivered_sha256=delivered, delivered=receipt.text, **common)


def response_id(number: int, index: int) -> str:
    """Which model reply a call came in (the receipt tells sibling calls by it): its round, or, where the
    recording numbers no rounds, the call itself."""
    return f"round-{number}" if number > 0 else f"call-{index}"


def _refuse_rest(walk: _Walk, rounds: list[ReplayRound], stop: StopNote) -> None:
    """After a stop, the model's later calls in the recording are refused: the stop is sticky."""
    for rnd in rounds:
        for call in rnd.calls:
            walk.index += 1
            refused = walk.guard.before_call(walk.index, call)
            rule, reason = (refused.rule, refused.reason) if refused is not None else (_RULE[stop.reason], "after_stop")
            walk.refusals.append(Refusal(call=walk.index, rule=rule, reason=reason,
                                         text=refused.text if refused is not None else ""))


_RULE = {"run_progress": "budget", "recursive_delete": "recursive_delete", "coding_loop": "coding_loop",
         "output_limit": "output_limit", "external": "external"}


def replay_session(session: ReplaySession, guard: Guard, policy_name: str) -> ReplayOutcome:
    """Replay ``session`` through ``guard`` (a fresh one per session)."""
    walk = _Walk(session, policy_name, guard, [])
    rounds = list(session.rounds)
    for at, rnd in enumerate(rounds):
        stop = guard.on_round(rnd.number, walk.index)
        if stop is not None:
            stop_call = walk.index
            _refuse_rest(walk, rounds[at:], stop)
            return walk.outcome(stop=stop, stop_call=stop_call)
        if rnd.cut:
            action = guard.on_cut(walk.continuing)
            walk.index += len(rnd.calls)  # a cut reply's calls never run, and are not refused: never sent
            if action == "deliver":
                return walk.outcome(text=rnd.text or "")
            if action == "report":
                stop = StopNote("output_limit", "output_limit", "cut at output limit")
                stop_call = walk.index
                _refuse_rest(walk, rounds[at + 1:], stop)
                return walk.outcome(stop=stop, stop_call=stop_call)
            walk.continuing = True
            continue
        ended: tuple[StopNote, int] | None = None
        for call in rnd.calls:
            walk.index += 1
            index = walk.index
            refused = guard.before_call(index, call)
            if refused is not None:
                walk.refusals.append(Refusal(call=index, rule=refused.rule, reason=refused.reason, text=refused.text))
                if refused.stop is not None and ended is None:
                    ended = (refused.stop, index)
                continue
            result = call.result
            if result is None or (not result.ran and result.refused_by in MODELED_RULES):
                return walk.outcome(unrecorded=index)
            if not result.ran:
                # Refused by the recording agent's own rule: it stays refused, and its budget saw the refusal.
                walk.refusals.append(Refusal(call=index, rule=result.refused_by or "recorded", reason="recorded",
                                             text=result.text))
            else:
                event = host_event(call, result, session.workspace, index, response_id(rnd.number, index))
                if event is not None:
                    guard.record(event)
            stop = guard.after_result(index, call, result)
            if stop is not None and ended is None:
                ended = (stop, index)
        if ended is not None:
            _refuse_rest(walk, rounds[at + 1:], ended[0])
            return walk.outcome(stop=ended[0], stop_call=ended[1])
        if not rnd.calls and rnd.text is not None:
            return walk.outcome(text=rnd.text)
    if session.ended_by_guard or session.final_text is None:
        # The agent would ask the model again: a new round, which the budget may stop before any request is made
        # (the builtin agent's no-progress stop is recorded so: no reply after it). If it does not, the recording
        # stops at its own guard (or holds no answer), and what came next was never recorded.
        stop = guard.on_round(0, walk.index)
        if stop is not None:
            return walk.outcome(stop=stop, stop_call=walk.index)
        return walk.outcome(unrecorded=walk.index + 1)
    return walk.outcome(text=session.final_text)
