"""``fleet report SWEEP``: REPORT.md, junit.xml and results.json beside sweep.json.

Everything comes from the stored sweep and its attempts' grade.json / meta.json. A cell's result is its
last attempt's grade. Pass rate = DELIVERED / cells, shown both over all cells and over the cells that
were not a harness failure (the fleet's fault stays out of the model's rate).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from xml.etree import ElementTree as ET

from harness.records import SweepRecord
from harness.store import Store, atomic_write

__all__ = ["write_report", "cell_results"]

GRADES = ("DELIVERED", "PARTIAL", "NOTHING", "CODE_IN_CHAT", "HARNESS_FAILURE")


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def cell_results(store: Store, sweep: SweepRecord) -> list[dict]:
    """One row per cell: its last attempt's grade, outcome, stop, reasons, timings and host facts."""
    rows = []
    for c in sweep.cells:
        runs = sweep.attempts.get(c.id) or []
        last = runs[-1] if runs else None
        folder = store.attempt_dir(sweep.id, c.id, last.attempt) if last else None
        grade = _load(folder / "grade.json") if folder else {}
        meta = _load(folder / "meta.json") if folder else {}
        rows.append({
            "cell": c.id, "host": c.host, "item": c.item, "agent": c.agent, "rep": c.rep,
            "attempts": len(runs), "status": last.status if last else "pending",
            "grade": grade.get("grade", "") or ("HARNESS_FAILURE" if last and last.status == "harness_failure" else ""),
            "outcome": grade.get("outcome", ""), "stop": grade.get("stop"), "reasons": grade.get("reasons", []),
            "checks": [{"name": k.get("name"), "status": k.get("status")} for k in grade.get("checks", [])],
            "duration_s": meta.get("duration_s", 0.0), "error": meta.get("error", ""),
            "host_facts": meta.get("host_facts", {}), "path": str(folder.relative_to(store.root)) if folder else "",
        })
    return rows


def _rate(rows: list[dict]) -> str:
    graded = [r for r in rows if r["grade"]]
    real = [r for r in graded if r["grade"] != "HARNESS_FAILURE"]

    def pct(part: int, whole: int) -> str:
        return f"{part}/{whole} ({100 * part / whole:.0f} %)" if whole else "-"

    delivered = sum(1 for r in graded if r["grade"] == "DELIVERED")
    return f"{pct(delivered, len(graded))} | {pct(delivered, len(real))}"


def _markdown(sweep: SweepRecord, rows: list[dict]) -> str:
    items = list(sweep.items)
    out = [f"# Sweep {sweep.id}", "", f"- status: {sweep.status}; created {sweep.created_at}; harness {sweep.harness_commit}",
           f"- cells: {len(rows)}; grades: " + ", ".join(f"{g} {n}" for g, n in Counter(r['grade'] or 'pending' for r in rows).most_common()),
           "", "## Matrix", "", "| host / agent | " + " | ".join(items) + " |", "|---" * (len(items) + 1) + "|"]
    by_row: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by_row[f"{r['host']} / {r['agent']}"][r["item"]].append(r["grade"] or r["status"])
    for row, cells in by_row.items():
        out.append(f"| {row} | " + " | ".join(" ".join(cells.get(i, ["-"])) for i in items) + " |")
    for key in ("host", "item"):
        out += ["", f"## Pass rate per {key}", "", f"| {key} | DELIVERED, all cells | DELIVERED, without harness failures |", "|---|---|---|"]
        groups: dict[str, list[dict]] = defaultdict(list)
        for r in rows:
            groups[r[key]].append(r)
        out += [f"| {k} | {_rate(v)} |" for k, v in groups.items()]
    stops = Counter(r["stop"]["reason"] for r in rows if r["stop"])
    out += ["", "## Stops by reason", ""] + ([f"- {k}: {n}" for k, n in stops.most_common()] or ["- none"])
    out += ["", "## Durations (last attempt)", "", "| host | median s | max s |", "|---|---|---|"]
    per_host: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["duration_s"]:
            per_host[r["host"]].append(r["duration_s"])
    out += [f"| {h} | {statistics.median(d):.1f} | {max(d):.1f} |" for h, d in per_host.items()]
    agent = [r for r in rows if r["grade"] in ("PARTIAL", "NOTHING", "CODE_IN_CHAT")]
    harness = [r for r in rows if r["grade"] == "HARNESS_FAILURE"]
    out += ["", "## Findings", "", "### Agent failures", ""]
    out += [f"- {r['cell']}: {r['grade']}: " + "; ".join(r["reasons"]) for r in agent] or ["- none"]
    out += ["", "### Harness limitations", ""]
    out += [f"- {r['cell']}: {r['error'] or '; '.join(r['reasons'])}" for r in harness] or ["- none"]
    out += ["", "### Environment notes", ""]
    seen: dict[str, dict] = {}
    for r in rows:
        if r["host_facts"] and r["host"] not in seen:
            seen[r["host"]] = r["host_facts"]
    out += [f"- {h}: " + ", ".join(f"{k} {v}" for k, v in facts.items()) for h, facts in seen.items()] or ["- none"]
    return "\n".join(out) + "\n"


def _junit(sweep: SweepRecord, rows: list[dict]) -> bytes:
    suite = ET.Element("testsuite", name=f"fleet sweep {sweep.id}", tests=str(len(rows)))
    counts: Counter[str] = Counter()
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=r["host"], name=f"{r['item']}/{r['agent']}/r{r['rep']}",
                             time=f"{r['duration_s']:.3f}")
        text = "; ".join(r["reasons"]) or r["error"]
        if r["grade"] == "HARNESS_FAILURE":
            ET.SubElement(case, "error", message=f"HARNESS_FAILURE: {text}"[:1000])
            counts["errors"] += 1
        elif r["grade"] in ("PARTIAL", "NOTHING", "CODE_IN_CHAT"):
            ET.SubElement(case, "failure", message=f"{r['grade']}: {text}"[:1000])
            counts["failures"] += 1
        elif not r["grade"]:
            ET.SubElement(case, "skipped", message=f"not graded ({r['status']})")
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
        "results.json": json.dumps({"sweep": sweep.id, "status": sweep.status, "cells": rows}, indent=2).encode(),
    }
    for name, data in files.items():
        atomic_write(folder / name, data)
    return [folder / n for n in files]

