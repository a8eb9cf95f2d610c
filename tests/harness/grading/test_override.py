"""A reviewer's override of a grade: the store side (grades.jsonl, the summary, the index), the report, compare,
and `fleet grade --override` / `fleet show` through the real `fleet` command."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.views.comparison import compare_sweeps
from harness.core.errors import GradeGate, UsageError
from harness.grading import Grade
from harness.grading.gradefiles import read_grade_history
from harness.grading.override import GradeOverride
from harness.store import override_grade
from harness.grading.scale import shown_grade
from harness.core.records import AttemptSummary
from harness.core.sweep import SweepRecord
from harness.views.report import cell_results, write_report
from harness.store import Store
from tests.support import assert_one_line_error, finished_result, run_fleet, synthetic_sweep

SWEEP = "20261201-000000-t"
CELL = "host0/01-item/builtin/r1"


def build_runs(root: Path, sweep_id: str = SWEEP, grades: tuple[str, ...] = ("DELIVERED", "DELIVERED", "NOTHING"),
               dispatched: bool = False) -> tuple[Store, SweepRecord]:
    """A real store written by the real SweepWriter: one host, one cell per grade in ``grades`` (items 01, 02,
    ...), each with one recorded, graded attempt; ``dispatched``: one more cell (the next item) whose attempt 1
    is still in flight."""
    store = Store(root)
    sweep = synthetic_sweep(sweep_id, hosts=1, items=len(grades) + (1 if dispatched else 0))
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        for cell, g in zip(sweep.cells, grades):
            assert w.record_attempt(sweep, finished_result(sweep, cell))
            w.record_grade(sweep, cell.id, 1, Grade(grade=g, outcome="none", reasons=[f"graded {g}"],  # type: ignore[arg-type]
                                                    failure="model_endpoint" if g == "HARNESS_FAILURE" else ""))
        if dispatched:
            cell = sweep.cells[len(grades)]
            w.dispatched(sweep, cell.id, AttemptSummary(attempt=1, task_id="t", status="dispatched"))
        w.set_status(sweep, "finished")
    return store, store.load_sweep(sweep.id)


def tree_digest(root: Path) -> str:
    """Every file and folder under ``root`` with its bytes: equal digests mean nothing was written."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        if p.is_file() and not p.is_symlink():
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


@contextmanager
def lock_held_elsewhere(store: Store, sweep_id: str) -> Iterator[None]:
    """Another process holds the sweep's writer lock (as a running coordinator does) until the block ends."""
    code = ("import fcntl, sys\nf = open(sys.argv[1], 'ab')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\nsys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(store.sweep_dir(sweep_id) / ".lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        assert store.is_being_written(sweep_id)
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)


def _index(store: Store, sql: str) -> list[tuple]:
    db = sqlite3.connect(f"file:{store.root / 'index.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_an_override_keeps_the_automatic_grade_and_is_recorded_everywhere(tmp_path: Path) -> None:
    store, sweep = build_runs(tmp_path)
    folder = store.attempt_dir(SWEEP, CELL, 1)
    grade_json = (folder / "grade.json").read_bytes()
    done = override_grade(store, SWEEP, CELL, 1, "PARTIAL", "  the page it wrote is blank  ", " alice ")
    assert (done.grade, done.automatic, done.reason, done.author) == ("PARTIAL", "DELIVERED", "the page it wrote is blank",
                                                                      "alice")
    assert done.at.endswith("Z")
    # The automatic grade stays as it was; the override is one more line of the history, after it.
    assert (folder / "grade.json").read_bytes() == grade_json
    history = read_grade_history(folder)
    assert [type(h) for h in history] == [Grade, GradeOverride] and history[1] == done
    lines = (folder / "grades.jsonl").read_text().splitlines()
    assert json.loads(lines[1])["kind"] == "override"
    # The sweep's state (journal or snapshot) and the index say the same.
    last = store.load_sweep(SWEEP).last(CELL)
    assert last is not None and (last.grade, last.override, shown_grade(last)) == ("DELIVERED", "PARTIAL", "PARTIAL")
    assert _index(store, "SELECT * FROM overrides") == [
        (SWEEP, CELL, 1, "PARTIAL", "DELIVERED", "the page it wrote is blank", "alice", done.at)]
    assert _index(store, f"SELECT grade, auto_grade, override FROM cells WHERE cell_id = '{CELL}'") == [
        ("PARTIAL", "DELIVERED", "PARTIAL")]


def test_a_second_override_keeps_both_and_the_latest_counts(tmp_path: Path) -> None:
    store, _ = build_runs(tmp_path)
    first = override_grade(store, SWEEP, CELL, None, "PARTIAL", "blank page", "alice")
    second = override_grade(store, SWEEP, CELL, None, "NOTHING", "nothing usable at all", "bob")
    history = read_grade_history(store.attempt_dir(SWEEP, CELL, 1))
    assert history[1:] == [first, second]
    # The second override overrides the same automatic grade, not the first override.
    assert second.automatic == "DELIVERED"
    last = store.load_sweep(SWEEP).last(CELL)
    assert last is not None and last.override == "NOTHING"
    assert _index(store, "SELECT author, grade FROM overrides ORDER BY at") == [("alice", "PARTIAL"), ("bob", "NOTHING")]
    assert _index(store, f"SELECT grade FROM cells WHERE cell_id = '{CELL}'") == [("NOTHING",)]


def test_a_regrade_keeps_the_override(tmp_path: Path) -> None:
    store, _ = build_runs(tmp_path)
    override_grade(store, SWEEP, CELL, 1, "PARTIAL", "blank page", "alice")
    proc = run_fleet("grade", SWEEP, "--runs", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    history = read_grade_history(store.attempt_dir(SWEEP, CELL, 1))
    assert [type(h).__name__ for h in history] == ["Grade", "GradeOverride", "Grade"]  # the regrade is appended
    last = store.load_sweep(SWEEP).last(CELL)
    assert last is not None and last.override == "PARTIAL" and shown_grade(last) == "PARTIAL"
    row = {r.cell: r for r in cell_results(store, store.load_sweep(SWEEP))}[CELL]
    assert row.grade == "PARTIAL" and row.override is not None and row.override.author == "alice"
    assert _index(store, f"SELECT grade, override FROM cells WHERE cell_id = '{CELL}'") == [("PARTIAL", "PARTIAL")]


@pytest.mark.parametrize(("args", "needle"), [
    (dict(grade="GREAT"), "is not one of DELIVERED"),
    (dict(grade="partial"), "is not one of"),
    (dict(reason="   \n "), "needs a reason"),
    (dict(reason="x" * 2001), "at most 2000"),
    (dict(author=""), "author's name"),
    (dict(author="a" * 101), "at most 100"),
    (dict(author="alice\nbob"), "printable"),
    (dict(cell_id="host0/09-item/builtin/r1"), "no cell"),
    (dict(attempt=2), "no attempt 2"),
    (dict(cell_id="host0/04-item/builtin/r1", attempt=1), "still running"),
    (dict(cell_id="host0/04-item/builtin/r1", attempt=None), "no recorded attempt"),
    (dict(sweep_id="20990101-000000-nope"), "no sweep"),
])
def test_every_refusal_is_one_line_and_writes_nothing(tmp_path: Path, args: dict, needle: str) -> None:
    store, _ = build_runs(tmp_path, dispatched=True)
    before = tree_digest(tmp_path)
    call = dict(sweep_id=SWEEP, cell_id=CELL, attempt=1, grade="PARTIAL", reason="why", author="alice") | args
    with pytest.raises(UsageError) as err:
        override_grade(store, call["sweep_id"], call["cell_id"], call["attempt"], call["grade"], call["reason"],
                       call["author"])
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert tree_digest(tmp_path) == before
    assert not (tmp_path / "20990101-000000-nope").exists()


def test_an_attempt_without_meta_json_is_not_recorded(tmp_path: Path) -> None:
    store, _ = build_runs(tmp_path)
    (store.attempt_dir(SWEEP, CELL, 1) / "meta.json").unlink()
    before = tree_digest(tmp_path)
    with pytest.raises(UsageError, match="no meta.json"):
        override_grade(store, SWEEP, CELL, 1, "PARTIAL", "why", "alice")
    assert tree_digest(tmp_path) == before


def test_refused_while_another_process_writes_the_sweep(tmp_path: Path) -> None:
    store, _ = build_runs(tmp_path)
    before = tree_digest(tmp_path)
    with lock_held_elsewhere(store, SWEEP):
        with pytest.raises(UsageError, match="being written by a coordinator"):
            override_grade(store, SWEEP, CELL, 1, "PARTIAL", "why", "alice")
        proc = run_fleet("grade", SWEEP, "--host", "host0", "--item", "01-item", "--override", "PARTIAL",
                         "--reason", "why", "--author", "alice", "--runs", str(tmp_path), cwd=tmp_path)
        assert_one_line_error(proc, "being written")
    assert tree_digest(tmp_path) == before
    # Once the lock is free the same override goes through.
    assert override_grade(store, SWEEP, CELL, 1, "PARTIAL", "why", "alice").grade == "PARTIAL"


def test_the_report_counts_the_override_and_says_so(tmp_path: Path) -> None:
    store, _ = build_runs(tmp_path, grades=("DELIVERED", "HARNESS_FAILURE", "NOTHING"))
    override_grade(store, SWEEP, CELL, 1, "PARTIAL", "the page is blank | really", "alice")
    override_grade(store, SWEEP, "host0/02-item/builtin/r1", 1, "DELIVERED", "the endpoint was fine", "bob")
    sweep = store.load_sweep(SWEEP)
    rows = {r.item: r for r in cell_results(store, sweep)}
    one, two, three = rows["01-item"], rows["02-item"], rows["03-item"]
    assert (one.grade, one.automatic_grade, one.overridden) == ("PARTIAL", "DELIVERED", True)
    assert one.override is not None and (one.override.author, one.override.reason) == ("alice", "the page is blank | really")
    assert (two.grade, two.automatic_grade, two.failure) == ("DELIVERED", "HARNESS_FAILURE", "model_endpoint")
    assert (three.grade, three.automatic_grade, three.override, three.overridden) == ("NOTHING", "NOTHING", None, False)
    write_report(store, sweep)
    md = (tmp_path / SWEEP / "REPORT.md").read_text()
    said = "PARTIAL (override by alice of DELIVERED: the page is blank | really)"
    assert f"- {CELL}: {said}" in md  # among the agent failures, and in the overrides
    assert f"- {CELL}: {said} ({one.override.at})" in md
    assert "| host0 / builtin | PARTIAL (override) | DELIVERED (override) | NOTHING |" in md
    # The rate counts the reviewers' grades: 1 DELIVERED (the overridden harness failure) of 3, none left out.
    assert "| host0 | 1/3 (33 %) | 1/3 (33 %) |" in md
    assert "### Harness limitations\n\n- none" in md
    suite = ET.parse(tmp_path / SWEEP / "junit.xml").getroot()
    assert (suite.get("failures"), suite.get("errors")) == ("2", "0")
    case = suite.find("testcase[@name='01-item/builtin/r1']")
    assert case is not None and case.find("failure").get("message") == said  # type: ignore[union-attr]
    passed = suite.find("testcase[@name='02-item/builtin/r1']")
    assert passed is not None and passed.find("error") is None and passed.find("failure") is None
    assert {p.get("name"): p.get("value") for p in passed.iter("property")} == {
        "override": "DELIVERED (override by bob of HARNESS_FAILURE: the endpoint was fine)",
        "automatic_grade": "HARNESS_FAILURE"}
    results = json.loads((tmp_path / SWEEP / "results.json").read_text())
    first = results["cells"][0]
    assert (first["grade"], first["automatic_grade"], first["override"]["author"]) == ("PARTIAL", "DELIVERED", "alice")
    assert results["cells"][2]["override"] is None


def test_compare_uses_the_override_and_says_so(tmp_path: Path) -> None:
    store, base = build_runs(tmp_path, "20261201-000000-base", grades=("DELIVERED", "PARTIAL", "HARNESS_FAILURE"))
    _, cand = build_runs(tmp_path, "20261202-000000-cand", grades=("DELIVERED", "PARTIAL", "HARNESS_FAILURE"))
    override_grade(store, cand.id, CELL, 1, "NOTHING", "the answer is wrong", "alice")
    override_grade(store, cand.id, "host0/03-item/builtin/r1", 1, "DELIVERED", "the endpoint was fine", "alice")
    result = compare_sweeps(base, store.load_sweep(cand.id))
    changes = {r.item: r.change for r in result.rows}
    assert changes == {"01-item": "regressed", "02-item": "unchanged", "03-item": "unmeasured"}
    row = next(r for r in result.rows if r.item == "01-item")
    assert row.candidate is not None and row.baseline is not None
    rep = row.candidate.reps[0]
    assert (rep.grade, rep.measured, rep.passed, rep.override, rep.automatic) == ("NOTHING", True, False, True, "DELIVERED")
    assert row.baseline.reps[0].override is False
    # The overridden harness failure is measured now: a pass, in the candidate's rate.
    third = next(r for r in result.rows if r.item == "03-item")
    assert third.candidate is not None and third.candidate.reps[0].passed and third.candidate.state == "passed"
    assert (result.baseline.rate.delivered, result.candidate.rate.delivered) == (1, 1)
    assert (result.baseline.rate.measured, result.candidate.rate.measured) == (2, 3)
    proc = run_fleet("compare", base.id, cand.id, "--runs", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "regressed   host0/01-item/builtin  DELIVERED -> NOTHING (override of DELIVERED)" in proc.stdout
    proc = run_fleet("compare", base.id, cand.id, "--json", "--runs", str(tmp_path), cwd=tmp_path)
    data = json.loads(proc.stdout)
    reps = next(r for r in data["rows"] if r["item"] == "01-item")["candidate"]["reps"]
    assert reps == [{"rep": 1, "grade": "NOTHING", "measured": True, "passed": False, "override": True,
                     "automatic": "DELIVERED", "rerun": False}]


def test_fleet_grade_override_and_fleet_show(tmp_path: Path) -> None:
    store, _ = build_runs(tmp_path)
    runs = ("--runs", str(tmp_path))
    proc = run_fleet("grade", SWEEP, "--host", "host0", "--item", "01-item", "--override", "PARTIAL", "--reason",
                     "the page is blank", "--author", "alice", *runs, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{CELL}: PARTIAL by alice (override of DELIVERED, at ")
    assert proc.stdout.rstrip().endswith("): the page is blank")
    proc = run_fleet("grade", SWEEP, "--host", "host0", "--item", "01", "--override", "NOTHING", "--reason", "worse",
                     "--author", "bob", "--json", *runs, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    done = GradeOverride.model_validate_json(proc.stdout)
    assert (done.grade, done.author, done.automatic) == ("NOTHING", "bob", "DELIVERED")
    assert read_grade_history(store.attempt_dir(SWEEP, CELL, 1))[-1] == done
    show = run_fleet("show", SWEEP, "host0", "01-item", *runs, cwd=tmp_path)
    assert show.returncode == 0, show.stderr
    assert "attempt 1: NOTHING (override; automatic DELIVERED)" in show.stdout
    assert "alice: DELIVERED -> PARTIAL: the page is blank" in show.stdout
    assert "bob: DELIVERED -> NOTHING: worse" in show.stdout
    # The chosen attempt's grade: the reviewer's counts, the automatic one is named beside it.
    assert "\ngrade: NOTHING (override; automatic DELIVERED) (outcome " in show.stdout


@pytest.mark.parametrize(("args", "needle"), [
    (("--override", "GREAT", "--reason", "r", "--author", "a"), "is not one of"),
    (("--override", "PARTIAL", "--author", "a"), "--override needs --reason"),
    (("--override", "PARTIAL", "--reason", "r"), "--override needs --author"),
    (("--override", "PARTIAL", "--reason", " ", "--author", "a"), "needs a reason"),
    (("--reason", "r"), "only with --override"),
    (("--override", "PARTIAL", "--reason", "r", "--author", "a", "--attempt", "7"), "no attempt 7"),
])
def test_fleet_grade_override_refusals_are_one_line_and_write_nothing(tmp_path: Path, args: tuple[str, ...],
                                                                       needle: str) -> None:
    build_runs(tmp_path)
    before = tree_digest(tmp_path)
    proc = run_fleet("grade", SWEEP, "--host", "host0", "--item", "01-item", *args, "--runs", str(tmp_path), cwd=tmp_path)
    assert_one_line_error(proc, needle)
    assert tree_digest(tmp_path) == before


def test_fleet_grade_override_needs_one_cell(tmp_path: Path) -> None:
    build_runs(tmp_path)
    before = tree_digest(tmp_path)
    proc = run_fleet("grade", SWEEP, "--override", "PARTIAL", "--reason", "r", "--author", "a", "--runs", str(tmp_path),
                     cwd=tmp_path)
    assert_one_line_error(proc, "give --host and --item")
    assert tree_digest(tmp_path) == before


def test_a_group_of_repetitions_says_how_many_are_overrides(tmp_path: Path) -> None:
    store = Store(tmp_path)
    sweeps = []
    for sweep_id in ("20261201-000000-base", "20261202-000000-cand"):
        sweep = synthetic_sweep(sweep_id, hosts=1, items=1, reps=2)
        with store.writer(sweep.id) as w:
            w.save_sweep(sweep)
            for cell in sweep.cells:
                assert w.record_attempt(sweep, finished_result(sweep, cell))
                w.record_grade(sweep, cell.id, 1, Grade(grade="DELIVERED", outcome="passed"))
            w.set_status(sweep, "finished")
        sweeps.append(sweep)
    override_grade(store, sweeps[1].id, "host0/01-item/builtin/r2", 1, "PARTIAL", "r2 is wrong", "alice")
    result = compare_sweeps(store.load_sweep(sweeps[0].id), store.load_sweep(sweeps[1].id))
    (row,) = result.rows
    assert row.change == "regressed" and row.candidate is not None
    assert row.candidate.summary == "flaky 1/2 (1 by override)"
    assert [r.shown for r in row.candidate.reps] == ["DELIVERED", "PARTIAL (override of DELIVERED)"]
    proc = run_fleet("compare", sweeps[0].id, sweeps[1].id, "--runs", str(tmp_path), cwd=tmp_path)
    assert "candidate: pass@2 yes; r1 DELIVERED, r2 PARTIAL (override of DELIVERED)" in proc.stdout, proc.stdout


def test_status_and_its_json_show_the_override_and_the_gate_counts_it(tmp_path: Path) -> None:
    store, _ = build_runs(tmp_path)
    override_grade(store, SWEEP, CELL, 1, "PARTIAL", "the page it wrote is blank", "alice")
    proc = run_fleet("status", SWEEP, "--json", "--runs", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cell = next(c for c in json.loads(proc.stdout)["cells"] if c["id"] == CELL)
    assert (cell["grade"], cell["override"], cell["label"]) == ("DELIVERED", "PARTIAL", "PARTIAL (override)")
    table = run_fleet("status", SWEEP, "--runs", str(tmp_path), cwd=tmp_path)
    assert "PARTIAL (override)" in table.stdout
    # The exit gate a CI job reads judges the shown grade: the override, not the automatic DELIVERED.
    from harness.cli.sweep_cmd import _gate

    sweep = store.load_sweep(SWEEP)
    with pytest.raises(GradeGate, match=f"{CELL} PARTIAL"):
        _gate(sweep, [sweep.cell(CELL)], frozenset({"PARTIAL"}))
    _gate(sweep, [sweep.cell(CELL)], frozenset({"DELIVERED"}))
