"""The attempt lifecycle's failure paths (workers.attempt.run_attempt), driven through MemoryTransport: a
scripted host in memory, so each path runs in milliseconds and says exactly what the lifecycle tried.

Each test starts from a healthy host (the launcher starts the agent at once, the agent exits 0) and breaks
one step; each checks the recorded status and reason code (harness/core/failures.py) and what was tried."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zlib
import marshal

import pytest

from harness.core.catalog import Item
from harness.core.checks.spec import CheckSpec
from harness.core.errors import HostLost, HostUnreachable
from harness.core.failures import REASONS, classify
from harness.core.inventory import AgentConfig, Host, ModelEndpoint
from harness.core.records import AttemptResult, Cell
from harness.core.sweep import AttemptRequest
from workers.host import launcher
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


def launcher_request(t: MemoryTransport) -> dict:
    """The request the lifecycle sent the launcher in its last script (on stdin, as launcher.boot_stdin writes it)."""
    stdin = t.stdins[-1]
    assert stdin is not None
    return launcher.boot_request(stdin)


def launcher_requests(t: MemoryTransport, verb: str) -> list[dict]:
    """Every request of ``verb`` the lifecycle sent the launcher, in order."""
    sent = [launcher.boot_request(s) for i, s in enumerate(t.stdins) if s and re.search(r"' \w+ [0-9a-f]+$", t.scripts[i])]
    return [r for r in sent if r["verb"] == verb]


def delivery_of(t: MemoryTransport) -> str:
    """The folder of the latest attempt's delivery on the host (WORKDIR/.fleet/deliveries/TOKEN)."""
    run = launcher_requests(t, "run")[-1]
    return f"{run['fleet']}/deliveries/{run['token']}"


def bundle_bytes(frames: list[tuple[bytes, str, bytes]]) -> bytes:
    """A delivery's bundle as docs/launcher.md describes it, written here independently of the launcher's writer."""
    raw = b""
    for kind, name, data in frames:
        encoded = name.encode("utf-8", "surrogateescape")
        raw += kind + len(encoded).to_bytes(4, "big") + len(data).to_bytes(8, "big") + encoded + data
    return launcher.BUNDLE_MAGIC + zlib.compress(raw)


def packed_into_bundle(t: MemoryTransport, workspace: dict[str, bytes] | None = None,
                       outputs: dict[str, bytes] | None = None, stdout: bytes | None = None) -> str:
    """What the launcher's pack does on a healthy host: the delivery's stdout (as the host has it, unless ``stdout``
    says otherwise), the workspace's and the outputs' files in the delivery's bundle; returns the pack verb's answer."""
    here = delivery_of(t)
    out = t.files.get(f"{here}/agent.stdout", b"") if stdout is None else stdout
    streams = {"agent.stdout": {"size": len(out), "sha256": hashlib.sha256(out).hexdigest(), "kept": len(out)}}
    frames = [(launcher.FILE, "agent.stdout", out), (launcher.FILE, "streams.json", json.dumps(streams).encode())]
    frames += [(launcher.WORKSPACE, rel, data) for rel, data in (workspace or {}).items()]
    frames += [(launcher.OUTPUT, rel, data) for rel, data in (outputs or {}).items()]
    frames += [(launcher.FILE, "outputs.json", b"[]"), (launcher.FILE, "manifest.json", b"[]"),
               (launcher.FILE, "launcher.log", b"")]
    data = bundle_bytes(frames)
    t.files[f"{here}/{launcher.BUNDLE}"] = data
    return json.dumps({"bundle": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}) + "\n"


def healthy_host(req: AttemptRequest, exit_code: int | None = 0, leaves: dict[str, bytes] | None = None) -> MemoryTransport:
    """A host on which every step works; the agent exits with ``exit_code`` (None: it never exits) and leaves
    ``leaves`` (paths relative to the attempt root) behind. The launcher signs its records with the key the
    lifecycle sent it, as workers/host/launcher/ does."""
    root = root_of(req)

    def launch(script: str, t: MemoryTransport) -> str:
        r = launcher_request(t)
        # The start first makes the attempt folder afresh and writes the prompt and the adapter's files into it.
        t.files.update(r["prepare"]["files"])
        prepared = {"uname": "Linux 6.8.0 x86_64", "python": "3.12.3", "executable": "/usr/bin/python3.12",
                    "disk_free_mb": 4000, "reaped": []}
        here = f"{r['fleet']}/deliveries/{r['token']}"
        started = launcher.sign(r["key"], {"token": r["token"], "pid": 4242, "pgid": 4242, "sid": 4242,
                                           "launcher_pid": 4241})
        if exit_code is not None:
            out = b"done\n"
            record = {"token": r["token"], "exit_code": exit_code, "signal": None, "ended_by": "exit",
                      "agent.stdout": {"size": len(out), "sha256": hashlib.sha256(out).hexdigest()}}
            t.files[f"{here}/exit.json"] = json.dumps(launcher.sign(r["key"], record)).encode()
            t.files[f"{here}/agent.stdout"] = out
            t.files.update({f"{root}/{rel}": data for rel, data in (leaves or {}).items()})
        # As the launcher answers: the start's facts on the supervisor's answer line.
        return json.dumps({"started": started, "prepared": prepared}) + "\n"

    def pack(script: str, t: MemoryTransport) -> str:
        # What the launcher's pack leaves: the files the agent left beside the workspace, as outputs in the bundle.
        return packed_into_bundle(t, outputs=leaves)

    def poll(script: str, t: MemoryTransport) -> str:
        here = re.match(r"cd (\S+) ", script)
        assert here is not None
        return t.files.get(f"{here.group(1)}/exit.json", b"").decode()

    return MemoryTransport(req.host, [
        (r'^printf %s "\$HOME"$', HOME),
        (r"command -v ", "/usr/local/bin/my-agent\n"),
        (r"\.ready$", ""),  # the harness release is installed (workers.install.ensure_harness)
        (r"' run [0-9a-f]+$", launch),
        (r"r exit\.json", poll),
        (r"^cat .*/exit\.json", ""),
        (r"' kill [0-9a-f]+$", '{"ended": []}\n'),
        (r"' pack [0-9a-f]+$", pack),
    ])


KILL = r"' kill [0-9a-f]+$"
PACK = r"' pack [0-9a-f]+$"
POLL = r"r exit\.json"


def assert_failure(result: AttemptResult, code: str) -> None:
    assert (result.status, result.reason) == ("harness_failure", code), (result.status, result.reason, result.error)
    assert code in REASONS
    failure = classify(result.status, result.reason)
    assert failure is not None and failure.reason == code and failure.retry is REASONS[code].retried


def test_the_host_facts_come_with_the_start_and_home_is_asked_once_per_worker_and_host() -> None:
    """uname, the Python version and disk free come in the launcher's start answer (no command, no Python start of
    their own: each was 20-150 ms per attempt); $HOME is asked by the first attempt on a transport only."""
    req = request()
    t = healthy_host(req)
    first = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    second_req = req.model_copy(update={"attempt": 2})
    second = run_attempt(t, second_req, adapter_for("echo", req.agent), timing=FAST)
    assert (first.status, second.status) == ("finished", "finished"), (first.error, second.error)
    assert len(t.ran(r'^printf %s "\$HOME"$')) == 1
    launcher_calls = r"' (run|pack|kill) [0-9a-f]+$"  # their BOOT line reads sys.version: the interpreter's, for its code
    asked = [s for s in t.ran(r"sys\.version|uname|df -Pk|^set -e; rm -rf |' reap [0-9a-f]+$")
             if not re.search(launcher_calls, s)]
    assert not asked, asked
    assert first.host_facts == second.host_facts == {"uname": "Linux 6.8.0 x86_64", "python": "3.12.3",
                                                      "disk_free_mb": "4000"}
    assert second.workspace.startswith(f"{HOME}/fleet/runs/s1/")
    # The host's python3 (maybe a pyenv shim, 0.1 s a start) is run by the interpreter it named once it said which.
    starts = t.ran(r"' run [0-9a-f]+$")
    assert starts[0].startswith("cd / && exec python3 -S -c ") and starts[1].startswith("cd / && exec /usr/bin/python3.12 -S -c ")


@pytest.mark.parametrize("answer", [ShellResult(0, "", ""), ShellResult(255, "", "Connection reset")])
def test_a_home_that_cannot_be_read_is_agent_not_started_and_nothing_is_made_under_root(answer: ShellResult) -> None:
    # The workdir ~/fleet became /fleet: the attempt folder was removed and made afresh at the root.
    req = request()
    t = healthy_host(req).on(r'^printf %s "\$HOME"$', answer)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "agent_not_started")
    assert "cannot read $HOME" in result.error
    assert not t.ran(r"^set -e; rm -rf ") and not t.ran(r"' run [0-9a-f]+$")


def test_a_healthy_host_finishes() -> None:
    """The baseline every other test breaks one step of."""
    req = request()
    t = healthy_host(req)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert (result.status, result.reason, result.exit_code) == ("finished", "", 0), result.error
    assert result.agent_started_at and result.host_facts["disk_free_mb"] == "4000"
    (run,) = launcher_requests(t, "run")
    assert run["spec"]["argv"] == ["my-agent", f"{root_of(req)}/prompt.md"]
    assert t.files[f"{root_of(req)}/prompt.md"] == b"rename my photos"
    assert not t.ran(KILL)
    # Nothing of the launcher or its records is in the attempt folder the agent can write.
    assert not [f for f in t.files if f.startswith(f"{root_of(req)}/.fleet/")]


@pytest.mark.parametrize("answer, says", [
    ('{"prepare_error": "/home/u/fleet/runs/s1: Permission denied"}\n', "cannot prepare {root}: /home/u/fleet/runs/s1: "
                                                                         "Permission denied"),
    ('{"reap_error": "OSError: [Errno 5] Input/output error"}\n', "cannot end what earlier attempts left running: "
                                                                  "OSError: [Errno 5] Input/output error"),
], ids=["prepare", "reap"])
def test_a_start_that_cannot_prepare_is_agent_not_started_and_nothing_is_waited_for(answer: str, says: str) -> None:
    req = request()
    t = healthy_host(req).on(r"' run [0-9a-f]+$", ShellResult(127, answer, ""))
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "agent_not_started")
    assert result.error == "tower1: " + says.format(root=root_of(req))
    assert not t.ran(POLL) and not t.ran(PACK) and not result.agent_started_at


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

    t.on(POLL, poll).on(KILL, lost)  # the host is gone: the kill fails too
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "host_lost")
    assert str(lost) in result.error
    kills = t.ran(KILL)
    assert len(kills) == 1
    assert t.scripts.index(kills[0]) > t.scripts.index(polls[-1])  # tried after the host went away
    assert not t.ran(PACK)


def test_a_missing_agent_program_is_agent_missing_before_anything_runs() -> None:
    req = request()
    # An agent without a version command: the launcher's start looks for its program first (no command of its own).
    t = healthy_host(req).on(r"' run [0-9a-f]+$", ShellResult(127, '{"agent_missing": "my-agent"}\n', ""))
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "agent_missing")
    assert result.error == "tower1: agent 'echo': my-agent is not installed (not found on PATH)"
    assert launcher_request_of(t, "run")["prepare"]["program"] == "my-agent" and not t.ran(r"command -v ")
    assert not t.ran(POLL) and not result.agent_started_at


def test_an_agent_with_a_version_command_is_looked_for_by_the_probe() -> None:
    req = request()
    req = req.model_copy(update={"agent": req.agent.model_copy(update={"version_command": ["my-agent", "--version"]})})
    t = healthy_host(req).on(r"command -v ", ShellResult(1, "", ""))
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "agent_missing")
    assert result.error == "tower1: agent 'echo': my-agent is not installed (not found on PATH)"
    assert t.ran(r"command -v 'my-agent'|command -v my-agent")
    assert not t.ran(r"' run [0-9a-f]+$") and f"{root_of(req)}/prompt.md" not in t.files


def test_a_timeout_is_status_timeout_and_the_group_is_killed() -> None:
    item = ITEM.model_copy(update={"timeout_s": 1})
    req = request(item=item)
    t = healthy_host(req, exit_code=None)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert (result.status, result.reason, result.exit_code) == ("timeout", "", None)
    assert classify(result.status, result.reason) is None  # the model's result: never retried away
    assert result.error == "the agent ran past the item's timeout of 1 s and was stopped"
    kills = t.ran(KILL)
    assert len(kills) == 1
    kill = launcher.boot_request(t.stdins[t.scripts.index(kills[0])] or b"")
    assert kill["pids"] == {"agent": 4242, "sid": 4242, "launcher": 4241} and kill["marker"]
    # Killed after the last poll, and collected after the kill: what it left is kept.
    last_poll = max(i for i, s in enumerate(t.scripts) if re.search(POLL, s))
    assert last_poll < t.scripts.index(kills[0]) < t.scripts.index(t.ran(PACK)[0])
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
    """run_checks goes through workers.checks.runner: the web runner's command, answered by the scripted host."""
    check = CheckSpec(name="site", kind="web", spec={"name": "site", "page": "index.html"})
    req = request(checks=[check])
    t = healthy_host(req)
    answers = ["Traceback: the browser driver dropped its connection",
               json.dumps({"name": "site", "kind": "web", "status": "passed", "summary": "1 passed"})]
    t.on(r"-m workers\.host\.webcheck ", lambda script, t: answers.pop(0))
    t.on(r"^rm -rf .*/checks/site && mkdir -p ", "")
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert result.status == "finished", result.error
    (checks,) = [json.loads(a.data()) for a in result.artifacts if a.name == "checks.json"]
    assert [c["status"] for c in checks] == ["passed"]
    assert checks[0]["summary"].startswith("1 passed (run twice; the first run: the web check did not answer: ")
    assert len(t.ran(r"-m workers\.host\.webcheck ")) == 2
    assert t.files[f"{root_of(req)}/.fleet/checks/site/spec.json"] == json.dumps(check.spec).encode()


# -- supervision: the delivery's records are signed, the agent cannot forge or redirect them ------------------------

def test_the_start_reaps_makes_the_folder_afresh_and_names_this_delivery() -> None:
    req = request()
    t = healthy_host(req)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST, slot="redis:k#0")
    assert result.status == "finished", result.error
    # One launcher call reaps, makes the folder afresh and starts (workers/host/launcher/ run: the reap comes first).
    (start,) = t.ran(r"' run [0-9a-f]+$")
    assert not t.ran(r"' reap [0-9a-f]+$") and not t.ran(r"rm -rf .*/attempt-1")
    stdin = t.stdins[t.scripts.index(start)] or b""
    sent = launcher.boot_request(stdin)
    assert sent["entry"] == {"host": "tower1", "sweep_id": "s1", "sweep_uid": "", "cell": req.cell.id, "attempt": 1,
                             "slot": "redis:k#0", "root": root_of(req)}
    assert sent["prepare"]["root"] == root_of(req)
    assert sent["prepare"]["dirs"] == [f"{root_of(req)}/workspace", f"{root_of(req)}/.fleet"]
    line, _, body = stdin.partition(b"\n")
    assert zlib.decompress(marshal.loads(body[:int(line)])["source"]) == launcher_source()
    # The key travels on stdin only: in no script, and it differs per delivery.
    run = launcher_request_of(t, "run")
    assert run["key"] not in "".join(t.scripts) and run["marker"] not in "".join(t.scripts)
    assert run["fleet"] == f"{HOME}/fleet/.fleet" and not run["fleet"].startswith(root_of(req))
    again = healthy_host(req)
    run_attempt(again, req, adapter_for("echo", req.agent), timing=FAST)
    assert launcher_request_of(again, "run")["key"] != run["key"]
    assert launcher_request_of(again, "run")["token"] != run["token"]
    # The delivery's folder is removed once its files are in the result: by the next launcher call on the host (no
    # command of its own on the way to the result), or when the worker stops.
    assert not t.ran(r"rm -rf .*/deliveries/")
    run_attempt(t, req.model_copy(update={"attempt": 2}), adapter_for("echo", req.agent), timing=FAST)
    forgotten = [launcher_requests(t, "run")[-1]["forget"], launcher_requests(t, "pack")[-1]["forget"]]
    assert forgotten == [[f"{run['fleet']}/deliveries/{run['token']}"], []], forgotten


def launcher_source() -> bytes:
    from workers.attempt import LAUNCHER_SOURCE

    return LAUNCHER_SOURCE


def launcher_request_of(t: MemoryTransport, verb: str) -> dict:
    (found,) = launcher_requests(t, verb)
    return found


def test_a_forged_exit_record_is_ignored_and_the_true_one_is_recorded() -> None:
    req = request()
    t = healthy_host(req, exit_code=7)
    forged = json.dumps({"token": "x", "exit_code": 0, "signal": None, "mac": "0" * 64})
    polls: list[str] = []

    def poll(script: str, t: MemoryTransport) -> str:
        polls.append(script)
        if len(polls) < 3:
            return forged  # what an agent that found the folder wrote
        here = re.match(r"cd (\S+) ", script)
        assert here is not None
        return t.files[f"{here.group(1)}/exit.json"].decode()

    t.on(POLL, poll)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert (result.status, result.exit_code) == ("finished", 7), result.error
    files = {a.name: a.data() for a in result.artifacts}
    assert files["harness/forged-records.txt"] == forged.encode() + b"\n"
    assert json.loads(files["harness/exit.json"])["exit_code"] == 7


def test_a_record_signed_for_another_delivery_is_ignored() -> None:
    """A replayed record of an earlier delivery (its own key and token) is not this delivery's exit."""
    req = request()
    t = healthy_host(req, exit_code=None)
    old = launcher.sign("ab" * 32, {"token": "0" * 24, "exit_code": 0, "signal": None, "ended_by": "exit"})
    t.on(POLL, json.dumps(old))
    result = run_attempt(t, req.model_copy(update={"item": ITEM.model_copy(update={"timeout_s": 1})}),
                         adapter_for("echo", req.agent), timing=FAST)
    assert result.status == "timeout", result.error


def test_bundle_members_outside_the_workspace_are_refused() -> None:
    req = request()
    t = healthy_host(req)

    def pack(script: str, t: MemoryTransport) -> str:
        names = ("ok.txt", "../escape.txt", "/etc/evil", "a/../../b.txt", "sub/fine.txt")
        return packed_into_bundle(t, workspace={name: b"abc" for name in names})

    t.on(PACK, pack)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert (result.status, result.exit_code) == ("finished", 0), result.error
    names = {a.name for a in result.artifacts}
    assert {n for n in names if n.startswith("workspace/")} == {"workspace/ok.txt", "workspace/sub/fine.txt"}
    files = {a.name: a.data() for a in result.artifacts}
    assert files["harness/refused-members.txt"].decode().split() == ["../escape.txt", "/etc/evil", "a/../../b.txt"]


@pytest.mark.parametrize("ended_by", ["heartbeat", "superseded"])
def test_an_agent_the_launcher_ended_for_lack_of_supervision_is_supervision_lost(ended_by: str) -> None:
    req = request()
    t = healthy_host(req, exit_code=None)

    def poll(script: str, t: MemoryTransport) -> str:
        r = launcher_request_of(t, "run")
        return json.dumps(launcher.sign(r["key"], {"token": r["token"], "exit_code": None, "signal": 15,
                                                   "ended_by": ended_by}))

    t.on(POLL, poll)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "supervision_lost")
    assert ("heartbeat" if ended_by == "heartbeat" else "later delivery") in result.error


def test_a_launcher_that_died_first_is_supervision_lost_and_the_tree_is_killed() -> None:
    req = request()
    t = healthy_host(req, exit_code=None).on(POLL, "GONE")
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "supervision_lost")
    assert "launcher on the host ended before the agent" in result.error
    assert len(t.ran(KILL)) == 1


def test_output_changed_after_the_agent_ended_is_artifact_corrupt() -> None:
    req = request()
    t = healthy_host(req)

    def pack(script: str, t: MemoryTransport) -> str:
        return packed_into_bundle(t, stdout=b"forged\n")  # rewritten after the launcher signed its size

    t.on(PACK, pack)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "artifact_corrupt")
    assert "agent.stdout changed after the agent ended" in result.error


def test_a_start_record_without_a_valid_signature_is_agent_not_started() -> None:
    req = request()
    t = healthy_host(req).on(r"' run [0-9a-f]+$", json.dumps({"started": {"token": "x", "pid": 1, "pgid": 1,
                                                                           "mac": "0" * 64}}))
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "agent_not_started")
    assert "no signed start record" in result.error


@pytest.mark.parametrize("launcher_pid", [0, -1, None, "4241"])
def test_a_signed_start_record_without_a_usable_launcher_pid_is_agent_not_started(launcher_pid: object) -> None:
    # The wait loop's `kill -0 0` is always true on the host: a dead launcher was never noticed before the
    # item's timeout (and -1 names every process).
    req = request(item=ITEM.model_copy(update={"timeout_s": 1}))
    t = healthy_host(req, exit_code=None)

    def launch(script: str, t: MemoryTransport) -> str:
        r = launcher_request(t)
        started = {"token": r["token"], "pid": 4242, "pgid": 4242, "sid": 4242}
        if launcher_pid is not None:
            started["launcher_pid"] = launcher_pid
        return json.dumps({"started": launcher.sign(r["key"], started)}) + "\n"

    t.on(r"' run [0-9a-f]+$", launch)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "agent_not_started")
    assert "names no usable pid" in result.error
    assert not t.ran(POLL)


@pytest.mark.parametrize("ran_s, status", [(9.5, "finished"), (10.5, "timeout")])
def test_an_exit_record_read_late_is_judged_by_how_long_the_agent_ran(ran_s: float, status: str) -> None:
    # The host did not answer for a while; when the worker reads the exit record, the launcher's own measure of the
    # run decides: an agent that ran past the item's timeout is a timeout, however late its end was seen.
    req = request()
    req = req.model_copy(update={"item": req.item.model_copy(update={"timeout_s": 10})})
    t = healthy_host(req, exit_code=None)

    def poll(script: str, t: MemoryTransport) -> str:
        r = launcher_request_of(t, "run")
        return json.dumps(launcher.sign(r["key"], {"token": r["token"], "exit_code": 0, "signal": None,
                                                   "ended_by": "exit", "ran_s": ran_s}))

    t.on(POLL, poll)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert result.status == status, result.error
    if status == "timeout":
        assert "ran 10.5 s, past the item's timeout of 10 s" in result.error


def test_a_host_whose_sleep_takes_whole_seconds_only_keeps_the_polls_window(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # `sleep 0.05 || sleep 1` counted each 1 s fallback as one 50 ms look: a 2 s window took 40 s on such a
    # host, past the poll's 30 s + window timeout and the launcher's heartbeat bound.
    import os
    import shlex
    import subprocess
    import time

    from workers.attempt import poll_script

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sleep"
    fake.write_text('#!/bin/sh\ncase "$1" in *.*) echo "sleep: invalid time interval" >&2; exit 1;; esac\n'
                    'exec /bin/sleep "$1"\n')
    fake.chmod(0o755)
    delivery = tmp_path / "delivery"
    delivery.mkdir()
    script = poll_script(shlex.quote(str(delivery)), shlex.quote("beat-1"), window_s=1.0, launcher_pid=os.getpid())
    started = time.monotonic()
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    took = time.monotonic() - started
    assert out.returncode == 0 and out.stdout.strip() == "", out
    assert (delivery / "heartbeat").read_text() == "beat-1"
    assert took < 5, f"a 1 s window took {took:.1f} s"


def test_a_forged_record_that_stays_in_place_is_polled_at_the_polls_pace_and_kept_once() -> None:
    """A record an agent forged stays where the host's poll looks: the host's loop ended at once on every poll, and
    the worker asked again at once (hundreds of commands a second for the agent's whole run), keeping each copy of a
    record over 2000 bytes once more (its kept text never equalled the whole), without bound."""
    import time

    req = request()
    t = healthy_host(req, exit_code=7)
    forged = json.dumps({"token": "x", "exit_code": 0, "pad": "x" * 3000, "mac": "0" * 64})
    t0 = time.monotonic()

    def poll(script: str, t: MemoryTransport) -> str:
        if time.monotonic() - t0 < 0.5:
            return forged
        here = re.match(r"cd (\S+) ", script)
        assert here is not None
        return t.files[f"{here.group(1)}/exit.json"].decode()

    t.on(POLL, poll)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=Timing(start_timeout_s=2.0, poll_min_s=0.05,
                                                                                poll_max_s=0.05))
    assert (result.status, result.exit_code) == ("finished", 7), result.error
    assert len(t.ran(POLL)) < 40, f"{len(t.ran(POLL))} polls in 0.5 s of a 50 ms poll"
    files = {a.name: a.data() for a in result.artifacts}
    assert files["harness/forged-records.txt"] == forged[:2000].encode() + b"\n"


def test_a_forged_packed_record_is_polled_at_the_polls_pace_until_the_true_one_comes() -> None:
    import time

    req = request()
    t = healthy_host(req)
    t0 = time.monotonic()

    def launch(script: str, t: MemoryTransport) -> str:
        r = launcher_request(t)
        here = f"{r['fleet']}/deliveries/{r['token']}"
        out = b"done\n"
        record = {"token": r["token"], "exit_code": 0, "signal": None, "ended_by": "exit", "packing": True,
                  "agent.stdout": {"size": len(out), "sha256": hashlib.sha256(out).hexdigest()}}
        t.files[f"{here}/exit.json"] = json.dumps(launcher.sign(r["key"], record)).encode()
        t.files[f"{here}/agent.stdout"] = out
        t.files[f"{here}/packed.json"] = json.dumps(launcher.sign(r["key"], {"token": r["token"], "ok": True})).encode()
        started = launcher.sign(r["key"], {"token": r["token"], "pid": 4242, "pgid": 4242, "sid": 4242,
                                           "launcher_pid": 4241})
        return json.dumps({"started": started}) + "\n"

    def packed(script: str, t: MemoryTransport) -> str:
        if time.monotonic() - t0 < 0.5:
            return json.dumps({"token": "x", "ok": True, "mac": "0" * 64})  # an agent's, in the delivery folder
        here = re.match(r"cd (\S+) ", script)
        assert here is not None
        return t.files[f"{here.group(1)}/packed.json"].decode()

    t.on(r"' run [0-9a-f]+$", launch).on(r"r packed\.json", packed)
    # The poll that sees exit.json finds no packed.json yet: the worker waits for it (await_pack).
    t.on(POLL, lambda script, t: t.files[f"{delivery_of(t)}/exit.json"].decode())
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=Timing(start_timeout_s=2.0, poll_min_s=0.05,
                                                                                poll_max_s=0.05))
    assert result.status == "finished", result.error
    waits = [s for s in t.ran(r"r packed\.json") if "exit.json" not in s]  # await_pack's polls, not the wait's
    assert len(waits) < 40, f"{len(waits)} polls in 0.5 s of a 50 ms poll"
    assert not t.ran(PACK), "the supervisor's signed packed.json was taken: no pack of the worker's own"


def test_forged_records_are_kept_up_to_a_bound_and_the_rest_counted() -> None:
    """An agent can write a new forged record for every poll: the evidence kept must not grow with them."""
    from workers.attempt import MAX_FORGED

    req = request()
    t = healthy_host(req, exit_code=0)
    polls: list[str] = []

    def poll(script: str, t: MemoryTransport) -> str:
        polls.append(script)
        if len(polls) <= MAX_FORGED + 5:
            return json.dumps({"token": "x", "exit_code": len(polls), "mac": "0" * 64})
        return t.files[f"{delivery_of(t)}/exit.json"].decode()

    t.on(POLL, poll)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert result.status == "finished", result.error
    lines = {a.name: a.data() for a in result.artifacts}["harness/forged-records.txt"].decode().splitlines()
    assert len(lines) == MAX_FORGED + 1 and lines[-1] == "... and 5 more records not taken", lines[-3:]


def test_an_interpreter_the_hosts_python_named_that_cannot_start_alone_is_left_for_the_hosts_python() -> None:
    """A host python that is a wrapper its interpreter needs (it sets the library path): the interpreter named in the
    start's facts cannot start on its own (exit 127, nothing on stdout). Each launcher call must still run, once
    through the host's python, and that interpreter is not tried again."""
    req = request()
    t = healthy_host(req)
    named = "/usr/bin/python3.12"  # what healthy_host's start says sys.executable is
    t.on(rf"^cd / && exec {re.escape(named)} ", ShellResult(127, "", f"{named}: error while loading shared libraries: "
                                                                     "libpython3.12.so.1.0: cannot open shared object file"))
    for attempt in (1, 2, 3):
        result = run_attempt(t, req.model_copy(update={"attempt": attempt}), adapter_for("echo", req.agent), timing=FAST)
        assert (result.status, result.exit_code) == ("finished", 0), (attempt, result.error)
    assert len(t.ran(rf"^cd / && exec {re.escape(named)} ")) == 1, "the interpreter that could not start was tried again"


def test_the_supervisors_pack_is_bounded_a_little_past_the_workers_wait_for_it() -> None:
    from workers.attempt import PACK_TIMEOUT_S

    req = request()
    t = healthy_host(req)
    assert run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST).status == "finished"
    limit = launcher_request_of(t, "run")["pack"]["limit_s"]
    assert PACK_TIMEOUT_S < limit <= PACK_TIMEOUT_S + 60, limit


def test_a_folder_a_later_delivery_took_before_the_pack_is_supervision_lost_and_no_check_runs_in_it() -> None:
    """The pack verb refuses an attempt folder a later delivery of the attempt has made afresh (workers/host/launcher/
    _taken): the run was not observed to its end as this delivery's, so nothing of the folder is this delivery's
    result and no check runs in it (the checks ran before the worker's own pack, in the later delivery's folder)."""
    check = CheckSpec(name="site", kind="web", spec={"name": "site", "page": "index.html"})
    req = request(checks=[check])
    t = healthy_host(req)
    t.on(PACK, ShellResult(3, '{"superseded": "a later delivery runs in the folder (t2)"}\n', ""))
    t.on(r"-m workers\.host\.webcheck ", json.dumps({"name": "site", "kind": "web", "status": "passed", "summary": "ok"}))
    t.on(r"^rm -rf .*/checks/site && mkdir -p ", "")
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "supervision_lost")
    assert "a later delivery runs in the folder (t2)" in result.error
    assert not t.ran(r"-m workers\.host\.webcheck "), "a check ran in a folder that is another delivery's"


def test_an_agent_that_ended_in_time_but_after_the_last_poll_is_finished_not_timeout() -> None:
    """The agent ended by itself just inside its timeout, after the last poll looked (its supervisor then packing):
    the worker's deadline passed, it killed an ended tree and read the exit record, whose own measure said the agent
    ran within its time, and still recorded a timeout. The launcher's measure decides, as for a record read late."""
    item = ITEM.model_copy(update={"timeout_s": 1})
    req = request(item=item)
    t = healthy_host(req, exit_code=None)  # no poll sees the exit record

    def after_kill(script: str, t: MemoryTransport) -> str:
        r = launcher_request_of(t, "run")
        return json.dumps(launcher.sign(r["key"], {"token": r["token"], "exit_code": 3, "signal": None,
                                                   "ended_by": "exit", "ran_s": 0.98}))

    t.on(r"^cat .*/exit\.json", after_kill)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert (result.status, result.exit_code) == ("finished", 3), (result.status, result.error)
    assert len(t.ran(KILL)) == 1, "the tree is still ended: the worker could not know it had"


def test_a_bundle_that_is_not_the_one_the_launcher_packed_is_artifact_corrupt() -> None:
    """The bundle's size and sha256 come signed in packed.json (or from the pack verb's own answer): a bundle changed
    in the delivery folder since (an agent's doing) is not taken, not one file of it."""
    req = request()
    t = healthy_host(req, leaves={"answer.txt": b"the answer"})

    def pack(script: str, t: MemoryTransport) -> str:
        answer = packed_into_bundle(t, outputs={"answer.txt": b"the answer"})
        here = delivery_of(t)
        t.files[f"{here}/{launcher.BUNDLE}"] = bundle_bytes([(launcher.OUTPUT, "answer.txt", b"forged")])
        return answer

    t.on(PACK, pack)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "artifact_corrupt")
    assert "bundle is not the one its launcher packed" in result.error
    assert not [a for a in result.artifacts if a.name == "answer.txt"]


def test_a_bundle_that_cannot_be_read_is_artifact_corrupt() -> None:
    req = request()
    t = healthy_host(req)

    def pack(script: str, t: MemoryTransport) -> str:
        data = launcher.BUNDLE_MAGIC + zlib.compress(b"f\x00\x00\x00\x09agent.std")  # a frame cut short
        t.files[f"{delivery_of(t)}/{launcher.BUNDLE}"] = data
        return json.dumps({"bundle": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}) + "\n"

    t.on(PACK, pack)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST)
    assert_failure(result, "artifact_corrupt")
    assert "bundle cannot be read" in result.error


def sent_tag(stdin: bytes | None) -> str:
    """The interpreter a launcher call's code was compiled by (``tag`` of what launcher.boot_stdin wrote)."""
    line, _, body = (stdin or b"").partition(b"\n")
    return str(marshal.loads(body[:int(line)])["tag"])


def test_the_code_a_host_compiled_is_sent_back_to_it_and_dropped_when_it_does_not_load() -> None:
    """A host whose interpreter is not the worker's compiles the launcher's source and gives its code back once
    (workers/host/launcher/ run): the next calls send that code, so the host compiles nothing. Code that does not load
    there (the interpreter behind the host's python changed) leaves no answer line: the source again, at once."""
    req = request()
    t = healthy_host(req)
    host_code = base64.b64encode(zlib.compress(b"the host's own code")).decode()
    healthy_start = next(r for p, r in t.replies if p.pattern == r"' run [0-9a-f]+$")
    assert callable(healthy_start)

    def start(script: str, t: MemoryTransport) -> str:
        assert launcher_request(t)["want_code"] is True
        answer = str(healthy_start(script, t))
        if sent_tag(t.stdins[-1]) == "host python 3.99":
            return answer
        return json.dumps({"compiled": {"tag": "host python 3.99", "code": host_code}}) + "\n" + answer

    t.on(r"' run [0-9a-f]+$", start)
    assert run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST).status == "finished"
    second = run_attempt(t, req.model_copy(update={"attempt": 2}), adapter_for("echo", req.agent), timing=FAST)
    assert second.status == "finished", second.error
    tags = [sent_tag(s) for s, script in zip(t.stdins, t.scripts) if s and re.search(r"' \w+ [0-9a-f]+$", script)]
    assert tags[0] != "host python 3.99" and set(tags[2:]) == {"host python 3.99"}, tags
    # The interpreter changed: the code does not load (a traceback, no answer line); the source goes at once.
    t.on(r"' pack [0-9a-f]+$", lambda script, t: ShellResult(1, "", "ValueError: bad marshal data")
         if b"host python 3.99" in (t.stdins[-1] or b"") else packed_into_bundle(t))
    third = run_attempt(t, req.model_copy(update={"attempt": 3}), adapter_for("echo", req.agent), timing=FAST)
    assert third.status == "finished", third.error
    assert "launcher code python3" not in t.memo


def test_the_delivery_folders_left_for_the_next_call_are_removed_when_the_worker_stops() -> None:
    from workers import tasks

    req = request()
    t = healthy_host(req).on(r"^rm -rf ", "")
    assert run_attempt(t, req, adapter_for("echo", req.agent), timing=FAST).status == "finished"
    run = launcher_request_of(t, "run")
    assert t.leftovers == [f"{run['fleet']}/deliveries/{run['token']}"]
    tasks._transports[("test",)] = t
    try:
        tasks.forget_leftovers()
    finally:
        del tasks._transports[("test",)]
    assert t.leftovers == [] and t.ran(r"^rm -rf " + re.escape(f"{run['fleet']}/deliveries/{run['token']}") + "$")


def test_two_attempts_on_one_transport_both_drop_launcher_code_that_no_longer_loads() -> None:
    """The embedded worker's threads share a host's transport: both met the stale code at once, and the second to drop
    it from the memo raised KeyError out of run_attempt (which never raises for the host's doing)."""
    import threading

    req = request()
    t = healthy_host(req)
    t.memo["launcher tag python3"] = "host python 3.99"
    t.memo["launcher code python3"] = base64.b64encode(b"stale").decode()
    healthy_start = next(r for p, r in t.replies if p.pattern == r"' run [0-9a-f]+$")
    assert callable(healthy_start)
    both_there = threading.Barrier(2, timeout=10)

    def start(script: str, t: MemoryTransport) -> ShellResult | str:
        if sent_tag(t.stdins[-1]) == "host python 3.99":
            both_there.wait()  # both calls are on the host at once with the stale code
            return ShellResult(1, "", "ValueError: bad marshal data (unknown type code)")
        return str(healthy_start(script, t))

    t.on(r"' run [0-9a-f]+$", start)
    results: dict[int, object] = {}

    def go(n: int) -> None:
        try:
            results[n] = run_attempt(t, req.model_copy(update={"attempt": n}), adapter_for("echo", req.agent),
                                     timing=FAST).status
        except BaseException as exc:  # noqa: BLE001 - what the test looks for
            results[n] = exc

    threads = [threading.Thread(target=go, args=(n,)) for n in (1, 2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert results == {1: "finished", 2: "finished"}, results
