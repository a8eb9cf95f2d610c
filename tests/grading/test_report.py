"""`fleet report`: pass rates with and without harness failures, findings, junit.xml."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.catalog import Item
from harness.grading import Grade, StopRecord
from harness.records import Artifact, AttemptResult, Cell, HostSummary, SweepRecord, utc_now
from harness.report import write_report
from harness.store import Store


def _sweep() -> SweepRecord:
    item = Item(id="07-photo-renamer", number="07", kind="open", title="t", prompt="p", timeout_s=60)
    cells = [Cell(id=Cell.make_id(h, item.id, "builtin", 1), host=h, item=item.id, agent="builtin", rep=1, seed=1)
             for h in ("tower1", "tower2", "laptop")]
    host = HostSummary(name="h", transport="ssh", os="linux", address="a", slots=1, tags=[], model_id="m",
                       model_base_url="http://x/v1", context=1, max_output=1)
    return SweepRecord(id="s1", created_at=utc_now(), inventory="i", prompts="p", harness_commit="c",
                       hosts={c.host: host.model_copy(update={"name": c.host}) for c in cells},
                       items={item.id: item}, cells=cells)


def test_report_rates_findings_and_junit(tmp_path: Path) -> None:
    store, sweep = Store(tmp_path), _sweep()
    grades = {
        "tower1": Grade(grade="DELIVERED", outcome="passed", reasons=["all required checks passed"]),
        "tower2": Grade(grade="PARTIAL", outcome="failed", reasons=["the receipt failed"],
                        stop=StopRecord(reason="recursive_delete", text="refused rm -rf", at_call=10)),
        "laptop": Grade(grade="HARNESS_FAILURE", outcome="none", reasons=["harness failure: host_unreachable"]),
    }
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        for c in sweep.cells:
            status = "harness_failure" if c.host == "laptop" else "finished"
            w.record_attempt(sweep, AttemptResult(sweep_id=sweep.id, cell_id=c.id, attempt=1, status=status,
                                                  host=c.host, agent=c.agent, item=c.item, duration_s=3.0,
                                                  artifacts=[Artifact.of("answer.txt", b"x")]))
            w.record_grade(sweep, c.id, 1, grades[c.host])
    write_report(store, sweep)
    md = (tmp_path / "s1" / "REPORT.md").read_text()
    assert "| 07-photo-renamer | 1/3 (33 %) | 1/2 (50 %) |" in md  # with and without the harness failure
    assert "- recursive_delete: 1" in md
    assert "- tower2/07-photo-renamer/builtin/r1: PARTIAL: the receipt failed" in md
    assert "### Harness limitations\n\n- laptop/07-photo-renamer/builtin/r1:" in md
    suite = ET.parse(tmp_path / "s1" / "junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    results = json.loads((tmp_path / "s1" / "results.json").read_text())
    assert [r["grade"] for r in results["cells"]] == ["DELIVERED", "PARTIAL", "HARNESS_FAILURE"]
    assert (tmp_path / "s1" / "tower1/07-photo-renamer/builtin/r1/attempt-1/grades.jsonl").read_text().count("\n") == 1
