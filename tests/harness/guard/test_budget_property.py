"""Seeded property test of seed 000's deferral invariants over random traces.

Each trace runs through four budgets at once: a plain reference written here from DESIGN's facts
(no deferral), the budget with deferral off, with deferral on, and with deferral on but no result
ever counting as the corrected attempt ("strict"). After every step the invariants the seed states
are checked:

- with deferral off, the budget equals the reference exactly;
- with deferral, it never stops the run or a lane earlier than the reference;
- the total cap is never deferred: every failure counts at once, and the 12th stops the run;
- at most one charge waits, and at most 2 wait in a run;
- without a passing correction, a difference from the reference opens only at a correctable
  failure and closes at the next non-discovery, non-duplicate result (one result later at most);
- discovery results neither charge nor forgive; only a passing inspection forgives.

Traces are shorter than the budget's memory (256 call ids, 128 success pairs), so the reference
needs no forgetting.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from harness.guard.budget import DEFAULT_POLICY, INSPECTION_TOOL, Lane, RunProgressBudget
from harness.guard.results import INSPECTION_KIND, TRANSITION_UNTESTED

TRACES = 600
STEPS = 80
SEED = 20260925
LANES: list[Lane | None] = [None, None, "workspace", "extension"]
DISCOVERY = {"tool_search", "tool_describe", "pixel_ods_skill"}


def receipt(status: str, error: bool = True, **details: Any) -> dict[str, Any]:
    body = {"details": {"schemaVersion": 1, "kind": INSPECTION_KIND, "status": status, **details}}
    return {**body, "isError": True} if error else body


def last_step(error_code: str) -> dict[str, Any]:
    step = {"index": 0, "status": "failed", "errorCode": error_code}
    return receipt("failed", blockedRequests=[], steps=[step])


CORRECTABLE = [receipt("failed", errorCode="invalid_request"),
               receipt("incomplete", errorCode=TRANSITION_UNTESTED),
               last_step("no_match"), last_step("invalid_selector")]
MEASURED = [last_step("visibility_mismatch"), receipt("failed", errorCode="timeout")]
PASSED = receipt("passed", error=False, steps=[])
DIRTY_PASS = receipt("passed", error=False, steps=[], pageErrors={"count": 1})
RUNNING = {"details": {"status": "running", "sessionId": "s-1"}}


@dataclass(frozen=True)
class Event:
    """One tool result of a trace, with the truths the generator knows about it."""

    call_id: str
    tool: str
    params: dict[str, Any]
    result: dict[str, Any]
    lane: Lane | None
    failed: bool
    correctable: bool
    passes: bool
    running: bool

    @property
    def discovery(self) -> bool:
        return self.tool in DISCOVERY


def random_event(rng: random.Random, step: int) -> Event:
    call_id = f"call-{rng.randrange(step)}" if step and rng.random() < 0.05 else f"call-{step}"
    lane = rng.choice(LANES)
    params = {"path": rng.choice("abc")}
    if rng.random() < 0.45:
        tool = rng.choice(["exec", "tool_call", "tool_search", INSPECTION_TOOL, INSPECTION_TOOL])
        if tool == INSPECTION_TOOL:
            correctable = rng.random() < 0.7
            result = rng.choice(CORRECTABLE if correctable else MEASURED)
        else:
            correctable, result = False, rng.choice([{"isError": True}, {"details": {"exitCode": 2}}])
        return Event(call_id, tool, params, result, lane, True, correctable, False, False)
    tool = rng.choice(["read", "exec", "process", "tool_search", "tool_describe", "pixel_ods_skill",
                       INSPECTION_TOOL, INSPECTION_TOOL])
    passes = tool == INSPECTION_TOOL and rng.random() < 0.7
    running = tool == "process" and rng.random() < 0.3
    result = PASSED if passes else DIRTY_PASS if tool == INSPECTION_TOOL else RUNNING if running else {}
    return Event(call_id, tool, params, result, lane, False, False, passes, running)


class ReferenceBudget:
    """The budget before seed 000, from DESIGN's facts alone: no deferral, nothing classified."""

    def __init__(self) -> None:
        self.rounds = self.failures = self.results = 0
        self.consecutive: dict[str | None, int] = {None: 0, "workspace": 0, "extension": 0}
        self.exhausted: set[str] = set()
        self.seen: set[str] = set()
        self.successes: Counter[str] = Counter()
        self.stop: tuple[str, int] | None = None

    def round(self) -> None:
        if self.stop is None:
            self.rounds += 1
            if self.rounds > 8:
                self.stop = ("no_progress", self.results)

    def result(self, event: Event) -> None:
        if self.stop is not None or event.call_id in self.seen:
            return
        self.seen.add(event.call_id)
        self.results += 1
        if event.failed:
            self.failures += 1
            self.consecutive[event.lane] += 1
            if event.lane is not None and self.consecutive[event.lane] >= 4:
                self.exhausted.add(event.lane)
            if self.failures >= 12:
                self.stop = ("total_failures", self.results)
            elif self.consecutive[None] >= 4:
                self.stop = ("consecutive_failures", self.results)
            elif len(self.exhausted) == 2:
                self.stop = ("lanes_exhausted", self.results)
            return
        if event.discovery:
            return
        self.consecutive[None] = 0
        if event.lane is not None:
            self.consecutive[event.lane] = 0
        if event.running:
            self.rounds = 0
            return
        key = json.dumps([event.tool, event.params], sort_keys=True)
        self.successes[key] += 1
        if self.successes[key] <= 2:
            self.rounds = 0


def state(budget: RunProgressBudget | ReferenceBudget) -> str | tuple[str, ...]:
    """What a run's caller sees: stopped, or which lanes refuse calls."""
    if budget.stop is not None:
        return "stopped"
    if isinstance(budget, ReferenceBudget):
        return tuple(sorted(budget.exhausted))
    return tuple(sorted(budget.snapshot()["exhausted_lanes"]))


def assert_equals_reference(budget: RunProgressBudget, reference: ReferenceBudget, at: str) -> None:
    snap = budget.snapshot()
    stop = None if budget.stop is None else (budget.stop.reason, budget.stop.call_index)
    assert stop == reference.stop, at
    if reference.stop is None:
        assert (snap["failures"], snap["consecutive_failures"], snap["rounds_without_progress"]) == (
            reference.failures, reference.consecutive[None], reference.rounds), at
        lanes = {lane: reference.consecutive[lane] for lane in ("workspace", "extension")}
        assert snap["lane_failures"] == lanes, at
        assert set(snap["exhausted_lanes"]) == reference.exhausted, at


def test_deferral_invariants_over_random_traces() -> None:
    strict_policy = DEFAULT_POLICY.model_copy(update={"corrects": {}})
    off_policy = DEFAULT_POLICY.model_copy(update={"deferral": False})
    tally = Counter[str]()
    for trace in range(TRACES):
        rng = random.Random(SEED + trace)
        reference = ReferenceBudget()
        off, on, strict = RunProgressBudget(off_policy), RunProgressBudget(), RunProgressBudget(strict_policy)
        seen: set[str] = set()
        for step in range(STEPS):
            at = f"trace {trace} step {step}"
            event = None if rng.random() < 0.15 else random_event(rng, step)
            lagging = state(strict) != state(reference)
            before = {"on": on.snapshot(), "strict": strict.snapshot()}
            if event is None:
                reference.round()
                notes = {"on": on.on_round().deferral, "strict": strict.on_round().deferral}
                off.on_round()
            else:
                reference.result(event)
                args = (event.call_id, event.tool, event.params, event.result, event.lane)
                off.on_result(*args)
                notes = {"on": on.on_result(*args).deferral, "strict": strict.on_result(*args).deferral}
            neutral = event is None or event.call_id in seen or (not event.failed and event.discovery)
            if event is not None:
                seen.add(event.call_id)

            assert_equals_reference(off, reference, f"deferral off equals the reference: {at}")
            for name, budget in (("on", on), ("strict", strict)):
                snap, note = budget.snapshot(), notes[name]
                assert budget.stop is None or reference.stop is not None, f"{name} never stops earlier: {at}"
                if reference.stop is None:
                    assert set(snap["exhausted_lanes"]) <= reference.exhausted, f"{name} lanes: {at}"
                    assert snap["failures"] == reference.failures, f"{name} counts failures at once: {at}"
                assert snap["failures"] < 12 or budget.stop is not None, f"{name} total cap: {at}"
                assert snap["deferrals"] <= 2, f"{name} at most 2 deferrals: {at}"
                if note is not None and note.action == "waits":
                    assert before[name]["waiting"] is None, f"{name} at most one waiting charge: {at}"
                    assert event is not None and event.failed and event.correctable, at
                    assert snap["failures"] < 12, at
                    tally["deferrals"] += 1
                if note is not None and note.action == "forgiven":
                    assert name == "on" and event is not None and event.passes, f"only a pass forgives: {at}"
                    assert event.lane is None or before[name]["waiting"]["counter"] in ("run", event.lane), at
                    tally["rescues"] += 1
                if event is not None and not event.failed and event.discovery:
                    assert {**snap, "results": 0} == {**before[name], "results": 0}, f"{name} discovery: {at}"

            differs = state(strict) != state(reference)
            if differs and not lagging:
                assert event is not None and event.failed and event.correctable and not neutral, (
                    f"only a correctable failure opens a wait: {at}")
            if lagging and differs:
                assert neutral, f"a waiting charge lasts one non-neutral result: {at}"
    assert tally["deferrals"] > 50, tally
    assert tally["rescues"] > 0, tally
