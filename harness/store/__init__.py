"""The result store: ``runs/<sweep>/...`` on disk plus ``runs/index.sqlite`` for queries.

Layout (docs/store.md)::

    runs/
      index.sqlite                       derived index of sweeps, attempts and artifacts
      <sweep-id>/
        sweep.json                       SweepRecord snapshot: plan, attempt summaries, state
        journal.jsonl                    every change since that snapshot, one JSON line each
        .lock                            held by the one process writing this sweep
        <host>/<item>/<agent>/r<rep>/attempt-<k>/
          meta.json                      AttemptResult without artifact contents
          answer.txt, agent.stdout, ...  the artifacts, each one's sha256 in meta.json

One writer: the coordinator holds an exclusive lock on the sweep while it writes. Every file is written
to a temporary name and renamed, so a reader never sees half a file and a crash never leaves one.

Why a journal: a sweep's state changes a few times per attempt (dispatched, recorded, graded). Rewriting
the whole of sweep.json each time costs what the sweep's size costs (34 ms per attempt at 3,000 cells,
growing); appending one line to journal.jsonl costs the same at 100 cells and at 100,000. The state is
sweep.json plus the journal replayed over it (every entry is an idempotent upsert, so replaying one the
snapshot already holds changes nothing). A new snapshot is written when the journal has grown past the
number of cells (so the cost stays flat, amortized), when the writer closes, and on demand.
"""

from __future__ import annotations

import base64
from collections import Counter
import fcntl
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, BinaryIO, Callable, Iterator, cast, get_args

from pydantic import ValidationError

from harness.core.nesting import loads_json
from harness.core.errors import ArtifactCorrupt, ArtifactRefused, FleetError, StoreError, UnsafeStoredPath, UsageError
from harness.core.records import AttemptMeta, AttemptResult, AttemptSummary, Cell, SweepStatus, read_meta, sha256_hex, utc_now

if TYPE_CHECKING:
    from harness.grading import Grade
    from harness.grading.override import GradeOverride
    # Imported where a sweep is read: writing an attempt's files (`fleet import`) needs neither the sweep's record
    # nor the catalog's and inventory's models it embeds.
    from harness.core.sweep import SweepRecord

__all__ = ["Store", "atomic_write"]


def write_grade_files(folder: Path, grade: "Grade") -> "list[tuple[Path, int]]":
    """``grade.json`` (the latest grade, replaced atomically) and one more line of ``grades.jsonl`` (history), with one
    disk flush for both (``write_grade_files_batch``). Returns what ``_undo_grade_files`` needs to take them back."""
    return write_grade_files_batch([(folder, grade)])


def append_grade_line(folder: Path, record: "Grade | GradeOverride") -> None:
    """One more line of the attempt's ``grades.jsonl``: an automatic grade or a reviewer's override, fsynced."""
    _append_line(folder, record, fsync=True)


def _append_line(folder: Path, record: "Grade | GradeOverride", fsync: bool) -> None:
    try:
        with _open_own(folder / "grades.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, "a") as f:
            f.write((record.model_dump_json() + "\n").encode())
            f.flush()
            if fsync:
                os.fsync(f.fileno())
    except OSError as exc:
        raise StoreError(f"cannot write {folder / 'grades.jsonl'}: {exc.strerror or exc}") from exc


def _history_size(folder: Path) -> int:
    """The size of the folder's ``grades.jsonl``; -1 when there is none."""
    try:
        return os.lstat(folder / "grades.jsonl").st_size
    except OSError:
        return -1


def _cut_history(folder: Path, size: int) -> None:
    """``grades.jsonl`` cut back to ``size`` bytes, or removed if there was none (-1): the lines appended since are
    taken back (shrinking a file needs no space). Best effort: a history that cannot be cut keeps a line of a grade
    that did not take."""
    if size < 0:
        try:
            (folder / "grades.jsonl").unlink(missing_ok=True)
        except OSError:
            pass
        return
    try:
        fd = os.open(folder / "grades.jsonl", os.O_WRONLY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass
    finally:
        os.close(fd)


def _undo_grade_files(written: "list[tuple[Path, int]]") -> None:
    """Take back what ``write_grade_files`` wrote (a later step of the same record failed): each folder's history cut
    back to where it was, its grade.json removed (the attempt it grades was not recorded)."""
    for folder, size in written:
        _cut_history(folder, size)
        (folder / "grade.json").unlink(missing_ok=True)


def write_grade_files_batch(graded: "list[tuple[Path, Grade]]") -> "list[tuple[Path, int]]":
    """Each folder's ``grade.json`` (the latest grade, replaced atomically) and one more line of its ``grades.jsonl``
    (history), for one attempt or many (a regrade of a whole sweep), with one disk flush for them all: every new
    grade.json is written to a temporary name and every history line appended, the file systems are flushed
    (``FileSystems``; an fsync of each file where there is no ``syncfs``), then every grade.json is renamed into place.
    So a reader sees the old grade.json or the new one, never half of one, and a history line is on disk before the
    grade it records has its name. A flush per file cost 0.3 ms each here (two per attempt: a third of recording a
    short one, 6 s of a 10,000-attempt regrade). When any of it fails, what did not take is taken back: the temporary
    files removed and the lines of the grades not renamed cut off again, so the history holds a line for each grade
    that took, and only those. Returns each folder with its history's size before (``_undo_grade_files``)."""
    pending: list[tuple[Path, str, int]] = []  # folder, grade.json's temporary name, the history's size before
    renamed = 0
    try:
        with FileSystems() as systems:
            each = not systems.together
            for folder, grade in graded:
                systems.before_write(folder)
                path = folder / "grade.json"
                size = _history_size(folder)
                try:
                    tmp = _temp_beside(path, grade.model_dump_json(indent=2).encode(), fsync=each)
                except OSError as exc:
                    raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
                pending.append((folder, tmp, size))
                _append_line(folder, grade, fsync=each)
            if not each:
                systems.flush()
        for folder, tmp, _ in pending:
            try:
                os.replace(tmp, folder / "grade.json")
            except OSError as exc:
                raise StoreError(f"cannot write {folder / 'grade.json'}: {exc.strerror or exc}") from exc
            renamed += 1
    finally:
        for folder, tmp, size in pending[renamed:]:
            Path(tmp).unlink(missing_ok=True)
            _cut_history(folder, size)
    return [(folder, size) for folder, _, size in pending]


def _syncfs() -> Callable[[int], int] | None:
    """The C library's ``syncfs`` (Linux), or None where there is none."""
    global _SYNCFS
    if _SYNCFS is False:
        import ctypes

        _SYNCFS = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    return _SYNCFS  # type: ignore[return-value]


_SYNCFS: object = False  # not looked up yet


class FileSystems:
    """The file systems a batch of writes lands on, made durable together: one ``syncfs`` (Linux) per file system
    for the whole batch, where an fsync of each file is a disk flush each; ``os.sync`` elsewhere.

    Each file system is held open (a folder on it) from before the first write of the batch there, not only for the
    flush: a file system's flush reports the write errors that happened since it was opened (Linux 5.8 and later),
    so an error while the kernel wrote the batch's files early is reported by the flush too, as an fsync of each file
    would report it. Call ``before_write(folder)`` before writing in ``folder``, then ``flush()``."""

    def __init__(self) -> None:
        self.together = _syncfs() is not None
        """One flush covers the whole file system (``syncfs``); else each file must be fsynced as it is written."""
        self._held: dict[int, tuple[int, Path]] = {}  # st_dev -> (an open folder on it, that folder)
        self._last: Path | None = None

    def before_write(self, folder: Path) -> None:
        if not self.together or folder == self._last:
            return
        try:
            fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise StoreError(f"cannot write in {folder}: {exc.strerror or exc}") from exc
        dev = os.fstat(fd).st_dev
        if dev in self._held:
            os.close(fd)
        else:
            self._held[dev] = (fd, folder)
        self._last = folder

    def flush(self) -> None:
        if not self.together:
            os.sync()
            return
        for fd, folder in self._held.values():
            flush_file_system(fd, folder)

    def __enter__(self) -> "FileSystems":
        return self

    def __exit__(self, *exc: object) -> None:
        for fd, _ in self._held.values():
            os.close(fd)
        self._held = {}


def flush_file_system(fd: int, folder: Path) -> None:
    """``syncfs`` on the file system of ``fd`` (an open ``folder``); a ``StoreError`` naming the folder if it fails."""
    import ctypes

    syncfs = _syncfs()
    assert syncfs is not None
    if syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise StoreError(f"cannot flush {folder} to disk: {os.strerror(err)}")


def _open_own(path: Path, flags: int, mode: str) -> BinaryIO:
    """Open a file of the store itself for appending or locking, never through a symbolic link (O_NOFOLLOW): a
    crafted store's ``grades.jsonl`` or ``.lock`` linked to a file elsewhere must not make a write land there."""
    fd = os.open(path, flags | os.O_NOFOLLOW, 0o644)
    return cast(BinaryIO, os.fdopen(fd, mode + "b"))


def _temp_beside(path: Path, data: bytes, fsync: bool) -> str:
    """``data`` written (and fsynced if ``fsync``) to a new temporary file in ``path``'s folder, which exists; its
    name. Nothing is left behind when it fails."""
    # A short temporary name, not ".NAME.XXXX.tmp": a NAME of up to 255 bytes (legal) must stay writable.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fleet-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temp_beside(path, data, fsync=True)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc}") from exc
    try:
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise StoreError(f"cannot write {path}: {exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_all(files: "list[tuple[Path, bytes]]", written: "list[Path] | None" = None) -> None:
    """What ``atomic_write`` does for each of ``files`` (path, data), in their order, with one disk flush for them
    all: each is written to a temporary name beside its target, the file systems written on flushed once each
    (``FileSystems``), then each file renamed over its target, in order. So a reader sees a file whole or not at all,
    and every file's bytes are on disk before any of them has its name, as with an fsync of each before its rename;
    a flush per file was most of recording a short attempt (10 of them: 2.4 of its 5.4 ms here). Where there is no
    ``syncfs`` (macOS) each file is fsynced as it is written, as ``atomic_write`` does.

    ``written`` gets each target once it has been renamed into place (for a caller that removes them again when a
    later step fails). Raises ``StoreError`` naming the file (or the folder whose file system could not be
    flushed); no temporary file is left."""
    temps: list[tuple[str, Path]] = []
    done = 0
    try:
        with FileSystems() as systems:
            fsync_each = not systems.together
            for path, data in files:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    systems.before_write(path.parent)
                    temps.append((_temp_beside(path, data, fsync_each), path))
                except OSError as exc:
                    raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
            if not fsync_each:
                systems.flush()
        for tmp, path in temps:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
            done += 1
            if written is not None:
                written.append(path)
    finally:
        for tmp, _ in temps[done:]:
            Path(tmp).unlink(missing_ok=True)


def storable_name(name: str) -> str:
    """An artifact name as the store can keep it: a name that is not valid Unicode (a file name of raw bytes on
    the host, decoded with surrogates) gets its bad bytes written as ``\\udcff`` escapes, so it can be a file
    name, a JSON string and an index row; the file is kept, under a name that says what it was."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


NAME_MAX = 255
"""Bytes of one file name part on the file systems a results directory lives on (ext4, APFS, XFS)."""
NAME_BUDGET = 1024
"""Bytes of an artifact's whole name under its attempt folder: well inside Linux's PATH_MAX (4096) with the
results directory's own path in front, and inside macOS's (1024) for a copy read there with a short prefix."""
RENAMED = "renamed"
"""The attempt folder's folder for files whose path, even with shortened parts, is longer than NAME_BUDGET
(or whose new name clashed): ``renamed/<hash of the original name>~<the name's tail>``."""


def _name_bytes(name: str) -> bytes:
    """The exact bytes of a host file name that reached Python decoded with surrogates (surrogateescape); a lone
    surrogate no file system gives (from crafted JSON) is kept as its UTF-8-like encoding."""
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogatepass")


def _digest(raw: bytes, n: int) -> str:
    return hashlib.sha256(raw).hexdigest()[:n]


def _cut(text: str, limit: int, tail: bool = False) -> str:
    """At most ``limit`` UTF-8 bytes of ``text`` (its start, or its end), never cutting a character in two."""
    data = text.encode("utf-8")
    part = data[-limit:] if tail else data[:limit]
    return part.decode("utf-8", "ignore")


def _flat_name(name: str, n: int = 1) -> str:
    tail = _cut(storable_name(name).rsplit("/", 1)[-1], 80, tail=True).lstrip(".")
    return f"{RENAMED}/{_digest(_name_bytes(name), 32)}~{tail}" + (f"~{n}" if n > 1 else "")


def _fitting_name(name: str) -> str:
    """``name`` escaped (storable_name), each part over NAME_MAX bytes cut to its start and a hash of the whole
    part, and, when the whole is still over NAME_BUDGET bytes, moved to the RENAMED folder."""
    parts = storable_name(name).split("/")
    for i, part in enumerate(parts):
        if len(part.encode("utf-8")) > NAME_MAX:
            parts[i] = f"{_cut(part, NAME_MAX - 24)}~{_digest(_name_bytes(name.split('/')[i]), 16)}"
    fitted = "/".join(parts)
    return fitted if len(fitted.encode("utf-8")) <= NAME_BUDGET else _flat_name(name)


def storable_names(names: list[str]) -> list[str]:
    """The names ``names`` are stored under, in order. A name the store can keep as it is keeps it; any other is
    renamed (``_fitting_name``), and a new name that would clash with another name or folder of the attempt (a
    file literally named ``a\\udcff`` beside one named by the bytes ``a\\xff``) moves to the RENAMED folder, so a
    rename never costs a file. Names given twice are left alone, for the caller to refuse."""
    fitted = [_fitting_name(n) for n in names]
    taken: set[str] = set()
    folders: set[str] = set()

    def take(name: str) -> None:
        taken.add(name)
        folders.update(str(p) for p in PurePosixPath(name).parents)

    def clashes(name: str) -> bool:
        return name in taken or name in folders or any(str(p) in taken for p in PurePosixPath(name).parents)

    for n, f in zip(names, fitted):
        if n == f:
            take(n)
    out = []
    for n, f in zip(names, fitted):
        if n != f:
            k = 1
            while clashes(f):
                k += 1
                if k > 1000:
                    raise ArtifactRefused(f"artifact name {storable_name(n)!r}: no free name to store it under")
                f = _flat_name(n, k - 1)
            take(f)
        out.append(f)
    return out


RECORD_FILES = ("meta.json", "grade.json", "grades.jsonl", "answer.txt", "workspace.manifest.json", "receipt.json",
                "checks.json", "transcript.jsonl")
"""The files of an attempt folder the harness itself reads or appends to: none may be a link (the store never
writes one), so a crafted store cannot make `fleet show`, `grade` or `report` read or write through one."""


def _id_problem(value: str) -> str:
    """Why ``value`` cannot be one part of a path in the store ('' when it can)."""
    if not value:
        return "is empty"
    if value in (".", ".."):
        return f"{value!r} names a folder above or at itself"
    if "/" in value or "\\" in value:
        return f"{value!r} holds a path separator"
    if "\x00" in value:
        return f"{value!r} holds a NUL byte"
    return ""


def check_stored_ids(sweep: SweepRecord, file: Path, folder_id: str) -> None:
    """Every id of ``sweep`` (read from ``file``) that a path is built from stays one safe part of a path, so
    no folder made from them leaves the sweep's folder: the sweep's own id is its folder's name, each cell's
    host, item and agent are plain names and its id is HOST/ITEM/AGENT/rREP, and attempts are listed only for
    planned cells. The first that is not is an ``UnsafeStoredPath`` naming the file and the key."""
    where = str(file)
    if sweep.id != folder_id:
        raise UnsafeStoredPath(where, "id", f"{sweep.id!r} is not the id of the folder it is in ({folder_id!r})")
    planned = set()
    for i, c in enumerate(sweep.cells):
        for key in ("host", "item", "agent"):
            why = _id_problem(getattr(c, key))
            if why:
                raise UnsafeStoredPath(where, f"cells[{i}].{key}", why)
        if c.id != Cell.make_id(c.host, c.item, c.agent, c.rep):
            raise UnsafeStoredPath(where, f"cells[{i}].id", f"{c.id!r} is not the cell's HOST/ITEM/AGENT/rREP "
                                   f"({Cell.make_id(c.host, c.item, c.agent, c.rep)!r})")
        if c.id in planned:
            # One cell twice would be counted twice (two repetitions of one, a rate over more cells than ran).
            raise UnsafeStoredPath(where, f"cells[{i}].id", f"{c.id!r} is listed twice")
        planned.add(c.id)
    for cell_id in sweep.attempts:
        if cell_id not in planned:
            raise UnsafeStoredPath(where, f"attempts.{cell_id}", "not a planned cell")


def _safe_relpath(name: str) -> PurePosixPath:
    """An artifact name from a worker must stay inside the attempt folder, and never replace the records."""
    p = PurePosixPath(name)
    if (p.is_absolute() or ".." in p.parts or not p.parts or "\x00" in name
            or p.parts[0] in ("meta.json", "grade.json", "grades.jsonl")):
        raise ArtifactRefused(f"refusing artifact name {name!r}: it points outside the attempt folder or at its record")
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
CREATE TABLE IF NOT EXISTS sweep_plans (
    sweep_id TEXT PRIMARY KEY, hosts TEXT, items INTEGER, agents TEXT
);
CREATE TABLE IF NOT EXISTS cells (
    sweep_id TEXT, cell_id TEXT, host TEXT, item TEXT, agent TEXT, rep INTEGER, attempts INTEGER,
    attempt INTEGER, status TEXT, grade TEXT, auto_grade TEXT, override TEXT, stop TEXT, duration_s REAL,
    PRIMARY KEY (sweep_id, cell_id)
);
CREATE INDEX IF NOT EXISTS cells_by_host ON cells (host, sweep_id);
CREATE TABLE IF NOT EXISTS overrides (
    sweep_id TEXT, cell_id TEXT, attempt INTEGER, grade TEXT, automatic TEXT, reason TEXT, author TEXT, at TEXT,
    PRIMARY KEY (sweep_id, cell_id, attempt, at)
);
"""


JOURNAL = "journal.jsonl"


class Store:
    """The results directory. Reading is free; writing a sweep needs ``writer(sweep_id)``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # -- reading ---------------------------------------------------------------------------------
    def sweep_dir(self, sweep_id: str) -> Path:
        if not sweep_id or "/" in sweep_id or sweep_id.startswith(".") or "\x00" in sweep_id:
            raise UsageError(f"bad sweep id {sweep_id!r}")
        return self.root / sweep_id

    def load_sweep(self, sweep_id: str) -> SweepRecord:
        """The sweep's state: its snapshot with the journal replayed over it. Every id a path is built from is
        checked (``check_stored_ids``); a snapshot or journal that is a link is refused, never read."""
        path = self.sweep_dir(sweep_id) / "sweep.json"
        for own in (path, path.parent / JOURNAL):
            if own.is_symlink():
                raise UnsafeStoredPath(str(own), "", "is a symbolic link (the store never writes one): not read")
        from harness.core.sweep import SweepRecord

        try:
            sweep = SweepRecord.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            known = ", ".join(self.list_sweeps()[-5:]) or "none"
            raise UsageError(f"{self.root}: no sweep {sweep_id!r} (latest: {known})") from None
        except ValidationError as exc:
            raise StoreError(f"{path}: not a valid sweep record: {_first_error(exc)}") from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
        check_stored_ids(sweep, path, sweep_id)
        _replay(sweep, path.parent / JOURNAL)
        return sweep

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

    def is_being_written(self, sweep_id: str) -> bool:
        """True while some process holds the sweep's writer lock (a coordinator is running it). Opens the lock
        read-only and asks for a shared lock for an instant, so it works on a read-only copy of the results;
        a writer that asks in that instant waits for it (``Store.writer`` retries briefly)."""
        lock_path = self.sweep_dir(sweep_id) / ".lock"
        try:
            # O_NONBLOCK, and a regular file only: a FIFO planted as .lock blocked open() (and `fleet status`) for
            # ever; a device or a link elsewhere is no lock of ours either.
            fd = os.open(lock_path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return False  # no lock file: nobody ever wrote it here, or it cannot be read: say nothing
        lock = os.fdopen(fd, "rb")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            lock.close()
            return False
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
            return False

    def inside(self, sweep_id: str, path: Path, file: str, key: str) -> Path:
        """``path``, once it is checked to lie inside the sweep's folder with every link followed: the one check of
        a path built from a stored id or name (the sweep's folder itself comes from the command line). Outside,
        or unresolvable (a link loop), it is an ``UnsafeStoredPath`` naming ``file`` and ``key``."""
        top = self.sweep_dir(sweep_id)
        try:
            real, real_top = path.resolve(), top.resolve()
        except (OSError, RuntimeError) as exc:
            raise UnsafeStoredPath(file, key, f"{path}: cannot follow: {exc}") from None
        if real != real_top and real_top not in real.parents:
            raise UnsafeStoredPath(file, key, f"{path} leads outside the sweep's folder {top} (to {real})")
        return path

    def attempt_dir(self, sweep_id: str, cell_id: str, attempt: int) -> Path:
        """The attempt's folder, checked (``inside``) with the record files the harness reads and writes in it:
        none of them may be a symbolic link."""
        file, key = str(self.sweep_dir(sweep_id) / "sweep.json"), f"attempts.{cell_id}"
        rel = PurePosixPath(cell_id)
        if not cell_id or rel.is_absolute() or ".." in rel.parts or "\x00" in cell_id:
            raise UnsafeStoredPath(file, key, f"cell id {cell_id!r} is not a path inside the sweep's folder")
        top = self.sweep_dir(sweep_id)
        folder = top / cell_id / f"attempt-{attempt}"
        if _link_below(top, rel.parts + (f"attempt-{attempt}",)):
            # Only a link under the sweep's folder can lead out of it: then every link is followed and the end
            # checked (a regrade or a report asks for 10,000 folders, and resolving each costs a dozen lstats).
            self.inside(sweep_id, folder, file, key)
        for name in _links_among(folder, RECORD_FILES):
            raise UnsafeStoredPath(file, key, f"{folder / name} is a symbolic link (the store never writes one)")
        return folder

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

    def query_index(self, *queries: tuple[str, tuple]) -> list[list[tuple]] | None:
        """Each query's rows from the index, opened read-only on one connection (reading must work on a read-only
        copy and must never create an index); None when there is no index or it cannot be read (an older layout,
        a damaged file): the caller reads the sweeps' files instead."""
        path = self.root / "index.sqlite"
        if not path.is_file():
            return None
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
            try:
                return [db.execute(sql, params).fetchall() for sql, params in queries]
            finally:
                db.close()
        except sqlite3.Error:
            return None

    # -- writing ---------------------------------------------------------------------------------
    def claim_sweep_id(self, base: str) -> str:
        """Make the sweep's folder under the first free id ``base``, ``base-2``, ...; the folder's creation
        is the claim, so two coordinators started in the same second with the same label never share an id
        (and so never share task ids or remote attempt folders)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.root}: {exc.strerror or exc}") from exc
        n = 1
        while True:
            sweep_id = base if n == 1 else f"{base}-{n}"
            try:
                (self.root / sweep_id).mkdir()
                return sweep_id
            except FileExistsError:
                n += 1
            except OSError as exc:
                raise StoreError(f"cannot create {self.root / sweep_id}: {exc.strerror or exc}") from exc

    def discard_sweep(self, sweep_id: str) -> None:
        """Remove a sweep that never dispatched anything (it failed before it began), so it never
        becomes "the latest sweep"."""
        shutil.rmtree(self.sweep_dir(sweep_id), ignore_errors=True)

    @contextmanager
    def writer(self, sweep_id: str) -> Iterator["SweepWriter"]:
        """Hold the sweep's lock while writing; a second writer gets a clear error, not a race."""
        d = self.sweep_dir(sweep_id)
        try:
            d.mkdir(parents=True, exist_ok=True)
            lock = _open_own(d / ".lock", os.O_RDWR | os.O_APPEND | os.O_CREAT, "a+")
        except OSError as exc:
            raise StoreError(f"cannot write {d}: {exc.strerror or exc}") from exc
        # A reader (`fleet status`) holds a shared lock for an instant: wait that out, never a real writer.
        deadline = time.monotonic() + 2.0
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    lock.close()
                    raise UsageError(f"sweep {sweep_id} is being written by another fleet process") from None
                time.sleep(0.05)
        try:
            # `fleet prune` renames a sweep away while it holds this lock: a writer that waited for it must not
            # write a half sweep into a new folder of the same name.
            same = os.stat(d / ".lock", follow_symlinks=False).st_ino == os.fstat(lock.fileno()).st_ino
        except OSError:
            same = False
        if not same:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
            raise UsageError(f"sweep {sweep_id} was removed (fleet prune) while this waited to write it") from None
        w = SweepWriter(self, sweep_id)
        try:
            yield w
        finally:
            try:
                w.close()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
                lock.close()

    @contextmanager
    def index(self) -> Iterator[sqlite3.Connection]:
        db = self._connect_index()
        try:
            with db:
                yield db
        except sqlite3.Error as exc:
            raise StoreError(f"{self.root / 'index.sqlite'}: {exc}") from exc
        finally:
            db.close()

    def _connect_index(self) -> sqlite3.Connection:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.root / "index.sqlite", timeout=30)
            db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{self.root / 'index.sqlite'}: {exc}") from exc
        return db


def _link_below(top: Path, parts: tuple[str, ...]) -> bool:
    """Whether a part of ``top / parts...`` under ``top`` is a symbolic link, or cannot be looked at (then the
    caller follows the path to be sure). ``parts`` hold no ``..`` (checked before). A part that does not exist ends
    the walk: nothing under it exists either, so no link there can lead anywhere."""
    path = os.fspath(top)
    for part in parts:
        path = os.path.join(path, part)  # a string, not a Path: this runs for every attempt of a regrade
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return True
        except FileNotFoundError:
            return False
        except OSError:
            return True
    return False


def _links_among(folder: Path, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` in ``folder`` that are symbolic links: one listing of the folder, not an lstat per name
    (a folder that cannot be listed is looked at name by name)."""
    try:
        with os.scandir(folder) as entries:
            links = {e.name for e in entries if e.name in names and e.is_symlink()}
        return [n for n in names if n in links]
    except FileNotFoundError:
        return []
    except OSError:
        return [n for n in names if (folder / n).is_symlink()]


def _first_error(exc: ValidationError) -> str:
    e = exc.errors()[0]
    where = ".".join(str(x) for x in e.get("loc", ()))
    return f"{where}: {e['msg']}" if where else e["msg"]


def _replay(sweep: SweepRecord, journal: Path) -> None:
    """Apply the journal's entries to the snapshot, in order. A last line cut by a crash (no newline) is
    ignored: it was never acknowledged. Any other bad line is a corrupt store, said with its line."""
    try:
        data = journal.read_bytes()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"{journal}: cannot read: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    if lines and lines[-1]:
        lines = lines[:-1]  # a torn last write
    planned = {c.id for c in sweep.cells}
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            entry = loads_json(raw)
            kind = entry["t"]
            if kind == "attempt":
                summary = AttemptSummary.model_validate(entry["summary"])
                if entry["cell"] not in planned:
                    raise UnsafeStoredPath(str(journal), f"line {n}: cell", f"{entry['cell']!r} is not a planned cell")
                _upsert(sweep, entry["cell"], summary)
            elif kind == "status":
                status, finished_at = entry["status"], entry.get("finished_at", sweep.finished_at)
                if status not in _STATUSES or not isinstance(finished_at, str):
                    raise ValueError(f"status entry {status!r}, finished_at {finished_at!r}: not a sweep state")
                sweep.status, sweep.finished_at = status, finished_at
            else:
                raise ValueError(f"unknown entry type {kind!r}")
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            why = _first_error(exc) if isinstance(exc, ValidationError) else str(exc)
            raise StoreError(f"{journal}: line {n}: {why}") from None


_STATUSES = get_args(SweepStatus)


def _cut_torn_tail(journal: Path) -> None:
    """Before a writer appends: a last line a crash cut short (no newline) was never acknowledged and readers
    ignore it; cut it off, or the next entry would be glued to it and make the whole journal unreadable."""
    try:
        with open(journal, "r+b") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
                f.flush()
                os.fsync(f.fileno())
    except FileNotFoundError:
        return


def _upsert(sweep: SweepRecord, cell_id: str, summary: AttemptSummary) -> None:
    runs = sweep.attempts.setdefault(cell_id, [])
    for i, a in enumerate(runs):
        if a.attempt == summary.attempt:
            runs[i] = summary
            return
    runs.append(summary)
    runs.sort(key=lambda a: a.attempt)


@dataclass
class Graded:
    """What ``SweepWriter.record_graded`` did with the grade of the attempt it recorded."""

    grade: "Grade | None" = None
    """The grade recorded with the attempt; None when there is none (see ``error``)."""
    error: FleetError | None = None
    """Why the attempt was recorded ungraded (its evidence could not be read, or the grade not written)."""
    fault: Exception | None = None
    """Any other exception of the grader (a fault of the grader, not of the attempt): the attempt is recorded ungraded
    all the same, and the caller raises it."""


def _with_grade(summary: AttemptSummary, grade: "Grade") -> AttemptSummary:
    """The attempt's summary with its grade: the grade's name, its stop and the failure code ``classify`` gives."""
    from harness.core.failures import classify

    failure = classify(summary.status, summary.reason, grade.grade, grade.failure)
    return summary.model_copy(update={"grade": grade.grade, "failure": failure.reason if failure else "",
                                      "stop": grade.stop.reason if grade.stop else ""})


def _grade_row(sweep_id: str, cell_id: str, attempt: int, grade: "Grade") -> tuple[str, tuple]:
    """The index's ``grades`` row of an attempt's grade, with its statement."""
    return ("INSERT OR REPLACE INTO grades VALUES (?,?,?,?,?,?,?,?)",
            (sweep_id, cell_id, attempt, grade.grader_version, grade.grade, grade.outcome,
             grade.stop.reason if grade.stop else "", grade.graded_at))


class SweepWriter:
    """Writes one sweep. Only made by ``Store.writer``, which holds the lock.

    Every change to the sweep's state goes through here: ``save_sweep`` writes a snapshot, the other
    methods append one journal line each (flushed and fsynced before they return)."""

    def __init__(self, store: Store, sweep_id: str) -> None:
        self.store = store
        self.sweep_id = sweep_id
        self._sweep: SweepRecord | None = None
        self._journal_lines = 0
        self._unsynced = False
        """Journal lines were written that no fsync has flushed to disk yet (``dispatched(durable=False)``)."""
        self._journal: BinaryIO | None = None
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
        """Append ``entries`` to the journal in one write and one fsync (a batch costs what one entry costs). Not
        ``durable``: written (a process that dies after it leaves it on file) but not flushed to disk yet; the next
        durable append, ``sync_journal`` or a snapshot flushes it."""
        path = self.store.sweep_dir(self.sweep_id) / JOURNAL
        line = b"".join(json.dumps(entry, separators=(",", ":")).encode() + b"\n" for entry in entries)
        start = -1
        try:
            if self._journal is None:
                if path.is_symlink():
                    raise UnsafeStoredPath(str(path), "", "is a symbolic link (the store never writes one): not written")
                _cut_torn_tail(path)
                # Unbuffered: a write the disk refused half-way is cut off below, not kept in a buffer that a
                # later flush would glue to the next entry.
                self._journal = os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644), "ab", buffering=0)
            fd = self._journal.fileno()
            start = os.fstat(fd).st_size
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        except OSError as exc:
            self._drop_torn_entry(start)
            raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
        self._unsynced = not durable
        self._journal_lines += len(entries)
        sweep = self._sweep
        if sweep is not None and self._journal_lines > max(1000, len(sweep.cells)):
            self.save_sweep(sweep)

    def _drop_torn_entry(self, start: int) -> None:
        """An entry the disk refused (full, quota): cut what of it was written, so the journal ends at its last
        whole line (shrinking a file needs no space), and open the journal afresh next time."""
        journal, self._journal = self._journal, None
        if journal is None:
            return
        try:
            if start >= 0:
                os.ftruncate(journal.fileno(), start)
        except OSError:
            pass  # the next writer cuts a torn tail before it appends; readers ignore one
        finally:
            try:
                journal.close()
            except OSError:
                pass

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
        _upsert(sweep, cell_id, summary)
        self._journal_attempt(sweep, cell_id, summary, durable)

    def sync_journal(self) -> None:
        """Flush to disk the journal lines written without a flush (``dispatched(durable=False)``); nothing to do
        when there are none."""
        if not self._unsynced or self._journal is None:
            return
        try:
            os.fsync(self._journal.fileno())
        except OSError as exc:
            raise StoreError(f"cannot write {self.store.sweep_dir(self.sweep_id) / JOURNAL}: "
                             f"{exc.strerror or exc}") from exc
        self._unsynced = False

    def save_sweep(self, sweep: SweepRecord) -> None:
        """Write a snapshot of the whole sweep (sweep.json) and start an empty journal."""
        d = self.store.sweep_dir(sweep.id)
        atomic_write(d / "sweep.json", sweep.model_dump_json(indent=2).encode())
        # After the snapshot is durable the journal's entries are all in it; a crash between the two only
        # means they are replayed once more, which changes nothing.
        try:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            if (d / JOURNAL).exists():
                atomic_write(d / JOURNAL, b"")
        except OSError as exc:
            raise StoreError(f"cannot write {d / JOURNAL}: {exc.strerror or exc}") from exc
        self._journal_lines = 0
        self._unsynced = False  # the snapshot, synced, holds every line the journal had
        self._sweep = sweep
        self._index_sweep(sweep)

    def close(self) -> None:
        """Leave a snapshot of what was journaled, so sweep.json alone tells the final state."""
        try:
            if self._sweep is not None and self._journal_lines:
                self.save_sweep(self._sweep)
        finally:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
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
    def _execute(self, *statements: tuple[str, list | tuple]) -> None:
        """Run statements in one transaction on the writer's own connection (kept open: opening one per
        attempt costs more than the attempt's rows)."""
        if self._db is None:
            self._db = self.store._connect_index()
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
        statements: list[tuple[str, list | tuple]] = [
            ("INSERT OR REPLACE INTO sweeps VALUES (?,?,?,?,?,?,?)",
             (sweep.id, sweep.label, sweep.created_at, sweep.finished_at, sweep.status, sweep.harness_commit,
              len(cells))),
            ("INSERT OR REPLACE INTO sweep_plans VALUES (?,?,?,?)",
             (sweep.id, json.dumps(sorted(sweep.hosts)), len(sweep.items), json.dumps(sorted({c.agent for c in cells})))),
        ]
        if self._indexed_plan is not cells:
            # Once per plan (a snapshot of a new or resumed sweep), not per status change: 10,000 rows.
            self._indexed_plan = cells
            statements.append(("INSERT OR REPLACE INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                               [self._cell_row(sweep, c.id) for c in cells]))
        self._execute(*statements)

    def _cell_row(self, sweep: SweepRecord, cell_id: str, runs: list[AttemptSummary] | None = None) -> tuple:
        """The cell's row of the index's ``cells`` table: its last recorded attempt as the dashboard's list and host
        pages count it (``shown_grade``: an override wins, a harness failure is HARNESS_FAILURE). ``runs``: the
        cell's attempts when they are about to change (the row is written in the same transaction)."""
        from harness.grading.scale import shown_grade

        if self._cell_of is None or self._cell_plan is not sweep.cells:
            self._cell_plan, self._cell_of = sweep.cells, {c.id: c for c in sweep.cells}
        c = self._cell_of[cell_id]
        recorded = [a for a in (sweep.attempts.get(cell_id) or [] if runs is None else runs) if a.status != "dispatched"]
        a = recorded[-1] if recorded else None
        return (sweep.id, cell_id, c.host, c.item, c.agent, c.rep, len(recorded), a.attempt if a else 0,
                a.status if a else "pending", shown_grade(a), a.grade if a else "", a.override if a else "",
                a.stop if a else "", a.duration_s if a else 0.0)

    def index_cell(self, sweep: SweepRecord, cell_id: str) -> None:
        """Rewrite the cell's index row from ``sweep`` (after an override changed its summary)."""
        self._execute(("INSERT OR REPLACE INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", self._cell_row(sweep, cell_id)))

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
                      grader: "Callable[[Path], Grade]") -> "Graded | None":
        """``record_attempt`` and ``record_grade`` in one step: the attempt's files are stored as ``record_attempt``
        stores them, then ``grader`` grades the stored folder (the evidence is read from disk, as for any grade), and
        the grade's files, the index rows of both and the summary with its grade go to disk together (one index
        transaction and one journal line, where the two steps took two each: 7 disk flushes of a short attempt
        become 4). None when the attempt was recorded already; raises what ``record_attempt`` raises. A grade that
        fails leaves the attempt recorded ungraded, and why in ``Graded.error`` (a ``FleetError``) or ``Graded.fault``."""
        return self._record(sweep, result, grader)

    def _record(self, sweep: SweepRecord, result: AttemptResult,
                grader: "Callable[[Path], Grade] | None") -> "Graded | None":
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
            _safe_relpath(art.name)
        stored = storable_names([a.name for a in result.artifacts])
        result = result.model_copy(update={"artifacts": [
            a.model_copy(update={"name": name} if name == a.name else {
                "name": name, "original": storable_name(a.name),
                "original_b64": base64.b64encode(_name_bytes(a.name)).decode("ascii")})
            for a, name in zip(result.artifacts, stored)]})
        files = []
        rels = [_safe_relpath(art.name) for art in result.artifacts]
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
            atomic_write_all([*files, (folder / "meta.json", json.dumps(result.meta(), indent=2).encode())], written)
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
        statements: list[tuple[str, list | tuple]] = [
            ("INSERT OR REPLACE INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
             (sweep.id, result.cell_id, result.attempt, result.host, result.item, result.agent,
              result.status, result.reason, result.exit_code, result.duration_s, result.started_at,
              result.ended_at, str(result.model.get("id", "")), result.harness_commit,
              str(folder.relative_to(self.store.root)))),
            ("INSERT OR REPLACE INTO artifacts VALUES (?,?,?,?,?,?)",
             [(sweep.id, result.cell_id, result.attempt, a.name, a.size, a.sha256) for a in result.artifacts]),
        ]
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
                statements.append(_grade_row(sweep.id, result.cell_id, result.attempt, grade))
        statements.append(
            ("INSERT OR REPLACE INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
             self._cell_row(sweep, result.cell_id, sorted([*(a for a in runs if a.attempt != result.attempt), entry],
                                                          key=lambda a: a.attempt))))
        try:
            self._execute(*statements)
        except BaseException:
            # Not recorded: its grade did not take either (the caller records the delivery's failure, with its own).
            if graded.grade is not None:
                _undo_grade_files(grade_files)
            raise
        _upsert(sweep, result.cell_id, entry)
        self._journal_attempt(sweep, result.cell_id, entry)
        return graded

    def record_grade(self, sweep: SweepRecord, cell_id: str, attempt: int, grade: "Grade") -> None:
        """``grade.json`` is the latest grade; ``grades.jsonl`` keeps every grade ever given (regrades too)."""
        write_grade_files(self.store.attempt_dir(sweep.id, cell_id, attempt), grade)
        summary = next((a for a in sweep.attempts.get(cell_id) or [] if a.attempt == attempt), None)
        if summary is not None:
            summary = _with_grade(summary, grade)
        runs = [summary if summary is not None and a.attempt == attempt else a for a in sweep.attempts.get(cell_id) or []]
        self._execute(
            _grade_row(sweep.id, cell_id, attempt, grade),
            *([("INSERT OR REPLACE INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", self._cell_row(sweep, cell_id, runs))]
              if summary is not None and cell_id in self._cell_ids(sweep) else []),
        )
        if summary is not None:
            _upsert(sweep, cell_id, summary)
            self._journal_attempt(sweep, cell_id, summary)

    def record_grades(self, sweep: SweepRecord, graded: "list[tuple[str, int, Path, Grade]]") -> None:
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
            ("INSERT OR REPLACE INTO grades VALUES (?,?,?,?,?,?,?,?)",
             [_grade_row(sweep.id, cell_id, attempt, g)[1] for cell_id, attempt, _, g in graded]),
            ("INSERT OR REPLACE INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
             [self._cell_row(sweep, cell_id, runs) for cell_id, runs in runs_of.items() if cell_id in planned]),
        )
        for cell_id, summary in summaries:
            _upsert(sweep, cell_id, summary)
        self._sweep = sweep
        if summaries:
            self._append_all([{"t": "attempt", "cell": cell_id, "summary": summary.model_dump(mode="json")}
                              for cell_id, summary in summaries])

    def record_override(self, sweep: SweepRecord, cell_id: str, attempt: int, override: "GradeOverride") -> None:
        """A reviewer's grade of a recorded attempt: one more line of its ``grades.jsonl`` (the automatic grade and
        every earlier override stay), the summary's ``override`` journaled, and the index's ``overrides`` and
        ``cells`` rows. The caller (``harness.grading.override.override_grade``) has checked the attempt."""
        summary = next((a for a in sweep.attempts.get(cell_id) or [] if a.attempt == attempt), None)
        if summary is None or summary.status == "dispatched" or cell_id not in self._cell_ids(sweep):
            raise UsageError(f"sweep {sweep.id}: {cell_id} has no recorded attempt {attempt}")
        append_grade_line(self.store.attempt_dir(sweep.id, cell_id, attempt), override)
        summary = summary.model_copy(update={"override": override.grade})
        runs = [summary if a.attempt == attempt else a for a in sweep.attempts.get(cell_id) or []]
        self._execute(
            ("INSERT OR REPLACE INTO overrides VALUES (?,?,?,?,?,?,?,?)",
             (sweep.id, cell_id, attempt, override.grade, override.automatic, override.reason, override.author,
              override.at)),
            ("INSERT OR REPLACE INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", self._cell_row(sweep, cell_id, runs)),
        )
        _upsert(sweep, cell_id, summary)
        self._journal_attempt(sweep, cell_id, summary)
