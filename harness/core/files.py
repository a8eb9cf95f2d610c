"""Read a file the user names, safely: only a regular file, of a bounded size, opened without blocking.

A FIFO would hang a plain read, a link to /dev/zero would never end it, and a huge file would fill the memory;
each is one ``FileProblem`` instead, whose words the caller puts in its own error line (a prompt's, an edit's).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["FileProblem", "read_regular_file"]


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
