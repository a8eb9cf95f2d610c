"""The attempt lifecycle's failure paths (workers.attempt.run_attempt), driven through MemoryTransport: a
scripted host in memory, so each path runs in milliseconds and says exactly what the lifecycle tried.

Each test starts from a healthy host (the launcher starts the agent at once, the agent exits 0) and breaks
one step; each checks the recorded status and reason code (harness/failures.py) and what was tried."""

from __future__ import annotations

import io
import json
import re
import tarfile

import pytest

from harness.catalog import Item
from harness.checks.spec import CheckSpec
from harness.errors import HostLost, HostUnreachable
from harness.failures import REASONS, classify
from harness.inventory import AgentConfig, Host, ModelEndpoint
from harness.records import AttemptRequest, AttemptResult, Cell
from workers.adapters import adapter_for
from workers.attempt import Timing, run_attempt
from workers.transport.base import ShellResult
from workers.transport.memory import MemoryTransport

HOME = "/home/qual"
FAST = Timing(start_timeout_s=2.0, poll_min_s=0.01, poll_max_s=0.02)
MODEL = ModelEndpoint(base_url="http://127.0.0.1:8080/v1", id="Qwen3.5-9B", context=65536, max_output=8192)
AGENTS = {
    "echo": AgentConfig(kind="command", command=["my-agent", "{prompt_file}"]),
    "builtin": AgentConfig(kind="builtin"),
}
HOST = Host(name="tower1", address="tower1.lan", user="qual", host_key="SHA256:" + "A" * 43, model=MODEL,
            agents=AGENTS)
ITEM = Item(id="07-photo-renamer", kind="open", title="Photo renamer", prompt="write it", timeout_s=60)


def request(agent: str = "echo", item: Item = ITEM, checks: list[CheckSpec] | None = None) -> AttemptRequest:
    cell = Cell(id=Cell.make_id(HOST.name, item.id, agent, 1), host=HOST.name, item=item.id, agent=agent, rep=1, seed=1)
    return AttemptRequest(sweep_id="s1", cell=cell, attempt=1, host=HOST, agent=AGENTS[agent], item=item,
                          prompt="rename my photos", harness_commit="test", checks=checks or [])


def root_of(req: AttemptRequest) -> str:
    return f"{HOME}/fleet/runs/{req.sweep_id}/{req.cell.id}/attempt-{req.attempt}"


def healthy_host(req: AttemptRequest, exit_code: int | None = 0, leaves: dict[str, bytes] | None = None) -> MemoryTransport:
    """A host on which every step works; the agent exits with ``exit_code`` (None: it never exits) and leaves
    ``leaves`` (paths relative to the attempt root) behind."""
    root = root_of(req)
    fleet = f"{root}/.fleet"

    def launch(script: str, t: MemoryTransport) -> str:
        t.files[f"{fleet}/started.json"] = json.dumps({"pid": 4242, "pgid": 4242}).encode()
        if exit_code is not None:
            t.files[f"{fleet}/exit.json"] = json.dumps({"exit_code": exit_code, "signal": None}).encode()
            t.files[f"{fleet}/agent.stdout"] = b"done\n"
            t.files.update({f"{root}/{rel}": data for rel, data in (leaves or {}).items()})
        return ""

    def pack(script: str, t: MemoryTransport) -> str:
        # What the launcher's pack leaves: the files the agent left beside the workspace, in outputs.tar.gz.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for rel, data in (leaves or {}).items():
                info = tarfile.TarInfo(rel)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        t.files[f"{fleet}/outputs.tar.gz"] = buf.getvalue()
        return ""

    def cat(name: str):  # type: ignore[no-untyped-def]
        return lambda script, t: t.files.get(f"{fleet}/{name}", b"").decode()

    return MemoryTransport(req.host, [
        (r'^printf %s "\$HOME"$', HOME),
        (r"^set -e; rm -rf ", f"Linux 6.8.0 x86_64\n3.12.3\n/dev/nvme0n1p2 1000 10 4096000 1% {HOME}\n"),
        (r"command -v ", "/usr/local/bin/my-agent\n"),
        (r"\.ready$", ""),  # the harness release is installed (workers.install.ensure_harness)
        (r"launch\.py run ", launch),
        (r"cat started\.json", cat("started.json")),
        (r"cat .*/exit\.json", cat("exit.json")),
        (r"launch\.py kill ", ""),
        (r"launch\.py pack ", pack),
    ])


def assert_failure(result: AttemptResult, code: str) -> None:
    assert (result.status, result.reason) == ("harness_failure", code), (result.status, result.reason, result.error)
    assert code in REASONS
    failure = classify(result.status, result.reason)
    assert failure is not None and failure.reason == code and failure.retry is REASONS[code].retried


def test_a_healthy_host_finishes() -> None:
    """The baseline every other test breaks one step of."""
    req = request()
    t = healthy_host(req)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert (result.status, result.reason, result.exit_code) == ("finished", "", 0), result.error
    assert result.agent_started_at and result.host_facts["disk_free_mb"] == "4000"
    assert json.loads(t.files[f"{root_of(req)}/.fleet/launch.json"])["argv"] == ["my-agent", f"{root_of(req)}/prompt.md"]
    assert t.files[f"{root_of(req)}/prompt.md"] == b"rename my photos"
    assert not t.ran(r"launch\.py kill ")


def test_a_stage_that_fails_is_agent_not_started_and_nothing_is_launched() -> None:
    req = request()
    t = healthy_host(req).on(r"^set -e; rm -rf ", ShellResult(1, "", "mkdir: cannot create directory: Permission denied"))
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "agent_not_started")
    assert f"cannot prepare {root_of(req)}" in result.error and "Permission denied" in result.error
    assert not t.ran(r"launch\.py run ") and not t.ran(r"command -v ")


@pytest.mark.parametrize("lost", [HostUnreachable("SSH connect to tower1.lan:22 timed out", host="tower1"),
                                  HostLost("connection lost during a command: EOFError", host="tower1")],
                         ids=["reconnect-refused", "channel-dropped"])
def test_a_host_lost_mid_run_is_host_lost_and_the_kill_is_attempted(lost: Exception) -> None:
    req = request()
    t = healthy_host(req, exit_code=None)
    polls = []

    def poll(script: str, t: MemoryTransport) -> str:
        polls.append(script)
        if len(polls) >= 3:
            raise lost
        return ""

    t.on(r"cat .*/exit\.json", poll).on(r"launch\.py kill ", lost)  # the host is gone: the kill fails too
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "host_lost")
    assert str(lost) in result.error
    kills = t.ran(r"launch\.py kill ")
    assert kills == [f"cd {root_of(req)} && python3 .fleet/launch.py kill {root_of(req)}"]
    assert t.scripts.index(kills[0]) > t.scripts.index(polls[-1])  # tried after the host went away
    assert not t.ran(r"launch\.py pack ")


def test_a_missing_agent_program_is_agent_missing_before_anything_runs() -> None:
    req = request()
    t = healthy_host(req).on(r"command -v ", ShellResult(1, "", ""))
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "agent_missing")
    assert result.error == "tower1: agent 'echo': my-agent is not installed (not found on PATH)"
    assert t.ran(r"command -v 'my-agent'|command -v my-agent")
    assert not t.ran(r"launch\.py run ") and f"{root_of(req)}/prompt.md" not in t.files


def test_a_timeout_is_status_timeout_and_the_group_is_killed() -> None:
    item = ITEM.model_copy(update={"timeout_s": 1})
    req = request(item=item)
    t = healthy_host(req, exit_code=None)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert (result.status, result.reason, result.exit_code) == ("timeout", "", None)
    assert classify(result.status, result.reason) is None  # the model's result: never retried away
    assert result.error == "the agent ran past the item's timeout of 1 s and was stopped"
    kills = t.ran(r"launch\.py kill ")
    assert kills == [f"cd {root_of(req)} && python3 .fleet/launch.py kill {root_of(req)}"]
    # Killed after the last poll, and collected after the kill: what it left is kept.
    last_poll = max(i for i, s in enumerate(t.scripts) if re.search(r"cat .*/exit\.json", s))
    assert last_poll < t.scripts.index(kills[0]) < t.scripts.index(t.ran(r"launch\.py pack ")[0])
    assert result.duration_s >= 1


def test_an_adapters_infrastructure_failure_is_model_endpoint() -> None:
    """The builtin agent exits with its kind's infrastructure code when its endpoint failed: the attempt keeps
    every file and is a harness failure, retried, never the model's answer."""
    req = request("builtin")
    end = {"event": "run_end", "outcome": "infrastructure", "reason": "model_http_503"}
    transcript = b'{"event": "run_start"}\n' + json.dumps(end).encode() + b"\n"
    t = healthy_host(req, exit_code=75, leaves={"transcript.jsonl": transcript})
    result = run_attempt(t, req, adapter_for("builtin", req.agent), timing=FAST)
    assert_failure(result, "model_endpoint")
    assert result.exit_code == 75 and result.error == "the model endpoint failed: model_http_503"
    files = {a.name: a.data() for a in result.artifacts}
    assert files["transcript.jsonl"] == transcript and files["agent.stdout"] == b"done\n"


def test_the_same_exit_without_the_infrastructure_code_is_the_models_result() -> None:
    req = request("builtin")
    end = {"event": "run_end", "outcome": "failed", "reason": "budget"}
    t = healthy_host(req, exit_code=1, leaves={"transcript.jsonl": json.dumps(end).encode() + b"\n"})
    result = run_attempt(t, req, adapter_for("builtin", req.agent), timing=FAST)
    assert (result.status, result.reason, result.exit_code) == ("finished", "", 1)


def test_a_check_that_breaks_once_runs_through_the_runner_protocol_twice() -> None:
    """run_checks goes through harness.checks.runner: the web runner's command, answered by the scripted host."""
    check = CheckSpec(name="site", kind="web", spec={"name": "site", "page": "index.html"})
    req = request(checks=[check])
    t = healthy_host(req)
    answers = ["Traceback: the browser driver dropped its connection",
               json.dumps({"name": "site", "kind": "web", "status": "passed", "summary": "1 passed"})]
    t.on(r"-m harness\.checks\.web ", lambda script, t: answers.pop(0))
    t.on(r"^rm -rf .*/checks/site && mkdir -p ", "")
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert result.status == "finished", result.error
    (checks,) = [json.loads(a.data()) for a in result.artifacts if a.name == "checks.json"]
    assert [c["status"] for c in checks] == ["passed"]
    assert checks[0]["summary"].startswith("1 passed (run twice; the first run: the web check did not answer: ")
    assert len(t.ran(r"-m harness\.checks\.web ")) == 2
    assert t.files[f"{root_of(req)}/.fleet/checks/site/spec.json"] == json.dumps(check.spec).encode()
