"""``fleet prune``: remove old sweeps from the results directory, and their rows from the index.

Safe against a crash and against a second prune (docs/retention.md):

- one prune at a time per results directory (``RUNS/.prune.lock``, an flock the kernel releases if it dies);
- a sweep is removed only while this process holds its writer lock (``RUNS/<id>/.lock``, as ``Store.writer``
  takes it), so a coordinator that starts writing it in that instant gets "being written", never a half
  deleted folder; a sweep whose status is planned or running, or whose lock is held, is never removed;
- removing is: rename ``RUNS/<id>`` to ``RUNS/.trash/<id>~<random>`` (atomic: the sweep is there or gone,
  never half), delete its index rows, then delete the trash folder. A prune killed at any point leaves a trash
  folder that the next prune finishes (index rows of a sweep whose folder is gone are removed then too).

Only folders holding a readable sweep.json are sweeps; anything else in RUNS (a folder that is not a sweep, a
symbolic link, a file, the embedded queue) is left alone and, when it looks like it could be one, named.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from harness.core.errors import FleetError, StoreError, UsageError
from harness.store.store import Store

__all__ = ["PruneResult", "parse_age", "prune", "TRASH", "INDEX_TABLES"]

TRASH = ".trash"
INDEX_TABLES = ("attempts", "grades", "artifacts", "sweep_plans", "cells", "overrides")
"""The index's tables keyed by ``sweep_id`` (``sweeps`` is keyed by ``id``)."""

_AGE = re.compile(r"^([0-9]+)([smhdw])$")  # ASCII digits only: \d would take any script's digits
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_AGE_DAYS = 36500
"""The longest --older-than (100 years): beyond some thousands of years "now minus AGE" is no date at all."""


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w``, ``45s`` as a duration; anything else is the user's error."""
    m = _AGE.match(text.strip())
    if not m or int(m.group(1)) == 0:
        raise UsageError(f"--older-than {text!r}: not an age (a positive number and a unit: 30d, 12h, 90m, 2w)")
    seconds = int(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds > MAX_AGE_DAYS * 86400:
        raise UsageError(f"--older-than {text!r}: too long (at most {MAX_AGE_DAYS}d)")
    return timedelta(seconds=seconds)


def _cutoff(now: datetime, older_than: timedelta) -> datetime:
    """``now - older_than``; an age longer than the calendar goes back means no sweep is that old."""
    try:
        return now - older_than
    except OverflowError:
        return datetime.min.replace(tzinfo=timezone.utc)


@dataclass
class Pruned:
    id: str
    label: str
    created_at: str
    size: int


@dataclass
class PruneResult:
    removed: list[Pruned] = field(default_factory=list)
    kept_running: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Entries of RUNS that are not sweeps (or cannot be read), each with why: left alone."""
    finished_trash: int = 0
    """Bytes of an earlier, interrupted prune's trash this one finished deleting."""

    @property
    def freed(self) -> int:
        return sum(p.size for p in self.removed) + self.finished_trash


def tree_size(path: Path) -> int:
    """Bytes of the files under ``path``, links not followed (a link is counted as itself)."""
    total = 0
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if not os.path.isdir(os.path.join(top, name)) or os.path.islink(os.path.join(top, name)):
                total += st.st_size
    return total


def _parse_time(text: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def prune(store: Store, keep: int | None = None, older_than: timedelta | None = None, label: str | None = None,
          dry_run: bool = False, now: datetime | None = None) -> PruneResult:
    """Remove the sweeps beyond the newest ``keep`` and/or created longer than ``older_than`` ago (both given: a
    sweep must be both), only those labelled ``label`` when given. ``dry_run``: say what would go, change nothing."""
    if keep is None and older_than is None:
        raise UsageError("fleet prune needs --keep N or --older-than AGE (e.g. --keep 30, --older-than 30d)")
    if keep is not None and keep < 0:
        raise UsageError(f"--keep {keep}: must be 0 or more")
    root = store.root
    if not root.is_dir():
        if root.exists() or root.is_symlink():
            raise UsageError(f"--runs {root}: not a folder")
        return PruneResult()
    result = PruneResult()
    with _prune_lock(root, dry_run):
        if not dry_run:
            _check_index(store)
            result.finished_trash = _finish_trash(store)
        result.skipped.extend(_orphan_rows(store, label, dry_run))
        candidates = []
        for entry in sorted(root.iterdir(), key=lambda p: p.name):
            name = entry.name
            if name.startswith(".") or name == "index.sqlite" or name.startswith("index.sqlite"):
                continue  # the store's own files: the index, the embedded queue, the trash, locks
            if entry.is_symlink():
                result.skipped.append(f"{name}: a symbolic link, not a sweep folder: left alone")
                continue
            if not entry.is_dir():
                continue
            if not (entry / "sweep.json").is_file() or (entry / "sweep.json").is_symlink():
                result.skipped.append(f"{name}: no sweep.json, not a sweep: left alone")
                continue
            try:
                rec = store.load_sweep(name)
            except FleetError as exc:
                result.skipped.append(f"{name}: cannot be read, left alone: {exc}")
                continue
            if label is not None and rec.label != label:
                continue
            candidates.append(rec)
        # Newest first, as `fleet sweeps` orders them: by creation time, then id.
        candidates.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        cutoff = _cutoff(now or datetime.now(timezone.utc), older_than) if older_than is not None else None
        for i, rec in enumerate(candidates):
            if keep is not None and i < keep:
                continue
            if cutoff is not None:
                created = _parse_time(rec.created_at)
                if created is None or created > cutoff:
                    continue
            try:
                busy = rec.status in ("planned", "running") or _being_written(store, rec.id)
            except _LeftAlone as exc:
                result.skipped.append(str(exc))
                continue
            if busy:
                result.kept_running.append(rec.id)
                continue
            size = tree_size(store.sweep_dir(rec.id))
            try:
                gone = dry_run or _remove(store, rec.id)
            except _LeftAlone as exc:
                result.skipped.append(str(exc))
                continue
            if gone:
                result.removed.append(Pruned(rec.id, rec.label, rec.created_at, size))
            else:
                result.kept_running.append(rec.id)
    result.removed.sort(key=lambda p: (p.created_at, p.id))  # said oldest first
    return result


class _LeftAlone(Exception):
    """A sweep prune cannot safely lock: said, and left where it is."""


def _being_written(store: Store, sweep_id: str) -> bool:
    """``Store.is_being_written`` without its blocking open: a crafted ``.lock`` that is a FIFO would make that
    open wait for a writer forever, with the prune lock held (every later prune waiting behind it). A lock that
    is not a regular file is left alone; one that is a link is for ``_remove`` to refuse."""
    path = store.sweep_dir(sweep_id) / ".lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # none (never written here), a link, unreadable: _remove decides, under its own open
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _LeftAlone(f"{sweep_id}: its lock {path} is not a regular file (the store writes only those): "
                             "left alone")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False
    finally:
        os.close(fd)


class _Held:
    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _prune_lock(root: Path, dry_run: bool) -> _Held:
    """One prune at a time: a second one waits for the first (pruning is quick) and then sees what it left."""
    if dry_run:
        return _Held(None)
    path = root / ".prune.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open {path}: {exc.strerror or exc}") from exc
    fcntl.flock(fd, fcntl.LOCK_EX)
    return _Held(fd)


def _remove(store: Store, sweep_id: str) -> bool:
    """Take the sweep's writer lock, check again that it is not running, rename it into the trash, drop its
    index rows, delete it. False when a writer holds it (it is left alone)."""
    folder = store.sweep_dir(sweep_id)
    try:
        # Never through a link (O_NOFOLLOW): a crafted .lock must not make prune lock, or create, a file elsewhere.
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise _LeftAlone(f"{sweep_id}: cannot take its lock {folder / '.lock'} ({exc.strerror or exc}): left alone") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _LeftAlone(f"{sweep_id}: its lock {folder / '.lock'} is not a regular file: left alone")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        # Under the lock: a coordinator that finished planning in between has left its status behind.
        if store.load_sweep(sweep_id).status in ("planned", "running"):
            return False
        trash = store.root / TRASH
        try:
            if trash.is_symlink() or (trash.exists() and not trash.is_dir()):
                # The trash is the store's own: a link there would move the sweep out of RUNS, where an
                # interrupted prune's leftovers are never found again. The link goes, never its target.
                trash.unlink()
            trash.mkdir(exist_ok=True)
            target = trash / f"{sweep_id}~{secrets.token_hex(4)}"
            os.rename(folder, target)
        except OSError as exc:
            raise StoreError(f"cannot move {folder} into {trash}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    _drop_rows(store, sweep_id)
    shutil.rmtree(target, ignore_errors=True)
    return True


def _drop_rows(store: Store, sweep_id: str) -> None:
    if not (store.root / "index.sqlite").is_file():
        return
    with store.index() as db:
        db.execute("DELETE FROM sweeps WHERE id = ?", (sweep_id,))
        for table in INDEX_TABLES:
            db.execute(f"DELETE FROM {table} WHERE sweep_id = ?", (sweep_id,))  # noqa: S608 - fixed table names


def _finish_trash(store: Store) -> int:
    """What an interrupted prune left: index rows of the sweeps it had moved, and their folders. Returns bytes."""
    trash = store.root / TRASH
    if trash.is_symlink() or not trash.is_dir():
        return 0
    freed = 0
    for entry in sorted(trash.iterdir()):
        sweep_id = entry.name.rsplit("~", 1)[0]
        if sweep_id and not (store.root / sweep_id).exists():
            _drop_rows(store, sweep_id)
        if entry.is_symlink() or not entry.is_dir():
            entry.unlink(missing_ok=True)
            continue
        freed += tree_size(entry)
        shutil.rmtree(entry, ignore_errors=True)
    return freed


def _check_index(store: Store) -> None:
    """Refuse to start when the index cannot be written: a sweep moved into the trash whose rows then cannot be
    deleted would be gone from every listing but the index's, and every later prune would stop at it."""
    if not (store.root / "index.sqlite").is_file():
        return
    try:
        with store.index() as db:
            db.execute("SELECT count(*) FROM sweeps").fetchone()
    except StoreError as exc:
        raise StoreError(f"{exc}: prune needs the index to delete removed sweeps' rows; nothing removed "
                         "(move the file away to prune without it)") from None


def _orphan_rows(store: Store, label: str | None, dry_run: bool) -> list[str]:
    """Index rows of sweeps whose folder is gone (removed by hand, or by an older prune): no listing of the
    folders shows them, but the dashboard reads the index and would list them for ever. Dropped (of ``label``
    only, when given), each said."""
    if not (store.root / "index.sqlite").is_file():
        return []
    union = " UNION ".join(f"SELECT DISTINCT sweep_id FROM {t}" for t in INDEX_TABLES)  # noqa: S608 - fixed names
    rows = store.query_index((f"SELECT id FROM sweeps UNION {union}", ()), ("SELECT id, label FROM sweeps", ()))
    if rows is None:
        return []  # unreadable: a dry run says nothing of it, a real prune has stopped at _check_index already
    ids = [r[0] for r in rows[0] if isinstance(r[0], str)]
    labels = dict(rows[1])
    said = []
    for sweep_id in sorted(ids):
        if label is not None and labels.get(sweep_id) != label:
            continue
        folder = store.root / sweep_id
        if not sweep_id or "/" in sweep_id or folder.exists() or folder.is_symlink():
            continue
        if not dry_run:
            _drop_rows(store, sweep_id)
        said.append(f"{sweep_id}: its folder is gone; its index rows {'would be' if dry_run else 'were'} deleted")
    return said
