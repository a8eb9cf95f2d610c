"""How two policies' outcomes of one session differ (docs/replay.md, "Two policies"), as seed 003 reports it:
the sessions that differ and how, and the count of byte-identical ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from harness.replay.outcome import ReplayOutcome

__all__ = ["Change", "Difference", "differences", "describe_stop"]

Change = Literal["newly stopped", "no longer stopped", "stopped elsewhere", "refusals changed", "receipt changed",
                 "text changed", "unrecorded"]


class Difference(BaseModel):
    model_config = ConfigDict(frozen=True)

    session: str
    changes: list[Change]
    baseline: ReplayOutcome
    candidate: ReplayOutcome


def describe_stop(o: ReplayOutcome) -> str:
    """The stop in a few words: ``11 consecutive_failures``, ``40 total_failures``, ``not stopped``."""
    if o.unrecorded_call is not None:
        return f"call {o.unrecorded_call} not recorded"
    if not o.stopped:
        return "not stopped"
    return f"{o.stop_call} {o.stop_detail or o.stop_reason}"


def _changes(a: ReplayOutcome, b: ReplayOutcome) -> list[Change]:
    if a.unrecorded_call is not None or b.unrecorded_call is not None:
        return [] if a.unrecorded_call == b.unrecorded_call and a.refused_calls == b.refused_calls else ["unrecorded"]
    found: list[Change] = []
    if not a.stopped and b.stopped:
        found.append("newly stopped")
    elif a.stopped and not b.stopped:
        found.append("no longer stopped")
    elif a.stopped and (a.stop_call, a.stop_reason, a.stop_detail) != (b.stop_call, b.stop_reason, b.stop_detail):
        found.append("stopped elsewhere")
    if a.refused_calls != b.refused_calls:
        found.append("refusals changed")
    if a.receipt_status != b.receipt_status:
        found.append("receipt changed")
    if a.delivered_sha256 != b.delivered_sha256:
        found.append("text changed")
    return found


def differences(baseline: Sequence[ReplayOutcome], candidate: Sequence[ReplayOutcome]) -> tuple[list[Difference], int]:
    """The sessions whose outcomes differ (in session order), and how many are byte-identical: the same stop, the
    same refusals, the same receipt status and the same delivered bytes."""
    diffs, same = [], 0
    for a, b in zip(baseline, candidate, strict=True):
        changes = _changes(a, b)
        if changes:
            diffs.append(Difference(session=a.session, changes=changes, baseline=a, candidate=b))
        else:
            same += 1
    return diffs, same
