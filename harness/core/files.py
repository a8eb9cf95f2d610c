"""Files read and written safely: a bounded read of a file the user names, and writes that land whole or not at all.

Reading: only a regular file, of a bounded size, opened without blocking. A FIFO would hang a plain read, a link to
/dev/zero would never end it, and a huge file would fill the memory; each is one ``FileProblem`` instead, whose words
the caller puts in its own error line (a prompt's, an edit's).

Writing: ``atomic_write`` is the harness's one way to replace a file (the store's records, grade files, reports,
schedule state, the builtin agent's answer and receipt): a temporary file beside the target, flushed to disk, renamed
over it, so a reader sees the old file or the new one, never half of one, and a crash leaves no half file.
``atomic_write_all`` does it for many files with one disk flush per file system (``FileSystems``: ``syncfs`` where
Linux has it), all of them on disk before any has its name. Both raise ``OSError`` (stdlib only: the builtin agent
runs on the host and uses them too); the batch's error is a ``WriteFailed`` that names the file, and the store says
it as a ``StoreError``.

The launcher (``workers/host/launcher.py``) keeps its own small writer: it runs on the host's bare Python as one
source text and may import nothing of the harness.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, cast

__all__ = ["FileProblem", "read_regular_file", "WriteFailed", "atomic_write", "atomic_write_all", "temp_beside",
           "open_own", "FileSystems", "flush_file_system"]


class FileProblem(Exception):
    """Why the file cannot be read, in a few words (``file not found``, ``not a regular file ...``)."""


def read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes; ``what`` names it in the problem ("a
    prompt is at most N bytes")."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise FileProblem("file not found") from None
    except OSError as exc:
        raise FileProblem("a symbolic link that loops" if exc.errno == errno.ELOOP
                          else f"cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem("not a regular file (a FIFO, a device or a socket)")
        if st.st_size > limit:
            raise FileProblem(f"{st.st_size} bytes: {what} is at most {limit} bytes")
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise FileProblem(f"cannot read: {exc.strerror or exc}") from None
        if len(data) > limit:
            raise FileProblem(f"over {limit} bytes: {what} is at most that")  # it grew while read
    return data


class WriteFailed(OSError):
    """A write of a batch that did not take, said in one line that names the file (``cannot write PATH: why``) or the
    folder whose file system could not be flushed (``cannot flush FOLDER to disk: why``). Its ``errno`` is the
    failure's (a full disk is still recognised as one), and it is raised from the ``OSError`` behind it, if any."""

    def __init__(self, line: str, code: int | None) -> None:
        super().__init__(code, line)
        self.line = line

    def __str__(self) -> str:
        return self.line

    def __reduce__(self) -> tuple[type, tuple[str, int | None]]:
        return (WriteFailed, (self.line, self.errno))  # OSError keeps (errno, strerror) as its args: the other order


def temp_beside(path: Path, data: bytes, fsync: bool) -> str:
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
    """Write ``data`` to ``path`` (its folder made if missing) through a fsynced temporary file in the same folder and
    a rename. Raises the ``OSError`` as it came; no temporary file is left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(path, data, fsync=True)
    try:
        os.replace(tmp, path)
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
    later step fails). Raises ``WriteFailed`` naming the file (or the folder whose file system could not be
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
                    temps.append((temp_beside(path, data, fsync_each), path))
                except WriteFailed:
                    raise
                except OSError as exc:
                    raise WriteFailed(f"cannot write {path}: {exc.strerror or exc}", exc.errno) from exc
            if not fsync_each:
                systems.flush()
        for tmp, path in temps:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise WriteFailed(f"cannot write {path}: {exc.strerror or exc}", exc.errno) from exc
            done += 1
            if written is not None:
                written.append(path)
    finally:
        for tmp, _ in temps[done:]:
            Path(tmp).unlink(missing_ok=True)


def open_own(path: Path, flags: int, mode: str) -> BinaryIO:
    """Open a file of the harness's own for appending or locking, never through a symbolic link (O_NOFOLLOW): a
    crafted store's ``grades.jsonl`` or ``.lock`` linked to a file elsewhere must not make a write land there."""
    fd = os.open(path, flags | os.O_NOFOLLOW, 0o644)
    return cast(BinaryIO, os.fdopen(fd, mode + "b"))


def _syncfs() -> Callable[[int], int] | None:
    """The C library's ``syncfs`` (Linux), or None where there is none."""
    global _SYNCFS
    if _SYNCFS is False:
        import ctypes  # lazy: 2 ms of a start that only reads files (the catalog, a replay's edits); once, here

        _SYNCFS = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    return _SYNCFS  # type: ignore[return-value]


_SYNCFS: object = False  # not looked up yet


class FileSystems:
    """The file systems a batch of writes lands on, made durable together: one ``syncfs`` (Linux) per file system
    for the whole batch, where an fsync of each file is a disk flush each; ``os.sync`` elsewhere.

    Each file system is held open (a folder on it) from before the first write of the batch there, not only for the
    flush: a file system's flush reports the write errors that happened since it was opened (Linux 5.8 and later),
    so an error while the kernel wrote the batch's files early is reported by the flush too, as an fsync of each file
    would report it. Call ``before_write(folder)`` before writing in ``folder``, then ``flush()``. Both raise
    ``WriteFailed``."""

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
            raise WriteFailed(f"cannot write in {folder}: {exc.strerror or exc}", exc.errno) from exc
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
    """``syncfs`` on the file system of ``fd`` (an open ``folder``); a ``WriteFailed`` naming the folder if it fails."""
    import ctypes  # lazy: loaded already by _syncfs, which found the function called here

    syncfs = _syncfs()
    assert syncfs is not None
    if syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise WriteFailed(f"cannot flush {folder} to disk: {os.strerror(err)}", err)
