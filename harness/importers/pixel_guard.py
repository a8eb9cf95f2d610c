"""Read the ODS Pixel guard in a recorded session: which calls it refused, and where it stopped the run.

Pixel's guard leaves no structured record of its decisions; a refused call's result carries the
guard's text instead (``details.status: blocked``). So the texts below are the record, matched by their
stable opening words, as the pixel-fleet fixtures hold them. A refusal whose text is not here is kept
as an ``unrecognized`` guard event with its text, never dropped.

Where the run-progress budget stopped is read from the recording (the calls it refused afterwards);
why it stopped (consecutive or total failures) is not written there, so the recorded results are
replayed through ``harness.guard.budget`` with seed 000's deferral off (the budget these sessions ran
under). Its reason is taken only when that replay stops at the recorded call; otherwise the stop says
``run_progress`` and that its counters are not known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.guard.budget import DEFAULT_POLICY, RunProgressBudget, Stop
from harness.guard.delete import RECURSIVE_DELETE_REFUSAL, find_recursive_delete
from harness.guard.verdict import TestVerdict, delivery_verdict
from harness.importers.recorded import ReceiptSource, RecordedCall, RecordedRun
from harness.core.transcript import GuardDecision, StopEvent

__all__ = ["BUDGET_STOP", "CODING_STOP", "REFUSALS", "GuardPlan", "classify", "plan_guard", "receipt_source"]

BUDGET_STOP = "This response was stopped after repeated tool failures or attempts without progress."
CODING_STOP = "Pixel stopped a no-progress coding repair loop after its bounded failed-verification limit."
MAIN_POLICY = DEFAULT_POLICY.model_copy(update={"deferral": False})
"""The budget as these sessions ran it: seed 000's deferral came later."""

REFUSALS: tuple[tuple[str, str, str], ...] = (
    # (opening words, rule, reason)
    (BUDGET_STOP, "budget", "run_progress"),
    (RECURSIVE_DELETE_REFUSAL[:80], "recursive_delete", "recursive_delete"),
    (CODING_STOP, "coding_loop", "failed_verification_limit"),
    ("Pixel stopped this response because it requested another coding tool after the repeated-command limit",
     "coding_loop", "repeated_command_limit"),
    ("For a new project, use a workspace-relative path", "workspace_route", "path_correction"),
    ("Not run: write the first project file before running commands", "workspace_route", "write_first"),
    ("Not run: verification must be the bare test command", "tool_policy", "bare_test_command"),
    ("Invalid preview relativeDirectory", "tool_policy", "invalid_preview_directory"),
    ("Pixel cannot publish this website yet", "tool_policy", "preview_before_site_files"),
    ("Pixel blocked this fetch because web_fetch is restricted", "tool_policy", "private_network_fetch"),
)


@dataclass
class GuardPlan:
    """The guard events of a run, by call index: before the call's result, and after it; and the run's stop."""

    before: dict[int, list[GuardDecision | StopEvent]] = field(default_factory=dict)
    after: dict[int, list[GuardDecision | StopEvent]] = field(default_factory=dict)
    stop: StopEvent | None = None


def classify(text: str | None) -> tuple[str, str]:
    """(rule, reason) of a refusal text; ``("unrecognized", "unrecognized_refusal")`` when unknown."""
    opening = (text or "").lstrip()
    for words, rule, reason in REFUSALS:
        if opening.startswith(words):
            return rule, reason
    return "unrecognized", "unrecognized_refusal"


def _refused_by_budget(call: RecordedCall) -> bool:
    return call.refused_by_budget_stop or (not call.ran and classify(call.refusal)[0] == "budget")


def _replay(calls: Sequence[RecordedCall], until: int) -> tuple[int, Stop] | None:
    """Where the budget (deferral off) stops, replaying the recorded results up to call ``until``."""
    budget, last_round = RunProgressBudget(MAIN_POLICY), None
    for index, call in enumerate(calls[: until + 1]):
        round_ = call.round or -(index + 1)  # not recorded: each call its own round
        if round_ != last_round:
            last_round = round_
            budget.on_round()
            if budget.stop is not None:
                return index - 1, budget.stop
        budget.on_result(call.call_id, call.name, call.arguments, call.budget_view())
        if budget.stop is not None:
            return index, budget.stop
    return None


def _budget_stop(calls: Sequence[RecordedCall]) -> tuple[int, str, str, bool] | None:
    """(call index, reason, text, replayed) of the budget's stop, or None when it did not stop the run.

    A call marked as refused by the stop comes after it; a call whose own result carries the stop text
    may be the stopping call itself (its copy was saved after the fuse) or the first one refused."""
    first = next((i for i, call in enumerate(calls) if _refused_by_budget(call)), None)
    if first is None:
        return None
    candidates = [first - 1] if calls[first].refused_by_budget_stop else [first, first - 1]
    replayed = _replay(calls, max(candidates))
    if replayed is not None and replayed[0] in candidates:
        return replayed[0], replayed[1].reason, replayed[1].text, True
    return candidates[0], "run_progress", "stopped by the run-progress budget (its counters are not recorded)", False


def plan_guard(calls: Sequence[RecordedCall], tests: Sequence[TestVerdict | None]) -> GuardPlan:
    """The guard and stop events the recorded refusals stand for (at most one stop per run)."""
    plan = GuardPlan()

    def add(where: dict[int, list[GuardDecision | StopEvent]], index: int, event: GuardDecision | StopEvent) -> None:
        if isinstance(event, StopEvent):
            if plan.stop is not None:
                return
            plan.stop = event
        where.setdefault(index, []).append(event)

    def data(call: RecordedCall, **more: object) -> dict[str, object]:
        return ({"recorded_n": call.recorded_n} if call.recorded_n is not None else {}) | more

    budget = _budget_stop(calls)

    def budget_stop(at: int, reason: str, text: str, replayed: bool) -> None:
        call = calls[at] if at >= 0 else None
        where, index = (plan.after, at) if call is not None else (plan.before, 0)
        round_, call_id = (call.round, call.call_id) if call is not None else (0, None)
        note = {"replayed": "harness.guard.budget, deferral off, stops at this call"} if replayed else {}
        add(where, index, GuardDecision(round=round_, rule="budget", decision="stop", call_id=call_id, reason=reason,
                                        text=text, data=(data(call) if call is not None else {}) | note))
        add(where, index, StopEvent(round=round_, rule="budget", reason=reason, text=text, call_id=call_id))

    if budget is not None and budget[0] < 0:
        budget_stop(*budget)
    seen: set[str] = set()

    def refused(index: int, call: RecordedCall) -> None:
        if _refused_by_budget(call):
            add(plan.before, index, GuardDecision(round=call.round, rule="budget", decision="refuse",
                                                  call_id=call.call_id, reason="after_stop", text=call.refusal,
                                                  data=data(call)))
            return
        rule, reason = classify(call.refusal)
        first = rule not in seen
        seen.add(rule)
        if rule == "recursive_delete":
            fragment = find_recursive_delete(call.command or "")
            add(plan.before, index, GuardDecision(
                round=call.round, rule="recursive_delete", decision="refuse", call_id=call.call_id,
                reason="recursive_delete" if first else "latch", text=call.refusal,
                data=data(call, **({"fragment": fragment} if first and fragment else {}))))
            if first:
                add(plan.before, index, StopEvent(round=call.round, rule="recursive_delete", reason="recursive_delete",
                                                  text=f"refused recursive delete: {fragment or call.command}",
                                                  call_id=call.call_id))
        elif rule == "coding_loop" and reason == "failed_verification_limit":
            # Pixel counts a run where no test ran and the runner exited non-zero as a failed verification
            # (seed 002, unittest's exit 5): delivery_verdict keeps that count.
            failed = sum(1 for call_before, test in zip(calls[:index], tests[:index])
                         if test is not None and delivery_verdict(test, call_before.exit_code) == "failed")
            add(plan.before, index, GuardDecision(
                round=call.round, rule="coding_loop", decision="stop" if first else "refuse", call_id=call.call_id,
                reason=reason if first else "after_stop", text=call.refusal, data=data(call, failed_test_runs=failed)))
            if first:
                add(plan.before, index, StopEvent(round=call.round, rule="coding_loop", reason=reason,
                                                  text=f"coding loop stopped after {failed} failed test runs",
                                                  call_id=call.call_id))
        else:
            add(plan.before, index, GuardDecision(
                round=call.round, rule=rule, decision="refuse",
                call_id=call.call_id, reason=reason, text=call.refusal, data=data(call)))

    for index, call in enumerate(calls):  # in call order, so the earliest stop is the run's stop
        stops_here = budget is not None and index == budget[0]
        if not call.ran and not (stops_here and _refused_by_budget(call)):
            refused(index, call)
        if stops_here:
            budget_stop(*budget)  # type: ignore[misc]
    return plan


def receipt_source(run: RecordedRun) -> ReceiptSource:
    """Who wrote what the owner got: the model, or one of the guard's own texts."""
    text = run.delivered or ""
    if run.final_text is not None and text == run.final_text:
        return "model"
    rule, _ = classify(text)
    if rule == "recursive_delete":
        return "refusal_receipt"
    if rule == "budget":
        return "budget_stop"
    return "agent_guard"
