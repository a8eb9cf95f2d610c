"""The builtin adapter: what the worker starts on the host, with which environment, and what it collects."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.core.catalog import Item
from harness.core.inventory import AgentConfig, Host, ModelEndpoint
from harness.modelserver import ScriptedModelServer
from harness.core.records import Cell
from harness.core.sweep import AttemptRequest
from harness.core.transcript import EVENT_ADAPTER
from workers.adapters.base import AttemptPaths
from workers.adapters.builtin import BuiltinAdapter
from workers.attempt import Timing, run_attempt
from workers.transport.local import LocalTransport
from tests.support import REPO

ROOT = REPO
PATHS = AttemptPaths("/home/fleet/runs/s1/c1/attempt-1")


def _host(**model: str) -> Host:
    endpoint = ModelEndpoint(base_url="http://127.0.0.1:8080/v1", id="Qwen3.5-9B", context=65536, max_output=8192,
                             **model)
    return Host(name="laptop", transport="local", python="/usr/bin/python3", env={"LANG": "C.UTF-8"},
                model=endpoint, agents={"builtin": AgentConfig(kind="builtin", env={"PYTHONPATH": "/opt/extra"})})


def _adapter(host: Host) -> BuiltinAdapter:
    return BuiltinAdapter("builtin", host.agents["builtin"])


ITEM = Item(id="07-photo-renamer", kind="open", title="Photo renamer", prompt="write it", timeout_s=900)


def test_argv_runs_the_agent_with_the_hosts_model() -> None:
    host = _host(api_key_env="LAPTOP_KEY")
    assert _adapter(host).argv(host, ITEM, PATHS) == [
        "/usr/bin/python3", "-m", "workers.host.agent",
        "--prompt-file", f"{PATHS.root}/prompt.md", "--workspace", f"{PATHS.root}/workspace",
        "--out-dir", PATHS.root, "--base-url", "http://127.0.0.1:8080/v1", "--model", "Qwen3.5-9B",
        "--context", "65536", "--max-output", "8192", "--api-key-env", "LAPTOP_KEY",
    ]
    assert "--api-key-env" not in _adapter(_host()).argv(_host(), ITEM, PATHS)


def test_the_agent_runs_from_the_installed_release_and_gets_the_hosts_env() -> None:
    host = _host()
    adapter = _adapter(host)
    assert adapter.needs_harness
    adapter.harness_python = "/home/fleet/harness/abc123/venv/bin/python"
    assert adapter.argv(host, ITEM, PATHS)[:3] == [adapter.harness_python, "-m", "workers.host.agent"]
    env = adapter.env(host, PATHS)
    assert env == {"LANG": "C.UTF-8", "PYTHONPATH": "/opt/extra"}


def test_exit_75_is_reported_as_the_model_endpoints_failure() -> None:
    adapter = _adapter(_host())
    end = b'{"event": "run_end", "outcome": "infrastructure", "reason": "model_http_500"}\n'
    assert adapter.infrastructure_failure(75, {"transcript.jsonl": b"{}\n" + end}) == (
        "the model endpoint failed: model_http_500"
    )
    assert adapter.infrastructure_failure(75, {}) == "the model endpoint failed: unknown"
    assert adapter.infrastructure_failure(0, {"transcript.jsonl": end}) is None
    assert adapter.infrastructure_failure(1, {}) is None


def test_collects_the_transcript_and_receipt_and_answers_from_answer_txt() -> None:
    adapter = _adapter(_host())
    assert adapter.collect() == ["transcript.jsonl", "receipt.json"]
    assert adapter.answer(b"completed: receipt passed\n", b"the answer") == b"the answer"
    assert adapter.answer(b"completed: receipt passed\n", None) == b""


def test_an_attempt_on_the_local_transport_collects_the_agents_files(tmp_path: Path) -> None:
    """The whole attempt lifecycle (launcher, process group, pack, collect) with the builtin agent."""
    script = ROOT / "prompts" / "open" / "07-photo-renamer" / "model.toml"
    with ScriptedModelServer(script) as server:
        endpoint = ModelEndpoint(base_url=server.url, id="scripted", context=32768, max_output=2048)
        host = Host(name="local", transport="local", python=sys.executable, workdir=str(tmp_path), model=endpoint,
                    agents={"builtin": AgentConfig(kind="builtin")})
        cell = Cell(id=Cell.make_id("local", ITEM.id, "builtin", 1), host="local", item=ITEM.id, agent="builtin",
                    rep=1, seed=1)
        prompt = (ROOT / "prompts" / "open" / "07-photo-renamer" / "prompt.md").read_text(encoding="utf-8")
        request = AttemptRequest(sweep_id="s1", cell=cell, attempt=1, host=host, agent=host.agents["builtin"],
                                 item=ITEM, prompt=prompt, harness_commit="test")
        result = run_attempt(LocalTransport(host), request, _adapter(host), timing=Timing(poll_min_s=0.05))
    assert (result.status, result.exit_code) == ("finished", 0), result.error
    files = {artifact.name: artifact for artifact in result.artifacts}
    receipt = json.loads(files["receipt.json"].data())
    assert receipt["status"] == "passed"
    assert files["answer.txt"].data().decode() == receipt["text"]
    last = EVENT_ADAPTER.validate_json(files["transcript.jsonl"].data().splitlines()[-1])
    assert last.event == "run_end" and last.outcome == "completed"
    assert "workspace/Playground/photo-renamer/rename_photos.py" in files
