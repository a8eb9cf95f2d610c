"""One sweep as a host x item x agent matrix: a chip per cell (its repetition), coloured by its grade, with its
stop, duration and attempt count, and the regressions against the previous sweep of its label marked.

Everything comes from the sweep's state (sweep.json and its journal, through ``Store.load_sweep``): a 10,000-
cell sweep is one file read, not 10,000. The stop of a sweep recorded before the summaries kept it comes from
the index's ``grades`` table.
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel, ConfigDict, Field

from harness.views.comparison import State, _states, regressed_between, states_of_grades
from harness.views.labels import label
from harness.grading.scale import shown_grade
from harness.core.records import Cell
from harness.core.sweep import SweepRecord
from harness.dashboard.listing import previous_of
from harness.store import Store
from harness.views.sweeplist import shown_status

__all__ = ["Chip", "Matrix", "chips_of", "read_matrix"]


class Chip(BaseModel):
    """One cell of the matrix."""

    model_config = ConfigDict(frozen=True)

    cell: str
    host: str
    item: str
    agent: str
    rep: int
    grade: str = Field(description="shown_grade: '' when not graded (or still running), the override when there is one.")
    text: str = Field(description="What the chip says: the grade, HARNESS_FAILURE(code), or the status.")
    automatic: str = Field(description="The automatic grade, when an override replaces it; else ''.")
    stop: str
    duration_s: float
    attempts: int
    running: bool
    regressed: bool = False


class Matrix(BaseModel):
    model_config = ConfigDict(frozen=True)

    sweep: SweepRecord
    status: str
    live: bool
    hosts: list[str]
    items: list[str]
    agents: list[str]
    grid: dict[str, dict[str, list[Chip]]] = Field(description="item -> host -> its chips (agents, then reps).")
    chips: int
    previous: str | None
    regressions: int
    counts: dict[str, int] = Field(description="Chips per grade ('' for not graded).")


def _stops_from_index(store: Store, sweep_id: str) -> dict[tuple[str, int], str]:
    got = store.query_index(("SELECT cell_id, attempt, stop FROM grades WHERE sweep_id = ? ORDER BY graded_at",
                             (sweep_id,)))
    return {(c, a): st or "" for c, a, st in got[0]} if got else {}


def chip_of(sweep: SweepRecord, c: Cell, live: bool, stops: dict[tuple[str, int], str] | None = None) -> Chip:
    runs = sweep.attempts.get(c.id) or []
    a = runs[-1] if runs else None
    grade = shown_grade(a)
    text = label(a, live)[0]
    if a is not None and a.override:
        text = a.override
    stop = a.stop if a else ""
    if a is not None and not stop and a.grade and stops:
        stop = stops.get((c.id, a.attempt), "")
    return Chip(cell=c.id, host=c.host, item=c.item, agent=c.agent, rep=c.rep, grade=grade, text=text,
                automatic=a.grade if a is not None and a.override else "", stop=stop,
                duration_s=a.duration_s if a else 0.0, attempts=len(runs),
                running=a is not None and a.status == "dispatched")


def chips_of(sweep: SweepRecord, live: bool, stops: dict[tuple[str, int], str] | None = None) -> dict[str, Chip]:
    return {c.id: chip_of(sweep, c, live, stops) for c in sweep.cells}


def _indexed_states(store: Store, sweep_id: str) -> dict[tuple[str, str, str], State] | None:
    """The previous sweep's group states from the index's ``cells`` rows, when the index has a row for each of its
    cells and calls it finished (a sweep still written to, or indexed before that table existed, is read from
    its files instead). Reading 10,000 rows takes a fraction of loading that sweep's state."""
    got = store.query_index(("SELECT status, cells FROM sweeps WHERE id = ?", (sweep_id,)),
                            ("SELECT host, item, agent, grade FROM cells WHERE sweep_id = ?", (sweep_id,)))
    if not got or len(got[0]) != 1 or got[0][0][0] != "finished" or got[0][0][1] != len(got[1]):
        return None
    return states_of_grades(got[1])


def read_matrix(store: Store, sweep_id: str) -> Matrix:
    sweep = store.load_sweep(sweep_id)
    previous = previous_of(store, sweep.id, sweep.label, sweep.created_at)
    status = shown_status(store, sweep)
    live = status in ("planned", "running")
    stops = _stops_from_index(store, sweep_id) if any(
        a.grade and not a.stop for runs in sweep.attempts.values() for a in runs[-1:]) else {}
    regressed: set[tuple[str, str, str]] = set()
    if previous is not None:
        base = _indexed_states(store, previous)
        regressed = regressed_between(base if base is not None else _states(store.load_sweep(previous)), _states(sweep))
    grid: dict[str, dict[str, list[Chip]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[str, int] = defaultdict(int)
    for c in sorted(sweep.cells, key=lambda c: (c.item, c.host, c.agent, c.rep)):
        chip = chip_of(sweep, c, live, stops)
        if (c.host, c.item, c.agent) in regressed:
            chip = chip.model_copy(update={"regressed": True})
        grid[c.item][c.host].append(chip)
        counts[chip.grade] += 1
    hosts = sorted({c.host for c in sweep.cells})
    return Matrix(sweep=sweep, status=status, live=live, hosts=hosts, items=sorted(grid),
                  agents=sorted({c.agent for c in sweep.cells}),
                  grid={i: dict(row) for i, row in grid.items()}, chips=len(sweep.cells), previous=previous,
                  regressions=len(regressed), counts=dict(counts))
