"""The sweeps list and the pass-rate trends: ``fleet sweeps``'s lines (``harness.views.sweeplist.list_sweeps``, read
from the index, not from every sweep.json), each sweep's previous one of its label, and a trend per label."""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel, ConfigDict, Field

from harness.store import Store
from harness.views.sweeplist import SweepLine, Unreadable, list_sweeps, sweep_keys

__all__ = ["Listing", "TrendPoint", "Trend", "read_listing", "previous_of"]

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


def read_listing(store: Store, label: str | None = None) -> Listing:
    """Every sweep (``fleet sweeps``'s lines, from the index), the previous sweep of each one's label, and the
    trends of the sweeps shown."""
    everything = list_sweeps(store)
    previous: dict[str, str] = {}
    newer: dict[str, str] = {}
    for line in everything.sweeps:  # newest first: the next line with the same label is the previous sweep
        if line.label:
            if line.label in newer:
                previous[newer[line.label]] = line.id
            newer[line.label] = line.id
    shown = [s for s in everything.sweeps if label is None or s.label == label]
    return Listing(sweeps=shown, previous=previous, trends=_trends(shown), unreadable=everything.unreadable)


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
    if not label:
        return None
    for key in sweep_keys(store):
        if key.label == label and (key.created_at, key.id) < (created_at, sweep_id):
            return key.id
    return None
