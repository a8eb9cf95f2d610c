"""The OpenClaw adapter's contract without a host: the command and the generated config, the owner's answer
from the JSON envelope, and what it makes of the state directories the real OpenClaw left (the sessions in
tests/agents/data/openclaw): the normalized transcript, and an endpoint failure as the fleet's."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from harness.core.catalog import Item
from harness.core.errors import TranscriptImportError
from harness.core.inventory import AgentConfig, Host
from harness.core.transcript import EVENT_ADAPTER, RunEnd
from workers.adapters import OpenClawAdapter, adapter_for
from workers.adapters.base import AttemptPaths

DATA = Path(__file__).parent / "data" / "openclaw" / "sqlite"
DB = "openclaw-state/agents/main/agent/openclaw-agent.sqlite"
ROOT = "/home/qual/fleet/runs/s1/tower1/07-photo-renamer/openclaw/r1/attempt-1"


def host(**model) -> Host:
    return Host.model_validate({
        "name": "tower1", "address": "tower1.lan", "user": "qual", "host_key": "SHA256:" + "A" * 43,
        "env": {"LANG": "C.UTF-8"},
        "model": {"base_url": "http://127.0.0.1:8080/v1", "id": "Qwen/Qwen3.5-27B", "context": 65536,
                  "max_output": 8192, **model},
        "agents": {"openclaw": {"kind": "openclaw"}},
    })


ITEM = Item(id="07-photo-renamer", kind="open", title="Photo renamer", prompt="x", timeout_s=900)
PATHS = AttemptPaths(ROOT)


def state(name: str) -> dict[str, bytes]:
    """The collected files of an attempt whose state directory holds this real database."""
    return {DB: gzip.decompress((DATA / f"{name}.sqlite.gz").read_bytes()), f"{DB}-wal": b""}


def test_the_command_and_its_environment():
    adapter = adapter_for("openclaw", AgentConfig(kind="openclaw", env={"PATH": "/opt/node24/bin:/usr/bin"}))
    assert isinstance(adapter, OpenClawAdapter) and adapter.program() == "openclaw"
    assert adapter.version_argv() == ["openclaw", "--version"]
    argv = adapter.argv(host(), ITEM, PATHS)
    assert argv[:6] == ["sh", "-c", 'mkdir -p -- "$1" "$2" && shift 2 && exec "$@"', "openclaw-setup",
                        f"{ROOT}/openclaw-state", f"{ROOT}/openclaw-home"]
    assert argv[6:] == [
        "openclaw", "agent", "exec", "--message-file", f"{ROOT}/prompt.md", "--cwd", f"{ROOT}/workspace",
        "--state-dir", f"{ROOT}/openclaw-state", "--config", f"{ROOT}/openclaw.json",
        "--model", "fleet/Qwen/Qwen3.5-27B", "--json", "--timeout", "900"]
    assert adapter.env(host(), PATHS) == {"LANG": "C.UTF-8", "OPENCLAW_HOME": f"{ROOT}/openclaw-home",
                                          "PATH": "/opt/node24/bin:/usr/bin"}
    assert adapter.collect() == ["openclaw.json", "openclaw-state/agents/"]
    custom = adapter_for("oc", AgentConfig(kind="openclaw", program="/opt/oc/bin/openclaw",
                                           version_command=["/opt/oc/bin/openclaw", "-V"]))
    assert custom.program() == "/opt/oc/bin/openclaw" and custom.version_argv() == ["/opt/oc/bin/openclaw", "-V"]
    assert custom.argv(host(), ITEM, PATHS)[6] == "/opt/oc/bin/openclaw"


def test_the_generated_config():
    adapter = adapter_for("openclaw", AgentConfig(kind="openclaw"))
    (name, data), = adapter.files(host(api_key_env="TOWER1_KEY"), ITEM, PATHS).items()
    assert name == "openclaw.json"
    config = json.loads(data)
    assert config == {
        "models": {"mode": "replace", "providers": {"fleet": {
            "baseUrl": "http://127.0.0.1:8080/v1", "api": "openai-completions", "apiKey": "${TOWER1_KEY}",
            "headers": {"X-Fleet-Conversation": ROOT},
            "models": [{"id": "Qwen/Qwen3.5-27B", "name": "Qwen/Qwen3.5-27B", "input": ["text"],
                        "contextWindow": 65536, "maxTokens": 8192}],
        }}},
        "agents": {"defaults": {"model": {"primary": "fleet/Qwen/Qwen3.5-27B"}}},
    }
    config = json.loads(adapter.files(host(), ITEM, PATHS)["openclaw.json"])
    assert config["models"]["providers"]["fleet"]["apiKey"] == "fleet-no-key"  # no key: never a real one


def test_the_answer_is_the_envelopes_final_text():
    adapter = adapter_for("openclaw", AgentConfig(kind="openclaw"))
    ok = {"ok": True, "status": "ok", "final": "Done: hello.py prints hi.", "payloads": [{"text": "Done."}]}
    assert adapter.answer(json.dumps(ok).encode(), None) == b"Done: hello.py prints hi."
    failed = {"ok": False, "status": "error", "final": "",
              "payloads": [{"text": "⚠️ Agent run failed (model: fleet/scripted-model).", "isError": True}]}
    assert adapter.answer(json.dumps(failed).encode(), None) == b""
    assert adapter.answer(b"openclaw: Node 20.20.2: node:sqlite is unavailable; use 24.16+", None) == b""


def test_normalize_the_state_directory():
    adapter = adapter_for("openclaw", AgentConfig(kind="openclaw"))
    data = adapter.normalize(state("renamer-v4"))
    assert data is not None
    events = [EVENT_ADAPTER.validate_json(line) for line in data.decode().splitlines()]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].imported.file == DB and events[0].imported.format == "openclaw-sqlite"
    assert isinstance(events[-1], RunEnd) and events[-1].outcome == "completed"
    assert adapter.normalize({"openclaw.json": b"{}"}) is None  # OpenClaw stopped before it had a session
    two = {**state("renamer-v4"), DB.replace("/main/", "/other/"): state("explain-v4")[DB]}
    with pytest.raises(TranscriptImportError, match="2 session databases"):
        adapter.normalize(two)


def test_an_endpoint_failure_is_the_fleets():
    adapter = adapter_for("openclaw", AgentConfig(kind="openclaw"))
    why = adapter.infrastructure_failure(1, state("http500-v4"))
    assert why is not None and why.startswith("the model endpoint failed: model_http_500: ")
    assert "500 CUDA out of memory" in why
    refused = adapter.infrastructure_failure(2, state("refused-v4"))
    assert refused is not None and "model_connection" in refused and "Connection error." in refused
    # The model's own results are not: a malformed tool call, a full context, a delivered answer.
    for name, code in (("tour-v4", 1), ("context-v4", 1), ("renamer-v4", 0)):
        assert adapter.infrastructure_failure(code, state(name)) is None, name
    assert adapter.infrastructure_failure(1, {}) is None
    assert adapter.infrastructure_failure(1, {DB: b"garbage"}) is None  # the transcript error is kept instead
