"""The sweeps list and the pass-rate trend, read from the index (``runs/index.sqlite``), not from every
sweep.json: with 1,000 sweeps the list is one query and one directory listing, and memory does not grow with
the sweeps' sizes. A sweep the index does not cover (copied without it, recorded before the index kept its
plan and cells) is read from its files instead, as ``fleet sweeps`` does."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import FleetError
from harness.report import PassRate
from harness.store import Store
from harness.sweeplist import SweepLine, Unreadable, _line

__all__ = ["Listing", "TrendPoint", "Trend", "read_listing", "previous_of"]

_QUERY = """
SELECT s.id, s.label, s.created_at, s.status, s.cells, p.hosts, p.items, p.agents,
       c.n, c.delivered, c.graded, c.measured
FROM sweeps AS s
JOIN sweep_plans AS p ON p.sweep_id = s.id
LEFT JOIN (SELECT sweep_id, COUNT(*) AS n, SUM(grade = 'DELIVERED') AS delivered, SUM(grade != '') AS graded,
                  SUM(grade != '' AND grade != 'HARNESS_FAILURE') AS measured
           FROM cells GROUP BY sweep_id) AS c ON c.sweep_id = s.id
"""


class TrendPoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    created_at: str
    rate: float | None
    x: float = Field(description="Position in the chart, 0..1 from the oldest sweep to the newest.")
    y: float = Field(description="Position in the chart, 0..1 from 100 % down to 0 %.")


class Trend(BaseModel):
    """The pass rate over the sweeps of one label, oldest first."""

    model_config = ConfigDict(frozen=True)

    label: str
    points: list[TrendPoint]


class Listing(BaseModel):
    model_config = ConfigDict(frozen=True)

    sweeps: list[SweepLine] = Field(description="Newest first.")
    previous: dict[str, str] = Field(description="Sweep id -> the latest earlier sweep with its label.")
    trends: list[Trend]
    unreadable: list[Unreadable]


def _indexed(store: Store) -> dict[str, SweepLine]:
    path = store.root / "index.sqlite"
    if not path.is_file():
        return {}
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            rows = db.execute(_QUERY).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return {}  # an index of an older layout, or damaged: every sweep is read from its files
    lines = {}
    for (sid, label, created, status, cells, hosts, items, agents, n, delivered, graded, measured) in rows:
        if n != cells:
            continue  # the index has not every cell's row (a sweep recorded before it kept them): read the files
        try:
            lines[sid] = SweepLine(id=sid, label=label or "", created_at=created or "", status=status, hosts=json.loads(hosts),
                                   items=items, agents=json.loads(agents), cells=cells,
                                   rate=PassRate(delivered=delivered or 0, graded=graded or 0, measured=measured or 0))
        except (ValueError, TypeError):
            continue
    return lines


def read_listing(store: Store, label: str | None = None) -> Listing:
    indexed = _indexed(store)
    lines: list[SweepLine] = []
    unreadable: dict[str, str] = {}
    for sweep_id in store.list_sweeps():
        line = indexed.get(sweep_id)
        if line is None:
            try:
                line = _line(store, store.load_sweep(sweep_id))
            except FleetError as exc:
                unreadable[sweep_id] = str(exc)
                continue
        elif line.status in ("planned", "running") and not store.is_being_written(sweep_id):
            line = line.model_copy(update={"status": "interrupted"})
        lines.append(line)
    lines.sort(key=lambda s: (s.created_at, s.id), reverse=True)
    previous: dict[str, str] = {}
    newer: dict[str, str] = {}
    for line in lines:  # newest first: the next line with the same label is the previous sweep
        if line.label in newer:
            previous[newer[line.label]] = line.id
        newer[line.label] = line.id
    shown = [s for s in lines if label is None or s.label == label]
    return Listing(sweeps=shown, previous=previous, trends=_trends(shown),
                   unreadable=[Unreadable(id=k, error=v) for k, v in sorted(unreadable.items())])


def _trends(lines: list[SweepLine]) -> list[Trend]:
    """One trend per label with at least two sweeps (a nightly), its newest 60 sweeps."""
    by_label: dict[str, list[SweepLine]] = defaultdict(list)
    for line in lines:
        if line.label:
            by_label[line.label].append(line)
    trends = []
    for label, group in sorted(by_label.items()):
        group = list(reversed(group[:60]))
        if len(group) < 2:
            continue
        points = []
        for n, s in enumerate(group):
            rate = s.rate.rate
            points.append(TrendPoint(id=s.id, created_at=s.created_at, rate=rate, x=n / (len(group) - 1),
                                     y=1.0 - (rate if rate is not None else 0.0)))
        trends.append(Trend(label=label, points=points))
    return trends


def previous_of(store: Store, sweep_id: str, label: str, created_at: str) -> str | None:
    """The latest sweep planned before this one with the same label, or None."""
    from harness.sweeplist import sweep_keys

    if not label:
        return None
    for key in sweep_keys(store):
        if key.label == label and (key.created_at, key.id) < (created_at, sweep_id):
            return key.id
    return None
