"""A crafted (or damaged) results directory: ids in sweep.json or journal.jsonl with ``../``, an absolute path
or a NUL, a sweep.json naming another sweep, an attempt folder or record file that is a symbolic link out of
the sweep. `fleet show`, `grade`, `status`, `report` and `resume` each refuse in one line naming the file and
the key (exit 2), and nothing outside the results directory is read (a canary's text never shows) or written
(a folder outside stays empty, a file outside keeps its bytes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.store import Store
from tests.support import assert_one_line_error, finished_result, run_fleet, synthetic_sweep

CANARY = "CANARY-7f3a9-outside-the-runs-folder"
COMMANDS = [["show", "{sweep}", "host0", "01"], ["grade", "{sweep}"], ["status", "{sweep}"], ["report", "{sweep}"],
            ["resume", "{sweep}"]]


def _store(tmp_path: Path) -> tuple[Path, str, Path]:
    """A results directory with one sweep, every cell recorded; and beside it (outside) a folder that looks like
    an attempt folder holding the canary, and an empty folder that must stay empty."""
    runs = tmp_path / "runs"
    store = Store(runs)
    sweep = synthetic_sweep()
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        for c in sweep.cells:
            assert w.record_attempt(sweep, finished_result(sweep, c))
    outside = tmp_path / "outside"
    fake = outside / "r1" / "attempt-1"
    fake.mkdir(parents=True)
    meta = json.loads((store.attempt_dir(sweep.id, sweep.cells[0].id, 1) / "meta.json").read_text())
    meta["error"] = CANARY
    (fake / "meta.json").write_text(json.dumps(meta))
    (fake / "answer.txt").write_text(CANARY + "\n")
    (tmp_path / "empty").mkdir()
    return runs, sweep.id, outside


def _snapshot(tmp_path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tmp_path)): p.read_bytes() for p in sorted((tmp_path / "outside").rglob("*")) if p.is_file()}


def _edit_sweep(runs: Path, sweep_id: str, edit) -> None:  # type: ignore[no-untyped-def]
    path = runs / sweep_id / "sweep.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _each_command_refuses(tmp_path: Path, runs: Path, sweep_id: str, *needles: str) -> int:
    before = _snapshot(tmp_path)
    seen = 0
    for command in COMMANDS:
        args = [a.format(sweep=sweep_id) for a in command] + ["--runs", str(runs)]
        proc = run_fleet(*args, cwd=tmp_path)
        assert CANARY not in proc.stdout + proc.stderr, (command, proc.stdout, proc.stderr)
        assert_one_line_error(proc, *needles)
        seen += 1
    assert _snapshot(tmp_path) == before
    assert not any((tmp_path / "empty").iterdir())
    assert not (tmp_path / "escaped").exists()
    return seen


@pytest.mark.parametrize("key, value, words", [
    ("id", "../../../outside/r1", "is not the cell's HOST/ITEM/AGENT/rREP"),
    ("id", "/abs/olute/x/r1", "is not the cell's HOST/ITEM/AGENT/rREP"),
    ("host", "..", "names a folder above or at itself"),
    ("host", "../../escaped", "holds a path separator"),
    ("item", "01-item\x00", "holds a NUL byte"),
])
def test_a_crafted_cell_id_is_refused_by_every_command(tmp_path: Path, key: str, value: str, words: str) -> None:
    runs, sweep_id, _ = _store(tmp_path)

    def edit(data: dict) -> None:
        cell = data["cells"][0]
        old = cell["id"]
        cell[key] = value
        if key != "id":  # an id that matches its crafted parts, so only the part itself is wrong
            cell["id"] = f"{cell['host']}/{cell['item']}/{cell['agent']}/r{cell['rep']}"
        data["attempts"][cell["id"]] = data["attempts"].pop(old)

    _edit_sweep(runs, sweep_id, edit)
    assert _each_command_refuses(tmp_path, runs, sweep_id, "sweep.json", f"cells[0].{key}", words) == 5


def test_a_sweep_json_that_names_another_sweep_is_refused(tmp_path: Path) -> None:
    runs, sweep_id, _ = _store(tmp_path)
    _edit_sweep(runs, sweep_id, lambda data: data.update(id="20261201-000000-other"))
    _each_command_refuses(tmp_path, runs, sweep_id, "sweep.json: id:", "is not the id of the folder it is in")


def test_a_journal_entry_for_a_cell_that_is_not_planned_is_refused(tmp_path: Path) -> None:
    runs, sweep_id, _ = _store(tmp_path)
    entry = {"t": "attempt", "cell": "../../../outside/r1",
             "summary": {"attempt": 1, "task_id": "t", "status": "finished"}}
    (runs / sweep_id / "journal.jsonl").write_text(json.dumps(entry) + "\n")
    _each_command_refuses(tmp_path, runs, sweep_id, "journal.jsonl: line 1: cell:", "is not a planned cell")


@pytest.mark.parametrize("number", [0, -5])
def test_a_journal_entry_for_an_attempt_numbered_below_one_is_refused(tmp_path: Path, number: int) -> None:
    # Attempts are numbered from 1; the writer never makes another. A crafted one would be shown in the tables and
    # written back into sweep.json by resume, for ever "dispatched".
    runs, sweep_id, _ = _store(tmp_path)
    cell = json.loads((runs / sweep_id / "sweep.json").read_text())["cells"][0]["id"]
    entry = {"t": "attempt", "cell": cell, "summary": {"attempt": number, "task_id": "x", "status": "dispatched"}}
    with open(runs / sweep_id / "journal.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")
    before = (runs / sweep_id / "sweep.json").read_bytes()
    for command in COMMANDS:
        args = [a.format(sweep=sweep_id) for a in command] + ["--runs", str(runs)]
        proc = run_fleet(*args, cwd=tmp_path)
        # A damaged journal is a store error (exit 1), as every other bad journal line (docs/input-errors.md).
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, (command, proc.returncode, proc.stderr)
        (line,) = proc.stderr.splitlines()
        assert "journal.jsonl: line 1: attempt:" in line and "greater than or equal to 1" in line, line
    assert (runs / sweep_id / "sweep.json").read_bytes() == before


def test_a_symlinked_cell_folder_that_leads_outside_is_refused(tmp_path: Path) -> None:
    runs, sweep_id, outside = _store(tmp_path)
    cell = runs / sweep_id / "host0" / "01-item" / "builtin" / "r1"
    for p in sorted(cell.rglob("*"), reverse=True):
        p.unlink() if not p.is_dir() else p.rmdir()
    cell.rmdir()
    os.symlink(outside / "r1", cell)
    # status only reads sweep.json (no attempt folder), so it shows the sweep; the others refuse.
    before = _snapshot(tmp_path)
    for command in COMMANDS:
        proc = run_fleet(*[a.format(sweep=sweep_id) for a in command], "--runs", str(runs), cwd=tmp_path)
        assert CANARY not in proc.stdout + proc.stderr, (command, proc.stdout, proc.stderr)
        if command[0] in ("status", "resume"):
            assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, (command, proc.stderr)
            continue
        assert_one_line_error(proc, "attempts.host0/01-item/builtin/r1", "leads outside the sweep's folder")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("name", ["answer.txt", "meta.json", "grades.jsonl"])
def test_a_record_file_that_is_a_link_is_never_read_or_written_through(tmp_path: Path, name: str) -> None:
    runs, sweep_id, outside = _store(tmp_path)
    target = outside / "r1" / "attempt-1" / ("answer.txt" if name == "grades.jsonl" else name)
    link = runs / sweep_id / "host0" / "01-item" / "builtin" / "r1" / "attempt-1" / name
    link.unlink(missing_ok=True)
    os.symlink(target, link)
    before = _snapshot(tmp_path)
    for command in (["show", sweep_id, "host0", "01"], ["grade", sweep_id], ["report", sweep_id]):
        proc = run_fleet(*command, "--runs", str(runs), cwd=tmp_path)
        assert CANARY not in proc.stdout + proc.stderr, (command, proc.stdout, proc.stderr)
        assert_one_line_error(proc, f"attempt-1/{name} is a symbolic link")
    assert _snapshot(tmp_path) == before
