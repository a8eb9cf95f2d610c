"""The spine end to end with real parts: redis-server, `fleet worker` processes, sshd hosts, the CLI."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import uuid
from pathlib import Path

import pytest
import redis

from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.fleetkit import free_port, run_fleet, start_fleet

pytestmark = pytest.mark.integration

INJECTION = (
    "Say \"hi\" and 'bye'.\n"
    "$(touch /tmp/pwned-{tag})\n"
    "`touch /tmp/pwned-{tag}`; touch /tmp/pwned-{tag} && echo $HOME\n"
    "tab\there, backslash \\ and a trailing newline\n"
)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sweep(runs: Path, summary: dict) -> dict:
    return json.loads((runs / summary["sweep"] / "sweep.json").read_text())


def _check_artifacts(attempt_dir: Path) -> dict:
    meta = json.loads((attempt_dir / "meta.json").read_text())
    assert meta["artifacts"], attempt_dir
    for art in meta["artifacts"]:
        f = attempt_dir / art["name"]
        assert f.is_file(), f
        assert _sha(f) == art["sha256"], f
        assert f.stat().st_size == art["size"]
    return meta


def _errors(runs: Path, summary: dict) -> list[str]:
    """Each attempt's error, for a failure's message."""
    return [json.loads(m.read_text()).get("error", "") for m in (runs / summary["sweep"]).rglob("meta.json")
            if json.loads(m.read_text()).get("status") != "finished"]


def test_sweep_three_hosts_three_items_two_repeats(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    tag = uuid.uuid4().hex[:8]
    hosts = [ssh_hosts[n] for n in ("alpha", "bravo", "charlie")]
    inv = write_inventory(tmp_path / "inv.toml", [h.toml(client_key[0]) for h in hosts])
    injection = INJECTION.format(tag=tag)
    prompts = write_prompts(
        tmp_path / "prompts",
        {"01-hello": "write hello.py that prints hello\n", "02-quote": injection, "03-unicode": "caf\u00e9 \u2603 — ok\n"},
    )
    workers(["alpha", "bravo", "charlie"], inv)
    workers(["alpha", "bravo", "charlie"], inv)
    runs = tmp_path / "runs"
    r = run_fleet(
        ["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--repeat", "2", "--json", "--runs", str(runs),
         "--broker", redis_server.url, "--label", "e2e"],
        namespace,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["status"] == "finished"
    assert len(summary["cells"]) == 3 * 3 * 2
    odd = [(c["id"], c["status"], c["reason"], c["attempts"]) for c in summary["cells"]
           if c["status"] != "finished" or c["attempts"] != 1 or c["exit_code"] != 0]
    assert not odd, (odd, _errors(runs, summary))

    sweep = _sweep(runs, summary)
    ids = [c["id"] for c in sweep["cells"]]
    assert len(ids) == len(set(ids)) == 18
    for cell in sweep["cells"]:
        attempts = sweep["attempts"][cell["id"]]
        assert [a["attempt"] for a in attempts] == [1]
        folder = runs / summary["sweep"] / cell["id"] / "attempt-1"
        meta = _check_artifacts(folder)
        assert meta["host"] == cell["host"] and meta["status"] == "finished"
        assert meta["harness_commit"]
        assert meta["worker"]
        # The prompt reached the agent byte for byte, through a file, on the remote host.
        sent = (prompts / "open" / cell["item"] / "prompt.md").read_bytes()
        assert (folder / "workspace" / "received.txt").read_bytes() == sent
        assert (folder / "prompt.md").read_bytes() == sent
    # Nothing in the prompt ran anywhere.
    assert not Path(f"/tmp/pwned-{tag}").exists()
    # The index holds each attempt once.
    db = sqlite3.connect(runs / "index.sqlite")
    rows = db.execute("SELECT COUNT(*), COUNT(DISTINCT cell_id) FROM attempts WHERE sweep_id = ?", (summary["sweep"],)).fetchone()
    assert rows == (18, 18)
    n_art = db.execute("SELECT COUNT(*) FROM artifacts WHERE sweep_id = ?", (summary["sweep"],)).fetchone()[0]
    assert n_art >= 18 * 5


def test_host_key_mismatch_is_harness_failure_and_nothing_runs(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    good, bad = ssh_hosts["alpha"], ssh_hosts["delta"]
    # delta is pinned with alpha's key: delta's own key does not match.
    inv = write_inventory(
        tmp_path / "inv.toml",
        [good.toml(client_key[0]), bad.toml(client_key[0], host_key=good.host_key_line).replace(
            str(bad.workdir), str(tmp_path / "delta-work"))],
    )
    prompts = write_prompts(tmp_path / "prompts", {"01-hello": "hello\n"})
    log_before = bad.log.read_text() if bad.log.exists() else ""
    workers(["alpha", "delta"], inv)
    runs = tmp_path / "runs"
    r = run_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                   "--broker", redis_server.url, "--max-attempts", "2"], namespace)
    assert r.returncode == 0, r.stderr[-3000:]
    cells = {c["host"]: c for c in json.loads(r.stdout)["cells"]}
    assert cells["alpha"]["status"] == "finished"
    assert cells["delta"]["status"] == "harness_failure"
    assert cells["delta"]["reason"] == "host_key_mismatch"
    # A key cannot heal by waiting: one attempt, however many --max-attempts allows; no second connection to the
    # impostor.
    assert cells["delta"]["attempts"] == 1
    assert cells["delta"]["label"] == "HARNESS_FAILURE(host_key_mismatch)"
    meta = json.loads((runs / json.loads(r.stdout)["sweep"] / cells["delta"]["id"] / "attempt-1" / "meta.json").read_text())
    assert "mismatch" in meta["error"] and "SHA256:" in meta["error"]
    # No command ran: no workspace was made and sshd accepted no login.
    assert not (tmp_path / "delta-work").exists()
    new_log = bad.log.read_text()[len(log_before):]
    assert "Accepted publickey" not in new_log


def test_refused_connection_is_retried_and_others_finish(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    alpha, bravo = ssh_hosts["alpha"], ssh_hosts["bravo"]
    dead_port = free_port()  # nothing listens here: connections are refused
    dead = alpha.toml(client_key[0], port=dead_port).replace("[hosts.alpha", "[hosts.ghost")
    inv = write_inventory(tmp_path / "inv.toml", [alpha.toml(client_key[0]), bravo.toml(client_key[0]), dead])
    prompts = write_prompts(tmp_path / "prompts", {"01-hello": "hello\n", "02-again": "again\n"})
    workers(["alpha", "bravo", "ghost"], inv)
    runs = tmp_path / "runs"
    r = run_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                   "--broker", redis_server.url, "--max-attempts", "3"], namespace)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    by_host: dict[str, list] = {}
    for c in summary["cells"]:
        by_host.setdefault(c["host"], []).append(c)
    assert all(c["status"] == "finished" for h in ("alpha", "bravo") for c in by_host[h])
    for c in by_host["ghost"]:
        assert c["status"] == "harness_failure" and c["reason"] == "host_unreachable"
        assert c["attempts"] == 3  # retried, every attempt kept
        for k in (1, 2, 3):
            meta = json.loads((runs / summary["sweep"] / c["id"] / f"attempt-{k}" / "meta.json").read_text())
            assert meta["reason"] == "host_unreachable" and str(dead_port) in meta["error"]

    # resume keeps the budget: the ghost cells used all 3 attempts, so nothing runs again, and it says why
    r2 = run_fleet(["resume", summary["sweep"], "--json", "--runs", str(runs), "--broker", redis_server.url], namespace)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "already used all 3 attempts" in r2.stderr and "--retry-exhausted" in r2.stderr
    assert {c["id"]: c["attempts"] for c in json.loads(r2.stdout)["cells"]} == {c["id"]: c["attempts"] for c in summary["cells"]}
    # --retry-exhausted runs only the cells whose last attempt is a harness failure, with a fresh budget
    r3 = run_fleet(["resume", summary["sweep"], "--retry-exhausted", "--json", "--runs", str(runs), "--broker",
                    redis_server.url, "--max-attempts", "1"], namespace)
    assert r3.returncode == 0, r3.stderr[-3000:]
    after = {c["id"]: c for c in json.loads(r3.stdout)["cells"]}
    for c in summary["cells"]:
        expected = c["attempts"] + (1 if c["host"] == "ghost" else 0)
        assert after[c["id"]]["attempts"] == expected


def test_slots_one_holds_across_two_worker_processes(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    host = ssh_hosts["charlie"]
    ledger = tmp_path / "ledger.txt"
    agent = ["sh", "-c", f'echo "start $(date +%s.%N)" >> {ledger}; sleep 0.6; echo "end $(date +%s.%N)" >> {ledger}']
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=agent, slots=1)])
    prompts = write_prompts(tmp_path / "prompts", {"01-a": "a\n", "02-b": "b\n", "03-c": "c\n"})
    workers(["charlie"], inv, concurrency=3)
    workers(["charlie"], inv, concurrency=3)
    # Two sweeps at once: each keeps one attempt in flight, so two tasks for one host reach two workers.
    procs = [
        start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs",
                     str(tmp_path / f"runs{i}"), "--broker", redis_server.url, "--repeat", "2"], namespace)
        for i in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        assert {c["status"] for c in json.loads(out)["cells"]} == {"finished"}
    events = [line.split() for line in ledger.read_text().splitlines()]
    assert len(events) == 2 * 2 * 3 * 2
    events.sort(key=lambda e: float(e[1]))
    kinds = [e[0] for e in events]
    assert kinds == ["start", "end"] * (len(events) // 2), "two runs overlapped on a host with slots = 1"


def test_a_hosts_next_attempt_waits_in_a_worker_and_starts_when_the_last_agent_ends(
        tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    """On Redis a one-slot host gets one attempt more than its slot, and the worker's pool has room for it by default
    (slots + 1 per host): the next attempt is sent while the last agent still runs, waits in the worker for the slot,
    and takes it when that agent ended, not after its attempt was collected, stored and recorded. Two agents never
    run at once."""
    from datetime import datetime

    host = ssh_hosts["charlie"]
    ledger = tmp_path / "ledger.txt"
    agent = ["sh", "-c", f'echo "start $(date +%s.%N)" >> {ledger}; sleep 0.5; echo "end $(date +%s.%N)" >> {ledger}']
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=agent, slots=1)])
    prompts = write_prompts(tmp_path / "prompts", {"01-a": "a\n", "02-b": "b\n", "03-c": "c\n"})
    w = workers(["charlie"], inv)  # the default pool
    assert len(w.pool_children()) == 2
    assert "warning" not in w.log.read_text()
    small = workers(["charlie"], inv, concurrency=1)  # fewer: said, once, as the worker starts
    assert small.log.read_text().count("fleet worker: warning: --concurrency 1 is below the 2 its hosts need") == 1
    small.stop()
    runs = tmp_path / "runs"
    p = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                     "--broker", redis_server.url], namespace)
    # The attempt waiting for the slot is not STARTED while an agent runs (the progress counts STARTED attempts as
    # running).
    client = redis.Redis.from_url(redis_server.url)
    counts, waits = [], []
    while p.poll() is None:
        lines = ledger.read_text().splitlines() if ledger.exists() else []
        if lines and lines[-1].startswith("start") and time.time() - float(lines[-1].split()[1]) > 0.15:
            metas = [v for v in (client.get(k) for k in client.scan_iter(match="celery-task-meta-*", count=1000)) if v]
            states = [json.loads(v).get("status") for v in metas]
            counts.append(states.count("STARTED"))
            waits.append(states.count("WAITING"))
        time.sleep(0.02)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    assert {c["status"] for c in json.loads(out)["cells"]} == {"finished"}
    # The next one, taken by a worker and waiting for the slot, says so (WAITING), not STARTED (which it stored as it
    # was taken, before); so the one running is the one STARTED (the one before it may still be stored, under load).
    assert counts and max(waits) == 1 and 1 in counts, (counts, waits)
    events = sorted((float(t), kind) for kind, t in (line.split() for line in ledger.read_text().splitlines()))
    assert [k for _, k in events] == ["start", "end"] * 3, "two agents ran at once on a host with slots = 1"
    record = json.loads((runs / json.loads(out)["sweep"] / "sweep.json").read_text())
    sent = sorted(datetime.fromisoformat(a["dispatched_at"].replace("Z", "+00:00")).timestamp()
                  for runs_ in record["attempts"].values() for a in runs_)
    ends = [t for t, k in events if k == "end"]
    # Each next attempt went out before the agent in front of it ended (it waited for the slot in the worker).
    assert sent[1] < ends[0] and sent[2] < ends[1], (sent, ends)


def test_two_coordinators_started_at_once_with_one_label_get_their_own_sweeps(
        tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    """Same label, same second: each claims its own id, so task ids and the host's attempt folders differ and
    every attempt runs once, in its own folder."""
    alpha = ssh_hosts["alpha"]
    inv = write_inventory(tmp_path / "inv.toml", [alpha.toml(client_key[0], slots=2)])
    prompts = write_prompts(tmp_path / "prompts", {"01-hello": "hello\n", "02-again": "again\n"})
    workers(["alpha"], inv, concurrency=2)
    runs = tmp_path / "runs"
    args = ["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
            "--broker", redis_server.url, "--label", "twin"]
    procs = [start_fleet(args, namespace) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    ids = sorted(json.loads(o[0])["sweep"] for o in outs)
    assert ids[0] != ids[1] and all(i.split("-", 2)[2].startswith("twin") for i in ids)
    db = sqlite3.connect(runs / "index.sqlite")
    for sweep_id in ids:
        rows = db.execute("SELECT cell_id, attempt, status FROM attempts WHERE sweep_id = ? ORDER BY cell_id",
                          (sweep_id,)).fetchall()
        assert rows == [("alpha/01-hello/cmd/r1", 1, "finished"), ("alpha/02-again/cmd/r1", 1, "finished")]
        for cell in ("alpha/01-hello/cmd/r1", "alpha/02-again/cmd/r1"):
            uid = json.loads((runs / sweep_id / "sweep.json").read_text())["uid"]
            remote = alpha.workdir / "runs" / sweep_id / uid / cell / "attempt-1"
            assert (remote / "workspace" / "received.txt").is_file(), remote


def test_two_coordinators_with_their_own_results_directories_never_share_a_task(
        tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    """One broker, one host, one label, the same second, but two results directories: both sweeps may get the same
    id; their uids keep task ids and the host's attempt folders apart, so every attempt of both runs once."""
    alpha = ssh_hosts["alpha"]
    inv = write_inventory(tmp_path / "inv.toml", [alpha.toml(client_key[0], slots=2)])
    prompts = write_prompts(tmp_path / "prompts", {"01-hello": "hello\n", "02-again": "again\n"})
    workers(["alpha"], inv, concurrency=2)
    procs = [start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs",
                          str(tmp_path / f"runs{i}"), "--broker", redis_server.url, "--label", "twin"], namespace)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    uids, task_ids = set(), set()
    for i, (out, _) in enumerate(outs):
        sweep_id = json.loads(out)["sweep"]
        record = json.loads((tmp_path / f"runs{i}" / sweep_id / "sweep.json").read_text())
        uids.add(record["uid"])
        for cell, runs in record["attempts"].items():
            (attempt,) = runs
            assert attempt["status"] == "finished"
            task_ids.add(attempt["task_id"])
            remote = alpha.workdir / "runs" / sweep_id / record["uid"] / cell / "attempt-1"
            assert (remote / "workspace" / "received.txt").is_file(), remote
    assert len(uids) == 2 and len(task_ids) == 4
