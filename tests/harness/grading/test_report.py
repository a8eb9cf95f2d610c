"""`fleet report`: pass rates with and without harness failures, findings, junit.xml."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.catalog import Item
from harness.grading import Grade, StopRecord, evidence_from_attempt, grade
from harness.records import Artifact, AttemptResult, Cell, HostSummary, SweepRecord, utc_now
from harness.report import cell_results, write_report
from harness.store import Store
from tests.support import TESTS


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
                                                  reason="host_unreachable" if c.host == "laptop" else "",
                                                  host=c.host, agent=c.agent, item=c.item, duration_s=3.0,
                                                  artifacts=[Artifact.of("answer.txt", b"x")]))
            w.record_grade(sweep, c.id, 1, grades[c.host])
    write_report(store, sweep)
    md = (tmp_path / "s1" / "REPORT.md").read_text()
    assert "| 07-photo-renamer | 1/3 (33 %) | 1/2 (50 %) |" in md  # with and without the harness failure
    assert "- recursive_delete: 1" in md
    assert "- tower2/07-photo-renamer/builtin/r1: PARTIAL: the receipt failed" in md
    assert "### Harness limitations\n\n- laptop/07-photo-renamer/builtin/r1: HARNESS_FAILURE(host_unreachable):" in md
    suite = ET.parse(tmp_path / "s1" / "junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    results = json.loads((tmp_path / "s1" / "results.json").read_text())
    assert [r["grade"] for r in results["cells"]] == ["DELIVERED", "PARTIAL", "HARNESS_FAILURE"]
    assert (tmp_path / "s1" / "tower1/07-photo-renamer/builtin/r1/attempt-1/grades.jsonl").read_text().count("\n") == 1


def test_a_finished_attempt_the_grader_calls_a_harness_failure_is_kept_out_of_the_models_rate(tmp_path: Path) -> None:
    """The report makes the same decision as the dispatcher and resume: a real agent that left no transcript
    finished (exit 0), but it is the fleet's failure, shown with its code and kept out of the second rate."""
    store, sweep = Store(tmp_path), _sweep()
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        for c in sweep.cells:
            w.record_attempt(sweep, AttemptResult(sweep_id=sweep.id, cell_id=c.id, attempt=1, status="finished",
                                                  exit_code=0, host=c.host, agent=c.agent, item=c.item,
                                                  agent_kind="openclaw" if c.host == "laptop" else "command",
                                                  artifacts=[Artifact.of("answer.txt", b"x")]))
            w.record_grade(sweep, c.id, 1, grade(evidence_from_attempt(store.attempt_dir(sweep.id, c.id, 1), None)))
    rows = {r.host: r for r in cell_results(store, sweep)}
    assert (rows["laptop"].grade, rows["laptop"].failure) == ("HARNESS_FAILURE", "no_transcript")
    assert rows["tower1"].failure == ""
    md = write_report(store, sweep) and (tmp_path / "s1" / "REPORT.md").read_text()
    assert "- laptop/07-photo-renamer/builtin/r1: HARNESS_FAILURE(no_transcript):" in md


def test_report_rows_are_typed_and_read_from_a_real_sweep(tmp_path: Path) -> None:
    """The golden sweep (tests/golden/): each row is a CellRow built from grade.json and meta.json through
    their models, and results.json is those rows as JSON."""
    import shutil

    from harness.report import CellRow, CheckLine, cell_results

    sweep_id = "20261201-213416-golden"
    shutil.copytree(TESTS / "golden" / "v1" / "runs" / sweep_id, tmp_path / sweep_id)
    store = Store(tmp_path)
    sweep = store.load_sweep(sweep_id)
    rows = cell_results(store, sweep)
    assert all(isinstance(r, CellRow) for r in rows)
    renamer, answer, stats = rows
    assert (renamer.grade, renamer.outcome, renamer.stop, renamer.checks) == (
        "DELIVERED", "passed", None, [CheckLine(name="test_photo_renamer", status="passed")])
    assert renamer.duration_s == 18.892 and renamer.host_facts["python"] == "3.11.7"
    assert renamer.path == f"{sweep_id}/local/07-photo-renamer/builtin/r1/attempt-1"
    assert (answer.grade, answer.checks, answer.reasons) == ("DELIVERED", [], ["the owner got a written answer"])
    assert stats.stop == StopRecord(reason="consecutive_failures", text="4 consecutive failures", at_call=4)
    write_report(store, sweep)
    md = (tmp_path / sweep_id / "REPORT.md").read_text()
    assert "| local | 2/3 (67 %) | 2/3 (67 %) |" in md and "- consecutive_failures: 1" in md
    assert "- local/27-log-stats/builtin/r1: NOTHING: stopped: 4 consecutive failures; nothing usable was written" in md
    results = json.loads((tmp_path / sweep_id / "results.json").read_text())
    assert [CellRow.model_validate(c) for c in results["cells"]] == rows
