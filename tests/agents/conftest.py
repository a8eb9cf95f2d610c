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


def node_env(cache: Path) -> str:
    """The TOML ``env`` line that puts Node.js 24 and the npm agents first on an agent's PATH."""
    return f'env = {{ PATH = "{npm_bin(cache)}:/usr/local/bin:/usr/bin:/bin" }}'


def ssh_agents_inventory(path: Path, host, keys, url: str, agents: dict[str, str], *, context: int = 32768,
                         slots: int = 1) -> Path:
    """An inventory of one SSH test host whose model is the scripted server at ``url`` (output limit 2048 tokens)
    with ``agents``: name -> the body of its TOML table (``kind = ...``, ``program = ...``, ``env = ...``)."""
    from tests.integration.conftest import write_inventory

    block = host.toml(keys[0], slots=slots).replace("http://127.0.0.1:9/v1", url)
    block = block.replace("max_output = 8192", "max_output = 2048").replace("context = 32768", f"context = {context}")
    block = block.split(f"[hosts.{host.name}.agents.cmd]")[0]
    block += "".join(f"[hosts.{host.name}.agents.{name}]\n{body}\n" for name, body in agents.items())
    return write_inventory(path, [block])


class DemoSweep:
    """One embedded-default sweep of every bundled open prompt with one real agent (the demo tests)."""

    def __init__(self, tmp_path: Path, kind: str, agent: str, *, context: int = 32768, slots: int = 1) -> None:
        import json
        import time

        from tests.integration.fleetkit import free_port, run_embedded

        inventory = tmp_path / f"{kind}-demo.toml"
        inventory.write_text(
            f'schema_version = 1\n[hosts.local]\ntransport = "local"\nos = "linux"\nworkdir = "{tmp_path / "host"}"\n'
            f'slots = {slots}\n[hosts.local.model]\nbase_url = "http://127.0.0.1:{free_port()}/v1"\n'
            f'id = "scripted-model"\ncontext = {context}\nmax_output = 2048\nscripted = true\n'
            f'[hosts.local.agents.{kind}]\n{agent}\n')
        started = time.monotonic()
        r = run_embedded(["sweep", "-i", str(inventory), "--agents", kind, "--json"], tmp_path, timeout=1200)
        self.elapsed = time.monotonic() - started
        assert r.returncode == 0, r.stderr[-3000:]
        self.summary = json.loads(r.stdout)
        self.dir = tmp_path / "runs" / self.summary["sweep"]
        self.record = json.loads((self.dir / "sweep.json").read_text())
        assert self.record["status"] == "finished"
        self.cells = {c["item"]: c for c in self.summary["cells"]}
        assert sorted(self.cells) == sorted(p.name for p in (REPO / "prompts" / "open").iterdir() if p.is_dir())
        assert {c["agent"] for c in self.cells.values()} == {kind}
        self.grades = {item: json.loads((self.folder(item, c["attempts"]) / "grade.json").read_text())
                       for item, c in self.cells.items()}

    def folder(self, item: str, attempt: int = 1) -> Path:
        return self.dir / self.cells[item]["id"] / f"attempt-{attempt}"

    def events(self, item: str, attempt: int = 1) -> list[dict]:
        """The attempt's transcript.jsonl, event by event, as plain dicts."""
        import json

        return [json.loads(line) for line in (self.folder(item, attempt) / "transcript.jsonl").read_text().splitlines()]


def sweep_on_host(inv: Path, agents: str, runs: Path, broker: str, ns: str, *, repeat: int = 1,
                  items: str = "07,12") -> tuple[dict, dict[tuple[str, str, int], dict], Path]:
    """`fleet sweep` of ``items`` with ``agents`` through Redis (a worker must serve the host): the --json
    summary, its cells by (item, agent, rep), and the sweep's folder."""
    import json

    from tests.integration.fleetkit import run_fleet

    r = run_fleet(["sweep", "-i", str(inv), "--items", items, "--agents", agents, "--repeat", str(repeat), "--json",
                   "--runs", str(runs), "--broker", broker], ns, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    return summary, {(c["item"], c["agent"], c["rep"]): c for c in summary["cells"]}, runs / summary["sweep"]


def assert_agent_missing(cells: dict[tuple[str, str, int], dict], agent: str) -> None:
    """Every cell of ``agent`` (whose program is not installed) is one HARNESS_FAILURE attempt, agent_missing."""
    mine = [c for (_, a, _), c in cells.items() if a == agent]
    assert mine
    for ghost in mine:
        assert (ghost["grade"], ghost["reason"], ghost["attempts"]) == ("HARNESS_FAILURE", "agent_missing", 1), ghost
