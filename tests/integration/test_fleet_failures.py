"""What the fleet does when parts fail: timeouts, lost workers, lost hosts; and `fleet hosts check`."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.fleetkit import run_fleet, start_fleet
from tests.support import alive, table_column

pytestmark = pytest.mark.integration


def _wait_for(path: Path, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > end:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)




def test_timeout_kills_the_process_group_and_is_not_retried(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    host = ssh_hosts["bravo"]
    pids = tmp_path / "pids"
    # The agent starts a grandchild too: the whole group must end, not only the direct child.
    agent = ["sh", "-c", f'sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; sleep 300']
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=agent)])
    prompts = write_prompts(tmp_path / "prompts", {"01-slow": "take your time\n"}, timeout_s=3)
    workers(["bravo"], inv)
    runs = tmp_path / "runs"
    r = run_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                   "--broker", redis_server.url], namespace)
    assert r.returncode == 0, r.stderr[-3000:]
    (cell,) = json.loads(r.stdout)["cells"]
    assert cell["status"] == "timeout" and cell["attempts"] == 1
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    end = time.monotonic() + 10
    while any(alive(p) for p in started) and time.monotonic() < end:
        time.sleep(0.1)
    assert not any(alive(p) for p in started), "the agent's process group outlived its timeout"


def test_worker_lost_is_recorded_and_retried(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    host = ssh_hosts["alpha"]
    marker = tmp_path / "started"
    agent = ["sh", "-c", f'touch {marker}; sleep 4; echo finished']
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=agent)])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"})
    w = workers(["alpha"], inv, concurrency=1, FLEET_SLOT_TTL="3")
    runs = tmp_path / "runs"
    proc = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                        "--broker", redis_server.url], namespace)
    _wait_for(marker)
    for child in w.pool_children():  # the pool process running the attempt dies
        os.kill(child, 9)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    (cell,) = json.loads(out)["cells"]
    assert cell["attempts"] == 2 and cell["status"] == "finished"
    sweep = json.loads((runs / json.loads(out)["sweep"] / "sweep.json").read_text())
    first, second = sweep["attempts"][cell["id"]]
    assert first["status"] == "harness_failure" and first["reason"] == "worker_lost"
    assert second["status"] == "finished"


def test_host_lost_mid_run_is_retried_when_it_returns(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    host = ssh_hosts["charlie"]
    marker = tmp_path / "started"
    agent = ["sh", "-c", f'if [ ! -e {marker} ]; then touch {marker}; sleep 5; fi; echo done']
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=agent)])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"})
    workers(["charlie"], inv)
    runs = tmp_path / "runs"
    proc = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                        "--broker", redis_server.url], namespace, {"FLEET_RETRY_BACKOFF": "4"})
    try:
        _wait_for(marker)
        host.stop()  # sshd and every session it serves are gone
        time.sleep(1.5)
    finally:
        host.start()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    (cell,) = json.loads(out)["cells"]
    sweep = json.loads((runs / json.loads(out)["sweep"] / "sweep.json").read_text())
    attempts = sweep["attempts"][cell["id"]]
    assert attempts[0]["status"] == "harness_failure" and attempts[0]["reason"] == "host_lost"
    assert attempts[-1]["status"] == "finished" and len(attempts) == 2


def test_hosts_check_reports_ssh_pin_model_and_disk(tmp_path, ssh_hosts, client_key, namespace):
    from harness.modelserver import ScriptedModelServer

    script = tmp_path / "script.toml"
    script.write_text('schema_version = 1\nmodel_id = "scripted-model"\n')
    with ScriptedModelServer(str(script)) as server:
        good = ssh_hosts["alpha"].toml(client_key[0]).replace("http://127.0.0.1:9/v1", server.url)
        down = ssh_hosts["bravo"].toml(client_key[0])
        wrong = ssh_hosts["charlie"].toml(client_key[0], host_key=ssh_hosts["alpha"].host_key_line)
        inv = write_inventory(tmp_path / "inv.toml", [good, down, wrong])
        r = run_fleet(["hosts", "check", "--inventory", str(inv), "--json"], namespace)
        # A narrow terminal folds the table's cells: the fingerprints one compares are never cut.
        text = run_fleet(["hosts", "check", "--inventory", str(inv)], namespace, {"COLUMNS": "70"})
    assert r.returncode == 1, r.stderr  # not every host is ready
    shown = json.loads(r.stdout)
    assert shown["schema_version"] == 1 and shown["inventory"] == str(inv) and shown["ready"] == ["alpha"]
    res = {h["host"]: h for h in shown["hosts"]}
    assert res["alpha"]["ok"] and res["alpha"]["ssh"] == "ok" and res["alpha"]["host_key"] == "matches pin"
    assert res["alpha"]["model"] == "ok" and res["alpha"]["disk_free_mb"] > 0
    assert res["alpha"]["agents"]["cmd"] == "found"
    assert not res["bravo"]["ok"] and res["bravo"]["model"].startswith("down:")
    assert not res["charlie"]["ok"] and res["charlie"]["host_key"].startswith("MISMATCH")
    assert shown["not_ready"]["bravo"].startswith("model down:")
    assert shown["not_ready"]["charlie"].startswith("host key mismatch: ")
    fingerprints = re.findall(r"SHA256:[A-Za-z0-9+/]+", res["charlie"]["host_key"])
    assert len(fingerprints) == 2 and fingerprints[0] != fingerprints[1]
    assert text.returncode == 1, text.stderr
    for fp in fingerprints:
        assert fp in table_column(text.stdout, 4)  # host, ok, ssh, host key
    last = text.stdout.strip().splitlines()[-1]
    assert last.startswith("1 of 3 hosts ready; not ready: bravo (model down:") and "charlie (host key mismatch: " in last


def test_a_failing_model_result_is_not_retried(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    host = ssh_hosts["bravo"]
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=["sh", "-c", "echo no; exit 3"])])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"})
    workers(["bravo"], inv)
    r = run_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs",
                   str(tmp_path / "runs"), "--broker", redis_server.url], namespace)
    assert r.returncode == 0, r.stderr[-3000:]
    (cell,) = json.loads(r.stdout)["cells"]
    assert (cell["status"], cell["exit_code"], cell["attempts"]) == ("finished", 3, 1)


def test_a_task_whose_whole_worker_died_is_delivered_again(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    host = ssh_hosts["delta"]
    marker = tmp_path / "started"
    agent = ["sh", "-c", f'touch {marker}; sleep 3; echo finished']
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=agent)])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"})
    fast = {"FLEET_VISIBILITY_TIMEOUT": "4", "FLEET_SLOT_TTL": "3"}
    first = workers(["delta"], inv, concurrency=1, **fast)
    runs = tmp_path / "runs"
    # The short visibility timeout is the workers' (the consumer restores unacknowledged tasks); the coordinator
    # keeps the default, which it checks against the item's run.
    proc = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                        "--broker", redis_server.url], namespace)
    _wait_for(marker)
    os.killpg(first.proc.pid, 9)  # the whole worker, main process and pool, dies without a word
    first.proc.wait(10)
    time.sleep(5)  # past the visibility timeout: the unacknowledged task may be delivered again
    second = workers(["delta"], inv, concurrency=1, **fast)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    (cell,) = json.loads(out)["cells"]
    # The same attempt ran to the end on the second worker and was recorded once.
    assert cell["status"] == "finished" and cell["attempts"] == 1
    meta = json.loads((runs / json.loads(out)["sweep"] / cell["id"] / "attempt-1" / "meta.json").read_text())
    assert meta["worker"].startswith(second.name + "@") and "finished" in (runs / json.loads(out)["sweep"] / cell["id"] / "attempt-1" / "agent.stdout").read_text()


def test_interrupting_a_sweep_revokes_and_kills_the_remote_agent(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    import signal

    host = ssh_hosts["alpha"]
    pids = tmp_path / "pids"
    agent = ["sh", "-c", f'sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait']
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=agent)])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"})
    workers(["alpha"], inv, concurrency=1)
    runs = tmp_path / "runs"
    proc = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                        "--broker", redis_server.url], namespace)
    _wait_for(pids)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "fleet resume" in err
    (sweep_dir,) = [p for p in runs.iterdir() if (p / "sweep.json").exists()]
    assert json.loads((sweep_dir / "sweep.json").read_text())["status"] == "interrupted"
    started = [int(p) for p in pids.read_text().split()]
    end = time.monotonic() + 20
    while any(alive(p) for p in started) and time.monotonic() < end:
        time.sleep(0.1)
    assert not any(alive(p) for p in started), "a revoked attempt left its agent running on the host"


def test_a_visibility_timeout_shorter_than_an_attempt_is_refused_before_anything_runs(tmp_path, ssh_hosts, client_key,
                                                                                       redis_server, namespace):
    """Redis would deliver a running attempt again every FLEET_VISIBILITY_TIMEOUT seconds, even after the sweep."""
    host = ssh_hosts["delta"]
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0])])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"}, timeout_s=120)
    runs = tmp_path / "runs"
    r = run_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--runs", str(runs), "--broker",
                   redis_server.url], namespace, {"FLEET_VISIBILITY_TIMEOUT": "600"})
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip() == (
        "fleet: error: FLEET_VISIBILITY_TIMEOUT=600 s is shorter than an attempt of 01-one may run (120 s timeout + "
        "900 s for checks and collecting = 1020 s): Redis would deliver it again while it runs; set it to at least 1020")
    assert not runs.exists() or not [p for p in runs.iterdir() if not p.name.startswith(".") and p.is_dir()]
