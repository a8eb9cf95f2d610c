"""`fleet grade SWEEP` at scale (harness/coordinator/regrade.py): the grades are recorded in batches, not one disk flush, index
commit and journal append per attempt; in worker processes they come out as one process gives them, attempt by
attempt as the coordinator grades; a corrupt record stops the regrade after the grades before it are recorded."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

import harness.core.files as store_module
from harness.coordinator.dispatch import grade_attempt
from harness.core.errors import StoreError, UnsafeStoredPath
from harness.core.records import Artifact
from harness.core.sweep import SweepRecord
from harness.coordinator.regrade import regrade
from harness.grading.gradefiles import write_grade_files_batch
from harness.store import Store, SweepWriter
from tests.support import finished_result, replace_failing_at, synthetic_sweep

SWEEP = "20261201-000000-regrade"
GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "v2" / "runs" / "20261201-214544-new" / "local"
TRANSCRIPTS = [(GOLDEN / item / "builtin" / "r1" / "attempt-1" / "transcript.jsonl").read_bytes()
               for item in ("07-photo-renamer", "27-log-stats")]
"""Real transcripts: a run that ended well, and one a guard stopped (its grade names the stop)."""


def _build(root: Path, hosts: int = 3, items: int = 4, reps: int = 3) -> tuple[Store, SweepRecord]:
    """A finished sweep of hosts x items x reps cells, each recorded and graded one at a time (as the coordinator
    does): answers with code and without, written files or none, so the grades differ from cell to cell."""
    store = Store(root)
    sweep = synthetic_sweep(SWEEP, hosts=hosts, items=items, reps=reps)
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        for n, c in enumerate(sweep.cells):
            answer = f"```python\nprint({n})\nprint(2)\nprint(3)\n```\n" if n % 3 == 0 else ("" if n % 3 == 1 else "done")
            files = [Artifact.of("workspace/a.py", b"x = 1\n"), Artifact.of("workspace.manifest.json", json.dumps(
                [{"path": "a.py", "size": 6, "sha256": "0" * 64, "packed": True, "why": ""}]).encode())] if n % 2 else [
                Artifact.of("workspace.manifest.json", b"[]")]  # a workspace captured empty
            w.record_attempt(sweep, finished_result(sweep, c, artifacts=[
                Artifact.of("answer.txt", answer.encode()), Artifact.of("transcript.jsonl", TRANSCRIPTS[n % 2]), *files]))
            grade_attempt(w, sweep, c, 1)
        w.set_status(sweep, "finished")
    return store, store.load_sweep(sweep.id)


def _grades(store: Store, sweep_id: str) -> dict[str, list[dict]]:
    """Each attempt's grades.jsonl, without the time each was given."""
    sweep = store.load_sweep(sweep_id)
    out = {}
    for c in sweep.cells:
        lines = (store.attempt_dir(sweep_id, c.id, 1) / "grades.jsonl").read_text().splitlines()
        out[c.id] = [{k: v for k, v in json.loads(line).items() if k != "graded_at"} for line in lines]
    return out


def _state(store: Store, sweep_id: str) -> tuple[list, list]:
    """The sweep's attempt summaries (as loaded: snapshot and journal) and the index's cells rows."""
    sweep = store.load_sweep(sweep_id)
    summaries = [(c.id, [(a.attempt, a.grade, a.failure, a.stop, a.status) for a in sweep.attempts[c.id]])
                 for c in sweep.cells]
    db = sqlite3.connect(store.root / "index.sqlite")
    try:
        rows = db.execute("SELECT cell_id, attempts, attempt, status, grade, auto_grade, stop FROM cells "
                          "WHERE sweep_id = ? ORDER BY cell_id", (sweep_id,)).fetchall()
    finally:
        db.close()
    return summaries, rows


def _all(sweep: SweepRecord) -> list:
    return [(c, a.attempt) for c in sweep.cells for a in sweep.attempts[c.id]]


def test_a_regrade_records_in_batches_not_a_flush_a_commit_and_a_journal_line_per_attempt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, sweep = _build(tmp_path / "runs", hosts=3, items=4, reps=3)  # 36 attempts
    counts = {"fsync": 0, "flush": 0, "index": 0, "journal": 0}
    real_fsync, real_flush = os.fsync, store_module.flush_file_system
    real_execute, real_append = SweepWriter._execute, SweepWriter._append_all

    def fsync(fd: int) -> None:
        counts["fsync"] += 1
        real_fsync(fd)

    def flush(fd: int, folder: Path) -> None:
        counts["flush"] += 1
        real_flush(fd, folder)

    def execute(self: SweepWriter, *statements) -> None:  # type: ignore[no-untyped-def]
        counts["index"] += 1
        real_execute(self, *statements)

    def append(self: SweepWriter, entries: list) -> None:
        counts["journal"] += 1
        real_append(self, entries)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(store_module, "flush_file_system", flush)
    monkeypatch.setattr(SweepWriter, "_execute", execute)
    monkeypatch.setattr(SweepWriter, "_append_all", append)
    assert regrade(store, sweep, _all(sweep), jobs=1, batch=10) == 36
    batches = 4  # 36 attempts in batches of 10
    assert counts["journal"] == batches, counts
    assert counts["index"] == batches + 1, counts  # and the sweep's row, with the snapshot the writer leaves
    assert counts["flush"] == batches, counts  # the grade.json files and the grades.jsonl lines, flushed together
    # The journal's own fsync per batch, and the snapshot the writer leaves when it closes (sweep.json, the
    # emptied journal): one at a time it was three per attempt (grade.json, grades.jsonl, the journal line).
    assert counts["fsync"] <= batches + 3, counts
    assert all(len(g) == 2 for g in _grades(store, SWEEP).values())  # every attempt got its new grade


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_regrade_gives_what_grading_each_attempt_alone_gives(tmp_path: Path, jobs: int) -> None:
    store, sweep = _build(tmp_path / "runs")
    shutil.copytree(tmp_path / "runs", tmp_path / "alone")
    alone = Store(tmp_path / "alone")
    one = alone.load_sweep(SWEEP)
    with alone.writer(SWEEP) as w:
        for c, attempt in _all(one):
            grade_attempt(w, one, c, attempt)
    assert regrade(store, sweep, _all(sweep), jobs=jobs, batch=7) == len(sweep.cells)
    assert _grades(store, SWEEP) == _grades(alone, SWEEP)
    assert _state(store, SWEEP) == _state(alone, SWEEP)
    assert len({g[-1]["grade"] for g in _grades(store, SWEEP).values()}) >= 3  # the cells' grades differ
    assert not list((tmp_path / "runs").rglob(".fleet-*.tmp"))  # no temporary file is left behind


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_corrupt_record_stops_the_regrade_after_the_grades_before_it(tmp_path: Path, jobs: int) -> None:
    store, sweep = _build(tmp_path / "runs")
    attempts = _all(sweep)
    bad = 22  # in the middle of a batch of 10, and of a worker's span
    path = store.attempt_dir(SWEEP, attempts[bad][0].id, 1) / "receipt.json"
    path.write_text('{"status": "maybe"}')
    with pytest.raises(StoreError, match=f"{path}: "):
        regrade(store, sweep, attempts, jobs=jobs, batch=10)
    lines = [len(g) for g in _grades(store, SWEEP).values()]
    assert lines == [2] * bad + [1] * (len(attempts) - bad), lines
    assert len(store.load_sweep(SWEEP).cells) == len(attempts)  # the journal is whole: the sweep loads
    assert not list((tmp_path / "runs").rglob(".fleet-*.tmp"))


def test_attempt_dir_follows_a_link_under_the_sweep_and_refuses_one_that_leads_out(tmp_path: Path) -> None:
    store, sweep = _build(tmp_path / "runs", hosts=2, items=1, reps=1)
    top = store.sweep_dir(SWEEP)
    # A host's folder moved within the sweep's folder and linked back: still inside, still graded.
    (top / "host0").rename(top / "moved-host0")
    os.symlink(top / "moved-host0", top / "host0")
    cell = sweep.cells[0]
    assert store.attempt_dir(SWEEP, cell.id, 1) == top / cell.id / "attempt-1"
    assert regrade(store, sweep, [(cell, 1)], jobs=1) == 1
    # The other host's folder linked to a copy outside: refused, nothing read there.
    shutil.copytree(top / "host1", tmp_path / "outside")
    shutil.rmtree(top / "host1")
    os.symlink(tmp_path / "outside", top / "host1")
    with pytest.raises(UnsafeStoredPath, match="leads outside the sweep's folder"):
        store.attempt_dir(SWEEP, sweep.cells[1].id, 1)


def test_fleet_grade_of_a_large_sweep_grades_in_workers_and_says_a_workers_error_in_one_line(tmp_path: Path) -> None:
    from harness.coordinator.regrade import PARALLEL_FROM
    from tests.support import assert_one_line_error, run_fleet

    runs = tmp_path / "runs"
    store, sweep = _build(runs, hosts=4, items=6, reps=10)
    assert len(sweep.cells) >= PARALLEL_FROM  # the command grades in worker processes
    proc = run_fleet("grade", SWEEP, "--runs", str(runs), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [f"regraded {len(sweep.cells)} attempt(s)"]
    assert all(len(g) == 2 for g in _grades(store, SWEEP).values())
    # A record file that is a link, found by a worker: the same one line (and exit status) as in one process, and
    # the grades of the attempts before it are recorded.
    bad = 150
    link = store.attempt_dir(SWEEP, sweep.cells[bad].id, 1) / "receipt.json"
    os.symlink(tmp_path / "elsewhere.json", link)
    proc = run_fleet("grade", SWEEP, "--runs", str(runs), cwd=tmp_path)
    assert_one_line_error(proc, f"{sweep.cells[bad].id}", "receipt.json is a symbolic link")
    lines = [len(g) for g in _grades_unchecked(store, sweep)]
    assert lines == [3] * bad + [2] * (len(sweep.cells) - bad), lines


def _grades_unchecked(store: Store, sweep: SweepRecord) -> list[list[str]]:
    """Each attempt's grades.jsonl lines, read without ``attempt_dir``'s checks (one of the folders is refused)."""
    top = store.sweep_dir(sweep.id)
    return [(top / c.id / "attempt-1" / "grades.jsonl").read_text().splitlines() for c in sweep.cells]


def test_a_rename_the_disk_refuses_leaves_no_temporary_file_and_says_which_grade_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from harness.core.diskfull import is_disk_full
    from harness.grading import Grade

    folders = []
    for n in range(5):
        (folder := tmp_path / f"a{n}").mkdir()
        (folder / "grade.json").write_text("old")
        folders.append(folder)
    replace, _ = replace_failing_at(3)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(StoreError, match=f"cannot write {folders[2] / 'grade.json'}: No space left") as caught:
        write_grade_files_batch([(f, Grade(grade="DELIVERED", outcome="none")) for f in folders])
    assert is_disk_full(caught.value)  # a full disk is still recognised as one (the sweep's one line)
    assert [(f / "grade.json").read_text() != "old" for f in folders] == [True, True, False, False, False]
    assert not list(tmp_path.rglob(".fleet-*.tmp"))
    # The history holds a line for each grade that took, and only those.
    assert [len((f / "grades.jsonl").read_text().splitlines()) if (f / "grades.jsonl").exists() else 0
            for f in folders] == [1, 1, 0, 0, 0]
