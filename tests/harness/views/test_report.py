"""`fleet report`: pass rates with and without harness failures, findings, junit.xml."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.core.catalog import Item
from harness.grading import Grade, StopRecord, evidence_from_attempt, grade
from harness.core.records import Artifact, AttemptResult, Cell, HostSummary, utc_now
from harness.core.sweep import SweepRecord
from harness.views.report import cell_results, write_report
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

    from harness.views.report import CellRow, CheckLine, cell_results

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
    assert "\n  - check test_logstats failed: test_logstats::test_busiest_ips_with_their_counts: failed on setup" in md
    # A sweep planned before sweep.json kept the server, whose inventory is gone: the server is not recorded.
    assert "| local | scripted-model | not recorded | 65536 | 2048 | http://127.0.0.1:8765/v1 |" in md
    assert "- label: golden; inventory " in md and "| local | builtin | 3 | 3 | 2 | 2/3 (67 %) | 2/3 (67 %) |" in md
    results = json.loads((tmp_path / sweep_id / "results.json").read_text())
    assert [CellRow.model_validate(c) for c in results["cells"]] == rows


def test_report_names_label_inventory_models_rates_per_host_and_agent_and_failed_checks(tmp_path: Path) -> None:
    from harness.core.checks.result import AssertionResult, CheckResult
    from harness.views.report import Results

    store, sweep = Store(tmp_path), _sweep()
    sweep = sweep.model_copy(update={
        "label": "nightly", "inventory": "/etc/fleet/fleet.toml", "inventory_sha256": "ab" * 32,
        "hosts": {h: s.model_copy(update={"model_id": "Qwen3.5-27B", "model_server": "llama.cpp", "context": 65536,
                                          "max_output": 8192, "model_base_url": "http://127.0.0.1:8080/v1"})
                  for h, s in sweep.hosts.items()}})
    failed = CheckResult(name="test_renamer", kind="pytest", status="failed", summary="1 failed",
                         details=[AssertionResult(name="test_renamer::test_dates", status="passed"),
                                  AssertionResult(name="test_renamer::test_names", status="failed",
                                                  message="AssertionError: wanted 3 files\nassert 2 == 3")])
    used = {"id": "Qwen3.5-27B", "base_url": "http://127.0.0.1:8080/v1", "context": 65536, "max_output": 8192}
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        for c in sweep.cells:
            # tower2's first attempt was lost to the fleet; its second counts (two attempts for one cell).
            for k in ((1, 2) if c.host == "tower2" else (1,)):
                status = "harness_failure" if (c.host, k) == ("tower2", 1) else "finished"
                w.record_attempt(sweep, AttemptResult(
                    sweep_id=sweep.id, cell_id=c.id, attempt=k, status=status, host=c.host, agent=c.agent,
                    item=c.item, model=used if c.host != "laptop" else {}, reason="host_lost" if status != "finished" else "",
                    artifacts=[Artifact.of("answer.txt", b"x")]))
            g = (Grade(grade="PARTIAL", outcome="failed", reasons=["a check failed"], checks=[failed])
                 if c.host == "tower2" else Grade(grade="DELIVERED", outcome="passed"))
            w.record_grade(sweep, c.id, sweep.attempts[c.id][-1].attempt, g)
    write_report(store, sweep)
    md = (tmp_path / "s1" / "REPORT.md").read_text()
    assert f"- label: nightly; inventory /etc/fleet/fleet.toml (sha256 {'ab' * 6})" in md
    assert "- attempts: 4 for 3 cell(s); 1 cell(s) had more than one (retried or rerun; the latest counts)" in md
    assert "| tower1 | Qwen3.5-27B | llama.cpp | 65536 | 8192 | http://127.0.0.1:8080/v1 |" in md
    assert "| laptop | Qwen3.5-27B | llama.cpp | 65536 | 8192 | http://127.0.0.1:8080/v1 |" in md  # from sweep.json
    assert "| tower2 | builtin | 1 | 2 | 0 | 0/1 (0 %) | 0/1 (0 %) |" in md
    assert "| tower1 | builtin | 1 | 1 | 1 | 1/1 (100 %) | 1/1 (100 %) |" in md
    # Under the cell: which test failed, and its message on one line.
    assert ("- tower2/07-photo-renamer/builtin/r1: PARTIAL: a check failed\n"
            "  - check test_renamer failed: test_renamer::test_names: AssertionError: wanted 3 files assert 2 == 3\n") in md
    results = Results.model_validate_json((tmp_path / "s1" / "results.json").read_text())
    assert (results.label, results.inventory, results.inventory_sha256) == ("nightly", "/etc/fleet/fleet.toml", "ab" * 32)
    models = {m.host: m for m in results.hosts}
    assert (models["tower1"].server, models["tower1"].source, models["laptop"].source) == ("llama.cpp", "attempts", "sweep")
    rates = {(g.host, g.agent): g for g in results.pass_rates}
    assert (rates[("tower2", "builtin")].attempts, rates[("tower1", "builtin")].rate) == (2, 1.0)
    assert (rates[("tower2", "builtin")].delivered, rates[("tower2", "builtin")].rate_without_failures) == (0, 0.0)
    tower2 = next(c for c in results.cells if c.host == "tower2")
    assert tower2.checks[0].message == "test_renamer::test_names: AssertionError: wanted 3 files assert 2 == 3"
    assert tower2.model == used


def test_a_host_whose_rerun_used_another_model_shows_both(tmp_path: Path) -> None:
    from harness.views.report import host_models

    store, sweep = Store(tmp_path), _sweep()
    rows = [r.model_copy(update={"model": {"id": mid, "base_url": "http://x/v1", "context": 1, "max_output": 1}})
            for r, mid in zip(cell_results(store, sweep), ("m", "m", "m"))]
    rows.append(rows[0].model_copy(update={"cell": "tower1/x", "model": {"id": "m2", "base_url": "http://y/v1",
                                                                         "context": 2, "max_output": 2}}))
    tower1 = [m for m in host_models(sweep, rows) if m.host == "tower1"]
    assert [(m.id, m.base_url, m.context) for m in tower1] == [("m", "http://x/v1", 1), ("m2", "http://y/v1", 2)]


def test_the_server_of_an_older_sweep_comes_from_its_unchanged_inventory(tmp_path: Path) -> None:
    import hashlib

    from harness.views.report import host_models

    inv = tmp_path / "fleet.toml"
    inv.write_text('schema_version = 1\n[hosts.tower1]\ntransport = "local"\nworkdir = "/tmp/w"\n'
                   '[hosts.tower1.model]\nbase_url = "http://x/v1"\nid = "m"\ncontext = 1\nmax_output = 1\n'
                   'server = "vllm"\n[hosts.tower1.agents.echo]\ncommand = ["echo"]\n')
    sweep = _sweep().model_copy(update={"inventory": str(inv),
                                         "inventory_sha256": hashlib.sha256(inv.read_bytes()).hexdigest()})
    assert {m.host: m.server for m in host_models(sweep, [])} == {"tower1": "vllm", "tower2": "", "laptop": ""}
    inv.write_text(inv.read_text().replace("vllm", "ollama"))  # changed since: its server may not be the sweep's
    assert {m.host: m.server for m in host_models(sweep, [])}["tower1"] == ""


def test_a_check_failure_message_is_one_line_and_cut() -> None:
    from harness.core.checks.result import AssertionResult, CheckResult, failure_message

    long = CheckResult(name="c", kind="web", status="failed", summary="s",
                       details=[AssertionResult(name="page", status="failed", message="x\x1b[2J" + "y" * 500)])
    text = failure_message(long)
    assert len(text) == 300 and text.endswith("...") and "\x1b" not in text and text.startswith("page: x\\x1b[2J")
    assert failure_message(CheckResult(name="c", kind="web", status="error", summary="Chromium did not\nstart")) == \
        "Chromium did not start"
    assert failure_message(CheckResult(name="c", kind="web", status="passed")) == ""


def test_every_results_json_field_is_documented() -> None:
    """docs/report.md names every field results.json has (its models' fields): a new one must be documented."""
    from harness.views.report import CellRow, CheckLine, GroupRate, HostModel, Results

    doc = (TESTS.parent / "docs" / "report.md").read_text(encoding="utf-8")
    for model in (Results, CellRow, CheckLine, GroupRate, HostModel):
        for name in model.model_fields:
            assert f"`{name}`" in doc, f"docs/report.md does not name {model.__name__}.{name}"
