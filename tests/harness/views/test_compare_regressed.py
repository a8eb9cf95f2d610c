"""``regressed_groups`` (what the dashboard's matrix marks) names exactly the groups ``compare_sweeps`` calls
regressed, for any grades, repetitions, harness failures, cells not graded or still running, overrides, and
groups only one sweep has."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.views.comparison import compare_sweeps, regressed_groups
from harness.core.records import AttemptSummary
from harness.core.sweep import SweepRecord
from tests.support import synthetic_sweep

OUTCOMES = ("DELIVERED", "PARTIAL", "NOTHING", "CODE_IN_CHAT", "HARNESS_FAILURE", "HF", "", "running", "override",
            "none")
"""A cell's last attempt: a grade, HARNESS_FAILURE (graded as one), HF (the attempt a harness failure), "" (not
graded), running (dispatched), override (NOTHING overridden to DELIVERED), none (no attempt)."""


def _summary(outcome: str) -> AttemptSummary | None:
    if outcome == "none":
        return None
    if outcome == "running":
        return AttemptSummary(attempt=1, task_id="t", status="dispatched")
    if outcome == "HF":
        return AttemptSummary(attempt=1, task_id="t", status="harness_failure", reason="host_lost", failure="host_lost")
    if outcome == "override":
        return AttemptSummary(attempt=1, task_id="t", status="finished", exit_code=0, grade="NOTHING", override="DELIVERED")
    return AttemptSummary(attempt=1, task_id="t", status="finished", exit_code=0, grade=outcome,
                          failure="model_endpoint" if outcome == "HARNESS_FAILURE" else "")


def _sweep(sweep_id: str, outcomes: list[str], items: int) -> SweepRecord:
    s = synthetic_sweep(sweep_id, hosts=2, items=items, reps=3)
    s.cells = s.cells[: len(outcomes)]  # the candidate may lack groups the baseline has, and the other way
    for cell, outcome in zip(s.cells, outcomes):
        a = _summary(outcome)
        if a is not None:
            s.attempts[cell.id] = [a]
    return s


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3), st.lists(st.sampled_from(OUTCOMES), min_size=0, max_size=18),
       st.lists(st.sampled_from(OUTCOMES), min_size=0, max_size=18))
def test_regressed_groups_are_compares_regressions(items: int, base: list[str], cand: list[str]) -> None:
    baseline = _sweep("20261201-000000-a", base[: 6 * items], items)
    candidate = _sweep("20261202-000000-b", cand[: 6 * items], items)
    expected = {(r.host, r.item, r.agent) for r in compare_sweeps(baseline, candidate).rows if r.change == "regressed"}
    assert regressed_groups(baseline, candidate) == expected


def test_a_step_down_is_regressed_and_the_rest_is_not() -> None:
    # One host, one item, three repetitions: passed -> flaky is regressed; flaky -> passed, unmeasured and the
    # same state with other grades are not.
    def one(outcomes: list[str]) -> SweepRecord:
        return _sweep("20261201-000000-x", outcomes, 1)

    key = ("host0", "01-item", "builtin")
    assert regressed_groups(one(["DELIVERED"] * 3), one(["DELIVERED", "PARTIAL", "DELIVERED"])) == {key}
    assert regressed_groups(one(["DELIVERED", "NOTHING", "HF"]), one(["NOTHING", "NOTHING", "NOTHING"])) == {key}
    assert regressed_groups(one(["DELIVERED", "NOTHING", "HF"]), one(["DELIVERED"] * 3)) == set()
    assert regressed_groups(one(["DELIVERED"] * 3), one(["HF", "", "running"])) == set()
    assert regressed_groups(one(["NOTHING"] * 3), one(["PARTIAL"] * 3)) == set()
