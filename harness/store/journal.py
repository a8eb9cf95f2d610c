"""A sweep's journal, ``journal.jsonl``: every change to its state since the snapshot (sweep.json), one JSON line each.

Why a journal: a sweep's state changes a few times per attempt (dispatched, recorded, graded). Rewriting the whole
of sweep.json each time costs what the sweep's size costs (34 ms per attempt at 3,000 cells, growing); appending one
line costs the same at 100 cells and at 100,000. The state is the snapshot with the journal replayed over it
(``replay``; every entry is an idempotent upsert, so replaying one the snapshot already holds changes nothing).

A crash can cut the last line short: readers ignore a last line without its newline (it was never acknowledged), and
the next writer cuts it off before it appends (``cut_torn_tail``), or the next entry would be glued to it. A write the
disk refuses half-way is cut back the same way at once (``Journal.append``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO, get_args

from pydantic import ValidationError

from harness.core.errors import StoreError, UnsafeStoredPath
from harness.core.files import atomic_write
from harness.core.nesting import loads_json
from harness.core.records import AttemptSummary, SweepStatus
from harness.core.sweep import SweepRecord

__all__ = ["JOURNAL", "Journal", "replay", "cut_torn_tail", "upsert", "first_error"]

JOURNAL = "journal.jsonl"


class Journal:
    """The journal of one sweep as its one writer appends to it (``SweepWriter``, which holds the sweep's lock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = 0
        """Entries appended since the last snapshot (``restart``)."""
        self.unsynced = False
        """Lines were written that no fsync has flushed to disk yet (``append(durable=False)``)."""
        self._file: BinaryIO | None = None

    def append(self, entries: list[dict], durable: bool = True) -> None:
        """Append ``entries`` in one write and one fsync (a batch costs what one entry costs). Not ``durable``: written
        (a process that dies after it leaves it on file) but not flushed to disk yet; the next durable append, ``sync``
        or a snapshot flushes it."""
        line = b"".join(json.dumps(entry, separators=(",", ":")).encode() + b"\n" for entry in entries)
        start = -1
        try:
            if self._file is None:
                if self.path.is_symlink():
                    raise UnsafeStoredPath(str(self.path), "", "is a symbolic link (the store never writes one): not written")
                cut_torn_tail(self.path)
                # Unbuffered: a write the disk refused half-way is cut off below, not kept in a buffer that a
                # later flush would glue to the next entry.
                self._file = os.fdopen(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644), "ab", buffering=0)
            fd = self._file.fileno()
            start = os.fstat(fd).st_size
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        except OSError as exc:
            self._drop_torn_entry(start)
            raise StoreError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        self.unsynced = not durable
        self.lines += len(entries)

    def _drop_torn_entry(self, start: int) -> None:
        """An entry the disk refused (full, quota): cut what of it was written, so the journal ends at its last
        whole line (shrinking a file needs no space), and open the journal afresh next time."""
        journal, self._file = self._file, None
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

    def sync(self) -> None:
        """Flush to disk the lines written without a flush (``append(durable=False)``); nothing to do when there are
        none."""
        if not self.unsynced or self._file is None:
            return
        try:
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise StoreError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        self.unsynced = False

    def restart(self) -> None:
        """Start an empty journal: called once a snapshot that holds every entry is durable. A crash between the two
        only means the entries are replayed once more, which changes nothing."""
        try:
            self.close()
            if self.path.exists():
                try:
                    atomic_write(self.path, b"")
                except OSError as exc:
                    raise StoreError(f"cannot write {self.path}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        self.lines = 0
        self.unsynced = False  # the snapshot, synced, holds every line the journal had

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def first_error(exc: ValidationError) -> str:
    """A pydantic error's first problem, as ``where: what`` for a one-line error naming the key."""
    e = exc.errors()[0]
    where = ".".join(str(x) for x in e.get("loc", ()))
    return f"{where}: {e['msg']}" if where else e["msg"]


def replay(sweep: SweepRecord, journal: Path) -> None:
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
                upsert(sweep, entry["cell"], summary)
            elif kind == "status":
                status, finished_at = entry["status"], entry.get("finished_at", sweep.finished_at)
                if status not in _STATUSES or not isinstance(finished_at, str):
                    raise ValueError(f"status entry {status!r}, finished_at {finished_at!r}: not a sweep state")
                sweep.status, sweep.finished_at = status, finished_at
            else:
                raise ValueError(f"unknown entry type {kind!r}")
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            why = first_error(exc) if isinstance(exc, ValidationError) else str(exc)
            raise StoreError(f"{journal}: line {n}: {why}") from None


_STATUSES = get_args(SweepStatus)


def cut_torn_tail(journal: Path) -> None:
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


def upsert(sweep: SweepRecord, cell_id: str, summary: AttemptSummary) -> None:
    """The attempt's summary in the sweep's state: the one of the same attempt replaced, or added in order."""
    runs = sweep.attempts.setdefault(cell_id, [])
    for i, a in enumerate(runs):
        if a.attempt == summary.attempt:
            runs[i] = summary
            return
    runs.append(summary)
    runs.sort(key=lambda a: a.attempt)
