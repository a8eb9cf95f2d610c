"""Giving a reviewer's grade to a recorded attempt: ``override_grade``, the one way ``fleet grade --override`` and the
dashboard's override form record one.

The override's record and the checks of its input are grading's (``harness.grading.override``); the line it adds to
the attempt's ``grades.jsonl`` is written by the grade files' owner (``harness.grading.gradefiles``). What is the
store's: the sweep's writer lock, and the summary, journal line and index rows the override changes
(``SweepWriter.record_override``).
"""

from __future__ import annotations

from harness.core.errors import UsageError
from harness.core.records import AttemptSummary, utc_now
from harness.core.sweep import SweepRecord
from harness.grading.override import GradeOverride, check_override_input
from harness.grading.scale import shown_grade
from harness.store.store import Store

__all__ = ["override_grade"]


def override_grade(store: Store, sweep_id: str, cell_id: str, attempt: int | None, grade: str, reason: str,
                   author: str) -> GradeOverride:
    """Give a reviewer's grade to a recorded attempt of ``cell_id`` (``attempt`` None: its last recorded one).

    Everything is checked before anything is written, and any refusal is one ``UsageError`` line: the input
    (``check_override_input``), the sweep and cell exist, the attempt is recorded (not in flight, meta.json
    present), and no coordinator is writing the sweep (its writer lock). Then, holding that lock, the override
    is one more line of the attempt's ``grades.jsonl``, the summary's ``override``, and the index's rows
    (``SweepWriter.record_override``). The automatic grade (``grade.json``) is left as it is."""
    grade_name, reason, author = check_override_input(grade, reason, author)
    sweep = store.load_sweep(sweep_id)  # before the writer: that would make a folder for a sweep that is not there
    _recorded(store, sweep, cell_id, attempt)
    if store.is_being_written(sweep_id):
        raise UsageError(f"sweep {sweep_id} is being written by a coordinator (fleet sweep, rerun or resume); "
                         "override its grades when it has ended")
    with store.writer(sweep_id) as w:
        # Read again under the lock: a coordinator may have written the sweep since.
        sweep = store.load_sweep(sweep_id)
        summary = _recorded(store, sweep, cell_id, attempt)
        override = GradeOverride(grade=grade_name, automatic=shown_grade(summary.model_copy(update={"override": ""})),
                                 reason=reason, author=author, at=utc_now())
        w.record_override(sweep, cell_id, summary.attempt, override)
    return override


def _recorded(store: Store, sweep: SweepRecord, cell_id: str, attempt: int | None) -> AttemptSummary:
    """The summary of the recorded attempt an override is for; else the ``UsageError`` saying why not."""
    if cell_id not in {c.id for c in sweep.cells}:
        raise UsageError(f"sweep {sweep.id} has no cell {cell_id!r}")
    runs = sweep.attempts.get(cell_id) or []
    if attempt is None:
        recorded = [a for a in runs if a.status != "dispatched"]
        if not recorded:
            raise UsageError(f"{cell_id}: no recorded attempt to override yet")
        summary = recorded[-1]
    else:
        found = next((a for a in runs if a.attempt == attempt), None)
        if found is None:
            raise UsageError(f"{cell_id}: no attempt {attempt}")
        summary = found
        if summary.status == "dispatched":
            raise UsageError(f"{cell_id}: attempt {attempt} is not recorded yet (it is still running)")
    if not (store.attempt_dir(sweep.id, cell_id, summary.attempt) / "meta.json").is_file():
        raise UsageError(f"{cell_id}: attempt {summary.attempt} has no meta.json: it is not recorded")
    return summary
