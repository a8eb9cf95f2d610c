"""The real OpenClaw through the whole spine: Redis, a `fleet worker`, an sshd host with Node 24 and OpenClaw
(from `.ci/agents`), and the scripted model beside it playing the items' scripts as a sweep's coordinator
does (models/*.toml first). One sweep runs the bundled photo renamer and the words-only item with OpenClaw,
and with an OpenClaw that is not installed: the files OpenClaw wrote are in the workspace, its session is
imported as transcript.jsonl, the checks ran and the cells are graded; the missing one is a harness failure
(agent_missing), not NOTHING. An endpoint that fails is a harness failure (model_endpoint), retried."""

from __future__ import annotations

import json
import time
import tomllib

import pytest

from harness.modelserver import ScriptedModelServer
from harness.core.transcript import ModelResponse, RunEnd, RunStart, ToolCall, ToolResult, read_transcript
from tests.agents.conftest import node_env, ssh_agents_inventory
from tests.integration.fleetkit import REPO, run_fleet

pytestmark = pytest.mark.integration

OPEN = REPO / "prompts" / "open"
ITEMS = ("07-photo-renamer", "12-explain-only")
# As the coordinator serves an item set: every agent's script, then the builtin agent's model.toml.
SCRIPTS = [f for item in ITEMS for f in sorted((OPEN / item / "models").glob("*.toml"))] + \
    [OPEN / item / "model.toml" for item in ITEMS]
GHOST = 'kind = "openclaw"\nprogram = "/nonexistent/bin/openclaw"'
STATE_DB = "openclaw-state/agents/main/agent/openclaw-agent.sqlite"


def _script_text(item: str) -> str:
    turns = tomllib.loads((OPEN / item / "models" / "openclaw.toml").read_text())["turns"]
    return turns[-1]["text"]


def test_openclaw_on_an_ssh_host_through_a_sweep(tmp_path, agents_cache, ssh_hosts, client_key, redis_server,
                                                 namespace, workers):
    host = ssh_hosts["delta"]
    started = time.monotonic()
    with ScriptedModelServer(scripts=[str(s) for s in SCRIPTS], model_id="scripted-model", context_size=32768,
                             max_output_tokens=2048) as server:
        inv = ssh_agents_inventory(tmp_path / "inv.toml", host, client_key, server.url, {
            "openclaw": f'kind = "openclaw"\n{node_env(agents_cache)}', "ghostclaw": GHOST})
        workers(["delta"], inv)
        runs = tmp_path / "runs"
        r = run_fleet(["sweep", "-i", str(inv), "--items", "07,12", "--agents", "openclaw,ghostclaw", "--json",
                       "--runs", str(runs), "--broker", redis_server.url], namespace, timeout=900)
        requests = list(server.requests)
    assert {q.script for q in requests} == {str(OPEN / item / "models" / "openclaw.toml") for item in ITEMS}
    elapsed = time.monotonic() - started
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    cells = {(c["item"], c["agent"]): c for c in summary["cells"]}
    sweep = runs / summary["sweep"]

    for item in ("07-photo-renamer", "12-explain-only"):
        ghost = cells[(item, "ghostclaw")]
        assert (ghost["grade"], ghost["reason"], ghost["attempts"]) == ("HARNESS_FAILURE", "agent_missing", 1), ghost

    # The photo renamer: OpenClaw wrote the script and its test, ran the test, answered; the checks pass.
    cell = cells[("07-photo-renamer", "openclaw")]
    assert (cell["status"], cell["attempts"], cell["grade"]) == ("finished", 1, "DELIVERED"), cell
    folder = sweep / cell["id"] / "attempt-1"
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["exit_code"] == 0
    assert meta["agent_version"].startswith("OpenClaw 2026.9.6"), meta["agent_version"]
    command = meta["agent_command"]
    exec_at = command.index("openclaw")
    root = command[command.index("--state-dir") + 1].rsplit("/", 1)[0]
    assert command[exec_at:] == [
        "openclaw", "agent", "exec", "--message-file", f"{root}/prompt.md", "--cwd", f"{root}/workspace",
        "--state-dir", f"{root}/openclaw-state", "--config", f"{root}/openclaw.json",
        "--model", "fleet/scripted-model", "--json", "--timeout", "900"]
    for name in ("rename_photos.py", "test_rename_photos.py"):
        assert (folder / "workspace" / "Playground" / "photo-renamer" / name).is_file()
    assert all(c["status"] == "passed" for c in json.loads((folder / "checks.json").read_text()))
    config = json.loads((folder / "openclaw.json").read_text())
    provider = config["models"]["providers"]["fleet"]
    assert provider["baseUrl"] == server.url and provider["api"] == "openai-completions"
    assert (provider["models"][0]["contextWindow"], provider["models"][0]["maxTokens"]) == (32768, 2048)
    assert (folder / STATE_DB).is_file()
    envelope = json.loads((folder / "agent.stdout").read_text())
    assert envelope["ok"] is True and envelope["status"] == "ok"
    assert (folder / "answer.txt").read_text() == envelope["final"] == _script_text("07-photo-renamer")

    events = read_transcript(folder / "transcript.jsonl")
    start = events[0]
    assert isinstance(start, RunStart) and start.agent == "openclaw" and start.imported is not None
    assert start.imported.format == "openclaw-sqlite" and start.imported.run == envelope["sessionId"]
    assert start.agent_version == "2026.9.6" and start.workspace == f"{root}/workspace"
    assert [e.name for e in events if isinstance(e, ToolCall)] == ["write", "write", "exec"]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [r.details.path for r in results[:2]] == ["Playground/photo-renamer/rename_photos.py",
                                                     "Playground/photo-renamer/test_rename_photos.py"]
    assert results[2].details.test is not None and results[2].details.test.verdict == "passed"
    assert not any(r.is_error for r in results)
    end = events[-1]
    assert isinstance(end, RunEnd) and end.outcome == "completed" and end.rounds == 4

    # Words only: no tool call, the answer is the model's reply.
    cell = cells[("12-explain-only", "openclaw")]
    assert (cell["status"], cell["attempts"], cell["grade"]) == ("finished", 1, "DELIVERED"), cell
    folder = sweep / cell["id"] / "attempt-1"
    assert (folder / "answer.txt").read_text() == _script_text("12-explain-only")
    events = read_transcript(folder / "transcript.jsonl")
    assert not [e for e in events if isinstance(e, ToolCall)]
    assert [e.text for e in events if isinstance(e, ModelResponse)] == [_script_text("12-explain-only")]

    # Each attempt is its own conversation on the model server (the header OpenClaw sends from its config).
    conversations = {q.conversation for q in requests}
    assert len(conversations) == 2 and all(c.startswith(str(host.workdir)) for c in conversations), conversations
    durations = {f"{c['item']}/{c['agent']}": json.loads((sweep / c["id"] / "attempt-1" / "meta.json").read_text())
                 ["duration_s"] for c in summary["cells"]}
    print(f"\nOpenClaw sweep: {elapsed:.1f} s; attempts: " + ", ".join(f"{k} {v:.1f} s" for k, v in durations.items()))


def test_a_failing_endpoint_is_a_harness_failure_retried(tmp_path, agents_cache, ssh_hosts, client_key, redis_server,
                                                         namespace, workers):
    """The endpoint answers 404 (the model id is not served): OpenClaw gives up at once and its session says
    so; each attempt is HARNESS_FAILURE model_endpoint, with its state and transcript kept."""
    host = ssh_hosts["delta"]
    script = tmp_path / "not-found.toml"
    script.write_text('schema_version = 1\n[fallback]\nhttp_status = 404\n'
                      'error_body = \'{"error": {"message": "model scripted-model not found", "type": "not_found"}}\'\n')
    with ScriptedModelServer(script) as server:
        inv = ssh_agents_inventory(tmp_path / "inv.toml", host, client_key, server.url, {
            "openclaw": f'kind = "openclaw"\n{node_env(agents_cache)}', "ghostclaw": GHOST})
        workers(["delta"], inv)
        runs = tmp_path / "runs"
        r = run_fleet(["sweep", "-i", str(inv), "--items", "12", "--agents", "openclaw", "--json", "--runs",
                       str(runs), "--broker", redis_server.url, "--max-attempts", "2"], namespace, timeout=600)
    # Every cell ended in a harness failure: the sweep ran, but measured nothing (exit 3).
    assert r.returncode == 3, r.stderr[-3000:]
    assert "nothing was measured" in r.stderr
    summary = json.loads(r.stdout)
    (cell,) = summary["cells"]
    assert (cell["status"], cell["reason"], cell["attempts"], cell["grade"]) == (
        "harness_failure", "model_endpoint", 2, "HARNESS_FAILURE"), cell
    for k in (1, 2):
        folder = runs / summary["sweep"] / cell["id"] / f"attempt-{k}"
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["exit_code"] == 1 and "model_http_404" in meta["error"] and "not found" in meta["error"]
        assert json.loads((folder / "agent.stdout").read_text())["ok"] is False
        assert (folder / STATE_DB).is_file() and (folder / "answer.txt").read_text() == ""
        end = read_transcript(folder / "transcript.jsonl")[-1]
        assert isinstance(end, RunEnd) and (end.outcome, end.reason) == ("infrastructure", "model_http_404")
