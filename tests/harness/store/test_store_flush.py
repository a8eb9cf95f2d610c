"""Recording an attempt: its files reach the disk in one flush, before any of them has its name, and a write that
fails leaves nothing of the delivery behind."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

import harness.core.files as store_module
from harness.core.errors import StoreError
from harness.core.records import Artifact, AttemptSummary
from harness.store import Store
from tests.support import finished_result, replace_failing_at, synthetic_sweep


def _recording(tmp_path: Path, artifacts: int):  # type: ignore[no-untyped-def]
    store = Store(tmp_path / "runs")
    sweep = synthetic_sweep()
    cell = sweep.cells[0]
    result = finished_result(sweep, cell, artifacts=[Artifact.of(f"workspace/f{i}.txt", b"x%d" % i)
                                                     for i in range(artifacts)])
    return store, sweep, cell, result


def _dispatched(w, sweep, cell) -> None:  # type: ignore[no-untyped-def]
    """The sweep saved and its cell's attempt 1 dispatched: what comes before its result is recorded."""
    w.save_sweep(sweep)
    w.dispatched(sweep, cell.id, AttemptSummary(attempt=1, task_id="t", status="dispatched"))


def _counting_disk(monkeypatch: pytest.MonkeyPatch, events: list[str], writer: object = None,
                   names: Callable[[Path], str] | None = None) -> None:
    """Every fsync, file system flush and index commit (of ``writer``'s index connection) of the store, in ``events``,
    in order; and each rename, as ``names`` says it, when given."""
    real_fsync, real_flush, real_replace = os.fsync, store_module.flush_file_system, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def flush(fd: int, folder: Path) -> None:
        events.append("flush")
        real_flush(fd, folder)

    class Counted:
        """The index connection, its commits counted (sqlite3.Connection's own methods cannot be replaced)."""

        def __init__(self, db: object) -> None:
            self._db = db

        def __enter__(self) -> object:
            return self._db.__enter__()  # type: ignore[attr-defined]

        def __exit__(self, *exc: object) -> object:
            events.append("commit")
            return self._db.__exit__(*exc)  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self._db, name)

    def replace(src: str, dst: Path) -> None:
        assert names is not None
        events.append(names(Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(store_module, "flush_file_system", flush)
    if names is not None:
        monkeypatch.setattr(os, "replace", replace)
    if writer is not None:
        monkeypatch.setattr(writer, "_db", Counted(writer._db))  # type: ignore[attr-defined]


def test_an_attempts_files_reach_the_disk_in_one_flush_before_any_has_its_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if store_module._syncfs() is None:
        pytest.skip("no syncfs here: each file is fsynced as it is written")
    store, sweep, cell, result = _recording(tmp_path, artifacts=12)
    events: list[str] = []
    with store.writer(sweep.id) as w:
        _dispatched(w, sweep, cell)
        _counting_disk(monkeypatch, events, names=lambda dst: f"name {dst.name}")
        assert w.record_attempt(sweep, result)
        monkeypatch.undo()
    names = [e for e in events if e.startswith("name ")]
    assert len(names) == 13 and names[-1] == "name meta.json", events  # the 12 files, then meta.json
    # One flush for the delivery, before the first name; the one fsync after them is the journal line's.
    first_name = events.index(names[0])
    assert events[:first_name] == ["flush"], events
    assert events[first_name:].count("fsync") <= 1 and "flush" not in events[first_name:], events
    folder = store.attempt_dir(sweep.id, cell.id, 1)
    assert (folder / "workspace" / "f11.txt").read_bytes() == b"x11" and (folder / "meta.json").is_file()
    assert not list(folder.rglob(".fleet-*.tmp"))


def test_a_delivery_whose_write_fails_half_way_leaves_no_file_and_stays_dispatched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, sweep, cell, result = _recording(tmp_path, artifacts=6)
    replace, _ = replace_failing_at(4)

    with store.writer(sweep.id) as w:
        _dispatched(w, sweep, cell)
        monkeypatch.setattr(os, "replace", replace)
        with pytest.raises(StoreError, match="cannot write .*f3.txt: No space left on device"):
            w.record_attempt(sweep, result)
        monkeypatch.undo()
        assert [a.status for a in sweep.attempts[cell.id]] == ["dispatched"]
    folder = store.attempt_dir(sweep.id, cell.id, 1)
    assert not [p for p in folder.rglob("*") if p.is_file()], "a file of the refused delivery was left behind"
    assert [a.status for a in store.load_sweep(sweep.id).attempts[cell.id]] == ["dispatched"]


def test_a_dispatch_written_without_a_flush_is_on_file_at_once_and_on_disk_with_the_next_flush(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "runs")
    sweep = synthetic_sweep()
    one, two = sweep.cells[0], sweep.cells[1]
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        monkeypatch.setattr(os, "fsync", fsync)
        w.dispatched(sweep, one.id, AttemptSummary(attempt=1, task_id="t1", status="dispatched"), durable=False)
        assert synced == []  # the host's next agent does not wait on a disk flush
        # On file at once: a coordinator killed now leaves it for `fleet resume` (a reader sees it).
        assert [a.status for a in Store(tmp_path / "runs").load_sweep(sweep.id).attempts[one.id]] == ["dispatched"]
        w.sync_journal()
        assert len(synced) == 1
        w.sync_journal()  # nothing left to flush: no second fsync
        assert len(synced) == 1
        w.dispatched(sweep, two.id, AttemptSummary(attempt=1, task_id="t2", status="dispatched"), durable=False)
        assert w.record_attempt(sweep, finished_result(sweep, one))  # its journal line's fsync flushes both
        flushed = len(synced)
        w.sync_journal()
        assert len(synced) == flushed
        monkeypatch.undo()
    back = Store(tmp_path / "runs").load_sweep(sweep.id)
    assert [a.status for a in back.attempts[one.id]] == ["finished"]
    assert [a.status for a in back.attempts[two.id]] == ["dispatched"]


def test_the_dispatcher_flushes_what_it_dispatched_before_it_waits() -> None:
    from types import SimpleNamespace

    from harness.core.catalog import Item
    from harness.coordinator.dispatch import Dispatcher, Planned
    from harness.core.inventory import load_inventory
    from harness.core.records import Cell
    from tests.support import REPO

    item = Item(id="07-photo-renamer", number="07", kind="open", title="t", prompt="p", timeout_s=60)
    host = load_inventory(str(REPO / "inventory" / "fleet.toml")).hosts["tower1"]
    cell = Cell(id=Cell.make_id(host.name, item.id, host.default_agent, 1), host=host.name, item=item.id,
                agent=host.default_agent, rep=1, seed=1)
    events: list[str] = []
    pending = SimpleNamespace(state="PENDING", id="t")

    class Writer:
        def set_status(self, sweep: object, status: str) -> None:
            events.append(f"status {status}")

        def dispatched(self, sweep: object, cell_id: str, summary: AttemptSummary, durable: bool = True) -> None:
            events.append(f"dispatched durable={durable}")

        def sync_journal(self) -> None:
            events.append("sync")

    class Wakeup:
        def wait(self, timeout: float, task_ids: object = ()) -> None:
            events.append("wait")
            d._in_flight.clear()  # the attempt is settled elsewhere: the loop ends
            d._per_host.clear()

        def stored(self, task_id: str) -> None:
            return None

    app = SimpleNamespace(send_task=lambda *a, **k: (events.append("send"), pending)[1])
    sweep = SimpleNamespace(id="s1", uid="", items={item.id: item})
    d = Dispatcher(app=app, writer=Writer(), sweep=sweep, inventory=SimpleNamespace(hosts={host.name: host}),  # type: ignore[arg-type]
                   wakeup=Wakeup())
    d.run([Planned(cell=cell, attempt=1, last_attempt=1)])
    assert events == ["status running", "dispatched durable=False", "send", "sync", "sync", "wait", "status finished"], \
        events


def test_the_file_system_is_held_open_from_before_the_first_write_to_its_flush(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system's flush reports the write errors since it was opened: opened only for the flush, it would miss
    one the kernel met writing a file of the batch early, which an fsync of that file would have reported."""
    if store_module._syncfs() is None:
        pytest.skip("no syncfs here")
    events: list[tuple[str, object]] = []
    real_open, real_mkstemp, real_flush = os.open, store_module.tempfile.mkstemp, store_module.flush_file_system

    def opened(path, flags, *args):  # type: ignore[no-untyped-def]
        fd = real_open(path, flags, *args)
        if flags & getattr(os, "O_DIRECTORY", 0):
            events.append(("open folder", fd))
        return fd

    def mkstemp(*args, **kwargs):  # type: ignore[no-untyped-def]
        events.append(("write", kwargs.get("dir")))
        return real_mkstemp(*args, **kwargs)

    def flush(fd: int, folder: Path) -> None:
        events.append(("flush", fd))
        real_flush(fd, folder)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(store_module.tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(store_module, "flush_file_system", flush)
    store_module.atomic_write_all([(tmp_path / "a" / "one", b"1"), (tmp_path / "b" / "two", b"2")])
    monkeypatch.undo()
    kinds = [kind for kind, _ in events]
    assert kinds.index("open folder") < kinds.index("write") and kinds.count("flush") == 1, events
    assert ("flush", events[kinds.index("open folder")][1]) in events  # the folder opened first is the one flushed
    assert (tmp_path / "a" / "one").read_bytes() == b"1" and (tmp_path / "b" / "two").read_bytes() == b"2"


def test_without_syncfs_each_file_is_fsynced_as_it_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(store_module, "_syncfs", lambda: None)
    monkeypatch.setattr(store_module, "flush_file_system", lambda fd, folder: pytest.fail("no syncfs to call"))
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    store_module.atomic_write_all([(tmp_path / f"f{i}", b"x") for i in range(5)])
    monkeypatch.undo()
    assert len(synced) == 5 and all((tmp_path / f"f{i}").read_bytes() == b"x" for i in range(5))


def test_an_attempt_recorded_with_its_grade_takes_one_index_commit_and_one_journal_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.coordinator.dispatch import _grader

    if store_module._syncfs() is None:
        pytest.skip("no syncfs here: each file is fsynced as it is written")
    store, sweep, cell, result = _recording(tmp_path, artifacts=3)
    events: list[str] = []
    with store.writer(sweep.id) as w:
        _dispatched(w, sweep, cell)
        journal = store.sweep_dir(sweep.id) / "journal.jsonl"
        before = journal.read_text().count("\n")
        _counting_disk(monkeypatch, events, w)
        graded = w.record_graded(sweep, result, _grader(sweep, cell))
        monkeypatch.undo()
        assert graded is not None and graded.grade is not None and graded.error is None
        lines = journal.read_text().splitlines()[before:]
    # The attempt's files (one flush), its grade's two files (one flush), one index transaction, one journal line.
    assert events == ["flush", "flush", "commit", "fsync"], events
    assert len(lines) == 1 and f'"grade":"{graded.grade.grade}"' in lines[0], lines
    folder = store.attempt_dir(sweep.id, cell.id, 1)
    assert (folder / "grade.json").is_file() and (folder / "grades.jsonl").read_text().count("\n") == 1
    summary = sweep.attempts[cell.id][0]
    assert (summary.status, summary.grade) == ("finished", graded.grade.grade)
    with store.index() as db:
        assert db.execute("SELECT grade FROM grades WHERE cell_id=?", (cell.id,)).fetchall() == [(graded.grade.grade,)]
        assert db.execute("SELECT status, grade FROM cells WHERE cell_id=?", (cell.id,)).fetchall() == [
            ("finished", graded.grade.grade)]
    # Read back as a reader sees it: the journal replayed over the snapshot.
    again = store.load_sweep(sweep.id)
    assert again.attempts[cell.id][0].grade == graded.grade.grade


def test_a_grade_that_cannot_be_made_leaves_the_attempt_recorded_ungraded(tmp_path: Path) -> None:
    store, sweep, cell, result = _recording(tmp_path, artifacts=1)

    def grader(folder: Path):  # type: ignore[no-untyped-def]
        raise StoreError(f"{folder / 'checks.json'}: not valid JSON")

    with store.writer(sweep.id) as w:
        _dispatched(w, sweep, cell)
        graded = w.record_graded(sweep, result, grader)
    assert graded is not None and graded.grade is None and "checks.json" in str(graded.error)
    summary = store.load_sweep(sweep.id).attempts[cell.id][0]
    assert (summary.status, summary.grade) == ("finished", "")
    folder = store.attempt_dir(sweep.id, cell.id, 1)
    assert (folder / "meta.json").is_file() and not (folder / "grade.json").exists()


def test_a_grade_reaches_the_disk_in_one_flush_before_grade_json_has_its_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.grading import Grade
    from harness.grading.gradefiles import write_grade_files

    if store_module._syncfs() is None:
        pytest.skip("no syncfs here: each file is fsynced as it is written")
    folder = tmp_path / "attempt-1"
    folder.mkdir()
    events: list[str] = []
    _counting_disk(monkeypatch, events, names=lambda dst: (
        f"name {dst.name} ({(folder / 'grades.jsonl').read_text().count(chr(10))} lines)"))
    write_grade_files(folder, Grade(grade="DELIVERED", outcome="none"))
    monkeypatch.undo()
    assert events == ["flush", "name grade.json (1 lines)"], events
    assert not [p for p in folder.iterdir() if p.name.startswith(".fleet-")]  # no temporary file left


def test_an_attempt_whose_index_write_fails_keeps_no_line_of_its_grade(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grade's files are written before the index rows: when those fail, the attempt is not recorded, and its grade
    is taken back (the history would show a grade of a delivery that was never recorded; record_result then records
    the delivery's failure, with a grade of its own)."""
    from harness.coordinator.dispatch import _grader

    store, sweep, cell, result = _recording(tmp_path, artifacts=1)
    with store.writer(sweep.id) as w:
        _dispatched(w, sweep, cell)

        def locked(*statements: object) -> None:
            raise StoreError(f"{store.root / 'index.sqlite'}: database is locked")

        monkeypatch.setattr(w, "_execute", locked)
        with pytest.raises(StoreError, match="database is locked"):
            w.record_graded(sweep, result, _grader(sweep, cell))
        monkeypatch.undo()
    folder = store.attempt_dir(sweep.id, cell.id, 1)
    assert not (folder / "grade.json").exists() and not (folder / "grades.jsonl").exists()
    assert sweep.attempts[cell.id][0].status == "dispatched"


def test_a_grade_whose_flush_fails_leaves_no_line_and_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.grading import Grade
    from harness.grading.gradefiles import write_grade_files

    if store_module._syncfs() is None:
        pytest.skip("no syncfs here: each file is fsynced as it is written")
    folder = tmp_path / "attempt-1"
    folder.mkdir()
    write_grade_files(folder, Grade(grade="NOTHING", outcome="none"))
    before = (folder / "grades.jsonl").read_bytes()

    def full(fd: int, where: Path) -> None:
        raise StoreError(f"cannot flush {where} to disk: No space left on device")

    monkeypatch.setattr(store_module, "flush_file_system", full)
    with pytest.raises(StoreError, match="No space left"):
        write_grade_files(folder, Grade(grade="DELIVERED", outcome="none"))
    monkeypatch.undo()
    # The history holds the grades that took, and only those; grade.json is the last of them; nothing else is left.
    assert (folder / "grades.jsonl").read_bytes() == before
    assert '"NOTHING"' in (folder / "grade.json").read_text()
    assert sorted(p.name for p in folder.iterdir()) == ["grade.json", "grades.jsonl"]
