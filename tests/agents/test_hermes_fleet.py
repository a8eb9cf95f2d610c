"""The real Hermes Agent through the whole spine: Redis, a `fleet worker`, an sshd host with Hermes (from
`.ci/agents`), and the scripted model beside it playing the items' models/hermes.toml. One sweep runs the
bundled photo renamer and the words-only item with Hermes, twice each, and with a Hermes that is not
installed: the files Hermes wrote are in the workspace, its session store is imported as transcript.jsonl,
the checks ran and the cells are graded; the missing one is a harness failure (agent_missing), not NOTHING."""

from __future__ import annotations

import json
import time
import tomllib

import pytest

from harness.modelserver import ScriptedModelServer
from harness.core.transcript import ModelResponse, RunEnd, RunStart, ToolCall, ToolResult, read_transcript
from tests.agents.conftest import assert_agent_missing, sweep_on_host, ssh_agents_inventory
from workers.adapters.hermes import ONESHOT_SCRIPT
from tests.integration.fleetkit import REPO

pytestmark = pytest.mark.integration

OPEN = REPO / "prompts" / "open"
SCRIPTS = [OPEN / "07-photo-renamer" / "models" / "hermes.toml", OPEN / "12-explain-only" / "models" / "hermes.toml"]
DB = "hermes/home/.hermes/state.db"


def _script_text(item: str) -> str:
    return tomllib.loads((OPEN / item / "models" / "hermes.toml").read_text())["turns"][-1]["text"]


def test_hermes_on_an_ssh_host_through_a_sweep(tmp_path, agents_cache, ssh_hosts, client_key, redis_server,
                                                 namespace, workers):
    host = ssh_hosts["delta"]
    started = time.monotonic()
    with ScriptedModelServer([str(s) for s in SCRIPTS], model_id="scripted-model", context_size=65536,
                             max_output_tokens=2048) as server:
        # Hermes refuses a model context under 64K: this host's model has 65536.
        inv = ssh_agents_inventory(tmp_path / "inv.toml", host, client_key, server.url, {
            "hermes": f'kind = "hermes"\nprogram = "{agents_cache / "hermes" / "bin" / "hermes"}"',
            "ghostmes": 'kind = "hermes"\nprogram = "/nonexistent/bin/hermes"'}, context=65536)
        workers(["delta"], inv)
        summary, cells, sweep = sweep_on_host(inv, "hermes,ghostmes", tmp_path / "runs", redis_server.url, namespace,
                                              repeat=2)
        requests = [q for q in server.requests if q.path.endswith("/chat/completions")]
    elapsed = time.monotonic() - started
    assert len(cells) == 8
    assert_agent_missing(cells, "ghostmes")

    for rep in (1, 2):
        # The photo renamer: Hermes wrote the script and its test, ran the test, answered; the checks pass.
        cell = cells[("07-photo-renamer", "hermes", rep)]
        assert (cell["status"], cell["attempts"], cell["grade"]) == ("finished", 1, "DELIVERED"), json.dumps(cell)
        folder = sweep / cell["id"] / "attempt-1"
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["exit_code"] == 0 and meta["agent_version"] == "hermes-agent 0.19.0", meta
        command = meta["agent_command"]
        root = command[4].rsplit("/", 1)[0]
        assert command[:3] == ["sh", "-c", ONESHOT_SCRIPT]
        assert command[3:] == ["sh", f"{root}/prompt.md", f"{root}/hermes-config.yaml", f"{root}/hermes/final.txt",
                               str(agents_cache / "hermes" / "bin" / "hermes"), "--usage-file", f"{root}/hermes/usage.json"]
        for name in ("rename_photos.py", "test_rename_photos.py"):
            assert (folder / "workspace" / "Playground" / "photo-renamer" / name).is_file()
        assert all(c["status"] == "passed" for c in json.loads((folder / "checks.json").read_text()))
        launch = json.loads((folder / "harness" / "launch.json").read_text())
        assert {"HOME", "HERMES_HOME", "PIP_DISABLE_PIP_VERSION_CHECK"} <= set(launch["env"])
        assert (folder / DB).is_file() and (folder / "hermes" / "home" / ".hermes" / "logs").is_dir()
        assert json.loads((folder / "hermes" / "usage.json").read_text())["completed"] is True
        config = (folder / "hermes-config.yaml").read_text()
        assert f'base_url: "{server.url}"' in config and "context_length: 65536" in config
        assert "max_tokens: 2048" in config and "allow_lazy_installs: false" in config
        assert (folder / "answer.txt").read_text() == _script_text("07-photo-renamer") + "\n"
        assert (folder / "answer.txt").read_bytes() == (folder / "hermes" / "final.txt").read_bytes()

        events = read_transcript(folder / "transcript.jsonl")
        start = events[0]
        assert isinstance(start, RunStart) and start.agent == "hermes" and start.imported is not None
        assert start.imported.format == "hermes" and start.imported.file == DB
        assert start.workspace == f"{root}/workspace" and start.base_url == server.url
        assert start.system_prompt.startswith("You are Hermes Agent")
        assert start.prompt == (OPEN / "07-photo-renamer" / "prompt.md").read_text()
        assert [e.name for e in events if isinstance(e, ToolCall)] == ["write_file", "write_file", "terminal"]
        results = [e for e in events if isinstance(e, ToolResult)]
        assert [r.details.path for r in results[:2]] == ["Playground/photo-renamer/rename_photos.py",
                                                         "Playground/photo-renamer/test_rename_photos.py"]
        assert results[2].details.exit_code == 0 and results[2].details.cwd == f"{root}/workspace/Playground/photo-renamer"
        assert results[2].details.test is not None and results[2].details.test.verdict == "passed"
        assert not any(r.is_error for r in results) and all(r.agent_is_error is False for r in results)
        responses = [e for e in events if isinstance(e, ModelResponse)]
        assert [r.finish_reason for r in responses] == ["tool_calls", "tool_calls", "tool_calls", "stop"]
        end = events[-1]
        assert isinstance(end, RunEnd) and end.outcome == "completed" and (end.rounds, end.tool_calls) == (4, 3)
        assert end.usage.prompt_tokens > 0

        # Words only: no tool call, the answer is the model's reply.
        cell = cells[("12-explain-only", "hermes", rep)]
        assert (cell["status"], cell["attempts"], cell["grade"]) == ("finished", 1, "DELIVERED"), json.dumps(cell)
        folder = sweep / cell["id"] / "attempt-1"
        assert (folder / "answer.txt").read_text() == _script_text("12-explain-only") + "\n"
        events = read_transcript(folder / "transcript.jsonl")
        assert not [e for e in events if isinstance(e, ToolCall)]
        assert [e.text for e in events if isinstance(e, ModelResponse)] == [_script_text("12-explain-only")]

    # Every request is Hermes' own, played by its script; no side request reached the model; and each attempt
    # is its own conversation, though the two repetitions send the same prompt (Hermes' system prompt names the
    # attempt's working folder).
    assert all(q.status == 200 and q.script in {str(s) for s in SCRIPTS} for q in requests), \
        [(q.status, q.script, q.source) for q in requests]
    conversations: dict[str, list[str]] = {}
    for q in requests:
        conversations.setdefault(q.conversation, []).append(q.source)
    assert len(conversations) == 4, conversations
    assert sorted(len(v) for v in conversations.values()) == [1, 1, 4, 4]
    assert all(v[0] == "turns[0]" for v in conversations.values())
    print(f"\nHermes sweep (4 Hermes cells, 4 missing): {elapsed:.1f} s; attempts: "
          + ", ".join(f"{c['item'][:2]}/{c['agent']}/r{c['rep']} "
                      f"{json.loads((sweep / c['id'] / 'attempt-1' / 'meta.json').read_text())['duration_s']:.1f} s"
                      for c in summary["cells"]))
