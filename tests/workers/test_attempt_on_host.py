"""The attempt lifecycle through the local transport and the real launcher, where a host changes under a worker or
several deliveries meet (found by adversarial review of the one-start lifecycle, issue 14)."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.catalog import Item
from harness.inventory import AgentConfig, Host, ModelEndpoint
from harness.records import AttemptRequest, AttemptResult, Cell
from workers.adapters import adapter_for
from workers.attempt import Timing, run_attempt
from workers.transport.base import Transport
from workers.transport.local import LocalTransport

FAST = Timing(start_timeout_s=20.0, poll_min_s=0.05, poll_max_s=0.2)
MODEL = ModelEndpoint(base_url="http://127.0.0.1:9/v1", id="m", context=32768, max_output=2048)
ITEM = Item(id="01-x", kind="open", title="x", prompt="say hi", timeout_s=60)
SAYS_HI = AgentConfig(kind="command", command=["sh", "-c", "echo hi"])


def _host(tmp_path: Path, python: str, agent: AgentConfig = SAYS_HI) -> Host:
    return Host(name="loc", transport="local", workdir=str(tmp_path / "work"), python=python, model=MODEL,
                agents={"a": agent})


def _attempt(t: Transport, host: Host, attempt: int = 1) -> AttemptResult:
    cell = Cell(id=Cell.make_id(host.name, ITEM.id, "a", 1), host=host.name, item=ITEM.id, agent="a", rep=1, seed=1)
    req = AttemptRequest(sweep_id="s1", cell=cell, attempt=attempt, host=host, agent=host.agents["a"], item=ITEM,
                         prompt="say hi", harness_commit="test")
    return run_attempt(t, req, adapter_for("a", host.agents["a"]), timing=FAST)


def _shim(tmp_path: Path, version: str) -> Path:
    """A pyenv-style shim (a shell script) that runs the interpreter of ``version``, as the host's python."""
    real = tmp_path / "versions" / version / "bin"
    real.mkdir(parents=True, exist_ok=True)
    if not (real / "python3").exists():
        (real / "python3").symlink_to(sys.executable)
    shim = tmp_path / "shims" / "python3"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f'#!/bin/sh\nexec {real}/python3 "$@"\n')
    shim.chmod(0o755)
    return real / "python3"


def test_a_host_whose_python_moved_to_another_version_still_starts_the_next_attempt(tmp_path: Path) -> None:
    """The worker runs later launcher calls with the interpreter the host's python named at the first start; once
    that version was removed (pyenv uninstall, an upgrade), every later start and kill of the worker's life failed
    (`exec: ...: not found`) and each attempt was agent_not_started."""
    old = _shim(tmp_path, "3.x")
    host = _host(tmp_path, str(tmp_path / "shims" / "python3"))
    t = LocalTransport(host)
    first = _attempt(t, host, 1)
    assert first.status == "finished", first.error
    assert str(old) in t.memo.values(), t.memo  # resolved once: later calls skip the shim
    old.unlink()
    new = _shim(tmp_path, "3.y")
    second = _attempt(t, host, 2)
    assert (second.status, second.exit_code) == ("finished", 0), second.error
    assert str(new) in t.memo.values(), t.memo

