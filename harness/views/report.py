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

from pydantic import BaseModel, ConfigDict, Field

from harness.core.checks.result import CheckStatus, failure_message
from harness.core.errors import FleetError, one_line
from harness.core.failures import classify
from harness.grading.model import Grade, StopRecord
from harness.grading.scale import AGENT_FAILURES, PassRate, pass_rate
from harness.grading.gradefiles import latest_override
from harness.grading.override import GradeOverride
from harness.core.inventory import load_inventory
from harness.core.recordfile import read_optional
from harness.core.records import AttemptMeta, AttemptStatus, read_meta
from harness.core.sweep import SweepRecord
from harness.store import Store, write_file

__all__ = ["write_report", "cell_results", "CellRow", "CheckLine", "shown_as",
           "HostModel", "GroupRate", "Results", "results_of", "host_models", "group_rates"]

class CheckLine(BaseModel):
    """One acceptance check of a cell's row: its name and status (the whole result is in grade.json)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    status: CheckStatus
    message: str = Field(default="", description="For a failed or broken check: its first failed assertion (for "
                         "pytest: the test) and its message, how many others failed, on one line, cut at 300 "
                         "characters (harness.core.checks.failure_message); '' otherwise.")


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
    failure: str = Field(default="", description="The harness failure code (harness.core.failures.classify) when the "
                         "last attempt or its grade is a harness failure, else ''.")
    reasons: list[str] = Field(description="The grade's reasons.")
    checks: list[CheckLine] = Field(description="The acceptance checks the grade was given from.")
    duration_s: float = Field(description="The last attempt's length (meta.json), 0 when not recorded.")
    error: str = Field(description="The last attempt's error text (meta.json).")
    host_facts: dict[str, str] = Field(description="What the host reported (meta.json of a sweep attempt).")
    model: dict[str, str | int] = Field(default_factory=dict, description="The host's model as the last attempt used "
                                        "it (meta.json): id, base_url, context, max_output; {} when not recorded.")
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
            checks=[CheckLine(name=k.name, status=k.status,
                              message=failure_message(k) if k.status in ("failed", "error") else "")
                    for k in grade.checks] if grade else [],
            duration_s=meta.duration_s if isinstance(meta, AttemptMeta) else 0.0, error=meta.error if meta else "",
            host_facts=meta.host_facts if isinstance(meta, AttemptMeta) else {},
            model=meta.model if isinstance(meta, AttemptMeta) else {}, path=str(folder.relative_to(store.root)) if folder else "",
            rerun=(r.at if (r := sweep.rerun_of(c.id)) is not None else ""),
        ))
    return rows


def shown_as(row: CellRow) -> str:
    """The cell's grade as the report prints it: ``PARTIAL (override by alice of DELIVERED: the reason)`` when a
    reviewer overrode it, else the grade (or the status when not graded)."""
    if row.override is not None:
        o = row.override
        return one_line(f"{row.grade} (override by {o.author} of {o.automatic or 'ungraded'}: {o.reason})")
    if row.overridden:
        return f"{row.grade} (override of {row.automatic_grade or 'ungraded'})"  # the history was not found
    return row.grade or row.status


class HostModel(BaseModel):
    """A host's model as the report names it (REPORT.md's "Hosts and models", results.json's ``hosts``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    id: str = Field(description="The model id.")
    server: str = Field(description="What serves it (the inventory's model.server); '' when not recorded.")
    base_url: str = Field(description="The OpenAI-compatible endpoint, as seen from the host.")
    context: int = Field(description="Context size in tokens.")
    max_output: int = Field(description="Per-reply output limit in tokens.")
    source: Literal["attempts", "sweep"] = Field(description="attempts: what the host's counted attempts recorded in "
                                                 "meta.json (a rerun may have used another model than planned); "
                                                 "sweep: sweep.json's host record (no attempt recorded one).")


class GroupRate(BaseModel):
    """The pass rate of one host's cells of one agent (REPORT.md's "Pass rate per host and agent")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    agent: str
    cells: int = Field(description="The group's cells.")
    attempts: int = Field(description="Their attempts in all, retries and reruns included.")
    # PassRate's numbers, flat and stored (PassRate computes its rates, so it does not read back from JSON).
    delivered: int = Field(description="Cells graded DELIVERED.")
    graded: int = Field(description="Cells with a grade, HARNESS_FAILURE included.")
    measured: int = Field(description="Cells with a grade other than HARNESS_FAILURE.")
    rate: float | None = Field(description="delivered / graded; null when nothing was graded.")
    rate_without_failures: float | None = Field(description="delivered / measured; null when nothing was measured.")

    @property
    def pass_rate(self) -> PassRate:
        return PassRate(delivered=self.delivered, graded=self.graded, measured=self.measured)


class Results(BaseModel):
    """results.json: every cell's row and the sweep's facts the report names. Fields are only ever added."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sweep: str = Field(description="The sweep id.")
    status: str = Field(description="The sweep's status when the report was written.")
    label: str = Field(default="", description="The sweep's label (--label); '' when none was given.")
    inventory: str = Field(default="", description="The inventory file the sweep was planned from.")
    inventory_sha256: str = Field(default="", description="Its sha256 when the sweep was planned ('' for old sweeps).")
    hosts: list[HostModel] = Field(default_factory=list, description="Each host's model.")
    pass_rates: list[GroupRate] = Field(default_factory=list, description="Per host and agent.")
    cells: list[CellRow] = Field(description="One row per cell, in the sweep's order.")


def _servers_from_inventory(sweep: SweepRecord) -> dict[str, str]:
    """model.server per host from the sweep's inventory file, for sweeps planned before sweep.json kept it, and only
    while the file is the one the sweep was planned from (same sha256): a changed file may say another server."""
    if not sweep.inventory_sha256:
        return {}
    try:
        inv = load_inventory(sweep.inventory)
    except (FleetError, OSError):
        return {}
    return {name: h.model.server for name, h in inv.hosts.items()} if inv.sha256 == sweep.inventory_sha256 else {}


def host_models(sweep: SweepRecord, rows: list[CellRow]) -> list[HostModel]:
    """Each host's model: what its counted attempts used (each different one), else what the sweep planned."""
    servers: dict[str, str] | None = None
    out = []
    for name, summary in sweep.hosts.items():
        server = summary.model_server
        if not server:
            servers = _servers_from_inventory(sweep) if servers is None else servers
            server = servers.get(name, "")
        used: dict[tuple[str, str, int, int], None] = {}
        for r in rows:
            m = r.model
            if r.host == name and m.get("id"):
                used[(str(m["id"]), str(m.get("base_url", "")), int(m.get("context", 0)), int(m.get("max_output", 0)))] = None
        if not used:
            out.append(HostModel(host=name, id=summary.model_id, server=server, base_url=summary.model_base_url,
                                 context=summary.context, max_output=summary.max_output, source="sweep"))
        for mid, url, context, max_output in used:
            # The server is known for the model the sweep planned; another one (a rerun's) is not recorded.
            out.append(HostModel(host=name, id=mid, server=server if mid == summary.model_id else "", base_url=url,
                                 context=context, max_output=max_output, source="attempts"))
    return out


def group_rates(sweep: SweepRecord, rows: list[CellRow]) -> list[GroupRate]:
    """Pass rates per host and agent, in the order the cells are planned."""
    groups: dict[tuple[str, str], list[CellRow]] = defaultdict(list)
    for r in rows:
        groups[(r.host, r.agent)].append(r)
    out = []
    for (h, a), g in groups.items():
        rate = pass_rate(r.grade for r in g)
        out.append(GroupRate(host=h, agent=a, cells=len(g), attempts=sum(r.attempts for r in g),
                             delivered=rate.delivered, graded=rate.graded, measured=rate.measured, rate=rate.rate,
                             rate_without_failures=rate.rate_without_failures))
    return out


def results_of(sweep: SweepRecord, rows: list[CellRow]) -> Results:
    """results.json's record of the sweep."""
    return Results(sweep=sweep.id, status=sweep.status, label=sweep.label, inventory=sweep.inventory,
                   inventory_sha256=sweep.inventory_sha256, hosts=host_models(sweep, rows),
                   pass_rates=group_rates(sweep, rows), cells=rows)


def _md(text: str) -> str:
    """A value for a Markdown table cell: one line, its pipes escaped."""
    return one_line(text).replace("|", "\\|")


def _check_lines(row: CellRow) -> list[str]:
    """``  - check NAME failed: MESSAGE`` for each check of the cell that failed or broke, under its finding."""
    return [f"  - check {one_line(k.name)} {k.status}" + (f": {k.message}" if k.message else "")
            for k in row.checks if k.status in ("failed", "error")]


def _rate(rows: list[CellRow]) -> str:
    rate = pass_rate(r.grade for r in rows)
    return f"{rate.all} | {rate.without_failures}"


def _markdown(sweep: SweepRecord, rows: list[CellRow], results: Results) -> str:
    items = list(sweep.items)
    sha = f" (sha256 {sweep.inventory_sha256[:12]})" if sweep.inventory_sha256 else ""
    attempts = sum(r.attempts for r in rows)
    again = sum(1 for r in rows if r.attempts > 1)
    out = [f"# Sweep {sweep.id}", "", f"- label: {one_line(sweep.label) or '(none)'}; inventory {one_line(sweep.inventory)}{sha}",
           f"- status: {sweep.status}; created {sweep.created_at}; harness {sweep.harness_commit}",
           f"- cells: {len(rows)}; grades: " + ", ".join(f"{g} {n}" for g, n in Counter(r.grade or 'pending' for r in rows).most_common()),
           f"- attempts: {attempts} for {len(rows)} cell(s); {again} cell(s) had more than one (retried or rerun; the latest counts)",
           f"- rerun: {sum(1 for r in rows if r.rerun)} cell(s) (their latest attempt, from `fleet rerun`, counts; see Reruns)"]
    out += ["", "## Hosts and models", "", "| host | model | server | context | output limit | endpoint |",
            "|---|---|---|---|---|---|"]
    out += [f"| {_md(m.host)} | {_md(m.id)} | {_md(m.server) or 'not recorded'} | {m.context} | {m.max_output} | "
            f"{_md(m.base_url)} |" for m in results.hosts]
    out += ["", "## Matrix", "", "| host / agent | " + " | ".join(items) + " |", "|---" * (len(items) + 1) + "|"]
    by_row: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        shown = f"{r.grade} (override)" if r.overridden else r.grade or r.status
        by_row[f"{r.host} / {r.agent}"][r.item].append(shown + (" (rerun)" if r.rerun else ""))
    for row, cells in by_row.items():
        out.append(f"| {row} | " + " | ".join(" ".join(cells.get(i, ["-"])) for i in items) + " |")
    out += ["", "## Pass rate per host and agent", "",
            "| host | agent | cells | attempts | DELIVERED | pass rate, all cells | without harness failures |",
            "|---|---|---|---|---|---|---|"]
    out += [f"| {_md(g.host)} | {_md(g.agent)} | {g.cells} | {g.attempts} | {g.delivered} | {g.pass_rate.all} | "
            f"{g.pass_rate.without_failures} |" for g in results.pass_rates]
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
    agent = [r for r in rows if r.grade in AGENT_FAILURES]
    harness = [r for r in rows if r.grade == "HARNESS_FAILURE"]
    out += ["", "## Findings", "", "### Agent failures", ""]
    out += [line for r in agent
            for line in [f"- {r.cell}: " + (shown_as(r) if r.overridden else f"{r.grade}: " + "; ".join(r.reasons)),
                         *_check_lines(r)]] or ["- none"]
    out += ["", "### Harness limitations", ""]
    out += [line for r in harness
            for line in [f"- {r.cell}: " + (shown_as(r) if r.overridden else
                                            f"HARNESS_FAILURE({r.failure}): {r.error or '; '.join(r.reasons)}"),
                         *_check_lines(r)]] or ["- none"]
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
        # A rerun is recorded before it sends anything: one stopped midway ran only some of its cells (resume
        # sends the rest), so the line says how many got their new attempt, not how many were planned.
        sent = [cid for cid, first in rerun.cells.items()
                if any(a.attempt >= first for a in sweep.attempts.get(cid) or [])]
        ran = (f"{len(sent)} cell(s) run again" if len(sent) == len(rerun.cells) else
               f"{len(sent)} of {len(rerun.cells)} planned cell(s) run again (stopped midway; `fleet resume` runs the rest)")
        out.append(f"- {rerun.at}, host {rerun.host}: {ran}"
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
        elif r.grade in AGENT_FAILURES:
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
    results = results_of(sweep, rows)
    folder = store.sweep_dir(sweep.id)
    files = {
        "REPORT.md": _markdown(sweep, rows, results).encode(),
        "junit.xml": _junit(sweep, rows),
        "results.json": json.dumps(results.model_dump(mode="json"), indent=2).encode(),
    }
    for name, data in files.items():
        write_file(folder / name, data)
    return [folder / n for n in files]

