"""The run-progress budget: when repeated failures or rounds without progress stop a run.

Limits (seed 000, ``BudgetPolicy`` defaults): the run stops at the result that brings its consecutive
failures to 4 or its total failures to 12, and at the ninth model round without progress. A success
counts as progress only while that exact (tool, arguments) pair has succeeded at most twice, so a
repeated ``echo done`` cannot keep a run alive; a real running-process receipt is progress (a verified
wait); discovery (tool search / describe / guides) changes the available schemas, not the task, so a
discovery success neither resets nor charges anything. A failed discovery call is still a failure.

Lanes: in a mixed task a call may belong to the ``workspace`` or ``extension`` lane. A lane keeps its
own consecutive counter and is exhausted at 4, which refuses that lane's calls only; the run stops
when every lane is exhausted. Calls without a lane use the run-wide counter, as in a single-purpose
task, which has no lanes at all.

Deferral (seed 000): a correctable failure (it measured nothing and its text already carries the
fix) whose charge would trip the consecutive fuse of its counter waits for exactly one next result,
so the model can send the fix. At most one charge waits, at most ``max_deferrals`` a run, and the
total cap is never deferred. The next failure charges its own counter and then the waiting charge;
the next non-discovery success charges it too, unless it is a passing corrected check of the same
counter, which forgives it. Discovery results leave it waiting; model rounds keep counting.

Results are de-duplicated by call id, and a stop is sticky: once stopped, every result is ignored
and every call refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from harness.guard.results import (
    is_correctable_inspection_failure,
    is_failed,
    is_passed_inspection,
    is_running_process,
    selected_call,
)

__all__ = [
    "Lane",
    "Counter",
    "StopReason",
    "ResultTest",
    "LANES",
    "INSPECTION_TOOL",
    "BudgetPolicy",
    "DEFAULT_POLICY",
    "Stop",
    "DeferralNote",
    "BudgetDecision",
    "RunProgressBudget",
]

Lane = Literal["workspace", "extension"]
Counter = Literal["run", "workspace", "extension"]
"""A consecutive-failure counter: the run-wide one, or a lane's."""
StopReason = Literal["consecutive_failures", "total_failures", "no_progress", "lanes_exhausted"]
ResultTest = Callable[[Mapping[str, Any]], bool]
"""Classifies one tool's result (for a wrapper call, the selected tool's inner result)."""

LANES: tuple[Lane, ...] = ("workspace", "extension")
INSPECTION_TOOL = "pixel_ods_workspace_preview_inspect"
"""The one tool whose failures the seed makes correctable, and whose pass forgives."""


class BudgetPolicy(BaseModel):
    """The budget's limits and classifiers. Frozen, so a replay can run two policies side by side
    (``DEFAULT_POLICY.model_copy(update={"deferral": False})`` is the budget before seed 000).

    ``model_dump(mode="json")`` records the limits with a cell; the classifier maps are code, so
    they are left out of it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    consecutive_failures: int = Field(
        default=4, ge=1, description="Failures in a row that stop the run or exhaust a lane.")
    total_failures: int = Field(
        default=12, ge=1, description="Failures in a run that stop it; never deferred.")
    rounds_without_progress: int = Field(
        default=8, ge=0, description="Model rounds allowed without progress; one more stops the run.")
    identical_successes: int = Field(
        default=2, ge=0, description="Successes of one exact (tool, arguments) pair that count as progress.")
    deferral: bool = Field(
        default=True, description="Let a correctable failure's fuse-tripping charge wait one result.")
    max_deferrals: int = Field(default=2, ge=0, description="Charges that may wait in one run.")
    discovery_tools: frozenset[str] = Field(
        default=frozenset({"tool_search", "tool_describe", "pixel_ods_skill"}),
        description="Tools whose successes neither reset nor charge anything.",
    )
    wrapper_tools: frozenset[str] = Field(
        default=frozenset({"tool_call"}),
        description="Tool Search transports: classified as the tool in arguments['id'], on details.result.",
    )
    correctable: Mapping[str, ResultTest] = Field(
        default_factory=lambda: {INSPECTION_TOOL: is_correctable_inspection_failure},
        exclude=True,
        description="Per tool: whether a failed result is correctable. Tools not listed never are.",
    )
    corrects: Mapping[str, ResultTest] = Field(
        default_factory=lambda: {INSPECTION_TOOL: is_passed_inspection},
        exclude=True,
        description="Per tool: whether a success is the corrected attempt that forgives a waiting charge.",
    )
    running_process: Mapping[str, ResultTest] = Field(
        default_factory=lambda: {"exec": is_running_process, "process": is_running_process},
        exclude=True,
        description="Per tool: whether a successful result is a real running-process receipt.",
    )
    unobserved_call_prefixes: tuple[str, ...] = Field(
        default=("tool_search_code:",),
        description="Call ids never observed: nested Tool Search children, whose parent call is observed.",
    )
    seen_calls_kept: int = Field(default=256, ge=1, description="Call ids remembered for de-duplication.")
    fingerprints_kept: int = Field(
        default=128, ge=1, description="(tool, arguments) success counts remembered, oldest dropped.")

    @field_serializer("discovery_tools", "wrapper_tools")
    def _sorted(self, names: frozenset[str]) -> list[str]:
        # A recorded policy must serialize the same way in every process (set order is not stable).
        return sorted(names)


DEFAULT_POLICY = BudgetPolicy()


class Stop(BaseModel):
    """Why and where the budget stopped a run. Sticky: a run has at most one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: StopReason = Field(description="Stable code for reports and queries.")
    text: str = Field(description='The human text, in the seed\'s words, e.g. "4 consecutive failures".')
    call_index: int = Field(description="1-based index of the observed result that stopped the run; "
                                        "for a round stop, the number of results observed before it.")
    call_id: str | None = Field(description="The stopping result's call id; None for a round stop.")


@dataclass(frozen=True, slots=True)
class DeferralNote:
    """What happened to a deferred charge at this result.

    ``waits``: this failure's charge waits for one result; ``forgiven``: a passing corrected check
    dropped the waiting charge; ``charged``: the waiting charge landed after all.
    """

    action: Literal["waits", "forgiven", "charged"]
    counter: Counter
    failed_call_id: str


@dataclass(frozen=True, slots=True)
class BudgetDecision:
    """The budget's answer to a round, a result or a call about to run."""

    allowed: bool
    """Whether the run goes on (for ``check_call``: whether that call may run)."""
    stop: Stop | None
    exhausted_lanes: tuple[Lane, ...]
    deferral: DeferralNote | None = None
    observed: bool = True
    """False when the result was ignored: a duplicate call id, an unobserved id, or after the stop."""


def _fingerprint(tool: str, arguments: Mapping[str, Any] | None) -> str:
    canonical = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # surrogatepass: JSON may carry a lone surrogate ("\ud800"), which a strict encode refuses; kept distinct, not lost.
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


class RunProgressBudget:
    """One run's budget. Feed it ``on_round`` and ``on_result`` in order; ask ``check_call``
    before a call runs."""

    def __init__(self, policy: BudgetPolicy = DEFAULT_POLICY) -> None:
        self.policy = policy
        self._results = 0
        self._rounds = 0
        self._failures = 0
        self._consecutive: dict[Counter, int] = {"run": 0, "workspace": 0, "extension": 0}
        self._exhausted: set[Lane] = set()
        self._waiting: DeferralNote | None = None
        """The charge that waits, as the note that announced it."""
        self._deferrals = 0
        self._seen: dict[str, None] = {}
        self._successes: dict[str, int] = {}
        self._stop: Stop | None = None

    @property
    def stop(self) -> Stop | None:
        return self._stop

    def on_round(self) -> BudgetDecision:
        """A model round began. The round after ``rounds_without_progress`` idle ones stops the run."""
        if self._stop is None:
            self._rounds += 1
            limit = self.policy.rounds_without_progress
            if self._rounds > limit:
                self._stop = Stop(reason="no_progress", text=f"more than {limit} rounds without progress",
                                  call_index=self._results, call_id=None)
        return self._decision()

    def on_result(self, call_id: str, tool: str, arguments: Mapping[str, Any] | None,
                  result: Mapping[str, Any], lane: Lane | None = None) -> BudgetDecision:
        """Account one tool result. ``lane`` is None for a call outside any lane (run-wide counter)."""
        if not call_id:
            raise ValueError("a tool result needs its call id: results are de-duplicated by it")
        if lane is not None and lane not in LANES:
            raise ValueError(f"unknown lane {lane!r}: expected one of {', '.join(LANES)} or None")
        if (self._stop is not None or call_id in self._seen
                or call_id.startswith(self.policy.unobserved_call_prefixes)):
            return self._decision(observed=False)
        self._remember(call_id)
        self._results += 1
        name, inner = self._selected(tool, arguments, result)
        counter: Counter = lane or "run"
        if is_failed(result):
            correctable = self._classify(self.policy.correctable, name, inner)
            note = self._on_failure(counter, call_id, correctable)
        elif name in self.policy.discovery_tools:
            note = None
        else:
            note = self._on_success(counter, call_id, tool, arguments, name, inner)
        return self._decision(note)

    def check_call(self, lane: Lane | None = None) -> BudgetDecision:
        """Whether a new call (in ``lane``) may run: no once the run stopped or that lane is exhausted."""
        decision = self._decision()
        if lane in self._exhausted:
            return BudgetDecision(allowed=False, stop=decision.stop, exhausted_lanes=decision.exhausted_lanes)
        return decision

    def snapshot(self) -> dict[str, Any]:
        """The counters, as plain JSON-ready data (for transcripts, reports and tests)."""
        return {
            "results": self._results,
            "rounds_without_progress": self._rounds,
            "failures": self._failures,
            "consecutive_failures": self._consecutive["run"],
            "lane_failures": {lane: self._consecutive[lane] for lane in LANES},
            "exhausted_lanes": list(self._exhausted_lanes()),
            "waiting": None if self._waiting is None
            else {"counter": self._waiting.counter, "call_id": self._waiting.failed_call_id},
            "deferrals": self._deferrals,
            "stop": None if self._stop is None else self._stop.model_dump(),
        }

    def _on_failure(self, counter: Counter, call_id: str, correctable: bool) -> DeferralNote | None:
        self._failures += 1
        note: DeferralNote | None
        if (correctable and self.policy.deferral and self._waiting is None
                and self._deferrals < self.policy.max_deferrals
                and self._failures < self.policy.total_failures and self._trips(counter)):
            self._waiting = note = DeferralNote("waits", counter, call_id)
            self._deferrals += 1
        else:
            self._charge(counter)
            note = self._charge_waiting()
        self._settle(call_id)
        return note

    def _on_success(self, counter: Counter, call_id: str, tool: str, arguments: Mapping[str, Any] | None,
                    name: str, inner: Mapping[str, Any]) -> DeferralNote | None:
        note = None
        if self._waiting is not None:
            waiting = self._waiting
            if waiting.counter in ("run", counter) and self._classify(self.policy.corrects, name, inner):
                self._waiting = None
                note = DeferralNote("forgiven", waiting.counter, waiting.failed_call_id)
            else:
                note = self._charge_waiting()
                self._settle(call_id)
                if self._stop is not None:
                    return note
        self._consecutive["run"] = 0
        if counter != "run":
            self._consecutive[counter] = 0
        if self._classify(self.policy.running_process, name, inner):
            self._rounds = 0
            return note
        fingerprint = _fingerprint(tool, arguments)
        # Updating a count keeps its place, so the oldest first-seen pair is forgotten first.
        count = self._successes.get(fingerprint, 0) + 1
        self._successes[fingerprint] = count
        if len(self._successes) > self.policy.fingerprints_kept:
            del self._successes[next(iter(self._successes))]
        if count <= self.policy.identical_successes:
            self._rounds = 0
        return note

    def _selected(self, tool: str, arguments: Mapping[str, Any] | None,
                  result: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
        """The tool a call really ran and its own result: a wrapper names it in ``arguments['id']``
        (possibly qualified, ``openclaw:core:exec``) and carries its result in ``details.result``."""
        if tool not in self.policy.wrapper_tools:
            return tool, result
        name, _ = selected_call(tool, arguments, self.policy.wrapper_tools)
        details = result.get("details")
        inner = details.get("result") if isinstance(details, Mapping) else None
        return name, inner if isinstance(inner, Mapping) else result

    @staticmethod
    def _classify(tests: Mapping[str, ResultTest], name: str, result: Mapping[str, Any]) -> bool:
        test = tests.get(name)
        return test is not None and test(result)

    def _trips(self, counter: Counter) -> bool:
        """Whether charging ``counter`` now would stop the run (run-wide) or exhaust its lane."""
        if counter != "run" and counter in self._exhausted:
            return False
        return self._consecutive[counter] + 1 >= self.policy.consecutive_failures

    def _charge(self, counter: Counter) -> None:
        self._consecutive[counter] += 1
        if counter != "run" and self._consecutive[counter] >= self.policy.consecutive_failures:
            self._exhausted.add(counter)

    def _charge_waiting(self) -> DeferralNote | None:
        if self._waiting is None:
            return None
        waiting, self._waiting = self._waiting, None
        self._charge(waiting.counter)
        return DeferralNote("charged", waiting.counter, waiting.failed_call_id)

    def _settle(self, call_id: str) -> None:
        policy = self.policy
        if self._failures >= policy.total_failures:
            reason: StopReason = "total_failures"
            text = f"{policy.total_failures} failures in total"
        elif self._consecutive["run"] >= policy.consecutive_failures:
            reason = "consecutive_failures"
            text = f"{policy.consecutive_failures} consecutive failures"
        elif len(self._exhausted) == len(LANES):
            reason = "lanes_exhausted"
            text = f"{policy.consecutive_failures} consecutive failures in every lane"
        else:
            return
        self._stop = Stop(reason=reason, text=text, call_index=self._results, call_id=call_id)

    def _remember(self, call_id: str) -> None:
        self._seen[call_id] = None
        if len(self._seen) > self.policy.seen_calls_kept:
            del self._seen[next(iter(self._seen))]

    def _exhausted_lanes(self) -> tuple[Lane, ...]:
        return tuple(lane for lane in LANES if lane in self._exhausted)

    def _decision(self, note: DeferralNote | None = None, *, observed: bool = True) -> BudgetDecision:
        return BudgetDecision(allowed=self._stop is None, stop=self._stop,
                              exhausted_lanes=self._exhausted_lanes(), deferral=note, observed=observed)
