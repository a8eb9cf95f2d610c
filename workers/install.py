"""Put the harness on a host: the same code as the coordinator, in a virtual environment of its own.

The builtin agent and its guard run on the host, so every host must run exactly the code that the
coordinator's commit names. ``ensure_harness`` uploads a source archive of this harness, builds
``<workdir>/harness/<release>/venv`` with it (the agent needs only pydantic besides the standard
library; the checks need pytest and playwright; Celery, Fabric and the rest are not installed on hosts), and marks it ready. A release that
is ready is reused while the code is unchanged; two workers installing at once take turns through a
lock folder on the host.

The release id is the commit for a clean checkout, and the commit plus a hash of the packed files
when the tree has local changes, so a changed file is never hidden behind an old install.
"""

from __future__ import annotations

import functools
import hashlib
import io
import shlex
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import AgentNotStarted
from harness.core.inventory import Host
from harness.core.version import SOURCE_ROOT, harness_commit
from workers.transport.base import Transport

__all__ = ["Release", "source_release", "ensure_harness", "HOST_REQUIREMENTS"]

HOST_REQUIREMENTS = ["pydantic>=2.6,<3", "pytest>=8", "playwright>=1.45"]
"""What the agent and the acceptance checks need on a host (Chromium itself is the host's own)."""
_PACKED = ("pyproject.toml", "README.md", "harness", "workers")


@dataclass(frozen=True)
class Release:
    """The harness source as shipped to hosts."""

    id: str
    archive: bytes


@functools.lru_cache(maxsize=1)
def source_release() -> Release:
    """A deterministic tar.gz of the harness source (same files, same bytes, same id)."""
    buf = io.BytesIO()
    files: list[Path] = []
    for name in _PACKED:
        p = SOURCE_ROOT / name
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files.extend(f for f in sorted(p.rglob("*")) if f.is_file() and "__pycache__" not in f.parts)
    digest = hashlib.sha256()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for f in sorted(files):
            rel = f.relative_to(SOURCE_ROOT).as_posix()
            data = f.read_bytes()
            digest.update(rel.encode() + b"\0" + data + b"\0")
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0  # byte-identical archives for identical files
            tar.addfile(info, io.BytesIO(data))
    commit = harness_commit()
    release_id = commit if not commit.endswith("-dirty") and not commit.startswith("v") else f"{commit}-{digest.hexdigest()[:12]}"
    return Release(release_id, buf.getvalue())


def _q(s: str) -> str:
    return shlex.quote(s)


def release_dir(host: Host, home: str, release_id: str) -> str:
    workdir = home + host.workdir[1:] if host.workdir.startswith("~") else host.workdir
    return f"{workdir.rstrip('/')}/harness/{release_id}"


def ensure_harness(t: Transport, host: Host, release: Release | None = None, timeout_s: float = 600) -> str:
    """Install the release on the host if it is not there yet; return the venv's python path."""
    release = release or source_release()
    home = t.shell('printf %s "$HOME"', timeout=30).stdout.strip()
    root = release_dir(host, home, release.id)
    python = f"{root}/venv/bin/python"
    if t.shell(f"test -f {_q(root)}/.ready", timeout=30).ok:
        return python
    lock = f"{root}.lock"
    t.shell(f"mkdir -p {_q(str(Path(root).parent))}", timeout=30)
    end = time.monotonic() + timeout_s
    # mkdir is atomic: whoever makes the lock folder installs; the others wait for .ready.
    while not t.shell(f"mkdir {_q(lock)} 2>/dev/null", timeout=30).ok:
        if t.shell(f"test -f {_q(root)}/.ready", timeout=30).ok:
            return python
        if time.monotonic() > end:
            raise AgentNotStarted(f"another install of the harness holds {lock}; remove it if stale", host=host.name)
        time.sleep(1.0)
    try:
        # Whoever held the lock before us may have just finished: its venv is in use, never replace it.
        if t.shell(f"test -f {_q(root)}/.ready", timeout=30).ok:
            return python
        t.shell(f"rm -rf {_q(root)} && mkdir -p {_q(root)}/src", timeout=60)
        t.put(f"{root}/src.tar.gz", release.archive)
        reqs = " ".join(_q(r) for r in HOST_REQUIREMENTS)
        r = t.shell(
            f"set -e; cd {_q(root)}; tar -xzf src.tar.gz -C src; "
            f"{_q(host.python)} -m venv venv; "
            f"venv/bin/python -m pip install -q --disable-pip-version-check {reqs}; "
            f"venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation ./src "
            f"|| venv/bin/python -m pip install -q --disable-pip-version-check --no-deps ./src; "
            f"venv/bin/python -c 'import harness.guard, workers.host.agent'; touch .ready",
            timeout=timeout_s,
        )
        if not r.ok:
            raise AgentNotStarted(f"installing the harness into {root} failed: {r.tail(600)}", host=host.name)
    finally:
        t.shell(f"rmdir {_q(lock)} 2>/dev/null; true", timeout=30)
    return python
