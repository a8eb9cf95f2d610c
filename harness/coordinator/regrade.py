"""``fleet grade SWEEP``: regrade stored attempts without rerunning anything (docs/grading.md).

Each attempt is graded from its folder as the coordinator grades it (``harness.coordinator.dispatch.grade_attempt``: its
evidence read through the records' models, the rules applied), and the grades are recorded in batches
(``SweepWriter.record_grades``: the grade files of a batch with one disk flush, the index rows in one transaction,
the summaries in one journal append). For a large sweep the grading runs in worker processes, one per core, while
this process records what comes back, in the attempts' order. One attempt at a time, a regrade of 10,000 attempts
took 40 s: a disk flush and an index commit per attempt, and one core.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Iterable, Iterator

from harness.core.errors import FleetError
from harness.core.records import Cell
from harness.core.sweep import SweepRecord
from harness.grading import Grade, evidence_from_attempt, grade
from harness.store import Store

__all__ = ["BATCH", "PARALLEL_FROM", "regrade"]

BATCH = 1000
"""Grades recorded together: a crash loses at most one batch's (a regrade gives them again)."""
PARALLEL_FROM = 200
"""Attempts from which a regrade grades in worker processes (fewer are done before a pool would have started)."""
_SPAN = 100
"""Attempts a worker grades per task: small enough that grades come back, and are recorded, while others are graded."""

Graded = tuple[str, int, Path, "Grade"]
"""(cell id, attempt, its folder as ``Store.attempt_dir`` gave it, the grade)."""

_shared: tuple[Store, SweepRecord, list[tuple[Cell, int]]] | None = None
"""Set before the pool forks: the workers find the sweep and the attempts here, so nothing is pickled to them."""


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _grade_span(span: tuple[int, int]) -> tuple[list[Graded], FleetError | None]:
    """The grades of attempts ``span[0]`` to ``span[1]`` of the shared list, in order, up to the first that cannot be
    graded (a corrupt record, an unsafe path), returned with that error, so the grades before it are still recorded."""
    assert _shared is not None
    store, sweep, attempts = _shared
    out: list[Graded] = []
    for cell, attempt in attempts[span[0]:span[1]]:
        try:
            folder = store.attempt_dir(sweep.id, cell.id, attempt)
            out.append((cell.id, attempt, folder, grade(evidence_from_attempt(folder, sweep.items[cell.item]))))
        except FleetError as exc:
            return out, exc
    return out, None


def _init_worker() -> None:
    # Ctrl-C reaches the whole process group: only the command's own process acts on it (it ends the workers).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def regrade(store: Store, sweep: SweepRecord, attempts: list[tuple[Cell, int]], jobs: int | None = None,
            batch: int = BATCH) -> int:
    """Grade ``attempts`` (cell, attempt number) of ``sweep`` from their folders and record the grades, holding the
    sweep's writer lock; returns how many were graded. ``jobs``: worker processes (default: one per core, from
    PARALLEL_FROM attempts; 1: all in this process). An attempt that cannot be graded stops the regrade, in its one
    line, once the grades before it are recorded (as when each was recorded on its own)."""
    global _shared
    if jobs is None:
        jobs = _cores() if len(attempts) >= PARALLEL_FROM else 1
    spans = [(i, min(len(attempts), i + _SPAN)) for i in range(0, len(attempts), _SPAN)]
    _shared = (store, sweep, attempts)
    pool = None
    try:
        if jobs > 1 and len(spans) > 1:
            # fork, and before the writer opens: the workers start with the sweep in memory and hold neither its
            # lock nor the index's connection.
            pool = multiprocessing.get_context("fork").Pool(min(jobs, len(spans)), initializer=_init_worker)
            results: Iterable[tuple[list[Graded], FleetError | None]] = pool.imap(_grade_span, spans)
        else:
            results = map(_grade_span, spans)
        n = _record(store, sweep, results, batch)
        if pool is not None:
            pool.close()
        return n
    except BaseException:
        if pool is not None:
            pool.terminate()  # an error or a stop signal here: no worker goes on
        raise
    finally:
        if pool is not None:
            pool.join()
        _shared = None


def _record(store: Store, sweep: SweepRecord, results: Iterable[tuple[list[Graded], FleetError | None]],
            batch: int) -> int:
    n = 0
    with store.writer(sweep.id) as w:
        for done in _batches(results, batch):
            w.record_grades(sweep, done)
            n += len(done)
    return n


def _batches(results: Iterable[tuple[list[Graded], FleetError | None]], batch: int) -> Iterator[list[Graded]]:
    """The grades of ``results`` in batches of ``batch``; a span's error is raised after the grades before it."""
    pending: list[Graded] = []
    for graded, error in results:
        pending.extend(graded)
        while len(pending) >= batch or (error is not None and pending):
            yield pending[:batch]
            pending = pending[batch:]
        if error is not None:
            raise error
    if pending:
        yield pending
