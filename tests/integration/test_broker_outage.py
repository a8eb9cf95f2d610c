"""A Redis outage in the middle of a sweep: real redis-server killed and started again, real `fleet worker`
processes, real sshd hosts. The coordinator waits it out (or, past FLEET_BROKER_OUTAGE_S, leaves a sweep that
`fleet resume` completes), and every finished attempt is stored exactly once with matching sha256."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.fleetkit import RedisServer, Worker, assert_stored_once, run_fleet, start_fleet

pytestmark = pytest.mark.integration

ITEMS = {"01-one": "one\n", "02-two": "two\n", "03-three": "three\n"}


def _agent(markers: Path) -> list[str]:
    # Each run leaves a marker when it starts, takes 2 s, and answers with its prompt.
    return ["sh", "-c", f'touch {markers}/$$; sleep 2; cat "$1"; echo done', "sh", "{prompt_file}"]


def _wait_markers(markers: Path, n: int, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while len(list(markers.iterdir())) < n:
        if time.monotonic() > end:
            raise AssertionError(f"only {len(list(markers.iterdir()))} of {n} runs started")
        time.sleep(0.05)


def assert_nothing_left_to_deliver(server: RedisServer, sweep_id: str) -> None:
    """No task of the sweep waits in a queue or in the unacknowledged set, from which Redis would hand it to a
    worker again (after the visibility timeout): the sweep ended, nothing of it runs again."""
    import redis

    client = redis.Redis.from_url(server.url)
    try:
        unacked = [v for v in (client.hvals("unacked") or []) if sweep_id.encode() in v]
        queued = [k for k in client.keys("fleet.*") if client.type(k) == b"list" and client.llen(k)]
    finally:
        client.close()
    assert not unacked, f"{len(unacked)} task(s) of the sweep left unacknowledged"
    assert not queued, queued


def _wait_logged(workers: list[Worker], text: str, n: int, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while sum(w.log.read_text(errors="replace").count(text) for w in workers) < n:
        if time.monotonic() > end:
            raise AssertionError(f"the workers logged {text!r} fewer than {n} times")
        time.sleep(0.1)


@pytest.fixture
def outage_redis(tmp_path: Path):
    server = RedisServer(tmp_path / "redis", persistent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fleet_workers(tmp_path: Path):
    started: list[Worker] = []
    yield started
    for w in started:
        w.stop()


def _setup(tmp_path, ssh_hosts, client_key, redis, namespace, fleet_workers):
    markers = tmp_path / "markers"
    markers.mkdir()
    hosts = [ssh_hosts["alpha"], ssh_hosts["bravo"]]
    inv = write_inventory(tmp_path / "inv.toml", [h.toml(client_key[0], agent=_agent(markers)) for h in hosts])
    prompts = write_prompts(tmp_path / "prompts", ITEMS)
    for h in hosts:
        w = Worker(tmp_path, redis.url, namespace, [h.name], inv, concurrency=1)
        fleet_workers.append(w)
        w.wait_ready()
    return markers, inv, prompts


def test_a_redis_outage_mid_sweep_is_waited_out_and_nothing_is_lost(tmp_path, ssh_hosts, client_key, outage_redis,
                                                                    namespace, fleet_workers):
    """6 cells on 2 hosts; Redis is killed while the second round runs (both agents finish while it is away) and
    started again 8 s later on the same port, with its data (AOF)."""
    markers, inv, prompts = _setup(tmp_path, ssh_hosts, client_key, outage_redis, namespace, fleet_workers)
    runs = tmp_path / "runs"
    proc = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                        "--broker", outage_redis.url], namespace, {"FLEET_BROKER_OUTAGE_S": "60"})
    try:
        _wait_markers(markers, 3)  # the first round is done on one host at least, the second round runs
        time.sleep(0.3)
        outage_redis.kill()
        time.sleep(8)
    finally:
        outage_redis.start()
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-4000:]
    assert "Traceback" not in err
    assert "unreachable since" in err and "reachable again after" in err, err[-3000:]
    result = json.loads(out)
    assert result["status"] == "finished"
    assert all(c["status"] == "finished" for c in result["cells"]), result["cells"]
    assert assert_stored_once(runs, result["sweep"], 6) >= 6
    assert_nothing_left_to_deliver(outage_redis, result["sweep"])


def test_an_outage_past_the_bound_leaves_a_sweep_that_resume_completes(tmp_path, ssh_hosts, client_key, outage_redis,
                                                                       namespace, fleet_workers):
    markers, inv, prompts = _setup(tmp_path, ssh_hosts, client_key, outage_redis, namespace, fleet_workers)
    runs = tmp_path / "runs"
    proc = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                        "--broker", outage_redis.url], namespace, {"FLEET_BROKER_OUTAGE_S": "3"})
    try:
        _wait_markers(markers, 2)  # an attempt runs on each host
        outage_redis.kill()
        out, err = proc.communicate(timeout=120)
    finally:
        outage_redis.start()
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("fleet: error: ")]
    assert len(lines) == 1 and err.strip().splitlines()[-1] == lines[0], err[-3000:]
    assert "FLEET_BROKER_OUTAGE_S=3" in lines[0] and "fleet resume" in lines[0], lines[0]
    (sweep_dir,) = [p for p in runs.iterdir() if (p / "sweep.json").exists()]
    # The two attempts running finish on their hosts while Redis is away; their workers store the results once it is
    # back (they retry for their own FLEET_BROKER_OUTAGE_S, 300 s by default). Each host's attempt sent ahead of its
    # slot (in flight too, on its queue) runs after, and is stored as well.
    _wait_logged(fleet_workers, "succeeded in", 4)
    status = run_fleet(["status", sweep_dir.name, "--json", "--runs", str(runs)], namespace)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] == "interrupted"
    r = run_fleet(["resume", sweep_dir.name, "--inventory", str(inv), "--json", "--runs", str(runs),
                   "--broker", outage_redis.url], namespace, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["status"] == "finished"
    assert assert_stored_once(runs, sweep_dir.name, 6) >= 6
    # Resume took the results finished during the outage: no cell was run twice.
    sweep = json.loads((sweep_dir / "sweep.json").read_text())
    assert all(len(a) == 1 for a in sweep["attempts"].values()), sweep["attempts"]


def _slow_agent(markers: Path) -> list[str]:
    # 4 s per run: with one slot per host the three rounds of a sweep take about 12 s on each host.
    return ["sh", "-c", f'touch {markers}/$$; sleep 4; cat "$1"; echo done', "sh", "{prompt_file}"]


def test_a_30_s_redis_stop_kills_no_worker_and_the_workers_take_the_next_sweep(
        tmp_path, ssh_hosts, client_key, outage_redis, namespace, fleet_workers):
    """Redis is stopped (SIGTERM: it writes its AOF and goes) while the first round runs on both hosts, stays away
    30 s and is started again with its data. The running attempts finish while it is away; the rest wait in their
    queues. The sweep completes with every cell recorded once, the same worker processes are still up, and they
    run a second sweep to its end."""
    markers = tmp_path / "markers"
    markers.mkdir()
    hosts = [ssh_hosts["alpha"], ssh_hosts["bravo"]]
    inv = write_inventory(tmp_path / "inv.toml", [h.toml(client_key[0], agent=_slow_agent(markers)) for h in hosts])
    prompts = write_prompts(tmp_path / "prompts", ITEMS)
    for h in hosts:
        w = Worker(tmp_path, outage_redis.url, namespace, [h.name], inv, concurrency=1)
        fleet_workers.append(w)
        w.wait_ready()
    runs = tmp_path / "runs"
    args = ["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
            "--broker", outage_redis.url]
    proc = start_fleet(args, namespace)
    try:
        try:
            _wait_markers(markers, 2)  # an attempt runs on each host
            outage_redis.stop()
            time.sleep(30)
            # Still there after 30 s without Redis: no worker gave up on its broker (a worker that allowed 3
            # reconnection tries exited here with `Unrecoverable error` after 12 s).
            dead = [w.name for w in fleet_workers if w.proc.poll() is not None]
            assert not dead, f"{dead} exited while Redis was away: {fleet_workers[0].log.read_text()[-3000:]}"
        finally:
            outage_redis.start()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:  # a failed check above: the sweep would wait for workers that are gone
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err[-4000:]
    assert "Traceback" not in err
    assert "unreachable since" in err and "reachable again after" in err, err[-3000:]
    first = json.loads(out)
    assert first["status"] == "finished"
    assert all(c["status"] == "finished" for c in first["cells"]), first["cells"]
    assert assert_stored_once(runs, first["sweep"], 6) == 6
    sweep = json.loads((runs / first["sweep"] / "sweep.json").read_text())
    assert all(len(a) == 1 for a in sweep["attempts"].values()), sweep["attempts"]
    assert_nothing_left_to_deliver(outage_redis, first["sweep"])
    for w in fleet_workers:
        assert w.proc.poll() is None, w.log.read_text()[-3000:]
        assert "Unrecoverable error" not in w.log.read_text(errors="replace")

    # The same workers consume the next sweep.
    r = run_fleet(args + ["--label", "after-outage"], namespace, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    second = json.loads(r.stdout)
    assert second["status"] == "finished" and second["sweep"] != first["sweep"]
    assert assert_stored_once(runs, second["sweep"], 6) == 6
    served = {json.loads((runs / second["sweep"] / c["id"] / "attempt-1" / "meta.json").read_text())["worker"]
              for c in second["cells"]}
    assert served == {f"{w.name}@{socket.gethostname()}" for w in fleet_workers}, served
