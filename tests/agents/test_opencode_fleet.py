"""The real OpenCode through the whole spine: Redis, a `fleet worker`, an sshd host with OpenCode (from
`.ci/agents`), and the scripted model beside it playing the items' models/opencode.toml. One sweep runs the
bundled photo renamer and the words-only item with OpenCode, twice each, and with an OpenCode that is not
installed: the files OpenCode wrote are in the workspace, its session store is imported as
transcript.jsonl, the checks ran and the cells are graded; the missing one is a harness failure
(agent_missing), not NOTHING."""

from __future__ import annotations

import json
import time
import tomllib

import pytest

from harness.modelserver import ScriptedModelServer
from harness.core.transcript import ModelResponse, RunEnd, RunStart, ToolCall, ToolResult, read_transcript
from tests.agents.conftest import assert_agent_missing, sweep_on_host, node_env, ssh_agents_inventory
from tests.integration.fleetkit import REPO

pytestmark = pytest.mark.integration

OPEN = REPO / "prompts" / "open"
SCRIPTS = [OPEN / "07-photo-renamer" / "models" / "opencode.toml", OPEN / "12-explain-only" / "models" / "opencode.toml"]
DB = "opencode/data/opencode/opencode.db"


def _script_text(item: str) -> str:
    return tomllib.loads((OPEN / item / "models" / "opencode.toml").read_text())["turns"][-1]["text"]


def test_opencode_on_an_ssh_host_through_a_sweep(tmp_path, agents_cache, ssh_hosts, client_key, redis_server,
                                                 namespace, workers):
    host = ssh_hosts["delta"]
    started = time.monotonic()
    with ScriptedModelServer([str(s) for s in SCRIPTS], model_id="scripted-model", context_size=32768,
                             max_output_tokens=2048) as server:
        inv = ssh_agents_inventory(tmp_path / "inv.toml", host, client_key, server.url, {
            "opencode": f'kind = "opencode"\n{node_env(agents_cache)}',
            "ghostcode": 'kind = "opencode"\nprogram = "/nonexistent/bin/opencode"'})
        workers(["delta"], inv)
        summary, cells, sweep = sweep_on_host(inv, "opencode,ghostcode", tmp_path / "runs", redis_server.url, namespace,
                                              repeat=2)
        requests = [q for q in server.requests if q.path.endswith("/chat/completions")]
    elapsed = time.monotonic() - started
    assert len(cells) == 8
    assert_agent_missing(cells, "ghostcode")

    for rep in (1, 2):
        # The photo renamer: OpenCode wrote the script and its test, ran the test, answered; the checks pass.
        cell = cells[("07-photo-renamer", "opencode", rep)]
        assert (cell["status"], cell["attempts"], cell["grade"]) == ("finished", 1, "DELIVERED"), json.dumps(cell)
        folder = sweep / cell["id"] / "attempt-1"
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["exit_code"] == 0 and meta["agent_version"] == "1.18.33", meta
        command = meta["agent_command"]
        root = command[4].rsplit("/", 1)[0]
        assert command[:5] == ["sh", "-c", 'f=$1; shift; exec "$@" < "$f"', "sh", f"{root}/prompt.md"]
        assert command[5:] == ["opencode", "run", "--format", "json", "--model", "fleet/scripted-model",
                               "--title", "fleet 07-photo-renamer"]
        for name in ("rename_photos.py", "test_rename_photos.py"):
            assert (folder / "workspace" / "Playground" / "photo-renamer" / name).is_file()
        assert all(c["status"] == "passed" for c in json.loads((folder / "checks.json").read_text()))
        launch = json.loads((folder / "harness" / "launch.json").read_text())
        assert {"HOME", "XDG_DATA_HOME", "OPENCODE_CONFIG", "OPENCODE_DISABLE_AUTOUPDATE", "npm_config_offline"} \
            <= set(launch["env"])
        provider = json.loads((folder / "opencode.json").read_text())["provider"]["fleet"]
        assert provider["options"] == {"baseURL": server.url}
        assert provider["models"]["scripted-model"]["limit"] == {"context": 32768, "output": 2048}
        assert (folder / DB).is_file() and (folder / "opencode" / "data" / "opencode" / "log").is_dir()
        assert (folder / "answer.txt").read_text() == _script_text("07-photo-renamer") + "\n"

        events = read_transcript(folder / "transcript.jsonl")
        start = events[0]
        assert isinstance(start, RunStart) and start.agent == "opencode" and start.imported is not None
        assert start.imported.format == "opencode" and start.imported.file == DB
        assert start.agent_version == "1.18.33" and start.workspace == f"{root}/workspace"
        assert start.prompt == (OPEN / "07-photo-renamer" / "prompt.md").read_text()
        assert [e.name for e in events if isinstance(e, ToolCall)] == ["write", "write", "bash"]
        results = [e for e in events if isinstance(e, ToolResult)]
        assert [r.details.path for r in results[:2]] == ["Playground/photo-renamer/rename_photos.py",
                                                         "Playground/photo-renamer/test_rename_photos.py"]
        assert results[2].details.exit_code == 0 and results[2].details.cwd == f"{root}/workspace/Playground/photo-renamer"
        assert results[2].details.test is not None and results[2].details.test.verdict == "passed"
        assert not any(r.is_error for r in results) and all(r.agent_is_error is False for r in results)
        responses = [e for e in events if isinstance(e, ModelResponse)]
        assert [r.finish_reason for r in responses] == ["tool_calls", "tool_calls", "tool_calls", "stop"]
        assert all(r.usage is not None and r.usage.prompt_tokens > 0 for r in responses)
        end = events[-1]
        assert isinstance(end, RunEnd) and end.outcome == "completed" and (end.rounds, end.tool_calls) == (4, 3)

        # Words only: no tool call, the answer is the model's reply.
        cell = cells[("12-explain-only", "opencode", rep)]
        assert (cell["status"], cell["attempts"], cell["grade"]) == ("finished", 1, "DELIVERED"), json.dumps(cell)
        folder = sweep / cell["id"] / "attempt-1"
        assert (folder / "answer.txt").read_text() == _script_text("12-explain-only") + "\n"
        events = read_transcript(folder / "transcript.jsonl")
        assert not [e for e in events if isinstance(e, ToolCall)]
        assert [e.text for e in events if isinstance(e, ModelResponse)] == [_script_text("12-explain-only")]

    # Every request is OpenCode's own, played by its script; no side request (title) reached the model; and
    # each attempt is its own conversation, though the two repetitions send the same prompt (OpenCode's system
    # prompt names the attempt's workspace).
    assert all(q.status == 200 and q.script in {str(s) for s in SCRIPTS} for q in requests), \
        [(q.status, q.script, q.source) for q in requests]
    conversations: dict[str, list[str]] = {}
    for q in requests:
        conversations.setdefault(q.conversation, []).append(q.source)
    assert len(conversations) == 4, conversations
    assert sorted(len(v) for v in conversations.values()) == [1, 1, 4, 4]
    assert all(v[0] == "turns[0]" for v in conversations.values())
    print(f"\nOpenCode sweep (4 OpenCode cells, 4 missing): {elapsed:.1f} s; attempts: "
          + ", ".join(f"{c['item'][:2]}/{c['agent']}/r{c['rep']} "
                      f"{json.loads((sweep / c['id'] / 'attempt-1' / 'meta.json').read_text())['duration_s']:.1f} s"
                      for c in summary["cells"]))
