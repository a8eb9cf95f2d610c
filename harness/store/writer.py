"""Writing one sweep: ``SweepWriter``, made by ``Store.writer`` while it holds the sweep's lock.

Every change to the sweep's state goes through it: a snapshot (``save_sweep``: sweep.json), or one journal line per
change (``journal.py``), flushed to disk before the method returns; the index rows of the same change in one
transaction on the writer's own connection (``index.py``). Recording an attempt stores its files first (checked
names, ``names.py``; all of them on disk in one flush before any has its name, ``harness.core.files``), then its grade's
files (``harness.grading.gradefiles``), then its rows and its journal line; a step that fails takes back what the
steps before it wrote, so the sweep's state is unchanged.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from harness.core.errors import ArtifactCorrupt, ArtifactRefused, FleetError, StoreError, UsageError
from harness.core.failures import classify
from harness.core.files import WriteFailed, atomic_write, atomic_write_all
from harness.core.records import AttemptResult, AttemptSummary, Cell, sha256_hex, utc_now
from harness.core.sweep import SweepRecord
from harness.grading import Grade
from harness.grading.gradefiles import append_grade_line, undo_grade_files, write_grade_files, write_grade_files_batch
from harness.grading.override import GradeOverride
from harness.store.index import (CELLS, GRADES, Statement, attempt_rows, cell_row, connect_index, grade_row,
                                 override_row, sweep_rows)
from harness.store.journal import JOURNAL, Journal, upsert
from harness.store.names import name_bytes, safe_relpath, storable_name, storable_names

if TYPE_CHECKING:
    from harness.store.store import Store

__all__ = ["SweepWriter", "Graded", "write_file"]


def write_file(path: Path, data: bytes) -> None:
    """A file the harness writes whole (the sweep's snapshot, a report, a schedule's state): ``atomic_write``, and a
    failure one ``StoreError`` line naming the file."""
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc}") from exc


@dataclass
class Graded:
    """What ``SweepWriter.record_graded`` did with the grade of the attempt it recorded."""

    grade: Grade | None = None
    """The grade recorded with the attempt; None when there is none (see ``error``)."""
    error: FleetError | None = None
    """Why the attempt was recorded ungraded (its evidence could not be read, or the grade not written)."""
    fault: Exception | None = None
    """Any other exception of the grader (a fault of the grader, not of the attempt): the attempt is recorded ungraded
    all the same, and the caller raises it."""


def _with_grade(summary: AttemptSummary, grade: Grade) -> AttemptSummary:
    """The attempt's summary with its grade: the grade's name, its stop and the failure code ``classify`` gives."""
    failure = classify(summary.status, summary.reason, grade.grade, grade.failure)
    return summary.model_copy(update={"grade": grade.grade, "failure": failure.reason if failure else "",
                                      "stop": grade.stop.reason if grade.stop else ""})


class SweepWriter:
    """Writes one sweep. Only made by ``Store.writer``, which holds the lock.

    Every change to the sweep's state goes through here: ``save_sweep`` writes a snapshot, the other
    methods append one journal line each (flushed and fsynced before they return)."""

    def __init__(self, store: Store, sweep_id: str) -> None:
        self.store = store
        self.sweep_id = sweep_id
        self._sweep: SweepRecord | None = None
        self._journal = Journal(store.sweep_dir(sweep_id) / JOURNAL)
        self._db: sqlite3.Connection | None = None
        self._plan: list | None = None
        self._plan_ids: frozenset[str] = frozenset()
        self._cell_of: dict[str, Cell] | None = None
        self._cell_plan: list | None = None
        self._indexed_plan: list | None = None

    # -- the journal --------------------------------------------------------------------------------
    def _append(self, entry: dict, durable: bool = True) -> None:
        self._append_all([entry], durable)

    def _append_all(self, entries: list[dict], durable: bool = True) -> None:
        """Append ``entries`` to the journal in one write and one fsync (``Journal.append``); a new snapshot once the
        journal has grown past the number of cells (so the cost stays flat, amortized)."""
        self._journal.append(entries, durable)
        sweep = self._sweep
        if sweep is not None and self._journal.lines > max(1000, len(sweep.cells)):
            self.save_sweep(sweep)

    def _journal_attempt(self, sweep: SweepRecord, cell_id: str, summary: AttemptSummary, durable: bool = True) -> None:
        self._sweep = sweep
        self._append({"t": "attempt", "cell": cell_id, "summary": summary.model_dump(mode="json")}, durable)

    def set_status(self, sweep: SweepRecord, status: str) -> None:
        """The sweep's state (running, finished, interrupted), journaled; the index row follows."""
        sweep.status = status  # type: ignore[assignment]
        if status == "finished" and not sweep.finished_at:
            sweep.finished_at = utc_now()
        self._sweep = sweep
        self._append({"t": "status", "status": status, "finished_at": sweep.finished_at})
        self._index_sweep(sweep)

    def dispatched(self, sweep: SweepRecord, cell_id: str, summary: AttemptSummary, durable: bool = True) -> None:
        """An attempt was (about to be) sent: recorded first, so a coordinator that dies in between leaves an
        attempt for ``resume`` to settle rather than a task nobody waits for.

        Not ``durable`` (the dispatcher, between a host's two agents): the line is written before the send, so a
        coordinator that dies (killed, out of memory) leaves it on file, but it is flushed to disk by the next
        fsync of the journal (the last attempt's record right after, or ``sync_journal`` before the dispatcher
        waits), not on the host's wait. Only a machine that goes down within those milliseconds loses it; then
        ``resume`` sends the attempt again under the same task id, and it is recorded once."""
        upsert(sweep, cell_id, summary)
        self._journal_attempt(sweep, cell_id, summary, durable)

    def sync_journal(self) -> None:
        """Flush to disk the journal lines written without a flush (``dispatched(durable=False)``); nothing to do
        when there are none."""
        self._journal.sync()

    def save_sweep(self, sweep: SweepRecord) -> None:
        """Write a snapshot of the whole sweep (sweep.json) and start an empty journal."""
        write_file(self.store.sweep_dir(sweep.id) / "sweep.json", sweep.model_dump_json(indent=2).encode())
        # After the snapshot is durable the journal's entries are all in it.
        self._journal.restart()
        self._sweep = sweep
        self._index_sweep(sweep)

    def close(self) -> None:
        """Leave a snapshot of what was journaled, so sweep.json alone tells the final state."""
        try:
            if self._sweep is not None and self._journal.lines:
                self.save_sweep(self._sweep)
        finally:
            self._journal.close()
            if self._db is not None:
                self._db.close()
                self._db = None

    def _cell_ids(self, sweep: SweepRecord) -> frozenset[str]:
        """The planned cells' ids, made once per plan: a scan of 100,000 cells per attempt would make recording
        grow with the sweep again."""
        if self._plan is not sweep.cells:
            self._plan, self._plan_ids = sweep.cells, frozenset(c.id for c in sweep.cells)
        return self._plan_ids

    # -- the index ----------------------------------------------------------------------------------
    def _execute(self, *statements: Statement) -> None:
        """Run statements in one transaction on the writer's own connection (kept open: opening one per
        attempt costs more than the attempt's rows)."""
        if self._db is None:
            self._db = connect_index(self.store.root)
        try:
            with self._db:
                for sql, params in statements:
                    if params and isinstance(params, list):
                        self._db.executemany(sql, params)
                    elif not isinstance(params, list):
                        self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.store.root / 'index.sqlite'}: {exc}") from exc

    def _index_sweep(self, sweep: SweepRecord) -> None:
        """The sweep's row, its plan's shape (what the dashboard's list shows without reading sweep.json), and,
        with a snapshot, every cell's row."""
        cells = sweep.cells
        statements = sweep_rows(sweep)
        if self._indexed_plan is not cells:
            # Once per plan (a snapshot of a new or resumed sweep), not per status change: 10,000 rows.
            self._indexed_plan = cells
            statements.append((CELLS, [self._cell_row(sweep, c.id) for c in cells]))
        self._execute(*statements)

    def _cell_row(self, sweep: SweepRecord, cell_id: str, runs: list[AttemptSummary] | None = None) -> tuple:
        """The cell's row of the index's ``cells`` table (``index.cell_row``). ``runs``: the cell's attempts when they
        are about to change (the row is written in the same transaction)."""
        if self._cell_of is None or self._cell_plan is not sweep.cells:
            self._cell_plan, self._cell_of = sweep.cells, {c.id: c for c in sweep.cells}
        return cell_row(sweep.id, self._cell_of[cell_id], sweep.attempts.get(cell_id) or [] if runs is None else runs)

    def index_cell(self, sweep: SweepRecord, cell_id: str) -> None:
        """Rewrite the cell's index row from ``sweep`` (after an override changed its summary)."""
        self._execute((CELLS, self._cell_row(sweep, cell_id)))

    # -- attempts and grades ------------------------------------------------------------------------------
    def record_attempt(self, sweep: SweepRecord, result: AttemptResult) -> bool:
        """Store one attempt's files, meta.json and index rows, and update ``sweep`` in memory.

        Returns False (and writes nothing) when that attempt is already recorded: a task delivered
        twice must not record a cell twice. A delivery that cannot be stored raises ``ArtifactCorrupt``,
        ``ArtifactRefused`` (bad bytes or names: nothing is written) or ``StoreError`` (the disk refused:
        what was written of it is removed again); the sweep's state is unchanged in every case.
        """
        return self._record(sweep, result, None) is not None

    def record_graded(self, sweep: SweepRecord, result: AttemptResult,
                      grader: Callable[[Path], Grade]) -> Graded | None:
        """``record_attempt`` and ``record_grade`` in one step: the attempt's files are stored as ``record_attempt``
        stores them, then ``grader`` grades the stored folder (the evidence is read from disk, as for any grade), and
        the grade's files, the index rows of both and the summary with its grade go to disk together (one index
        transaction and one journal line, where the two steps took two each: 7 disk flushes of a short attempt
        become 4). None when the attempt was recorded already; raises what ``record_attempt`` raises. A grade that
        fails leaves the attempt recorded ungraded, and why in ``Graded.error`` (a ``FleetError``) or ``Graded.fault``."""
        return self._record(sweep, result, grader)

    def _record(self, sweep: SweepRecord, result: AttemptResult,
                grader: Callable[[Path], Grade] | None) -> Graded | None:
        if result.sweep_id != sweep.id or result.cell_id not in self._cell_ids(sweep) or result.attempt < 1:
            # The folder is made from these: a result naming another sweep or a cell the plan lacks must never
            # decide where files go.
            raise ArtifactRefused(f"a result for sweep {result.sweep_id!r}, cell {result.cell_id!r}, attempt "
                                  f"{result.attempt} does not belong to sweep {sweep.id}", host=result.host)
        runs = sweep.attempts.setdefault(result.cell_id, [])
        summary = next((a for a in runs if a.attempt == result.attempt), None)
        if summary is not None and summary.status != "dispatched":
            return None
        folder = self.store.attempt_dir(sweep.id, result.cell_id, result.attempt)
        # Check every artifact before writing any, so a refused delivery leaves no file behind.
        for art in result.artifacts:
            safe_relpath(art.name)
        stored = storable_names([a.name for a in result.artifacts])
        result = result.model_copy(update={"artifacts": [
            a.model_copy(update={"name": name} if name == a.name else {
                "name": name, "original": storable_name(a.name),
                "original_b64": base64.b64encode(name_bytes(a.name)).decode("ascii")})
            for a, name in zip(result.artifacts, stored)]})
        files = []
        rels = [safe_relpath(art.name) for art in result.artifacts]
        counts = Counter(rels)  # a count per name, not rels.count() per artifact: a workspace may hold 100,000 files
        for art, rel in zip(result.artifacts, rels):
            # Two artifacts of one name, or one whose name is another's folder, cannot both be kept as files.
            if counts[rel] > 1 or any(parent in counts for parent in rel.parents):
                raise ArtifactRefused(f"artifact name {art.name!r} is given twice, or under another artifact's name",
                                      host=result.host)
            path = folder / rel
            try:
                data = art.data()
            except ValueError:
                raise ArtifactCorrupt(f"{result.cell_id} attempt {result.attempt}: artifact {art.name} is not valid "
                                      "base64", host=result.host) from None
            if sha256_hex(data) != art.sha256 or len(data) != art.size:
                raise ArtifactCorrupt(f"{result.cell_id} attempt {result.attempt}: artifact {art.name} arrived "
                                      "corrupted (size or sha256 differ)", host=result.host)
            files.append((path, data))
        written: list[Path] = []
        try:
            # meta.json last: its presence means the attempt is complete on disk. One disk flush for all of them, before
            # any is renamed into place (an fsync of each was most of recording a short attempt).
            try:
                atomic_write_all([*files, (folder / "meta.json", json.dumps(result.meta(), indent=2).encode())], written)
            except WriteFailed as exc:
                raise StoreError(str(exc)) from exc
        except BaseException:
            for path in written:
                path.unlink(missing_ok=True)
            raise
        entry = AttemptSummary(
            attempt=result.attempt,
            task_id=summary.task_id if summary else "",
            status=result.status,
            reason=result.reason,
            exit_code=result.exit_code,
            dispatched_at=summary.dispatched_at if summary else "",
            recorded_at=utc_now(),
            duration_s=result.duration_s,
            failure=(result.reason or "infrastructure") if result.status == "harness_failure" else "",
        )
        graded = Graded()
        grade_files: list[tuple[Path, int]] = []
        statements = attempt_rows(sweep.id, result, str(folder.relative_to(self.store.root)))
        if grader is not None:
            try:
                grade = grader(folder)
                grade_files = write_grade_files(folder, grade)
            except FleetError as exc:  # recorded ungraded, as when the grade came after the record and failed
                graded.error = exc
            except Exception as exc:  # noqa: BLE001 - a fault of the grader itself: recorded ungraded, for the caller
                graded.fault = exc
            else:
                graded.grade = grade
                entry = _with_grade(entry, grade)
                statements.append(grade_row(sweep.id, result.cell_id, result.attempt, grade))
        statements.append(
            (CELLS, self._cell_row(sweep, result.cell_id, sorted([*(a for a in runs if a.attempt != result.attempt), entry],
                                                                 key=lambda a: a.attempt))))
        try:
            self._execute(*statements)
        except BaseException:
            # Not recorded: its grade did not take either (the caller records the delivery's failure, with its own).
            if graded.grade is not None:
                undo_grade_files(grade_files)
            raise
        upsert(sweep, result.cell_id, entry)
        self._journal_attempt(sweep, result.cell_id, entry)
        return graded

    def record_grade(self, sweep: SweepRecord, cell_id: str, attempt: int, grade: Grade) -> None:
        """``grade.json`` is the latest grade; ``grades.jsonl`` keeps every grade ever given (regrades too)."""
        write_grade_files(self.store.attempt_dir(sweep.id, cell_id, attempt), grade)
        summary = next((a for a in sweep.attempts.get(cell_id) or [] if a.attempt == attempt), None)
        if summary is not None:
            summary = _with_grade(summary, grade)
        runs = [summary if summary is not None and a.attempt == attempt else a for a in sweep.attempts.get(cell_id) or []]
        self._execute(
            grade_row(sweep.id, cell_id, attempt, grade),
            *([(CELLS, self._cell_row(sweep, cell_id, runs))]
              if summary is not None and cell_id in self._cell_ids(sweep) else []),
        )
        if summary is not None:
            upsert(sweep, cell_id, summary)
            self._journal_attempt(sweep, cell_id, summary)

    def record_grades(self, sweep: SweepRecord, graded: list[tuple[str, int, Path, Grade]]) -> None:
        """What ``record_grade`` records, for many attempts at once (``fleet grade`` of a whole sweep), each given as
        (cell id, attempt, its folder as ``Store.attempt_dir`` gave it, grade): the grade files of all of them
        (``write_grade_files_batch``), their index rows in one transaction and their summaries in one journal
        append. One at a time, a regrade cost a disk flush and an index commit per attempt (40 s for 10,000)."""
        if not graded:
            return
        write_grade_files_batch([(folder, g) for _, _, folder, g in graded])
        runs_of: dict[str, list[AttemptSummary]] = {}  # cell id -> its attempts, the new grades in them
        summaries: list[tuple[str, AttemptSummary]] = []
        for cell_id, attempt, _, grade in graded:
            runs = runs_of.get(cell_id) or list(sweep.attempts.get(cell_id) or [])
            summary = next((a for a in runs if a.attempt == attempt), None)
            if summary is None:
                continue
            summary = _with_grade(summary, grade)
            runs_of[cell_id] = [summary if a.attempt == attempt else a for a in runs]
            summaries.append((cell_id, summary))
        planned = self._cell_ids(sweep)
        self._execute(
            (GRADES, [grade_row(sweep.id, cell_id, attempt, g)[1] for cell_id, attempt, _, g in graded]),
            (CELLS, [self._cell_row(sweep, cell_id, runs) for cell_id, runs in runs_of.items() if cell_id in planned]),
        )
        for cell_id, summary in summaries:
            upsert(sweep, cell_id, summary)
        self._sweep = sweep
        if summaries:
            self._append_all([{"t": "attempt", "cell": cell_id, "summary": summary.model_dump(mode="json")}
                              for cell_id, summary in summaries])

    def record_override(self, sweep: SweepRecord, cell_id: str, attempt: int, override: GradeOverride) -> None:
        """A reviewer's grade of a recorded attempt: one more line of its ``grades.jsonl`` (the automatic grade and
        every earlier override stay), the summary's ``override`` journaled, and the index's ``overrides`` and
        ``cells`` rows. The caller (``harness.store.overrides.override_grade``) has checked the attempt."""
        summary = next((a for a in sweep.attempts.get(cell_id) or [] if a.attempt == attempt), None)
        if summary is None or summary.status == "dispatched" or cell_id not in self._cell_ids(sweep):
            raise UsageError(f"sweep {sweep.id}: {cell_id} has no recorded attempt {attempt}")
        append_grade_line(self.store.attempt_dir(sweep.id, cell_id, attempt), override)
        summary = summary.model_copy(update={"override": override.grade})
        runs = [summary if a.attempt == attempt else a for a in sweep.attempts.get(cell_id) or []]
        self._execute(
            override_row(sweep.id, cell_id, attempt, override),
            (CELLS, self._cell_row(sweep, cell_id, runs)),
        )
        upsert(sweep, cell_id, summary)
        self._journal_attempt(sweep, cell_id, summary)
