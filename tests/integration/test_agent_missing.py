"""An agent that is not installed on a host is the fleet's failure (agent_missing), found before anything
runs, not retried, and reported by `fleet hosts check`; its version is recorded when it is there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.fleetkit import free_port, run_embedded

pytestmark = pytest.mark.integration

INVENTORY = """schema_version = 1
[hosts.local]
transport = "local"
workdir = "{workdir}"
slots = 1
[hosts.local.model]
base_url = "http://127.0.0.1:{port}/v1"
id = "scripted-model"
context = 32768
max_output = 2048
scripted = true
[hosts.local.agents.ghost]
kind = "command"
command = ["no-such-agent-7f3e", "{{prompt_file}}"]
[hosts.local.agents.echo]
kind = "command"
command = ["sh", "-c", "echo words only, as asked > \\"$1\\"", "sh", "{{answer_file}}"]
version_command = ["sh", "-c", "echo echo-agent 1.2.3"]
[hosts.local.agents.homed]
kind = "command"
command = ["~/bin/homed-agent", "{{answer_file}}"]
env = {{ HOMED_DATA = "~/data:/srv/x" }}
"""


def test_missing_agent_is_a_harness_failure_not_retried_and_hosts_check_says_so(tmp_path: Path) -> None:
    inv = tmp_path / "inv.toml"
    inv.write_text(INVENTORY.format(workdir=tmp_path / "host", port=free_port()))
    # An agent installed under the host user's home: `~` is that home, in the program and in env values.
    (tmp_path / "home" / "bin").mkdir(parents=True)
    homed = tmp_path / "home" / "bin" / "homed-agent"
    homed.write_text('#!/bin/sh\necho "homed: $HOMED_DATA" > "$1"\n')
    homed.chmod(0o755)
    r = run_embedded(["sweep", "-i", str(inv), "--items", "12", "--agents", "ghost,echo,homed", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    cells = {c["agent"]: c for c in json.loads(r.stdout)["cells"]}
    ghost = cells["ghost"]
    assert (ghost["grade"], ghost["reason"], ghost["attempts"]) == ("HARNESS_FAILURE", "agent_missing", 1)
    sweep = json.loads(r.stdout)["sweep"]
    meta = json.loads((tmp_path / "runs" / sweep / ghost["id"] / "attempt-1" / "meta.json").read_text())
    assert "no-such-agent-7f3e is not installed" in meta["error"]
    # Nothing ran: no launch record, no agent output.
    assert not (tmp_path / "runs" / sweep / ghost["id"] / "attempt-1" / "agent.stdout").exists()
    echo = json.loads((tmp_path / "runs" / sweep / cells["echo"]["id"] / "attempt-1" / "meta.json").read_text())
    assert echo["agent_version"] == "echo-agent 1.2.3" and echo["agent_command"][0] == "sh"
    assert cells["echo"]["grade"] == "DELIVERED"
    answer = (tmp_path / "runs" / sweep / cells["homed"]["id"] / "attempt-1" / "answer.txt").read_text()
    assert answer == f"homed: {tmp_path / 'home'}/data:/srv/x\n" and cells["homed"]["grade"] == "DELIVERED"

    # Without --agents a missing agent is shown but the host is ready: no sweep asked for it.
    check = run_embedded(["hosts", "check", "-i", str(inv), "--json"], tmp_path)
    assert check.returncode == 0, check.stderr[-2000:]
    shown = json.loads(check.stdout)
    (host,) = shown["hosts"]
    assert host["agents"] == {"ghost": "missing: no-such-agent-7f3e not on PATH", "echo": "echo-agent 1.2.3",
                              "homed": "found"}
    assert (shown["schema_version"], shown["inventory"], shown["ready"], shown["not_ready"]) == (1, str(inv), ["local"], {})
    # A sweep of the missing agent would fail there: the host is not ready for it.
    check = run_embedded(["hosts", "check", "-i", str(inv), "--agents", "echo,ghost", "--json"], tmp_path)
    assert check.returncode == 1
    shown = json.loads(check.stdout)
    assert shown["ready"] == [] and shown["agents_counted"] == ["echo", "ghost"]
    assert shown["not_ready"] == {"local": "agent ghost missing: no-such-agent-7f3e not on PATH"}
    text = run_embedded(["hosts", "check", "-i", str(inv), "--agents", "ghost"], tmp_path)
    assert text.returncode == 1
    assert text.stdout.splitlines()[-1] == "0 of 1 host ready; not ready: local (agent ghost missing: no-such-agent-7f3e not on PATH)"
    assert run_embedded(["hosts", "check", "-i", str(inv), "--agents", "echo"], tmp_path).stdout.splitlines()[-1] == "all 1 host ready"
