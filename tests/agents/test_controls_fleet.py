"""Controls: one sweep runs the builtin agent, OpenClaw, OpenCode and Hermes on the same SSH host, the same
model and the same items (`fleet sweep --agents builtin,openclaw,opencode,hermes`), so the agent is a
dimension of the matrix. Each conversation is played by that agent's own script (models/<kind>.toml, the
builtin agent's model.toml), every cell is graded, and the table and the report have a row per host / agent."""

from __future__ import annotations

import json

import pytest

from harness.modelserver import ScriptedModelServer
from tests.agents.conftest import node_env, ssh_agents_inventory
from tests.integration.fleetkit import REPO, run_fleet

pytestmark = pytest.mark.integration

OPEN = REPO / "prompts" / "open"
ITEMS = ("07-photo-renamer", "12-explain-only")
AGENTS = ("builtin", "openclaw", "opencode", "hermes")


def test_four_agents_on_one_host_model_and_items(tmp_path, agents_cache, ssh_hosts, client_key, redis_server,
                                                 namespace, workers):
    host = ssh_hosts["delta"]
    # As the coordinator serves an item set: every agent's script first, then the builtin agent's model.toml.
    scripts = [str(f) for item in ITEMS for f in sorted((OPEN / item / "models").glob("*.toml"))]
    scripts += [str(OPEN / item / "model.toml") for item in ITEMS]
    with ScriptedModelServer(scripts=scripts, model_id="scripted-model", context_size=65536,
                             max_output_tokens=2048) as server:
        # Hermes refuses a context under 64K, so the host's model has 65536 for every agent alike.
        inv = ssh_agents_inventory(tmp_path / "inv.toml", host, client_key, server.url, {
            "builtin": 'kind = "builtin"', "openclaw": f'kind = "openclaw"\n{node_env(agents_cache)}',
            "opencode": f'kind = "opencode"\n{node_env(agents_cache)}',
            "hermes": f'kind = "hermes"\nprogram = "{agents_cache / "hermes" / "bin" / "hermes"}"'}, context=65536, slots=2)
        workers(["delta"], inv)
        runs = tmp_path / "runs"
        r = run_fleet(["sweep", "-i", str(inv), "--items", "07,12", "--agents", ",".join(AGENTS), "--json",
                       "--runs", str(runs), "--broker", redis_server.url], namespace, timeout=900)
        played = {(q.script, q.conversation) for q in server.requests if q.path.endswith("/chat/completions")}
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    cells = {(c["item"], c["agent"]): c for c in summary["cells"]}
    assert set(cells) == {(i, a) for i in ITEMS for a in AGENTS}
    assert {k: c["grade"] for k, c in cells.items()} == {k: "DELIVERED" for k in cells}, \
        {k: (c["grade"], c["reason"]) for k, c in cells.items()}

    # Each agent's conversations were played by its own script, one conversation per cell at least.
    expected = {str(OPEN / i / "models" / f"{a}.toml") for i in ITEMS for a in AGENTS if a != "builtin"}
    expected |= {str(OPEN / i / "model.toml") for i in ITEMS}
    assert {script for script, _ in played} == expected
    sweep = runs / summary["sweep"]
    kinds = {}
    for (item, agent), cell in cells.items():
        meta = json.loads((sweep / cell["id"] / "attempt-1" / "meta.json").read_text())
        assert (meta["agent"], meta["agent_kind"], meta["model"]["id"]) == (agent, agent, "scripted-model")
        assert (sweep / cell["id"] / "attempt-1" / "transcript.jsonl").is_file()
        kinds[agent] = meta["agent_version"]
    assert kinds["openclaw"].startswith("OpenClaw 2026.9.6") and kinds["opencode"] == "1.18.33"
    assert "0.19.0" in kinds["hermes"]

    # The agent is a dimension of the table and the report: a row per host / agent.
    status = run_fleet(["status", summary["sweep"], "--runs", str(runs)], namespace)
    assert status.returncode == 0, status.stderr
    for agent in AGENTS:
        assert f"delta / {agent}" in status.stdout, status.stdout
    rep = run_fleet(["report", summary["sweep"], "--runs", str(runs)], namespace)
    assert rep.returncode == 0, rep.stderr
    report = (sweep / "REPORT.md").read_text()
    for agent in AGENTS:
        assert f"| delta / {agent} | DELIVERED | DELIVERED |" in report, report
