"""``fleet report SWEEP``: REPORT.md, junit.xml and results.json beside sweep.json.

Everything comes from the stored sweep and its attempts' grade.json / meta.json. A cell's result is its
last attempt's grade: a reviewer's override when there is one (grades.jsonl; the report says so, with the
automatic grade, the author and the reason), else the automatic grade. Pass rate = DELIVERED / cells, shown
both over all cells and over the cells that were not a harness failure (the fleet's fault stays out of the
model's rate).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Literal
from xml.etree import ElementTree as ET

from pydantic import BaseModel, ConfigDict, Field, computed_field

from harness.checks.result import CheckStatus
from harness.errors import one_line
from harness.failures import classify
from harness.grading.model import Grade, StopRecord
from harness.grading.override import GradeOverride, latest_override
from harness.recordfile import read_optional
from harness.records import AttemptMeta, AttemptStatus, SweepRecord, read_meta
from harness.store import Store, atomic_write

__all__ = ["write_report", "cell_results", "CellRow", "CheckLine", "PASS_GRADE", "PassRate", "pass_rate", "shown_as"]

GRADES = ("DELIVERED", "PARTIAL", "NOTHING", "CODE_IN_CHAT", "HARNESS_FAILURE")


class CheckLine(BaseModel):
    """One acceptance check of a cell's row: its name and status (the whole result is in grade.json)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    status: CheckStatus


class CellRow(BaseModel):
    """One cell of the report (and of results.json's ``cells``): its last attempt, graded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cell: str = Field(description="The cell id, HOST/ITEM/AGENT/rREP.")
    host: str
    item: str
    agent: str
    rep: int
    attempts: int = Field(description="How many attempts the cell has had.")
    status: AttemptStatus | Literal["pending"] = Field(description="The last attempt's status; pending: none yet.")
    grade: str = Field(description="The grade the cell counts as: a reviewer's override when there is one, else the "
                       "last attempt's automatic grade; '' when not graded (a harness failure without a grade counts "
                       "as HARNESS_FAILURE).")
    automatic_grade: str = Field(description="The last attempt's automatic grade (grade.json; "
                                 "HARNESS_FAILURE for a harness failure); the same as grade unless overridden.")
    override: GradeOverride | None = Field(default=None, description="The reviewer's latest override of the last "
                                           "attempt (grades.jsonl): grade, automatic, author, reason, at; null when none.")
    outcome: str = Field(description="The grade's product outcome; '' when not graded.")
    stop: StopRecord | None = Field(description="The guard stop the grade names.")
    failure: str = Field(default="", description="The harness failure code (harness.failures.classify) when the "
                         "last attempt or its grade is a harness failure, else ''.")
    reasons: list[str] = Field(description="The grade's reasons.")
    checks: list[CheckLine] = Field(description="The acceptance checks the grade was given from.")
    duration_s: float = Field(description="The last attempt's length (meta.json), 0 when not recorded.")
    error: str = Field(description="The last attempt's error text (meta.json).")
    host_facts: dict[str, str] = Field(description="What the host reported (meta.json of a sweep attempt).")
    path: str = Field(description="The last attempt's folder, relative to the results directory.")
    rerun: str = Field(default="", description="When the last attempt came from `fleet rerun`: when that rerun was "
                       "planned (UTC); '' when it is the sweep's own.")

    @property
    def overridden(self) -> bool:
        """A reviewer's grade counts for this cell (even one that agrees with the automatic grade)."""
        return self.override is not None or self.grade != self.automatic_grade


def cell_results(store: Store, sweep: SweepRecord) -> list[CellRow]:
    """One row per cell: its last attempt's grade, outcome, stop, reasons, timings and host facts, read from
    grade.json and meta.json through their models (a missing one is an attempt not yet recorded or graded;
    a corrupt one is a StoreError naming the file and key)."""
    rows = []
    for c in sweep.cells:
        runs = sweep.attempts.get(c.id) or []
        last = runs[-1] if runs else None
        folder = store.attempt_dir(sweep.id, c.id, last.attempt) if last else None
        grade = read_optional(folder / "grade.json", Grade) if folder else None
        meta = read_meta(folder / "meta.json") if folder and (folder / "meta.json").is_file() else None
        # The one failure decision (the dispatcher's and resume's): the attempt's status, or its grade.
        failure = classify(last.status, last.reason, grade.grade if grade else last.grade,
                           grade.failure if grade else last.failure) if last else None
        name = "HARNESS_FAILURE" if failure else (grade.grade if grade else "")
        # Only an overridden attempt's history is read: the summary says whether there is one.
        override = latest_override(folder) if folder and last and last.override else None
        rows.append(CellRow(
            cell=c.id, host=c.host, item=c.item, agent=c.agent, rep=c.rep, attempts=len(runs),
            status=last.status if last else "pending", grade=last.override if last and last.override else name,
            automatic_grade=name, override=override, outcome=grade.outcome if grade else "",
            stop=grade.stop if grade else None, failure=failure.reason if failure else "",
            reasons=grade.reasons if grade else [],
            checks=[CheckLine(name=k.name, status=k.status) for k in grade.checks] if grade else [],
            duration_s=meta.duration_s if isinstance(meta, AttemptMeta) else 0.0, error=meta.error if meta else "",
            host_facts=meta.host_facts if isinstance(meta, AttemptMeta) else {}, path=str(folder.relative_to(store.root)) if folder else "",
            rerun=(r.at if (r := sweep.rerun_of(c.id)) is not None else ""),
        ))
    return rows


PASS_GRADE = "DELIVERED"
"""The one grade that is a pass, in the report's rates and in ``fleet compare`` and ``fleet sweeps``."""


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
                    measured=sum(1 for g in graded if g != "HARNESS_FAILURE"))


def shown_as(row: CellRow) -> str:
    """The cell's grade as the report prints it: ``PARTIAL (override by alice of DELIVERED: the reason)`` when a
    reviewer overrode it, else the grade (or the status when not graded)."""
    if row.override is not None:
        o = row.override
        return one_line(f"{row.grade} (override by {o.author} of {o.automatic or 'ungraded'}: {o.reason})")
    if row.overridden:
        return f"{row.grade} (override of {row.automatic_grade or 'ungraded'})"  # the history was not found
    return row.grade or row.status


def _rate(rows: list[CellRow]) -> str:
    rate = pass_rate(r.grade for r in rows)
    return f"{rate.all} | {rate.without_failures}"


def _markdown(sweep: SweepRecord, rows: list[CellRow]) -> str:
    items = list(sweep.items)
    out = [f"# Sweep {sweep.id}", "", f"- status: {sweep.status}; created {sweep.created_at}; harness {sweep.harness_commit}",
           f"- cells: {len(rows)}; grades: " + ", ".join(f"{g} {n}" for g, n in Counter(r.grade or 'pending' for r in rows).most_common()),
           f"- rerun: {sum(1 for r in rows if r.rerun)} cell(s) (their latest attempt, from `fleet rerun`, counts; see Reruns)",
           "", "## Matrix", "", "| host / agent | " + " | ".join(items) + " |", "|---" * (len(items) + 1) + "|"]
    by_row: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        shown = f"{r.grade} (override)" if r.overridden else r.grade or r.status
        by_row[f"{r.host} / {r.agent}"][r.item].append(shown + (" (rerun)" if r.rerun else ""))
    for row, cells in by_row.items():
        out.append(f"| {row} | " + " | ".join(" ".join(cells.get(i, ["-"])) for i in items) + " |")
    for key in ("host", "item"):
        out += ["", f"## Pass rate per {key}", "", f"| {key} | DELIVERED, all cells | DELIVERED, without harness failures |", "|---|---|---|"]
        groups: dict[str, list[CellRow]] = defaultdict(list)
        for r in rows:
            groups[getattr(r, key)].append(r)
        out += [f"| {k} | {_rate(v)} |" for k, v in groups.items()]
    stops = Counter(r.stop.reason for r in rows if r.stop)
    out += ["", "## Stops by reason", ""] + ([f"- {k}: {n}" for k, n in stops.most_common()] or ["- none"])
    out += ["", "## Durations (last attempt)", "", "| host | median s | max s |", "|---|---|---|"]
    per_host: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.duration_s:
            per_host[r.host].append(r.duration_s)
    out += [f"| {h} | {statistics.median(d):.1f} | {max(d):.1f} |" for h, d in per_host.items()]
    agent = [r for r in rows if r.grade in ("PARTIAL", "NOTHING", "CODE_IN_CHAT")]
    harness = [r for r in rows if r.grade == "HARNESS_FAILURE"]
    out += ["", "## Findings", "", "### Agent failures", ""]
    out += [f"- {r.cell}: " + (shown_as(r) if r.overridden else f"{r.grade}: " + "; ".join(r.reasons))
            for r in agent] or ["- none"]
    out += ["", "### Harness limitations", ""]
    out += [f"- {r.cell}: " + (shown_as(r) if r.overridden else
                               f"HARNESS_FAILURE({r.failure}): {r.error or '; '.join(r.reasons)}")
            for r in harness] or ["- none"]
    out += ["", "### Environment notes", ""]
    seen: dict[str, dict[str, str]] = {}
    for r in rows:
        if r.host_facts and r.host not in seen:
            seen[r.host] = r.host_facts
    out += [f"- {h}: " + ", ".join(f"{k} {v}" for k, v in facts.items()) for h, facts in seen.items()] or ["- none"]
    out += ["", "## Overrides", "", "A reviewer's grade counts in place of the automatic one, which is kept.", ""]
    out += [f"- {r.cell}: {shown_as(r)}" + (f" ({r.override.at})" if r.override else "")
            for r in rows if r.overridden] or ["- none"]
    out += ["", "## Reruns", "", "Cells run again by `fleet rerun`; earlier attempts are kept, the latest counts.", ""]
    for rerun in sweep.reruns:
        counted = [cid for cid in rerun.cells if sweep.rerun_of(cid) is rerun]
        out.append(f"- {rerun.at}, host {rerun.host}: {len(rerun.cells)} cell(s) run again"
                   + (f"; counted: {', '.join(counted)}" if counted else "; none of them counts any more (rerun since, or nothing sent)"))
    if not sweep.reruns:
        out.append("- none")
    return "\n".join(out) + "\n"


def _junit(sweep: SweepRecord, rows: list[CellRow]) -> bytes:
    suite = ET.Element("testsuite", name=f"fleet sweep {sweep.id}", tests=str(len(rows)))
    counts: Counter[str] = Counter()
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=r.host, name=f"{r.item}/{r.agent}/r{r.rep}",
                             time=f"{r.duration_s:.3f}")
        text = f"{r.grade}: " + ("; ".join(r.reasons) or r.error)
        if r.overridden:
            # A reviewer's grade counts; the case says it is one, and what the harness had said (also on a pass).
            text = shown_as(r)
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", name="override", value=text[:1000])
            ET.SubElement(props, "property", name="automatic_grade", value=r.automatic_grade)
        if r.grade == "HARNESS_FAILURE":
            ET.SubElement(case, "error", message=text[:1000])
            counts["errors"] += 1
        elif r.grade in ("PARTIAL", "NOTHING", "CODE_IN_CHAT"):
            ET.SubElement(case, "failure", message=text[:1000])
            counts["failures"] += 1
        elif not r.grade:
            ET.SubElement(case, "skipped", message=f"not graded ({r.status})")
            counts["skipped"] += 1
    for k in ("failures", "errors", "skipped"):
        suite.set(k, str(counts[k]))
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)


def write_report(store: Store, sweep: SweepRecord) -> list[Path]:
    """Write REPORT.md, junit.xml and results.json into the sweep's folder; returns their paths."""
    rows = cell_results(store, sweep)
    folder = store.sweep_dir(sweep.id)
    files = {
        "REPORT.md": _markdown(sweep, rows).encode(),
        "junit.xml": _junit(sweep, rows),
        "results.json": json.dumps({"sweep": sweep.id, "status": sweep.status,
                                     "cells": [r.model_dump(mode="json") for r in rows]}, indent=2).encode(),
    }
    for name, data in files.items():
        atomic_write(folder / name, data)
    return [folder / n for n in files]

