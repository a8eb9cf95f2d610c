"""The harness commit recorded with every sweep and attempt, so a result names the code that made it."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from harness import __version__

SOURCE_ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def harness_commit() -> str:
    """``git describe``-like id of the source tree: the commit, with ``-dirty`` for local changes.

    ``FLEET_HARNESS_COMMIT`` wins (a host installed from a tarball knows its commit only that way);
    outside a git checkout the package version is the best we have.
    """
    forced = os.environ.get("FLEET_HARNESS_COMMIT")
    if forced:
        return forced
    try:
        head = subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return f"v{__version__}"
        dirty = subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), "status", "--porcelain", "--untracked-files=no", "--", "harness", "workers"],
            capture_output=True, text=True, timeout=10,
        )
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return f"v{__version__}"
