"""The grade scale: the grades in order, the one that is a pass, and the grade a cell counts as.

Every view that counts or sorts grades (the report, ``fleet compare``, ``fleet sweeps``, the dashboard, a schedule's
summary) reads them here, so a pass means the same everywhere and the order is written once:

- ``GRADE_ORDER``: the five grades, best first (``DELIVERED`` ... ``HARNESS_FAILURE``), as ``GradeName`` declares them;
- ``PASS_GRADE``: ``DELIVERED`` is the one pass;
- ``shown_grade``: what a cell counts as (a reviewer's override, else ``HARNESS_FAILURE`` for a harness failure, else
  the automatic grade);
- ``pass_rate``: a ``PassRate`` both ways, over every graded cell and without the harness's failures;
- ``grade_gate``: the ``--fail-on GRADES`` exit gate, over the grade each cell counts as.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final, get_args

from pydantic import BaseModel, ConfigDict, Field, computed_field

from harness.core.failures import classify
from harness.core.gate import HELD, GateVerdict, first_hits
from harness.core.records import AttemptSummary
from harness.grading.model import GradeName

__all__ = ["GRADE_ORDER", "PASS_GRADE", "FAILURE_GRADE", "AGENT_FAILURES", "PassRate", "pass_rate", "shown_grade",
           "grade_gate"]

GRADE_ORDER: Final[tuple[GradeName, ...]] = get_args(GradeName)
"""The grades, best first: tables, counts and charts list them in this order."""

FAILURE_GRADE: Final[GradeName] = "HARNESS_FAILURE"
"""The fleet's fault, not the model's: counted in one of the two rates only."""

PASS_GRADE: Final[GradeName] = "DELIVERED"
"""The one grade that is a pass, in the report's rates and in ``fleet compare`` and ``fleet sweeps``."""

AGENT_FAILURES: Final[tuple[GradeName, ...]] = tuple(g for g in GRADE_ORDER if g not in (PASS_GRADE, FAILURE_GRADE))
"""The grades that are the agent's (and its model's) failure, not a pass and not the fleet's fault: the report's
"Agent failures" and junit.xml's ``<failure>``."""


class PassRate(BaseModel):
    """A pass rate both ways: DELIVERED over every graded cell, and over the graded cells that were not a harness
    failure (the fleet's fault stays out of the model's rate). A cell not graded yet is in neither."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    delivered: int = Field(description="Cells graded DELIVERED.")
    graded: int = Field(description="Cells with a grade, HARNESS_FAILURE included.")
    measured: int = Field(description="Cells with a grade other than HARNESS_FAILURE.")

    @computed_field(description="delivered / graded; null when nothing was graded.")  # type: ignore[prop-decorator]
    @property
    def rate(self) -> float | None:
        return self.delivered / self.graded if self.graded else None

    @computed_field(description="delivered / measured; null when nothing was measured.")  # type: ignore[prop-decorator]
    @property
    def rate_without_failures(self) -> float | None:
        return self.delivered / self.measured if self.measured else None

    @property
    def all(self) -> str:
        return _pct(self.delivered, self.graded)

    @property
    def without_failures(self) -> str:
        return _pct(self.delivered, self.measured)


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f} %)" if whole else "-"


def pass_rate(grades: Iterable[str]) -> PassRate:
    """The pass rate of cells whose grades (a CellRow's ``grade``: '' when not graded) are ``grades``."""
    graded = [g for g in grades if g]
    return PassRate(delivered=sum(1 for g in graded if g == PASS_GRADE), graded=len(graded),
                    measured=sum(1 for g in graded if g != FAILURE_GRADE))


def shown_grade(a: AttemptSummary | None) -> str:
    """The grade a cell counts as in pass rates, reports, compare and the dashboard: '' when not graded yet (or
    still in flight), a reviewer's override when there is one, HARNESS_FAILURE for a harness failure
    (``classify``), else the automatic grade."""
    if a is None or a.status == "dispatched":
        return ""
    if a.override:
        return a.override
    if classify(a.status, a.reason, a.grade, a.failure) is not None:
        return FAILURE_GRADE
    return a.grade


def grade_gate(lasts: Iterable[tuple[str, AttemptSummary | None]], fail_on: Collection[str]) -> GateVerdict:
    """``--fail-on GRADES`` (exit 4 when tripped): over each judged cell's id and last attempt, the cells whose shown
    grade (a reviewer's override counts, as in reports and compare) is one of ``fail_on``. No grade given: it holds."""
    if not fail_on:
        return HELD
    hits = tuple(f"{cell_id} {g}" for cell_id, a in lasts if (g := shown_grade(a)) in fail_on)
    if not hits:
        return HELD
    return GateVerdict(True, hits, f"--fail-on {','.join(sorted(fail_on))}: {len(hits)} cell(s): {first_hits(hits)}")
