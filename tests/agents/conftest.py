"""Fixtures for the real agents' tests: the agents installed once per test session by ``.ci/agents``, and
the integration kit's servers (redis-server, sshd hosts, Celery workers) for tests that drive them on a host."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import client_key, namespace, redis_server, ssh_hosts, workers  # noqa: F401
from tests.integration.fleetkit import REPO

__all__ = ["agents_cache", "npm_bin"]


@pytest.fixture(scope="session")
def agents_cache() -> Path:
    """The folder ``.ci/agents`` installs Node 24, OpenClaw, OpenCode and Hermes into (once per machine; it
    takes a lock, so parallel test workers wait for one install). ``FLEET_AGENTS_CACHE`` chooses the folder."""
    try:
        r = subprocess.run(["bash", str(REPO / ".ci" / "agents")], capture_output=True, text=True, timeout=1800,
                           env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail(".ci/agents did not finish within 30 minutes")
    if r.returncode != 0:
        pytest.fail(f".ci/agents failed (exit {r.returncode}): {r.stderr[-2000:]}")
    lines = r.stdout.strip().splitlines()
    if not lines or not Path(lines[-1]).is_dir():
        pytest.fail(f".ci/agents printed no cache folder: {r.stdout[-500:]!r}")
    return Path(lines[-1])


def npm_bin(cache: Path) -> Path:
    """``node_modules/.bin`` of the cache's npm install: ``node`` (24), ``openclaw``, ``opencode``. Put it first
    on PATH: OpenClaw refuses an older node."""
    return cache / "npm" / "node_modules" / ".bin"
