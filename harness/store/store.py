"""The results directory: ``Store``, what reads it, and the lock a sweep's one writer holds.

Layout (docs/store.md)::

    runs/
      index.sqlite                       derived index of sweeps, attempts and artifacts (``index.py``)
      <sweep-id>/
        sweep.json                       SweepRecord snapshot: plan, attempt summaries, state
        journal.jsonl                    every change since that snapshot, one JSON line each (``journal.py``)
        .lock                            held by the one process writing this sweep
        <host>/<item>/<agent>/r<rep>/attempt-<k>/
          meta.json                      AttemptResult without artifact contents
          answer.txt, agent.stdout, ...  the artifacts, each one's sha256 in meta.json
          grade.json, grades.jsonl       the grade files (``harness.grading.gradefiles``)

Reading is free and works on a read-only copy; every path built from a stored id or name is checked before it is
used (``check_stored_ids``, ``inside``, ``attempt_dir``). Writing a sweep needs its lock: ``writer(sweep_id)`` holds
an exclusive lock on the sweep's ``.lock`` and gives the ``SweepWriter`` (``writer.py``); a second writer gets a
clear error, not a race. Every file is written to a temporary name and renamed, so a reader never sees half a file
and a crash never leaves one.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pydantic import ValidationError

from harness.core.errors import StoreError, UnsafeStoredPath, UsageError
from harness.core.files import open_own
from harness.core.paths import name_problem, real_inside, relpath_problem
from harness.core.records import AttemptMeta, read_meta
from harness.core.sweep import SweepRecord
from harness.store.index import connect_index, query_index
from harness.store.journal import JOURNAL, first_error, replay
from harness.store.names import RECORD_FILES, check_stored_ids
from harness.store.writer import SweepWriter

__all__ = ["Store"]


class Store:
    """The results directory. Reading is free; writing a sweep needs ``writer(sweep_id)``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # -- reading ---------------------------------------------------------------------------------
    def sweep_dir(self, sweep_id: str) -> Path:
        # One name (harness.core.paths), and not hidden: .trash and .prune.lock are the store's own. A backslash is
        # an ordinary character here, as it always was: `fleet sweep` makes no such id, but a folder renamed by hand
        # is read.
        if name_problem(sweep_id, backslash=True) or sweep_id.startswith("."):
            raise UsageError(f"bad sweep id {sweep_id!r}")
        return self.root / sweep_id

    def load_sweep(self, sweep_id: str) -> SweepRecord:
        """The sweep's state: its snapshot with the journal replayed over it. Every id a path is built from is
        checked (``check_stored_ids``); a snapshot or journal that is a link is refused, never read."""
        path = self.sweep_dir(sweep_id) / "sweep.json"
        for own in (path, path.parent / JOURNAL):
            if own.is_symlink():
                raise UnsafeStoredPath(str(own), "", "is a symbolic link (the store never writes one): not read")
        try:
            sweep = SweepRecord.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            known = ", ".join(self.list_sweeps()[-5:]) or "none"
            raise UsageError(f"{self.root}: no sweep {sweep_id!r} (latest: {known})") from None
        except ValidationError as exc:
            raise StoreError(f"{path}: not a valid sweep record: {first_error(exc)}") from None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
        check_stored_ids(sweep, path, sweep_id)
        replay(sweep, path.parent / JOURNAL)
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
            real, inside = real_inside(path, top.resolve())
        except (OSError, RuntimeError) as exc:
            raise UnsafeStoredPath(file, key, f"{path}: cannot follow: {exc}") from None
        if not inside:
            raise UnsafeStoredPath(file, key, f"{path} leads outside the sweep's folder {top} (to {real})")
        return path

    def attempt_dir(self, sweep_id: str, cell_id: str, attempt: int) -> Path:
        """The attempt's folder, checked (``inside``) with the record files the harness reads and writes in it:
        none of them may be a symbolic link."""
        file, key = str(self.sweep_dir(sweep_id) / "sweep.json"), f"attempts.{cell_id}"
        if relpath_problem(cell_id):
            raise UnsafeStoredPath(file, key, f"cell id {cell_id!r} is not a path inside the sweep's folder")
        top = self.sweep_dir(sweep_id)
        folder = top / cell_id / f"attempt-{attempt}"
        if _link_below(top, (*cell_id.split("/"), f"attempt-{attempt}")):
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
        return query_index(self.root, *queries)

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
    def writer(self, sweep_id: str) -> Iterator[SweepWriter]:
        """Hold the sweep's lock while writing; a second writer gets a clear error, not a race."""
        d = self.sweep_dir(sweep_id)
        try:
            d.mkdir(parents=True, exist_ok=True)
            lock = open_own(d / ".lock", os.O_RDWR | os.O_APPEND | os.O_CREAT, "a+")
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
        """The index (``index.py``), made if there is none, in one transaction."""
        db = connect_index(self.root)
        try:
            with db:
                yield db
        except sqlite3.Error as exc:
            raise StoreError(f"{self.root / 'index.sqlite'}: {exc}") from exc
        finally:
            db.close()


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
