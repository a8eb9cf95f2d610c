"""Stored records read back typed: meta.json's two forms, what a worker's result becomes in it, and a
corrupt record said in one line naming the file and the key (never a traceback)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.core.errors import StoreError
from harness.importers.folder import write_run_folder
from harness.importers.recorded import RecordedRun
from harness.core.records import AttemptMeta, AttemptResult, ImportedMeta, read_meta
from harness.store import Store
from tests.support import run_fleet
from tests.support import TESTS

GOLDEN = TESTS / "golden"
SWEEP = "20261201-213416-golden"
OLDER_SWEEP = "20261201-213543-before-agent-kind"
RENAMER = "local/07-photo-renamer/builtin/r1"


def _runs(tmp_path: Path, root: Path = GOLDEN / "v1" / "runs", sweep: str = SWEEP) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(root / sweep, runs / sweep)
    return runs


def _assert_one_line(proc, *needles: str) -> str:  # type: ignore[no-untyped-def]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    (line,) = proc.stderr.splitlines()
    assert line.startswith("fleet: error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def test_a_meta_json_stores_every_field_of_the_attempt_result_but_the_contents() -> None:
    # meta.json's fields are declared apart from the worker's message, so a field added to one alone is caught.
    assert set(AttemptResult.model_fields) - {"schema_version"} == set(AttemptMeta.model_fields) - {"schema_version", "kind"}


def test_a_result_from_a_worker_older_than_agent_kind_still_names_the_builtin_agent() -> None:
    message = {"sweep_id": "s", "cell_id": "h/i/builtin/r1", "attempt": 1, "status": "finished", "host": "h",
               "agent": "builtin", "item": "i", "agent_command": ["/venv/bin/python", "-m", "workers.agent"]}
    assert AttemptResult.model_validate(message).to_meta().agent_kind == "builtin"
    # a worker that says it knows no kind is believed: only an absent key is an older worker's
    assert AttemptResult.model_validate({**message, "agent_kind": ""}).to_meta().agent_kind == ""
    assert AttemptResult.model_validate({**message, "agent_command": ["my-agent"]}).to_meta().agent_kind == ""


def test_a_recorded_fact_cannot_shadow_a_field_of_the_imported_record(tmp_path: Path) -> None:
    run = RecordedRun(format="pixel-fleet", file="x.json", sha256="0" * 64, label="run-1", prompt="p", calls=[],
                      limits=[], agent="pixel", facts={"status": "aborted", "agent_version": "9.9", "calls": 40})
    folder = write_run_folder(run, [], tmp_path / "run-1")
    meta = read_meta(folder / "meta.json")
    assert isinstance(meta, ImportedMeta)
    assert (meta.status, meta.calls) == ("finished", 0)
    assert meta.facts == {"status": "aborted", "agent_version": "9.9", "calls": 40}
    # and a second import of the run may replace its folder: it is known as an import's
    assert write_run_folder(run, [], tmp_path / "run-1") == folder


@pytest.mark.parametrize(("change", "problem"), [
    ({"schema_version": 3}, "schema_version 3 is not supported (this harness reads 1, 2)"),
    ({"schema_version": None}, "schema_version None is not supported"),
    ({"status": "exploded"}, "status: Input should be 'dispatched', 'finished', 'timeout' or 'harness_failure'"),
    ({"artifacts": [{"name": "a", "size": "big", "sha256": "x"}]}, "artifacts[0].size: Input should be a valid integer"),
    ({"kind": "dream"}, "not a meta.json record: kind must be 'run' or 'imported'"),
    ({"colour": "blue"}, "colour: Extra inputs are not permitted"),
])
def test_a_bad_meta_json_is_one_line_naming_the_file_and_the_key(tmp_path: Path, change: dict, problem: str) -> None:  # type: ignore[type-arg]
    meta = json.loads((GOLDEN / "v1" / "runs" / SWEEP / RENAMER / "attempt-1" / "meta.json").read_text())
    path = tmp_path / "meta.json"
    path.write_text(json.dumps({**meta, **change}))
    with pytest.raises(StoreError) as err:
        read_meta(path)
    assert str(err.value) == f"{path}: {problem}" or str(err.value).startswith(f"{path}: {problem}")


def test_a_meta_json_without_a_version_is_refused(tmp_path: Path) -> None:
    meta = json.loads((GOLDEN / "v1" / "runs" / SWEEP / RENAMER / "attempt-1" / "meta.json").read_text())
    del meta["schema_version"]
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match=r"meta.json: schema_version: missing$"):
        read_meta(tmp_path / "meta.json")


def test_an_imported_record_is_not_a_sweep_attempt(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    folder = runs / SWEEP / RENAMER / "attempt-1"
    shutil.copy(next((GOLDEN / "v1" / "imported").iterdir()) / "meta.json", folder / "meta.json")
    with pytest.raises(StoreError, match="kind: 'imported' is an imported session's record, not a sweep attempt's"):
        Store(runs).load_meta(SWEEP, RENAMER, 1)


def test_fleet_show_reads_an_older_meta_json_as_todays_record(tmp_path: Path) -> None:
    runs = _runs(tmp_path, GOLDEN / "v1-before-agent-kind" / "runs", OLDER_SWEEP)
    proc = run_fleet("show", OLDER_SWEEP, "local", "07", "--json", "--runs", str(runs), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert (shown["schema_version"], shown["kind"], shown["agent_kind"], shown["status"]) == (2, "run", "builtin", "finished")
    assert AttemptMeta.model_validate(shown) == Store(runs).load_meta(OLDER_SWEEP, RENAMER, 1)
    text = run_fleet("show", OLDER_SWEEP, "local", "07", "--runs", str(runs), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "  agent_kind: builtin" in text.stdout and "answer.txt:" in text.stdout
    assert "905d6878d1c2       2386  workspace/Playground/photo-renamer/rename_photos.py" in text.stdout


def test_fleet_show_prints_the_grade_its_reasons_the_stop_and_the_failed_check(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    proc = run_fleet("show", SWEEP, "local", "27", "--runs", str(runs), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "grade: NOTHING (outcome failed; grader 3, graded 2026-12-01T21:34:42.324Z)" in lines
    at = lines.index("reasons:")
    assert lines[at + 1:at + 3] == ["  - stopped: 4 consecutive failures",
                                    "  - nothing usable was written to the workspace"]
    assert "stop: 4 consecutive failures (consecutive_failures) at call 4" in lines
    # Which test failed and why, on one line (the test's message had a newline), with how many others did.
    assert ("  test_logstats failed: test_logstats::test_busiest_ips_with_their_counts: failed on setup with "
            '"AssertionError: no logstats.py in the workspace (the prompt names the script) assert []" (and 3 more)') in lines
    renamer = run_fleet("show", SWEEP, "local", "07", "--runs", str(runs), cwd=tmp_path).stdout.splitlines()
    assert "  test_photo_renamer passed" in renamer and not [line for line in renamer if line.startswith("stop:")]


def test_fleet_show_of_an_attempt_not_graded_says_so(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    (runs / SWEEP / RENAMER / "attempt-1" / "grade.json").unlink()
    proc = run_fleet("show", SWEEP, "local", "07", "--runs", str(runs), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "grade: not graded yet (no grade.json)" in proc.stdout.splitlines()


def test_fleet_show_on_a_corrupt_grade_json_is_one_line(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    path = runs / SWEEP / RENAMER / "attempt-1" / "grade.json"
    path.write_text(path.read_text().replace('"grade": "DELIVERED"', '"grade": "GREAT"'))
    _assert_one_line(run_fleet("show", SWEEP, "local", "07", "--runs", str(runs), cwd=tmp_path), "grade.json: grade:")


def test_fleet_show_on_a_corrupt_meta_json_is_one_line(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    path = runs / SWEEP / RENAMER / "attempt-1" / "meta.json"
    path.write_text(path.read_text().replace('"exit_code": 0', '"exit_code": "zero"'))
    _assert_one_line(run_fleet("show", SWEEP, "local", "07", "--runs", str(runs), cwd=tmp_path),
                     "meta.json: exit_code: Input should be a valid integer")
    path.write_text("{")
    _assert_one_line(run_fleet("show", SWEEP, "local", "07", "--runs", str(runs), cwd=tmp_path),
                     "meta.json: not valid JSON")


def test_fleet_report_on_a_corrupt_grade_json_is_one_line(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    path = runs / SWEEP / "local/27-log-stats/builtin/r1/attempt-1/grade.json"
    grade = json.loads(path.read_text())
    grade["checks"][0]["status"] = "maybe"
    path.write_text(json.dumps(grade))
    line = _assert_one_line(run_fleet("report", SWEEP, "--runs", str(runs), cwd=tmp_path),
                            f"{path}: checks[0].status: Input should be 'passed', 'failed', 'untested' or 'error'")
    assert not (runs / SWEEP / "REPORT.md").exists(), line


def test_fleet_grade_on_a_corrupt_checks_json_is_one_line(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    path = runs / SWEEP / RENAMER / "attempt-1" / "checks.json"
    checks = json.loads(path.read_text())
    del checks[0]["kind"]
    path.write_text(json.dumps(checks))
    _assert_one_line(run_fleet("grade", SWEEP, "--item", "07", "--runs", str(runs), cwd=tmp_path),
                     f"{path}: [0].kind: Field required")


def test_a_new_import_replaces_a_folder_an_older_version_imported(tmp_path: Path) -> None:
    from harness.importers import import_to_folder

    src = GOLDEN / "v1" / "imported" / "fe9ee859-c533-483c-b978-5c4a672dc126"
    shutil.copytree(src, tmp_path / "out" / src.name)
    fixture = TESTS / "fixtures" / "pixel-fleet" / "photo-renamer-tower2-d4a61f33.json"
    (folder,) = import_to_folder("pixel-fleet", fixture, tmp_path / "out")
    assert folder == tmp_path / "out" / src.name
    assert json.loads((folder / "meta.json").read_text())["schema_version"] == 2
