"""The exit gates as verdicts (harness/core/gate.py), each decided in its domain without a process: nothing measured
(harness/coordinator/verbs.py), --fail-on (harness/grading/scale.py), --fail-on-regressions
(harness/views/comparison.py). The exits they become are tested through `fleet` (test_cli.py, test_compare.py)."""

from __future__ import annotations

from harness.coordinator.verbs import nothing_measured
from harness.core.gate import HELD, first_hits
from harness.core.records import AttemptSummary
from harness.core.sweep import SweepRecord
from harness.grading.scale import grade_gate
from harness.views.comparison import compare_sweeps, regression_gate
from tests.support import synthetic_sweep


def _graded(grade: str, **fields: str) -> AttemptSummary:
    return AttemptSummary(attempt=1, task_id="t", status="finished", exit_code=0, grade=grade, **fields)


HF = AttemptSummary(attempt=1, task_id="t", status="harness_failure", reason="host_lost")


def test_nothing_measured_trips_only_when_every_judged_cell_is_a_harness_failure() -> None:
    tripped = nothing_measured("s1", [("a", HF), ("b", _graded("HARNESS_FAILURE", failure="model_endpoint"))])
    assert tripped.tripped and tripped.hits == ("a", "b")
    assert tripped.message == "sweep s1: nothing was measured: all 2 cell(s) ended in HARNESS_FAILURE"
    assert nothing_measured("s1", [("a", HF), ("b", _graded("NOTHING"))]) == HELD
    assert nothing_measured("s1", [("a", HF), ("b", None)]) == HELD  # a cell with no attempt is no failure
    assert nothing_measured("s1", []) == HELD


def test_the_grade_gate_judges_the_shown_grade_and_names_the_first_five_cells() -> None:
    lasts = [(f"c{n}", _graded("PARTIAL")) for n in range(7)] + [("o", _graded("DELIVERED", override="NOTHING")),
                                                                  ("h", HF), ("p", None)]
    verdict = grade_gate(lasts, frozenset({"PARTIAL", "NOTHING"}))
    assert verdict.tripped and len(verdict.hits) == 8 and verdict.hits[-1] == "o NOTHING"  # the override counts
    assert verdict.message == ("--fail-on NOTHING,PARTIAL: 8 cell(s): c0 PARTIAL, c1 PARTIAL, c2 PARTIAL, "
                               "c3 PARTIAL, c4 PARTIAL and 3 more")
    assert grade_gate(lasts, frozenset({"HARNESS_FAILURE"})).hits == ("h HARNESS_FAILURE",)
    assert grade_gate(lasts, frozenset({"DELIVERED"})) == HELD  # overridden: it counts as NOTHING
    assert grade_gate(lasts, frozenset()) == HELD


def _with_grades(sweep: SweepRecord, grades: list[str]) -> SweepRecord:
    sweep.attempts = {c.id: [_graded(g)] for c, g in zip(sweep.cells, grades)}
    sweep.status = "finished"
    return sweep


def test_the_regression_gate_trips_past_its_allowance() -> None:
    base = _with_grades(synthetic_sweep("20261201-000000-a", hosts=1, items=3), ["DELIVERED"] * 3)
    cand = _with_grades(synthetic_sweep("20261202-000000-a", hosts=1, items=3), ["NOTHING", "NOTHING", "DELIVERED"])
    result = compare_sweeps(base, cand)
    verdict = regression_gate(result, 0)
    assert verdict.tripped and verdict.message == ("--fail-on-regressions 0: 2 regressed: "
                                                   f"{', '.join(verdict.hits)}")
    assert len(verdict.hits) == 2 and all(h.count("/") == 2 for h in verdict.hits)
    assert regression_gate(result, 1).tripped and regression_gate(result, 2) == HELD


def test_first_hits_says_how_many_more() -> None:
    assert first_hits(["a", "b"]) == "a, b"
    assert first_hits([str(n) for n in range(6)]) == "0, 1, 2, 3, 4 and 1 more"
    assert first_hits(["a", "b", "c"], shown=2) == "a, b and 1 more"
