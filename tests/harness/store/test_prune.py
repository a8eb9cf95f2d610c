"""`fleet prune`: old sweeps removed with their index rows, never a running one, nothing but sweeps touched,
safe when killed midway and beside a second prune."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.store.prune import TRASH, parse_age, prune
from harness.store import Store
from harness.core.errors import UsageError
from tests.dashboard.stores import sweep_of, write_sweep
from tests.support import assert_one_line_error, fleet_argv, run_fleet


def _store(tmp_path: Path, n: int = 4, label: str = "nightly") -> Store:
    store = Store(tmp_path / "runs")
    for day in range(1, n + 1):
        s = sweep_of(f"202611{day:02d}-020000-{label}", label=label, created_at=f"2026-11-{day:02d}T02:00:00.000Z",
                     hosts=1, items=2)
        write_sweep(store, s, {c.id: ["DELIVERED"] for c in s.cells})
    return store


def _index_ids(store: Store) -> dict[str, set[str]]:
    db = sqlite3.connect(store.root / "index.sqlite")
    try:
        out = {"sweeps": {r[0] for r in db.execute("SELECT id FROM sweeps")}}
        for table in ("attempts", "grades", "artifacts", "sweep_plans", "cells"):
            out[table] = {r[0] for r in db.execute(f"SELECT sweep_id FROM {table}")}
        return out
    finally:
        db.close()


def test_keep_removes_the_oldest_with_their_index_rows_and_says_what_it_freed(tmp_path):
    store = _store(tmp_path)
    r = run_fleet("prune", "--keep", "2", "--runs", str(store.root), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("removed 20261101-020000-nightly (label nightly, created 2026-11-01 02:00, ")
    assert lines[1].startswith("removed 20261102-020000-nightly ")
    assert lines[-1].startswith("pruned 2 sweep(s), ") and lines[-1].endswith(" freed"), r.stdout
    assert store.list_sweeps() == ["20261103-020000-nightly", "20261104-020000-nightly"]
    for table, ids in _index_ids(store).items():
        assert ids == {"20261103-020000-nightly", "20261104-020000-nightly"}, table
    assert not any((store.root / TRASH).iterdir())
    # `fleet sweeps` reads what is left.
    listed = run_fleet("sweeps", "--runs", str(store.root), cwd=tmp_path)
    assert "20261101" not in listed.stdout and "20261104-020000-nightly" in listed.stdout


def test_dry_run_lists_and_removes_nothing(tmp_path):
    store = _store(tmp_path)
    before = _index_ids(store)
    r = run_fleet("prune", "--keep", "1", "--dry-run", "--runs", str(store.root), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [line.split()[0:2] for line in r.stdout.splitlines()[:3]] == [["would", "remove"]] * 3
    assert r.stdout.splitlines()[-1].startswith("would prune 3 sweep(s), ")
    assert len(store.list_sweeps()) == 4 and _index_ids(store) == before


def test_older_than_and_label(tmp_path):
    store = _store(tmp_path, 3, "nightly")
    other = sweep_of("20261101-030000-adhoc", label="adhoc", created_at="2026-11-01T03:00:00.000Z")
    write_sweep(store, other, {})
    from datetime import datetime, timezone

    now = datetime(2026, 11, 3, 12, 0, tzinfo=timezone.utc)
    done = prune(store, older_than=parse_age("2d"), label="nightly", now=now)
    assert [p.id for p in done.removed] == ["20261101-020000-nightly"]
    assert "20261101-030000-adhoc" in store.list_sweeps()
    done = prune(store, older_than=parse_age("33h"), now=now)
    assert sorted(p.id for p in done.removed) == ["20261101-030000-adhoc", "20261102-020000-nightly"]
    # Both limits: a sweep must be beyond the newest N and older than AGE.
    assert prune(store, keep=0, older_than=parse_age("1w"), now=now).removed == []


@pytest.mark.parametrize("args, needle", [
    ([], "needs --keep N or --older-than"),
    (["--older-than", "30"], "not an age"),
    (["--older-than", "0d"], "not an age"),
    (["--older-than", "1y"], "not an age"),
    (["--older-than", "-1d"], "not an age"),
    (["--older-than", "abc"], "not an age"),
    (["--older-than", "\u0663d"], "not an age"),  # an Arabic-Indic 3: \\d took it
    (["--older-than", "9999999d"], "too long"),  # now minus it is no date: was an OverflowError traceback
    (["--older-than", "99999999999999999999d"], "too long"),  # too large for a timedelta: was a traceback
    (["--older-than", "99999999999w"], "too long"),
    (["--keep", "-1"], "--keep -1"),
    (["--keep", "x"], "--keep"),
])
def test_bad_values_get_one_line(tmp_path, args, needle):
    assert_one_line_error(run_fleet("prune", *args, "--runs", str(tmp_path / "runs"), cwd=tmp_path), needle)


def test_a_running_sweep_is_never_pruned_by_status_or_by_its_lock(tmp_path):
    store = _store(tmp_path, 3)
    running = sweep_of("20261020-020000-nightly", label="nightly", created_at="2026-10-20T02:00:00.000Z")
    write_sweep(store, running, {}, finish=False)  # status running, no writer any more
    locked = "20261101-020000-nightly"
    fd = os.open(store.sweep_dir(locked) / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a coordinator writing it
    try:
        r = run_fleet("prune", "--keep", "0", "--runs", str(store.root), cwd=tmp_path)
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    assert f"kept {locked}: it is running" in r.stdout and "kept 20261020-020000-nightly: it is running" in r.stdout
    assert sorted(store.list_sweeps()) == ["20261020-020000-nightly", locked]
    assert _index_ids(store)["sweeps"] == {"20261020-020000-nightly", locked}


def test_only_sweeps_are_touched_links_and_strangers_left_alone(tmp_path):
    store = _store(tmp_path, 2)
    outside = tmp_path / "elsewhere"
    write_sweep(Store(outside), sweep_of("20261001-000000-x", created_at="2026-10-01T00:00:00.000Z"), {})
    (store.root / "20261001-000000-x").symlink_to(outside / "20261001-000000-x")
    stranger = store.root / "photos"
    stranger.mkdir()
    (stranger / "keep.jpg").write_bytes(b"x")
    broken = store.root / "20261002-000000-broken"
    broken.mkdir()
    (broken / "sweep.json").write_text("{not json")
    (store.root / "notes.txt").write_text("mine")
    r = run_fleet("prune", "--keep", "0", "--runs", str(store.root), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "20261001-000000-x: a symbolic link, not a sweep folder: left alone" in r.stderr
    assert "photos: no sweep.json, not a sweep: left alone" in r.stderr
    assert "20261002-000000-broken: cannot be read, left alone" in r.stderr
    assert r.stdout.splitlines()[-1].startswith("pruned 2 sweep(s)")
    assert (outside / "20261001-000000-x" / "sweep.json").is_file() and (store.root / "20261001-000000-x").is_symlink()
    assert (stranger / "keep.jpg").read_bytes() == b"x" and (broken / "sweep.json").is_file()
    assert (store.root / "notes.txt").read_text() == "mine" and (store.root / "index.sqlite").is_file()


def test_a_prune_killed_after_the_rename_is_finished_by_the_next(tmp_path):
    # The state a prune leaves when killed between the rename into the trash and the index update.
    store = _store(tmp_path, 2)
    gone = "20261101-020000-nightly"
    (store.root / TRASH).mkdir()
    os.rename(store.sweep_dir(gone), store.root / TRASH / f"{gone}~deadbeef")
    assert gone in _index_ids(store)["cells"]
    r = run_fleet("prune", "--keep", "5", "--runs", str(store.root), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "finished an interrupted prune" in r.stdout
    assert all(gone not in ids for ids in _index_ids(store).values())
    assert not any((store.root / TRASH).iterdir())


def test_a_prune_killed_by_sigkill_midway_leaves_a_consistent_store(tmp_path):
    store = _store(tmp_path, 2)
    big = store.sweep_dir("20261101-020000-nightly") / "host0" / "bulk"
    big.mkdir(parents=True)
    for i in range(40000):
        (big / f"f{i}").write_bytes(b"x")
    proc = subprocess.Popen([*fleet_argv(), "prune", "--keep", "1", "--runs", str(store.root)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    trash = store.root / TRASH
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (trash.is_dir() and any(trash.iterdir())):
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert trash.is_dir() and any(trash.iterdir()), "the prune ended before it could be killed midway"
    # Whatever it had done: the sweep is gone from the listing (renamed away whole), and the next prune finishes.
    assert store.list_sweeps() == ["20261102-020000-nightly"]
    r = run_fleet("prune", "--keep", "1", "--runs", str(store.root), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not any(trash.iterdir())
    assert all(ids == {"20261102-020000-nightly"} for ids in _index_ids(store).values())


def test_two_prunes_at_once_remove_each_sweep_once(tmp_path):
    store = _store(tmp_path, 6)
    results: list = []

    def one() -> None:
        results.append(prune(Store(store.root), keep=2))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    removed = sorted(p.id for r in results for p in r.removed)
    assert removed == [f"202611{d:02d}-020000-nightly" for d in range(1, 5)]
    assert store.list_sweeps() == ["20261105-020000-nightly", "20261106-020000-nightly"]


def test_parse_age():
    assert parse_age("30d").total_seconds() == 30 * 86400 and parse_age("12h").total_seconds() == 43200
    with pytest.raises(UsageError):
        parse_age("-3d")


def test_a_sweep_whose_lock_is_a_link_is_left_alone_and_its_target_untouched(tmp_path):
    store = _store(tmp_path, 2)
    target = tmp_path / "elsewhere.txt"
    target.write_text("not yours")
    lock = store.sweep_dir("20261101-020000-nightly") / ".lock"
    lock.unlink()
    lock.symlink_to(target)
    r = run_fleet("prune", "--keep", "0", "--runs", str(store.root), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "20261101-020000-nightly: cannot take its lock" in r.stderr and "left alone" in r.stderr
    assert store.list_sweeps() == ["20261101-020000-nightly"] and target.read_text() == "not yours"
    assert r.stdout.splitlines()[-1].startswith("pruned 1 sweep(s)")


def test_a_writer_that_waited_for_a_pruned_sweep_writes_nothing(tmp_path):
    # The prune holds the sweep's lock while it renames it away; a writer waiting for that lock then finds its
    # lock file moved with the folder, and must not recreate the sweep as a half folder of the same name.
    store = _store(tmp_path, 1)
    sweep_id = "20261101-020000-nightly"
    folder = store.sweep_dir(sweep_id)
    fd = os.open(folder / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    errors: list[str] = []

    def write() -> None:
        try:
            with store.writer(sweep_id):
                pass
        except UsageError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=write)
    t.start()
    time.sleep(0.3)
    (store.root / TRASH).mkdir()
    os.rename(folder, store.root / TRASH / f"{sweep_id}~x")
    os.close(fd)
    t.join()
    assert errors == [f"sweep {sweep_id} was removed (fleet prune) while this waited to write it"]
    assert not folder.exists() or not (folder / "sweep.json").exists()


def test_an_age_beyond_the_calendar_removes_nothing_and_raises_nothing(tmp_path):
    """prune() called with a timedelta longer than the calendar goes back: no sweep is that old."""
    from datetime import timedelta

    store = _store(tmp_path, 2)
    done = prune(store, older_than=timedelta(days=999_999_999))
    assert done.removed == [] and len(store.list_sweeps()) == 2


def test_a_sweep_whose_lock_is_a_fifo_does_not_hang_the_prune(tmp_path):
    """Opening a FIFO for reading waits for a writer: a crafted `.lock` FIFO hung prune forever, holding the prune
    lock. It is left alone, said, and the other sweeps are pruned."""
    store = _store(tmp_path, 3)
    lock = store.sweep_dir("20261101-020000-nightly") / ".lock"
    lock.unlink()
    os.mkfifo(lock)
    r = subprocess.run(fleet_argv() + ["prune", "--keep", "1", "--runs", str(store.root)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "20261101-020000-nightly: its lock" in r.stderr and "not a regular file" in r.stderr, r.stderr
    assert store.list_sweeps() == ["20261101-020000-nightly", "20261103-020000-nightly"]


def test_a_trash_that_is_a_link_is_replaced_and_its_target_untouched(tmp_path):
    store = _store(tmp_path, 2)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (store.root / TRASH).symlink_to(outside)
    done = prune(store, keep=0)
    assert len(done.removed) == 2 and store.list_sweeps() == []
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]  # no sweep was moved out of RUNS
    assert (store.root / TRASH).is_dir() and not (store.root / TRASH).is_symlink()


def test_index_rows_of_a_sweep_whose_folder_is_gone_are_deleted_and_said(tmp_path):
    """A sweep folder removed by hand left its rows in the index for ever (the dashboard reads them)."""
    import shutil

    store = _store(tmp_path, 3)
    shutil.rmtree(store.sweep_dir("20261101-020000-nightly"))
    dry = run_fleet("prune", "--keep", "5", "--dry-run", "--runs", str(store.root), cwd=tmp_path)
    assert dry.returncode == 0 and "20261101-020000-nightly: its folder is gone; its index rows would be deleted" \
        in dry.stderr, dry.stderr
    assert "20261101-020000-nightly" in _index_ids(store)["sweeps"]
    r = run_fleet("prune", "--keep", "5", "--runs", str(store.root), cwd=tmp_path)
    assert r.returncode == 0 and "its index rows were deleted" in r.stderr, r.stderr
    for table, ids in _index_ids(store).items():
        assert ids == {"20261102-020000-nightly", "20261103-020000-nightly"}, table
    # Of another label: left, with --label.
    shutil.rmtree(store.sweep_dir("20261102-020000-nightly"))
    assert prune(store, keep=5, label="adhoc").skipped == []
    assert "20261102-020000-nightly" in _index_ids(store)["sweeps"]


def test_an_unreadable_index_stops_prune_before_anything_is_moved(tmp_path):
    """Moving a sweep into the trash and then failing to delete its rows left it invisible, and every later prune
    stopped at the same error with the sweep in the trash: the index is checked first."""
    store = _store(tmp_path, 3)
    (store.root / "index.sqlite").write_bytes(b"not a database" * 100)
    r = run_fleet("prune", "--keep", "1", "--runs", str(store.root), cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("fleet: error: ") and "index.sqlite" in lines[0] and "nothing removed" in lines[0]
    assert len(store.list_sweeps()) == 3
    assert not (store.root / TRASH).exists() or not any((store.root / TRASH).iterdir())
