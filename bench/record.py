"""What every benchmark does with its figures (add them, under its own key, to the results file it was given), and with
what it writes to set itself up."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["record", "setup_without_syncs"]


def record(json_path: str | None, key: str, row: Any) -> None:
    """Put ``row`` under ``key`` in the JSON file ``json_path`` (made if missing; other keys kept); None: nothing."""
    if not json_path:
        return
    path = Path(json_path)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = row
    path.write_text(json.dumps(data, indent=1) + "\n")


@contextlib.contextmanager
def setup_without_syncs() -> Iterator[None]:
    """What a benchmark writes to set itself up (a large sweep, a thousand transcripts) is not what it measures: inside
    this block ``os.fsync`` does nothing (a store or transcript writer syncs each file, a disk flush each: most of the
    setup's minutes), and one ``os.sync`` at its end puts everything on the disk before anything is timed."""
    real = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real
        os.sync()
