"""What environment an agent gets (docs/environment.md): the launcher's allow-list, what its adapter sets, and
the host variables named by ``model.api_key_env`` and the agent's ``pass_env``, never the worker's own. Run
through the real local transport and launcher: the worker's environment is this process's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.core.catalog import Item
from harness.core.checks.spec import CheckSpec
from harness.core.errors import InventoryError
from harness.core.inventory import AgentConfig, Host, ModelEndpoint, load_inventory
from harness.core.records import Cell
from harness.core.sweep import AttemptRequest
from workers.adapters import adapter_for
from workers.attempt import Timing, run_attempt
from workers.transport.local import LocalTransport

FAST = Timing(start_timeout_s=20.0, poll_min_s=0.05, poll_max_s=0.2)
BROKER = "redis://:brokerpw-5c1f@127.0.0.1:6379/0"
BACKEND = "redis://backend:backendpw-77aa@127.0.0.1:6379/1"
MODEL_KEY = "sk-modelkey-9e3d"
HOST_TOKEN = "hosttoken-41b0"
UNRELATED = "deploy-token-a8c2"


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's environment, as `fleet worker` may be started: its settings with passwords, the model's key (a
    local host's environment is the worker's), a token the agent asks for by name, and an unrelated secret."""
    monkeypatch.setenv("FLEET_BROKER_URL", BROKER)
    monkeypatch.setenv("FLEET_RESULT_BACKEND", BACKEND)
    monkeypatch.setenv("FLEET_SLOTS_URL", BROKER)
    monkeypatch.setenv("QUAL_MODEL_KEY", MODEL_KEY)
    monkeypatch.setenv("QUAL_HOST_TOKEN", HOST_TOKEN)
    monkeypatch.setenv("DEPLOY_TOKEN", UNRELATED)
    monkeypatch.setenv("FLEET_CHROMIUM", "/opt/chromium/chrome")
    monkeypatch.setenv("LC_MESSAGES", "C")


def _host(tmp_path: Path, api_key_env: str, agent: AgentConfig) -> Host:
    model = ModelEndpoint(base_url="http://127.0.0.1:9/v1", id="m", context=32768, max_output=2048,
                          api_key_env=api_key_env)
    return Host(name="loc", transport="local", workdir=str(tmp_path / "work"), python=sys.executable, model=model,
                agents={"envdump": agent})


def _run(host: Host, checks: list[CheckSpec] | None = None) -> tuple[dict[str, str], dict, AttemptRequest, dict[str, bytes]]:
    item = Item(id="01-env", kind="open", title="env", prompt="print your environment", timeout_s=60)
    cell = Cell(id=Cell.make_id(host.name, item.id, "envdump", 1), host=host.name, item=item.id, agent="envdump",
                rep=1, seed=1)
    req = AttemptRequest(sweep_id="s1", cell=cell, attempt=1, host=host, agent=host.agents["envdump"], item=item,
                         prompt="print your environment", harness_commit="test", checks=checks or [])
    result = run_attempt(LocalTransport(host), req, adapter_for("envdump", host.agents["envdump"]), timing=FAST)
    assert result.status == "finished" and result.exit_code == 0, (result.status, result.error)
    files = {a.name: a.data() for a in result.artifacts}
    seen = dict(line.split("=", 1) for line in files["answer.txt"].decode().splitlines() if "=" in line)
    return seen, json.loads(files["harness/launch.json"]), req, files


ENVDUMP = AgentConfig(kind="command", command=["sh", "-c", 'env > "$1"', "sh", "{answer_file}"],
                      env={"AGENT_MODE": "quiet"}, pass_env=["QUAL_HOST_TOKEN", "NOT_SET_ANYWHERE"])


def test_an_agent_on_a_local_host_never_sees_the_workers_settings_or_other_secrets(tmp_path: Path, worker_env) -> None:
    seen, launch, req, files = _run(_host(tmp_path, "", ENVDUMP))
    assert "FLEET_BROKER_URL" not in seen and "FLEET_RESULT_BACKEND" not in seen and "FLEET_SLOTS_URL" not in seen
    assert "DEPLOY_TOKEN" not in seen and "FLEET_CHROMIUM" not in seen
    assert "QUAL_MODEL_KEY" not in seen, "a host whose model names no key gives none"
    assert seen["AGENT_MODE"] == "quiet" and seen["LC_MESSAGES"] == "C" and seen["PATH"] and seen["HOME"]
    assert seen["QUAL_HOST_TOKEN"] == HOST_TOKEN, "pass_env hands the agent a host variable by name"
    assert "NOT_SET_ANYWHERE" not in seen
    for secret in (BROKER, "brokerpw-5c1f", "backendpw-77aa", UNRELATED):
        assert all(secret.encode() not in data for data in files.values())
    # Stored: names only. Sent through the broker: names only.
    assert launch["env"] == {"AGENT_MODE": "***"} and launch["pass_env"] == ["QUAL_HOST_TOKEN", "NOT_SET_ANYWHERE"]
    assert HOST_TOKEN not in json.dumps(launch) and HOST_TOKEN not in req.model_dump_json()


def test_the_models_key_reaches_the_agent_from_the_host_and_is_stored_nowhere_by_the_harness(tmp_path: Path, worker_env) -> None:
    seen, launch, req, files = _run(_host(tmp_path, "QUAL_MODEL_KEY", ENVDUMP))
    assert seen["QUAL_MODEL_KEY"] == MODEL_KEY  # the agent's own credential, read from the host's environment
    assert "FLEET_BROKER_URL" not in seen
    assert launch["pass_env"] == ["QUAL_MODEL_KEY", "QUAL_HOST_TOKEN", "NOT_SET_ANYWHERE"]
    # This agent printed its environment into its answer; everything the harness wrote itself is free of the key.
    assert all(MODEL_KEY.encode() not in data for name, data in files.items() if name != "answer.txt")
    # On the host too: the launch travels on the launcher's stdin, so no file but the agent's own answer holds the key.
    on_host = [f for f in Path(req.host.workdir).rglob("*") if f.is_file() and not f.is_symlink() and f.name != "answer.txt"]
    assert on_host and not [f for f in on_host if MODEL_KEY.encode() in f.read_bytes()]
    assert MODEL_KEY not in req.model_dump_json()


def test_local_shell_scripts_run_without_the_harness_settings(worker_env, tmp_path: Path) -> None:
    host = _host(tmp_path, "", ENVDUMP)
    out = LocalTransport(host).shell("env").stdout
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert not names & {"FLEET_BROKER_URL", "FLEET_RESULT_BACKEND", "FLEET_SLOTS_URL"}
    # The host's own variables stay: the checks' browser, the model's key for the launcher to hand on, the rest.
    assert {"FLEET_CHROMIUM", "QUAL_MODEL_KEY", "DEPLOY_TOKEN", "PATH"} <= names


def test_the_checks_never_see_the_models_key(tmp_path: Path, worker_env, monkeypatch: pytest.MonkeyPatch) -> None:
    # The agent's own test, run by the check, prints the environment into its failure, which checks.json keeps.
    import workers.install

    monkeypatch.setattr(workers.install, "ensure_harness", lambda t, host: sys.executable)  # this venv has pytest
    check = CheckSpec(name="env", kind="pytest", files={"test_env.py": (
        "import os\n\ndef test_env():\n"
        "    assert False, [os.environ.get(n, 'unset') for n in ('QUAL_MODEL_KEY', 'QUAL_HOST_TOKEN', 'DEPLOY_TOKEN')]\n")})
    seen, launch, req, files = _run(_host(tmp_path, "QUAL_MODEL_KEY", ENVDUMP), [check])
    assert seen["QUAL_MODEL_KEY"] == MODEL_KEY
    checks = files["checks.json"].decode()
    assert f"'unset', 'unset', '{UNRELATED}'" in checks, checks  # the check ran and printed; the host's rest stays
    assert MODEL_KEY not in checks and HOST_TOKEN not in checks


@pytest.mark.parametrize("kind", ["command", "builtin", "openclaw", "opencode", "hermes"])
def test_every_adapter_passes_the_models_key_by_name(kind: str, tmp_path: Path) -> None:
    config = AgentConfig(kind=kind, command=["x"] if kind == "command" else [], pass_env=["QUAL_MODEL_KEY", "HF_TOKEN"])
    host = _host(tmp_path, "QUAL_MODEL_KEY", config)
    assert adapter_for("envdump", config).pass_env(host) == ["QUAL_MODEL_KEY", "HF_TOKEN"]


def test_a_pass_env_entry_that_is_no_variable_name_is_refused(tmp_path: Path) -> None:
    inv = tmp_path / "inv.toml"
    inv.write_text('schema_version = 1\n[hosts.loc]\ntransport = "local"\n'
                   'model = { base_url = "http://127.0.0.1:9/v1", id = "m", context = 1, max_output = 1 }\n'
                   '[hosts.loc.agents.a]\ncommand = ["x"]\npass_env = ["HF_TOKEN=abc"]\n')
    with pytest.raises(InventoryError) as err:
        load_inventory(inv)
    assert "hosts.loc.agents.a.pass_env" in str(err.value)
