"""``fleet sweeps`` and the dashboard's list: the sweeps of a results directory, newest first; and ``previous``
for ``fleet compare``.

What is read, and why it stays fast with 1,000 sweeps: the order, the labels and each whole line (hosts, items,
agents, cells, pass rate, status) come from the index (``runs/index.sqlite``: its ``sweeps``, ``sweep_plans``
and ``cells`` tables, kept by the writer in the same step as the files), read once, read-only, in two queries;
memory and time do not grow with the sweeps' sizes. A sweep the index lacks or does not cover whole (a results
directory copied without it, a sweep recorded before the index kept its plan and cells, a damaged index) is read
from its files instead (snapshot and journal, as ``fleet status`` does), only the sweeps shown, newest first,
until ``--limit`` lines are made.
"""

from __future__ import annotations

import json
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from harness.views.comparison import sweep_rate
from harness.core.errors import FleetError, UsageError
from harness.core.sweep import SweepRecord
from harness.grading.scale import PassRate
from harness.store import Store

__all__ = ["SWEEPS_SCHEMA_VERSION", "SweepKey", "SweepLine", "SweepList", "sweep_keys", "list_sweeps", "previous_sweep"]

SWEEPS_SCHEMA_VERSION: Final = 1
"""The version of ``fleet sweeps --json``'s object (docs/compare.md)."""


class SweepKey(BaseModel):
    """What orders and filters the listing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    label: str
    created_at: str


class SweepLine(BaseModel):
    """One sweep of ``fleet sweeps``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    label: str
    created_at: str = Field(description="When it was planned (UTC, ISO 8601).")
    status: str = Field(description="planned, running, finished or interrupted (a sweep marked running whose "
                        "coordinator is gone shows interrupted, as fleet status says).")
    hosts: list[str]
    items: int = Field(description="How many items it planned.")
    agents: list[str]
    cells: int
    rate: PassRate = Field(description="Its pass rate as fleet report computes it (last attempt of each cell).")


class Unreadable(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    error: str


class SweepList(BaseModel):
    """``fleet sweeps --json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SWEEPS_SCHEMA_VERSION
    sweeps: list[SweepLine] = Field(description="Newest first.")
    unreadable: list[Unreadable] = Field(default_factory=list, description="Sweeps whose record cannot be read, "
                                         "with the error: left out of the listing and of `previous`.")


def _indexed(store: Store) -> dict[str, SweepKey]:
    """The index's sweeps rows, opened read-only (listing must work on a read-only copy, and must never create
    an index); a missing or unreadable index is no index."""
    got = store.query_index(("SELECT id, label, created_at FROM sweeps", ()))
    if got is None:
        return {}
    rows = got[0]
    return {r[0]: SweepKey(id=r[0], label=r[1] or "", created_at=r[2] or "") for r in rows
            if isinstance(r[0], str) and isinstance(r[2], str)}


def sweep_keys(store: Store, unreadable: dict[str, str] | None = None) -> list[SweepKey]:
    """Every readable sweep of the results directory, newest first (by created_at, then id). A sweep whose record
    cannot be read is left out, and named with its error in ``unreadable`` when given: one damaged sweep must not
    hide the others."""
    indexed = _indexed(store)
    keys = []
    for sweep_id in store.list_sweeps():
        key = indexed.get(sweep_id)
        if key is None:
            try:
                rec = store.load_sweep(sweep_id)
            except FleetError as exc:
                if unreadable is not None:
                    unreadable[sweep_id] = str(exc)
                continue
            key = SweepKey(id=rec.id, label=rec.label, created_at=rec.created_at)
        keys.append(key)
    keys.sort(key=lambda k: (k.created_at, k.id), reverse=True)
    return keys


def shown_status(store: Store, rec: SweepRecord) -> str:
    """The status as ``fleet status`` shows it: a sweep left planned or running by a coordinator that is gone is
    interrupted."""
    if rec.status in ("planned", "running") and not store.is_being_written(rec.id):
        return "interrupted"
    return rec.status


def _line(store: Store, rec: SweepRecord) -> SweepLine:
    status = shown_status(store, rec)
    return SweepLine(id=rec.id, label=rec.label, created_at=rec.created_at, status=status, hosts=sorted(rec.hosts),
                     items=len(rec.items), agents=sorted({c.agent for c in rec.cells}), cells=len(rec.cells),
                     rate=sweep_rate(rec))


_LINES = """
SELECT s.id, s.label, s.created_at, s.status, s.cells, p.hosts, p.items, p.agents,
       c.n, c.delivered, c.graded, c.measured
FROM sweeps AS s
JOIN sweep_plans AS p ON p.sweep_id = s.id
LEFT JOIN (SELECT sweep_id, COUNT(*) AS n, SUM(grade = 'DELIVERED') AS delivered, SUM(grade != '') AS graded,
                  SUM(grade != '' AND grade != 'HARNESS_FAILURE') AS measured
           FROM cells GROUP BY sweep_id) AS c ON c.sweep_id = s.id
"""


def _indexed_lines(store: Store) -> dict[str, SweepLine]:
    """Every sweep line the index can give whole: the sweep's row, its plan's shape (``sweep_plans``) and a row per
    planned cell (``cells``, its shown grade). A sweep recorded before the index kept these has no line here, and
    an index of an older layout or a damaged one gives none: those sweeps are read from their files."""
    got = store.query_index((_LINES, ()))
    if got is None:
        return {}
    rows = got[0]
    lines = {}
    for (sid, label, created, status, cells, hosts, items, agents, n, delivered, graded, measured) in rows:
        if n != cells:
            continue
        try:
            lines[sid] = SweepLine(id=sid, label=label or "", created_at=created or "", status=status,
                                   hosts=json.loads(hosts), items=items, agents=json.loads(agents), cells=cells,
                                   rate=PassRate(delivered=delivered or 0, graded=graded or 0, measured=measured or 0))
        except (ValueError, TypeError):
            continue  # a row that does not make a line (a damaged index): the files say it
    return lines


def list_sweeps(store: Store, label: str | None = None, limit: int | None = None) -> SweepList:
    """The sweeps, newest first, only those labelled ``label`` if given, at most ``limit``. Each line comes from
    the index when it has the whole line (one query for every sweep), else from the sweep's files."""
    lines: list[SweepLine] = []
    unreadable: dict[str, str] = {}
    indexed = _indexed_lines(store)
    for key in sweep_keys(store, unreadable):
        if limit is not None and len(lines) >= limit:
            break
        if label is not None and key.label != label:
            continue
        line = indexed.get(key.id)
        if line is not None:
            if line.status in ("planned", "running") and not store.is_being_written(key.id):
                line = line.model_copy(update={"status": "interrupted"})
            lines.append(line)
            continue
        try:
            lines.append(_line(store, store.load_sweep(key.id)))
        except FleetError as exc:
            unreadable[key.id] = str(exc)
    return SweepList(sweeps=lines, unreadable=[Unreadable(id=k, error=v) for k, v in sorted(unreadable.items())])


def previous_sweep(store: Store, candidate: SweepRecord) -> str:
    """``previous``: the latest sweep planned before ``candidate`` with the same label."""
    if not candidate.label:
        raise UsageError(f"sweep {candidate.id} has no label: `previous` means the latest earlier sweep with the same "
                         "label; name the baseline's id")
    for key in sweep_keys(store):
        if key.label == candidate.label and (key.created_at, key.id) < (candidate.created_at, candidate.id):
            return key.id
    raise UsageError(f"no sweep labelled {candidate.label!r} was planned before {candidate.id}")
