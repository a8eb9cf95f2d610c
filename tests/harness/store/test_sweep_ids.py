"""Which sweep ids the store reads: the rule it always had, whatever `fleet sweep` makes today."""

from __future__ import annotations

from pathlib import Path

from harness.store import Store
from tests.support import assert_one_line_error, run_fleet, synthetic_sweep


def test_a_sweep_whose_folder_holds_a_backslash_is_read_as_it_always_was(tmp_path: Path) -> None:
    # `fleet sweep` makes no such id (a label is letters, digits, '.', '_' and '-'), but a folder renamed by hand was
    # always read; the store refuses only a '/', a hidden name and a NUL in a sweep's id.
    runs = tmp_path / "runs"
    sweep = synthetic_sweep("20261207-000000-a\\b", hosts=1, items=1)
    sweep.status = "finished"
    with Store(runs).writer(sweep.id) as w:
        w.save_sweep(sweep)
    proc = run_fleet("status", sweep.id, "--runs", str(runs), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "20261207-000000-a\\b" in proc.stdout


def test_a_sweep_id_that_names_a_path_is_refused(tmp_path: Path) -> None:
    for bad in ("../x", ".hidden", "a/b"):
        proc = run_fleet("status", bad, "--runs", str(tmp_path / "runs"), cwd=tmp_path)
        assert_one_line_error(proc, "bad sweep id")
