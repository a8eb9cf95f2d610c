"""The attempt lifecycle through the local transport and the real launcher, where a host changes under a worker or
several deliveries meet (found by adversarial review of the one-start lifecycle, issue 14)."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.core.catalog import Item
from harness.core.inventory import AgentConfig, Host, ModelEndpoint
from harness.core.records import AttemptResult, Cell
from harness.core.sweep import AttemptRequest
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



AUDITED = """import sys
log = open(sys.argv.pop(1), "a", buffering=1)
def hook(event, args):
    if event in ("os.remove", "os.rename"):
        log.write("%s %s %s\\n" % (event, args[0], args[1] if event == "os.rename" else ""))
sys.addaudithook(hook)
code = sys.argv[sys.argv.index("-c") + 1]
exec(compile(code, "boot", "exec"), {"__name__": "__main__"})
"""


def _audited_python(tmp_path: Path) -> tuple[str, Path]:
    """A host python that runs what it is given under an audit hook, which logs every remove and rename of the
    launcher and its supervisor (a fork keeps the hook) to a file, in order."""
    log = tmp_path / "audit.log"
    (tmp_path / "audited.py").write_text(AUDITED)
    wrapper = tmp_path / "python-audited"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "audited.py"} {log} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper), log


def test_the_host_is_given_back_once_its_agent_ended_and_before_the_result_is_collected(tmp_path: Path) -> None:
    """``on_host_free`` (the task gives its slot back there) is called once, when the agent's tree is gone and its
    workspace packed, and before the delivery is read: the host's next attempt starts while this one is collected. The
    supervisor removes its running entry before it writes packed.json, so that next start never finds an earlier
    holder of the slot to end (its reap waited for it in steps of 0.1 s)."""
    python, audit = _audited_python(tmp_path)
    host = _host(tmp_path, python, AgentConfig(kind="command", command=["sh", "-c", "echo hi > out.txt"]))
    t = LocalTransport(host)
    seen: list[dict] = []
    gets = []
    real_get = t.get

    def get(path: str) -> bytes | None:
        gets.append(path)
        return real_get(path)

    t.get = get  # type: ignore[method-assign]

    def host_free() -> None:
        fleet = Path(host.workdir) / ".fleet"
        seen.append({"packed": sorted(p.parent.name for p in (fleet / "deliveries").glob("*/packed.json")),
                     "running": sorted(p.name for p in (fleet / "running").glob("*.json")),
                     "gets": len(gets)})

    cell = Cell(id=Cell.make_id(host.name, ITEM.id, "a", 1), host=host.name, item=ITEM.id, agent="a", rep=1, seed=1)
    req = AttemptRequest(sweep_id="s1", cell=cell, attempt=1, host=host, agent=host.agents["a"], item=ITEM,
                         prompt="say hi", harness_commit="test")
    result = run_attempt(t, req, adapter_for("a", host.agents["a"]), timing=FAST, on_host_free=host_free)
    assert result.status == "finished", result.error
    assert len(seen) == 1, seen
    assert len(seen[0]["packed"]) == 1 and seen[0]["running"] == [], seen
    assert seen[0]["gets"] == 0 and gets, (seen, gets)  # the bundle is read after the host was given back
    assert any(a.name.endswith("out.txt") for a in result.artifacts), [a.name for a in result.artifacts]
    events = audit.read_text().splitlines()
    entry = next(i for i, e in enumerate(events) if e.startswith("os.remove ") and "/running/" in e)
    packed = next(i for i, e in enumerate(events) if e.startswith("os.rename ") and e.endswith("/packed.json"))
    assert entry < packed, events


def test_a_host_whose_agent_never_started_is_not_given_back_early(tmp_path: Path) -> None:
    """An attempt that failed before its agent ran (here: no such program) gives its slot back when the task ends,
    as before: ``on_host_free`` is for an agent that ended."""
    host = _host(tmp_path, sys.executable, AgentConfig(kind="command", command=["no-such-program-here"]))
    t = LocalTransport(host)
    called: list[bool] = []
    cell = Cell(id=Cell.make_id(host.name, ITEM.id, "a", 1), host=host.name, item=ITEM.id, agent="a", rep=1, seed=1)
    req = AttemptRequest(sweep_id="s1", cell=cell, attempt=1, host=host, agent=host.agents["a"], item=ITEM,
                         prompt="say hi", harness_commit="test")
    result = run_attempt(t, req, adapter_for("a", host.agents["a"]), timing=FAST, on_host_free=lambda: called.append(True))
    assert result.status == "harness_failure", result
    assert called == []


def test_an_agent_its_supervisor_stopped_gives_its_host_back_only_with_the_task(tmp_path: Path) -> None:
    """An agent its supervisor ended itself (here at the launcher's own deadline, a second before the worker's): the
    supervisor does not pack, the worker's pack verb does, so no signed packed.json says the supervisor is done, and
    ``on_host_free`` is not called: a next start on the slot could stop a supervisor still ending. The slot goes back
    when the task ends. (An agent the worker kills at the timeout is packed by its supervisor, and gives the host back
    after that pack, as a normal end does.)"""
    host = _host(tmp_path, sys.executable, AgentConfig(kind="command", command=["sleep", "30"]))
    t = LocalTransport(host)
    called: list[bool] = []
    item = ITEM.model_copy(update={"timeout_s": 2})
    cell = Cell(id=Cell.make_id(host.name, item.id, "a", 1), host=host.name, item=item.id, agent="a", rep=1, seed=1)
    req = AttemptRequest(sweep_id="s1", cell=cell, attempt=1, host=host, agent=host.agents["a"], item=item,
                         prompt="say hi", harness_commit="test")
    timing = Timing(start_timeout_s=20.0, poll_min_s=0.05, poll_max_s=0.2, launcher_grace_s=-1.0)
    result = run_attempt(t, req, adapter_for("a", host.agents["a"]), timing=timing, on_host_free=lambda: called.append(True))
    assert result.status == "timeout", (result.status, result.error)
    assert called == []
