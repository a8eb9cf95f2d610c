"""A full disk under the results directory, recognised wherever it shows: an ``OSError`` ENOSPC (or EDQUOT)
from the store's own writes, SQLite's "database or disk is full" from the index or the embedded queue (raw or
wrapped by SQLAlchemy and kombu), anywhere in an exception's chain.

A full disk stops the sweep at once (``harness.core.errors.DiskFull``): recording the delivery that hit it as a
``store_error`` harness failure would only burn the cell's retries on a disk that stays full. The attempts in
flight stay ``dispatched`` and ``fleet resume`` takes them once there is room.
"""

from __future__ import annotations

import errno
import sqlite3

__all__ = ["is_disk_full"]

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: BaseException | None) -> bool:
    """True when ``exc`` or anything it was raised from (``__cause__``, ``__context__``, SQLAlchemy's ``orig``)
    says the disk is full."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            return True
        if isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc):
            return True
        if "No space left on device" in str(exc) or "database or disk is full" in str(exc):
            return True  # a message the store or the queue translated, kept in its text
        orig = getattr(exc, "orig", None)
        if isinstance(orig, BaseException) and is_disk_full(orig):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
