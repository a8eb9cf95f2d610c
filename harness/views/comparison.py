"""``fleet compare BASELINE CANDIDATE``: two sweeps, cell by cell (docs/compare.md).

Pure functions over two ``SweepRecord``s; the CLI only formats the ``Comparison`` they return.

- A cell's grade is its last attempt's, as sweep.json records it (what ``fleet status`` shows), a reviewer's
  override in place of the automatic grade (``RepGrade.override`` says so); a harness failure
  (``harness.core.failures.classify``) or a cell not graded yet is *unmeasured*: neither a pass nor a fail.
- A pass is DELIVERED, the report's rule (``harness.views.report.PASS_GRADE``), so compare and report agree.
- Cells are matched by (host, item, agent), their repetitions grouped: a group is ``passed`` (every measured
  repetition passed), ``failed`` (none did), ``flaky`` (some did) or ``unmeasured`` (no repetition was measured).
- Groups are ordered failed < flaky < passed: a step up is ``improved``, a step down ``regressed``; the same state
  with other grades (NOTHING -> PARTIAL) is ``changed``, counted as neither.
- The paired test is the exact two-sided sign test (McNemar's exact test) over the groups both sweeps measured.
- ``regression_gate`` is ``--fail-on-regressions N``'s decision (exit 4 when more than N groups regressed).
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction
from collections.abc import Mapping
from typing import Final, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.failures import classify
from harness.core.gate import HELD, GateVerdict, first_hits
from harness.views.labels import label
from harness.grading.scale import shown_grade
from harness.core.records import AttemptSummary
from harness.core.sweep import SweepRecord
from harness.grading.scale import PASS_GRADE, PassRate, pass_rate

__all__ = [
    "COMPARE_SCHEMA_VERSION",
    "CHANGES",
    "Change",
    "State",
    "states_of_grades",
    "regressed_between",
    "RepGrade",
    "Side",
    "CompareRow",
    "Counts",
    "SignTest",
    "Subtotal",
    "SweepRef",
    "Comparison",
    "cell_grade",
    "sweep_rate",
    "sign_test",
    "compare_sweeps",
    "regressed_groups",
    "regression_gate",
]

COMPARE_SCHEMA_VERSION: Final = 1
"""The version of ``fleet compare --json``'s object (docs/compare.md)."""

Change = Literal["regressed", "improved", "changed", "new", "gone", "unmeasured", "unchanged"]
CHANGES: Final[tuple[Change, ...]] = ("regressed", "improved", "changed", "new", "gone", "unmeasured", "unchanged")
"""Every kind of change, in the order the changed-only view shows them (regressions first)."""

State = Literal["passed", "failed", "flaky", "unmeasured"]
_RANK: Final[dict[str, int]] = {"failed": 0, "flaky": 1, "passed": 2}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RepGrade(_Model):
    """One repetition of a cell group in one sweep."""

    rep: int = Field(description="The repetition number.")
    grade: str = Field(description="What the table shows: the grade, HARNESS_FAILURE(code), or the status when not "
                       "graded (pending, running, ok, exit N, timeout).")
    measured: bool = Field(description="Graded and not a harness failure: it counts as a pass or a fail.")
    passed: bool = Field(description="Measured and DELIVERED.")
    override: bool = Field(default=False, description="grade is a reviewer's override (grades.jsonl), not the "
                           "automatic grade.")
    automatic: str = Field(default="", description="With an override: what the table would show without it (the "
                           "automatic grade, HARNESS_FAILURE(code), ...); else ''.")
    rerun: bool = Field(default=False, description="The grade is the cell's latest attempt from `fleet rerun`, not "
                        "the sweep's own first run.")

    @property
    def shown(self) -> str:
        """The grade as the terminal prints it: ``DELIVERED (override of PARTIAL)`` for a reviewer's grade."""
        shown = f"{self.grade} (override of {self.automatic})" if self.override else self.grade
        return shown + (" (rerun)" if self.rerun else "")


class Side(_Model):
    """A cell group (host x item x agent, its repetitions together) as one sweep has it."""

    state: State = Field(description="passed: every measured repetition passed; failed: none did; flaky: some did; "
                         "unmeasured: no repetition was measured.")
    k: int = Field(description="How many repetitions were measured (harness failures and ungraded ones are not).")
    passes: int = Field(description="How many measured repetitions passed.")
    pass_at_k: bool = Field(description="At least one of the k measured repetitions passed.")
    reps: list[RepGrade] = Field(description="Every repetition, in order.")

    @property
    def summary(self) -> str:
        """One cell's grade, or for repetitions ``STATE PASSES/K``."""
        if len(self.reps) == 1:
            return self.reps[0].shown
        overrides = sum(r.override for r in self.reps)
        reruns = sum(r.rerun for r in self.reps)
        return (f"{self.state} {self.passes}/{self.k}" + (f" ({overrides} by override)" if overrides else "")
                + (f" ({reruns} rerun)" if reruns else ""))


class CompareRow(_Model):
    """One cell group of either sweep."""

    host: str
    item: str
    agent: str
    change: Change
    baseline: Side | None = Field(description="The group in the baseline; null when it is new.")
    candidate: Side | None = Field(description="The group in the candidate; null when it is gone.")


class Counts(_Model):
    """How many cell groups had each change."""

    regressed: int = 0
    improved: int = 0
    changed: int = 0
    new: int = 0
    gone: int = 0
    unmeasured: int = 0
    unchanged: int = 0

    @classmethod
    def of(cls, rows: Iterable[CompareRow]) -> "Counts":
        n: dict[str, int] = defaultdict(int)
        for r in rows:
            n[r.change] += 1
        return cls(**n)

    def line(self) -> str:
        return ", ".join(f"{getattr(self, c)} {c}" for c in CHANGES)


class SignTest(_Model):
    """The exact two-sided sign test (McNemar's exact test) over the groups both sweeps measured."""

    b: int = Field(description="Discordant pairs better in the baseline (regressed).")
    c: int = Field(description="Discordant pairs better in the candidate (improved).")
    p: float = Field(description="min(1, 2 * sum_{i<=min(b,c)} C(b+c, i) / 2^(b+c)); 1 when b + c = 0.")
    p_exact: str = Field(description="p as an exact fraction, e.g. 1/16.")


class Subtotal(_Model):
    """The changes and both pass rates of one host's (or one agent's) cells."""

    name: str
    counts: Counts
    baseline: PassRate
    candidate: PassRate


class SweepRef(_Model):
    id: str
    label: str
    created_at: str
    status: str
    rate: PassRate = Field(description="The sweep's pass rate over all its cells, as fleet report computes it.")


class Comparison(_Model):
    """``fleet compare --json``."""

    schema_version: int = COMPARE_SCHEMA_VERSION
    baseline: SweepRef
    candidate: SweepRef
    counts: Counts
    test: SignTest
    per_host: list[Subtotal]
    per_agent: list[Subtotal]
    rows: list[CompareRow] = Field(description="Every cell group of either sweep: regressions first (CHANGES' "
                                   "order), then by host, item and agent.")


def cell_grade(a: AttemptSummary | None) -> tuple[str, bool]:
    """(what the table shows, measured) for a cell whose last attempt is ``a``. A reviewer's override is the
    grade (``shown_grade``): it counts, and an override to HARNESS_FAILURE is not measured. Otherwise a harness
    failure (the one decision, ``classify``) and an attempt not graded yet are not measured."""
    if a is not None and a.status != "dispatched" and a.override:
        return a.override, a.override != "HARNESS_FAILURE"
    text = label(a)[0]
    measured = a is not None and a.status != "dispatched" and bool(a.grade) and classify(
        a.status, a.reason, a.grade, a.failure) is None
    return text, measured


def _grades(sweep: SweepRecord) -> list[str]:
    """Every cell's grade as report's pass rate reads it (``shown_grade``): '' when not graded, a reviewer's
    override when there is one, HARNESS_FAILURE for a failure."""
    return [shown_grade(sweep.last(c.id)) for c in sweep.cells]


def _sides(sweep: SweepRecord) -> dict[tuple[str, str, str], Side]:
    reps: dict[tuple[str, str, str], list[RepGrade]] = defaultdict(list)
    for c in sorted(sweep.cells, key=lambda c: c.rep):
        a = sweep.last(c.id)
        text, measured = cell_grade(a)
        passed = measured and text == PASS_GRADE
        overridden = a is not None and a.status != "dispatched" and bool(a.override)
        automatic = label(a.model_copy(update={"override": ""}))[0] if a is not None and overridden else ""
        reps[(c.host, c.item, c.agent)].append(RepGrade(rep=c.rep, grade=text, measured=measured, passed=passed,
                                                        override=overridden, automatic=automatic,
                                                        rerun=sweep.rerun_of(c.id) is not None))
    sides = {}
    for key, rs in reps.items():
        k = sum(r.measured for r in rs)
        passes = sum(r.passed for r in rs)
        sides[key] = Side(state=_state(k, passes), k=k, passes=passes, pass_at_k=passes > 0, reps=rs)
    return sides


def _state(k: int, passes: int) -> State:
    """A group of ``k`` measured repetitions, ``passes`` of them passed."""
    return "unmeasured" if k == 0 else "passed" if passes == k else "failed" if passes == 0 else "flaky"


def _states(sweep: SweepRecord) -> dict[tuple[str, str, str], State]:
    """Each cell group's state, as ``_sides`` decides it, without its models (the matrix's fast path)."""
    counts: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for c in sweep.cells:
        text, measured = cell_grade(sweep.last(c.id))
        n = counts[(c.host, c.item, c.agent)]
        n[0] += measured
        n[1] += measured and text == PASS_GRADE
    return {key: _state(k, passes) for key, (k, passes) in counts.items()}


def states_of_grades(rows: Iterable[tuple[str, str, str, str]]) -> dict[tuple[str, str, str], State]:
    """``_states`` from each cell's (host, item, agent, shown grade) as the index's ``cells`` table keeps them
    (``shown_grade``: '' not graded, HARNESS_FAILURE a harness failure, an override first). The same decision
    as ``cell_grade``: a grade other than those two is measured, DELIVERED a pass."""
    counts: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for host, item, agent, grade in rows:
        n = counts[(host, item, agent)]
        measured = grade not in ("", "HARNESS_FAILURE")
        n[0] += measured
        n[1] += measured and grade == PASS_GRADE
    return {key: _state(k, passes) for key, (k, passes) in counts.items()}


def regressed_between(base: dict[tuple[str, str, str], State],
                      cand: dict[tuple[str, str, str], State]) -> set[tuple[str, str, str]]:
    """The groups whose state went down from ``base`` to ``cand`` (both measured)."""
    return {key for key, state in cand.items() if key in base and "unmeasured" not in (state, base[key])
            and _RANK[state] < _RANK[base[key]]}


def regressed_groups(baseline: SweepRecord, candidate: SweepRecord) -> set[tuple[str, str, str]]:
    """The (host, item, agent) groups ``compare_sweeps`` calls regressed, without building the comparison: the
    dashboard marks them on every view of a sweep, and for 10,000 cells the whole comparison took ten times as
    long as this."""
    return regressed_between(_states(baseline), _states(candidate))


def _change(base: Side | None, cand: Side | None) -> Change:
    if base is None:
        return "new"
    if cand is None:
        return "gone"
    if base.state == "unmeasured" or cand.state == "unmeasured":
        return "unmeasured"
    if _RANK[cand.state] > _RANK[base.state]:
        return "improved"
    if _RANK[cand.state] < _RANK[base.state]:
        return "regressed"
    grades = [{r.grade for r in s.reps if r.measured} for s in (base, cand)]
    return "changed" if grades[0] != grades[1] else "unchanged"


def sign_test(b: int, c: int) -> SignTest:
    """The exact two-sided binomial sign test on b and c discordant pairs, in exact integers: p = min(1, 2 *
    sum_{i<=min(b,c)} C(b+c, i) / 2^(b+c)), and 1 when there is no discordant pair."""
    n = b + c
    if n == 0:
        p = Fraction(1)
    else:
        p = min(Fraction(1), Fraction(2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)), 2 ** n))
    return SignTest(b=b, c=c, p=float(p), p_exact=str(p))


def sweep_rate(sweep: SweepRecord) -> PassRate:
    """The sweep's pass rate over all its cells, as fleet report computes it."""
    return pass_rate(_grades(sweep))


def _ref(sweep: SweepRecord, statuses: Mapping[str, str]) -> SweepRef:
    return SweepRef(id=sweep.id, label=sweep.label, created_at=sweep.created_at,
                    status=statuses.get(sweep.id, sweep.status), rate=sweep_rate(sweep))


def _subtotals(rows: list[CompareRow], base: SweepRecord, cand: SweepRecord, key: str) -> list[Subtotal]:
    """Per host (key "host") or per agent: one pass over the rows and the cells, whatever their number."""
    changes: dict[str, list[CompareRow]] = defaultdict(list)
    for r in rows:
        changes[getattr(r, key)].append(r)
    graded: list[dict[str, list[str]]] = []
    for sweep in (base, cand):
        by_name: dict[str, list[str]] = defaultdict(list)
        for c, g in zip(sweep.cells, _grades(sweep)):
            by_name[getattr(c, key)].append(g)
        graded.append(by_name)
    return [Subtotal(name=n, counts=Counts.of(changes[n]), baseline=pass_rate(graded[0][n]),
                     candidate=pass_rate(graded[1][n])) for n in sorted(changes)]


def compare_sweeps(baseline: SweepRecord, candidate: SweepRecord,
                   statuses: Mapping[str, str] | None = None) -> Comparison:
    """Every cell group of either sweep, its change, the counts, both pass rates, the sign test and the
    subtotals per host and per agent. ``statuses``: a sweep's status as shown (``fleet status`` says
    interrupted for a sweep left running by a coordinator that is gone), by id; else sweep.json's."""
    statuses = statuses or {}
    base, cand = _sides(baseline), _sides(candidate)
    keys = list(base) + [k for k in cand if k not in base]
    rows = [CompareRow(host=h, item=i, agent=a, change=_change(base.get((h, i, a)), cand.get((h, i, a))),
                       baseline=base.get((h, i, a)), candidate=cand.get((h, i, a))) for h, i, a in keys]
    order = {c: n for n, c in enumerate(CHANGES)}
    rows.sort(key=lambda r: (order[r.change], r.host, r.item, r.agent))
    counts = Counts.of(rows)
    return Comparison(baseline=_ref(baseline, statuses), candidate=_ref(candidate, statuses), counts=counts,
                      test=sign_test(counts.regressed, counts.improved),
                      per_host=_subtotals(rows, baseline, candidate, "host"),
                      per_agent=_subtotals(rows, baseline, candidate, "agent"), rows=rows)


def regression_gate(result: Comparison, allowed: int) -> GateVerdict:
    """``fleet compare --fail-on-regressions N`` (exit 4 when tripped): more than ``allowed`` cell groups regressed
    from the baseline; the hits are the regressed groups, as host/item/agent, in the comparison's order."""
    if result.counts.regressed <= allowed:
        return HELD
    hits = tuple(f"{r.host}/{r.item}/{r.agent}" for r in result.rows if r.change == "regressed")
    return GateVerdict(True, hits, f"--fail-on-regressions {allowed}: {len(hits)} regressed: {first_hits(hits)}")
