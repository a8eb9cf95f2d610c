"""The sweep's table: one orientation (an item per row, a host per column) whatever the counts, labels that
say attempts (`DELIVERED (2 attempts)`), and lines that never wrap when the output is not a terminal."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from harness.views.progress import attempts_suffix, matrix_table
from harness.core.records import AttemptSummary, RerunRecord
from harness.core.sweep import SweepRecord
from harness.store import Store
from tests.support import run_fleet, synthetic_sweep


def _graded(sweep: SweepRecord, attempts: dict[str, int]) -> SweepRecord:
    for c in sweep.cells:
        sweep.attempts[c.id] = [AttemptSummary(attempt=k, task_id=f"t{k}", status="finished", exit_code=0,
                                               grade="DELIVERED") for k in range(1, attempts.get(c.id, 1) + 1)]
    return sweep


def _rows(sweep: SweepRecord) -> list[list[str]]:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(matrix_table(sweep))
    return [[c.strip() for c in line.split("│")[1:-1]] for line in out.getvalue().splitlines() if line.startswith("│")]


def test_the_table_has_an_item_per_row_whether_hosts_or_items_are_more() -> None:
    for hosts, items in ((6, 3), (1, 10), (3, 3), (2, 3)):
        rows = _rows(_graded(synthetic_sweep(hosts=hosts, items=items), {}))
        assert [r[0] for r in rows] == [f"{i:02d}-item" for i in range(1, items + 1)], (hosts, items)
        assert all(len(r) == hosts + 1 for r in rows)


def test_labels_say_attempts_and_rerun() -> None:
    assert attempts_suffix(1, False) == ""
    assert attempts_suffix(2, False) == " (2 attempts)"
    assert attempts_suffix(3, True) == " (3 attempts, rerun)"
    sweep = synthetic_sweep(hosts=1, items=2)
    first, second = sweep.cells
    _graded(sweep, {first.id: 2, second.id: 3})
    sweep.reruns.append(RerunRecord(at="2026-12-04T00:00:00Z", host="host0", cells={second.id: 3}))
    assert _rows(sweep) == [["01-item", "DELIVERED (2 attempts)"], ["02-item", "DELIVERED (3 attempts, rerun)"]]


def test_status_without_a_terminal_never_wraps(tmp_path: Path) -> None:
    # A results folder deep enough that its path alone passes 80 columns, as on a CI runner.
    runs = tmp_path / ("a-results-folder-with-a-long-name-" * 3) / "runs"
    store = Store(runs)
    sweep = _graded(synthetic_sweep(hosts=1, items=1), {})
    sweep.status = "finished"
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
    proc = run_fleet("status", sweep.id, "--runs", str(runs), cwd=tmp_path)  # COLUMNS=80, stdout a pipe
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert last == f"sweep {sweep.id}: finished, results in {runs / sweep.id}", proc.stdout
    assert len(last) > 80


def test_a_terminal_too_narrow_for_the_table_folds_a_grade_and_never_cuts_it() -> None:
    # Five hosts on an 80-column terminal showed every cell as "HARNESS_F…".
    sweep = _graded(synthetic_sweep(hosts=5, items=2), {})
    for attempts in sweep.attempts.values():
        attempts[0].status, attempts[0].grade, attempts[0].reason = "harness_failure", "HARNESS_FAILURE", "no_worker"
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(matrix_table(sweep))
    text = out.getvalue()
    assert "…" not in text, text
    assert all(len(line) <= 80 for line in text.splitlines())
    column = [line.split("│")[2].strip() for line in text.splitlines() if line.startswith("│")]
    assert "".join(column).startswith("HARNESS_FAILURE"), column


def test_whole_lines_render_the_same_table_without_working_out_folds() -> None:
    # Where the output is not a terminal (a log, a pipe: 100,000 columns) no cell is ever folded; telling rich so
    # halves the table's time on a 10,000-cell sweep, and must not change a character of it.
    sweep = synthetic_sweep(hosts=4, items=3, reps=2)
    _graded(sweep, {c.id: 1 + n % 3 for n, c in enumerate(sweep.cells)})
    sweep.attempts[sweep.cells[0].id][-1].grade = "HARNESS_FAILURE"
    rendered = []
    for whole in (False, True):
        out = io.StringIO()
        Console(file=out, width=100_000, color_system=None).print(matrix_table(sweep, whole_lines=whole))
        rendered.append(out.getvalue())
    assert rendered[0] == rendered[1]
    assert "DELIVERED (3 attempts) DELIVERED" in rendered[1]  # two repetitions in one cell, on one line
    assert all(c.overflow != "fold" and c.no_wrap for c in matrix_table(sweep, whole_lines=True).columns)
