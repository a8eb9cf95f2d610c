"""The summary of one scheduled sweep: what the webhook receives as its JSON body and the command on stdin.

docs/schedules.md documents every field; ``schema_version`` changes when a field changes meaning or goes away.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.grading.scale import PassRate

__all__ = ["SUMMARY_SCHEMA_VERSION", "Regression", "HarnessFailure", "SweepSummary", "summarize"]

SUMMARY_SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Regression(_Model):
    host: str
    item: str
    agent: str
    before: str = Field(description="The previous sweep's grade(s) of this cell group.")
    after: str = Field(description="This sweep's grade(s).")


class HarnessFailure(_Model):
    cell: str = Field(description="The cell id (host/item/agent/rN).")
    reason: str = Field(description="The failure code (docs/failures.md).")


class SweepSummary(_Model):
    schema_version: int = SUMMARY_SCHEMA_VERSION
    event: Literal["finished", "failed", "skipped"] = Field(
        description="finished: the sweep ran to its end; failed: it stopped on an error; skipped: a late fire.")
    schedule: str = Field(description="The schedule's name.")
    label: str = Field(description="The schedule's label.")
    fired_at: str = Field(description="When beat fired (UTC, ISO 8601).")
    sweep: str = Field("", description="The sweep's id ('' when none was planned).")
    status: str = Field("", description="The sweep's status (finished, interrupted, ...).")
    resumed: bool = Field(False, description="The service resumed this sweep after it had stopped mid-sweep.")
    note: str = Field("", description="A late fire that was queued or skipped, in words.")
    rate: PassRate | None = Field(None, description="DELIVERED over graded cells, and without harness failures.")
    previous: str = Field("", description="The previous sweep of the label it was compared with ('' if none).")
    regressions: list[Regression] = Field(default_factory=list, description="Cell groups that regressed, first.")
    improved: int = Field(0, description="Cell groups that improved on the previous sweep.")
    harness_failures: dict[str, list[HarnessFailure]] = Field(
        default_factory=dict, description="Per host, the cells whose last attempt is a harness failure.")
    report: str = Field("", description="Path of REPORT.md ('' when no report was written).")
    error: str = Field("", description="For failed: the error, one line.")
    text: str = Field("", description="The same in a few lines of plain text, for a chat message.")


def summarize(summary: SweepSummary) -> SweepSummary:
    """Fill ``text`` from the other fields: regressions first, then rates, harness failures and the report."""
    s = summary
    lines = []
    if s.event == "skipped":
        lines.append(f"schedule {s.schedule}: fire at {s.fired_at} skipped: {s.note}")
    elif s.event == "failed":
        lines.append(f"schedule {s.schedule}: sweep {s.sweep or '(none)'} failed: {s.error}")
    else:
        lines.append(f"schedule {s.schedule}: sweep {s.sweep} {s.status}" + (" (resumed)" if s.resumed else ""))
    if s.note and s.event != "skipped":
        lines.append(s.note)
    if s.previous:
        lines.append(f"{len(s.regressions)} regressed, {s.improved} improved since {s.previous}")
    for r in s.regressions:
        lines.append(f"  regressed {r.host}/{r.item}/{r.agent}: {r.before} -> {r.after}")
    if s.rate is not None:
        lines.append(f"pass rate {s.rate.all} (without harness failures {s.rate.without_failures})")
    for host, fails in s.harness_failures.items():
        lines.append(f"harness failures on {host}: " + ", ".join(f"{f.cell} ({f.reason})" for f in fails))
    if s.report:
        lines.append(f"report: {s.report}")
    return s.model_copy(update={"text": "\n".join(lines)})
