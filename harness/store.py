"""The result store: ``runs/<sweep>/...`` on disk plus ``runs/index.sqlite`` for queries.

Layout (docs/store.md)::

    runs/
      index.sqlite                       derived index of sweeps, attempts and artifacts
      <sweep-id>/
        sweep.json                       SweepRecord: plan, attempt summaries, state
        .lock                            held by the one process writing this sweep
        <host>/<item>/<agent>/r<rep>/attempt-<k>/
          meta.json                      AttemptResult without artifact contents
          answer.txt, agent.stdout, ...  the artifacts, each one's sha256 in meta.json

One writer: the coordinator holds an exclusive lock on the sweep while it writes. Every file is written
to a temporary name and renamed, so a reader never sees half a file and a crash never leaves one.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import tempfile
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Iterator

from pydantic import ValidationError

from harness.errors import StoreError, UsageError
from harness.records import AttemptMeta, AttemptResult, AttemptSummary, SweepRecord, read_meta, sha256_hex, utc_now

if TYPE_CHECKING:
    from harness.grading import Grade

__all__ = ["Store", "atomic_write"]


def write_grade_files(folder: Path, grade: "Grade") -> None:
    """``grade.json`` (the latest grade, replaced atomically) and one more line of ``grades.jsonl`` (history)."""
    atomic_write(folder / "grade.json", grade.model_dump_json(indent=2).encode())
    with open(folder / "grades.jsonl", "a", encoding="utf-8") as f:
        f.write(grade.model_dump_json() + "\n")
        f.flush()
        os.fsync(f.fileno())


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise StoreError(f"cannot write {path}: {exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _safe_relpath(name: str) -> PurePosixPath:
    """An artifact name from a worker must stay inside the attempt folder."""
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or name.startswith("meta.json"):
        raise StoreError(f"refusing artifact name {name!r}")
    return p


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY, label TEXT, created_at TEXT, finished_at TEXT, status TEXT,
    harness_commit TEXT, cells INTEGER
);
CREATE TABLE IF NOT EXISTS attempts (
    sweep_id TEXT, cell_id TEXT, attempt INTEGER, host TEXT, item TEXT, agent TEXT,
    status TEXT, reason TEXT, exit_code INTEGER, duration_s REAL, started_at TEXT, ended_at TEXT,
    model TEXT, harness_commit TEXT, path TEXT,
    PRIMARY KEY (sweep_id, cell_id, attempt)
);
CREATE TABLE IF NOT EXISTS grades (
    sweep_id TEXT, cell_id TEXT, attempt INTEGER, grader_version INTEGER, grade TEXT, outcome TEXT,
    stop TEXT, graded_at TEXT,
    PRIMARY KEY (sweep_id, cell_id, attempt, grader_version, graded_at)
);
CREATE TABLE IF NOT EXISTS artifacts (
    sweep_id TEXT, cell_id TEXT, attempt INTEGER, name TEXT, size INTEGER, sha256 TEXT,
    PRIMARY KEY (sweep_id, cell_id, attempt, name)
);
"""


class Store:
    """The results directory. Reading is free; writing a sweep needs ``writer(sweep_id)``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # -- reading ---------------------------------------------------------------------------------
    def sweep_dir(self, sweep_id: str) -> Path:
        if not sweep_id or "/" in sweep_id or sweep_id.startswith("."):
            raise UsageError(f"bad sweep id {sweep_id!r}")
        return self.root / sweep_id

    def load_sweep(self, sweep_id: str) -> SweepRecord:
        path = self.sweep_dir(sweep_id) / "sweep.json"
        try:
            return SweepRecord.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            known = ", ".join(self.list_sweeps()[-5:]) or "none"
            raise UsageError(f"{self.root}: no sweep {sweep_id!r} (latest: {known})") from None
        except ValidationError as exc:
            raise StoreError(f"{path}: not a valid sweep record: {exc.errors()[0]['msg']}") from None

    def list_sweeps(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "sweep.json").is_file())

    def latest_sweep(self) -> str:
        """The newest sweep's id (ids sort by time); none yet is the user's error."""
        sweeps = self.list_sweeps()
        if not sweeps:
            raise UsageError(f"{self.root}: no sweeps yet")
        return sweeps[-1]

    def attempt_dir(self, sweep_id: str, cell_id: str, attempt: int) -> Path:
        return self.sweep_dir(sweep_id) / cell_id / f"attempt-{attempt}"

    def load_meta(self, sweep_id: str, cell_id: str, attempt: int) -> AttemptMeta:
        """The attempt's meta.json through ``AttemptMeta`` (older versions migrated); a bad file is one
        ``StoreError`` line naming the file and the key."""
        path = self.attempt_dir(sweep_id, cell_id, attempt) / "meta.json"
        if not path.is_file():
            raise UsageError(f"{path}: no such attempt")
        meta = read_meta(path)
        if not isinstance(meta, AttemptMeta):
            raise StoreError(f"{path}: kind: {meta.kind!r} is an imported session's record, not a sweep attempt's")
        return meta

    # -- writing ---------------------------------------------------------------------------------
    @contextmanager
    def writer(self, sweep_id: str) -> Iterator["SweepWriter"]:
        """Hold the sweep's lock while writing; a second writer gets a clear error, not a race."""
        d = self.sweep_dir(sweep_id)
        d.mkdir(parents=True, exist_ok=True)
        lock = open(d / ".lock", "a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise UsageError(f"sweep {sweep_id} is being written by another fleet process") from None
        try:
            yield SweepWriter(self, sweep_id)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()

    @contextmanager
    def index(self) -> Iterator[sqlite3.Connection]:
        self.root.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.root / "index.sqlite", timeout=30)
        try:
            db.executescript(_SCHEMA)
            with db:
                yield db
        except sqlite3.Error as exc:
            raise StoreError(f"{self.root / 'index.sqlite'}: {exc}") from exc
        finally:
            db.close()


class SweepWriter:
    """Writes one sweep. Only made by ``Store.writer``, which holds the lock."""

    def __init__(self, store: Store, sweep_id: str) -> None:
        self.store = store
        self.sweep_id = sweep_id

    def save_sweep(self, sweep: SweepRecord) -> None:
        atomic_write(self.store.sweep_dir(sweep.id) / "sweep.json", sweep.model_dump_json(indent=2).encode())
        with self.store.index() as db:
            db.execute(
                "INSERT OR REPLACE INTO sweeps VALUES (?,?,?,?,?,?,?)",
                (sweep.id, sweep.label, sweep.created_at, sweep.finished_at, sweep.status, sweep.harness_commit, len(sweep.cells)),
            )

    def record_attempt(self, sweep: SweepRecord, result: AttemptResult) -> bool:
        """Store one attempt's files, meta.json and index rows, and update ``sweep`` in memory.

        Returns False (and writes nothing) when that attempt is already recorded: a task delivered
        twice must not record a cell twice.
        """
        runs = sweep.attempts.setdefault(result.cell_id, [])
        summary = next((a for a in runs if a.attempt == result.attempt), None)
        if summary is not None and summary.status != "dispatched":
            return False
        folder = self.store.attempt_dir(sweep.id, result.cell_id, result.attempt)
        # Check every artifact before writing any, so a refused delivery leaves no file behind.
        files = []
        for art in result.artifacts:
            data = art.data()
            if sha256_hex(data) != art.sha256 or len(data) != art.size:
                raise StoreError(f"{result.cell_id} attempt {result.attempt}: artifact {art.name} arrived corrupted")
            files.append((folder / _safe_relpath(art.name), data))
        for path, data in files:
            atomic_write(path, data)
        # meta.json last: its presence means the attempt is complete on disk.
        atomic_write(folder / "meta.json", json.dumps(result.meta(), indent=2).encode())
        entry = AttemptSummary(
            attempt=result.attempt,
            task_id=summary.task_id if summary else "",
            status=result.status,
            reason=result.reason,
            exit_code=result.exit_code,
            dispatched_at=summary.dispatched_at if summary else "",
            recorded_at=utc_now(),
            duration_s=result.duration_s,
        )
        if summary is None:
            runs.append(entry)
            runs.sort(key=lambda a: a.attempt)
        else:
            runs[runs.index(summary)] = entry
        with self.store.index() as db:
            db.execute(
                "INSERT OR REPLACE INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    sweep.id, result.cell_id, result.attempt, result.host, result.item, result.agent,
                    result.status, result.reason, result.exit_code, result.duration_s, result.started_at,
                    result.ended_at, str(result.model.get("id", "")), result.harness_commit,
                    str(folder.relative_to(self.store.root)),
                ),
            )
            db.executemany(
                "INSERT OR REPLACE INTO artifacts VALUES (?,?,?,?,?,?)",
                [(sweep.id, result.cell_id, result.attempt, a.name, a.size, a.sha256) for a in result.artifacts],
            )
        self.save_sweep(sweep)
        return True

    def record_grade(self, sweep: SweepRecord, cell_id: str, attempt: int, grade: "Grade") -> None:
        """``grade.json`` is the latest grade; ``grades.jsonl`` keeps every grade ever given (regrades too)."""
        write_grade_files(self.store.attempt_dir(sweep.id, cell_id, attempt), grade)
        for a in sweep.attempts.get(cell_id) or []:
            if a.attempt == attempt:
                a.grade = grade.grade
        with self.store.index() as db:
            db.execute(
                "INSERT OR REPLACE INTO grades VALUES (?,?,?,?,?,?,?,?)",
                (sweep.id, cell_id, attempt, grade.grader_version, grade.grade, grade.outcome,
                 grade.stop.reason if grade.stop else "", grade.graded_at),
            )
        self.save_sweep(sweep)
