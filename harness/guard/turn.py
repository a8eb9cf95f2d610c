"""One owner turn under the guard: every rule, in the order it acts, behind one small API.

The builtin agent (``workers/host/agent/loop.py``) and the replay (``harness/replay/``) both drive a turn through
this class, so "the guard as shipped" in a replay is the same code, in the same order, as in a run:

* ``on_round()`` before each model request (the run-progress budget's rounds without progress);
* ``before_call(name, arguments)`` before each call: the budget's sticky stop, then the recursive-delete
  refusal and its latch, then the coding-loop stop. A refused call does not run, and the budget does not
  observe it (it ran nothing, so it is neither a success nor a failure of the model's work);
* ``after_result(...)`` after each result that ran: the budget observes it, a test run feeds the coding loop,
  and what the receipt needs (files changed, commands run) is kept;
* ``on_cut(...)`` when a reply stopped at the output limit: continue once, report, or deliver;
* the endings (``completed``, ``refusal_receipt``, ``budget_stop``, ``coding_stop``, ``cut_report``) build
  what the owner is delivered.

Which rules are on and their limits is a ``GuardPolicy`` (``harness.guard.policy``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness.guard.budget import BudgetDecision, RunProgressBudget, Stop
from harness.guard.coding_loop import CodingLoopGuard
from harness.guard.delete import DeleteGuard
from harness.guard.output_limit import ContinuationLedger, CutTurn, OutputLimitDecision, report_text
from harness.guard.policy import DEFAULT_GUARD, GuardPolicy
from harness.guard.receipt import (
    CommandRun,
    FileChange,
    RunFacts,
    asks_for_change,
    build_refusal_receipt,
    latest_test,
    verification_status,
)
from harness.guard.verdict import TestVerdict, recognize
from harness.core.transcript import OwnerReceipt

__all__ = ["Rule", "CallCheck", "GuardSession", "latest_verdict", "completed_receipt", "BUDGET_STOP_TEXT", "BUDGET_REFUSAL_TEXT", "CODING_STOP_TEXT",
           "TURN_KEY"]

Rule = Literal["budget", "recursive_delete", "coding_loop", "output_limit"]

BUDGET_STOP_TEXT = (
    "The agent was stopped after {what}: the run-progress budget ends a run that keeps failing or makes no "
    "progress. The request is not complete; files saved before the stop are kept."
)
BUDGET_REFUSAL_TEXT = "error: the run was stopped ({what}); this call did not run."
CODING_STOP_TEXT = (
    "The agent was stopped after {failed} failed test runs without a passing one: a test-and-repair loop that "
    "makes no progress. The request is not complete; files saved before the stop are kept."
)
TURN_KEY = "owner-turn"
"""The run is one owner turn: the continuation ledger's only key."""


@dataclass(frozen=True)
class CallCheck:
    """The guard's answer before one call runs."""

    allowed: bool
    rule: Rule | None = None
    """The rule that refused it."""
    reason: str | None = None
    """Stable code: ``after_stop`` (budget), ``recursive_delete`` or ``latch``, ``coding_loop`` or ``after_stop``."""
    text: str | None = None
    """What the model is told instead of a result."""
    fragment: str | None = None
    """recursive_delete: the deletion found in the call."""
    stops: bool = False
    """This refusal is the one that stops the run (the first deletion refusal, the coding-loop stop)."""


def latest_verdict(events: Sequence[FileChange | CommandRun]) -> TestVerdict | None:
    """The latest recognized test command's verdict, when one ran to its end."""
    test = latest_test(events)
    if test is None or test.end is None:
        return None
    return recognize(test.output, test.exit_code, test.command)


def completed_receipt(events: Sequence[FileChange | CommandRun], text: str) -> OwnerReceipt:
    """What the owner gets when the model answered: its text, with the latest test's status."""
    return OwnerReceipt(status=verification_status(events), text=text, source="model", test=latest_verdict(events))


class GuardSession:
    """The guard's state for one owner turn under ``policy``."""

    def __init__(self, request_text: str, workspace_root: str, policy: GuardPolicy = DEFAULT_GUARD) -> None:
        self.policy = policy
        self.request_text = request_text
        self.workspace_root = workspace_root
        on = policy.guards
        self.budget = RunProgressBudget(policy.budget_policy()) if on.budget else None
        self.delete = DeleteGuard(request_text) if on.recursive_delete else None
        self.coding = CodingLoopGuard(policy.coding_loop.failed_test_runs) if on.coding_loop else None
        self.ledger = ContinuationLedger()
        self.host_events: list[FileChange | CommandRun] = []

    # -- the turn ------------------------------------------------------------------------------------

    @property
    def deletion_refused(self) -> bool:
        """A recursive deletion was refused: tool use is over and the owner gets the refusal receipt."""
        return self.delete is not None and self.delete.stopped

    @property
    def coding_stopped(self) -> bool:
        return self.coding is not None and self.coding.stopped

    @property
    def budget_stop(self) -> Stop | None:
        return self.budget.stop if self.budget is not None else None

    def on_round(self) -> BudgetDecision | None:
        """A model round begins (None when the budget is off)."""
        return self.budget.on_round() if self.budget is not None else None

    def before_call(self, name: str, arguments: Mapping[str, Any] | None) -> CallCheck:
        """Decide one call before it runs."""
        if self.budget is not None:
            allowed = self.budget.check_call()
            if not allowed.allowed:  # stopped earlier: the stop is sticky
                what = allowed.stop.text if allowed.stop is not None else "run-progress budget"
                return CallCheck(False, "budget", "after_stop", BUDGET_REFUSAL_TEXT.format(what=what))
        if self.delete is not None:
            latched = self.delete.stopped
            verdict = self.delete.check(name, arguments or {})
            if not verdict.allowed:
                return CallCheck(False, "recursive_delete", "latch" if latched else "recursive_delete",
                                 verdict.reason or "", verdict.fragment, stops=not latched)
        if self.coding is not None:
            decision = self.coding.check(name, arguments)
            if not decision.allowed:
                return CallCheck(False, "coding_loop", "coding_loop" if decision.stops else "after_stop",
                                 decision.text, stops=decision.stops)
        return CallCheck(True)

    def after_result(self, call_id: str, name: str, arguments: Mapping[str, Any] | None,
                     view: Mapping[str, Any], test: TestVerdict | None = None,
                     exit_code: int | None = None) -> BudgetDecision | None:
        """A call ran and returned ``view`` (``isError`` and ``details``, as the budget reads a result); ``test``
        is its verdict when it was a recognized test command. None when the budget is off."""
        if self.coding is not None and test is not None:
            self.coding.on_test(test, exit_code)
        if self.budget is None:
            return None
        return self.budget.on_result(call_id, name, arguments or {}, view)

    def record(self, event: FileChange | CommandRun) -> None:
        """What the receipt needs to know about a call that ran: a file changed, a command run."""
        self.host_events.append(event)

    def on_cut(self, is_continuation: bool) -> OutputLimitDecision:
        """The reply stopped at the output limit (its calls never run): continue once, report, or deliver.
        With the rule off, the cut reply is delivered as it is."""
        if not self.policy.guards.output_limit:
            return OutputLimitDecision(action="deliver")
        return self.ledger.decide(TURN_KEY, self.cut_turn(is_continuation))

    def cut_turn(self, is_continuation: bool) -> CutTurn:
        status = verification_status(self.host_events)
        latest: dict[str, Literal["none", "passed", "failed", "running"]] = {
            "none": "none", "passed": "passed", "failed": "failed", "pending": "running"}
        workspace_task = asks_for_change(self.request_text) or any(
            isinstance(event, FileChange) for event in self.host_events)
        return CutTurn(cut=True, is_continuation=is_continuation, latest_test=latest[status], receipt_status=status,
                       incomplete_turn_text=True, workspace_task=workspace_task)

    # -- endings -------------------------------------------------------------------------------------

    def latest_verdict(self) -> TestVerdict | None:
        return latest_verdict(self.host_events)

    def completed(self, text: str) -> OwnerReceipt:
        """The model answered: its text, with the latest test's status."""
        return completed_receipt(self.host_events, text)

    def refusal_receipt(self) -> OwnerReceipt:
        """After a refused deletion: the receipt built from what the tools recorded, never model text."""
        receipt = build_refusal_receipt(self.host_events, RunFacts(request_text=self.request_text,
                                                                   workspace_root=self.workspace_root))
        return OwnerReceipt(status=receipt.status, text=receipt.text, source="refusal_receipt",
                            test_state=receipt.test_state, test=receipt.test_verdict, reasons=receipt.reasons)

    def budget_stop_receipt(self, stop: Stop) -> OwnerReceipt:
        return OwnerReceipt(status="failed", text=BUDGET_STOP_TEXT.format(what=stop.text), source="budget_stop",
                            test=self.latest_verdict(), reasons=(stop.reason,))

    def coding_stop_receipt(self) -> OwnerReceipt:
        failed = self.coding.failed if self.coding is not None else 0
        return OwnerReceipt(status="failed", text=CODING_STOP_TEXT.format(failed=failed), source="coding_loop_stop",
                            test=self.latest_verdict(), reasons=("coding_loop",))

    def cut_report(self, decision: OutputLimitDecision, is_continuation: bool) -> OwnerReceipt:
        return OwnerReceipt(status="failed", text=report_text(self.cut_turn(is_continuation)),
                            source="output_limit_report", test=self.latest_verdict(), reasons=decision.refusals)
