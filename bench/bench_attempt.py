"""The harness's own time per attempt over SSH, beside its floor measured in the same run.

A real loopback sshd with a pinned key, an agent that does nothing (`true`), one slot:

* **attempt**: `run_attempt` over the harness's SSH transport, in this process (no queue): median and p90 of N
  attempts, and what one attempt does on the host (commands, Python starts, SFTP reads and writes);
* **its floor**, on the same connection, beside each attempt (before it in every other round, after it in the rest,
  so both see the same load of the machine and neither always follows the other): the
  same count of commands, Python starts (`python -S -c pass`, the cheapest a launcher could have) and SFTP operations
  done raw, with no harness work;
* **through Celery**: `fleet sweep` on Redis with one `fleet worker`, N and 2N cells, three times each; the time per
  attempt is the median time from one agent's end to the next one's on the host (each attempt's harness/exit.json,
  written by its supervisor, to the microsecond), and, by whole sweeps, (wall(2N) - wall(N)) / N, so what a sweep
  costs once (starting, planning, the report) is given apart (wall(N) - N x per attempt);
* **its floor**, measured beside the sweeps (10 of each before every sweep, in the same minutes of the machine's load;
  between sweeps, so without a coordinator recording beside it: a floor, not a twin): the raw floor above on a
  connection of its own, plus one raw Celery round trip (a task that does nothing, the same Redis
  as broker and result backend, a solo worker; `bench/_celery_noop.py`).

Run: .venv/bin/python bench/bench_attempt.py [--attempts 40] [--cells 20] [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.core.catalog import Item  # noqa: E402
from harness.core.inventory import Host, load_inventory  # noqa: E402
from harness.core.records import Cell, utc_now  # noqa: E402
from harness.core.sweep import AttemptRequest  # noqa: E402
from tests.integration.fleetkit import FLEET, RedisServer, SSHHost, Worker, fleet_env, keygen  # noqa: E402
from workers.adapters.registry import adapter_for  # noqa: E402
from workers.attempt import run_attempt  # noqa: E402
from workers.transport import connect_for  # noqa: E402
from workers.transport.base import Transport  # noqa: E402
from bench.record import record  # noqa: E402
from tests.integration.conftest import write_prompts  # noqa: E402


def _ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median_ms": round(statistics.median(xs) * 1000, 1), "p90_ms": round(xs[max(0, int(len(xs) * 0.9) - 1)] * 1000, 1)}


class Counting:
    """Counts what the lifecycle asks of the transport: commands (and which of them start the host's Python),
    SFTP reads and writes."""

    def __init__(self, t: Transport) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        for name in ("shell", "get", "put"):
            setattr(t, name, self._wrap(name, getattr(t, name)))

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            kind = name
            if name == "shell" and " -S -c " in args[0]:
                kind = "python"
            self.counts[kind] += 1
            return real(*args, **kwargs)
        return counted


def in_process(host: Host, attempts: int) -> tuple[list[float], list[float], dict[str, float]]:
    """N attempts and, after each, its floor: the same operations done raw on the same connection (interleaved, so
    both see the same load of the machine)."""
    t = connect_for(host)
    t.open()
    counting = Counting(t)
    item = Item(id="noop", kind="open", title="noop", prompt="do nothing", timeout_s=60)
    agent = host.agents["cmd"]
    times: list[float] = []
    floors: list[float] = []
    warm = 3
    per: dict[str, float] = {}
    ops_seen: dict[str, int] = {}
    for n in range(warm + attempts):
        cell = Cell(id=Cell.make_id(host.name, item.id, "cmd", n + 1), host=host.name, item=item.id, agent="cmd",
                    rep=n + 1, seed=1)
        req = AttemptRequest(sweep_id="bench", cell=cell, attempt=1, host=host, agent=agent, item=item,
                             prompt="do nothing", harness_commit="bench")
        # The floor first on every other round: whichever goes second meets what the first left (a supervisor still
        # ending, an SSH session closing), so neither is always the one that does.
        floor_first = n % 2 == 1 and bool(ops_seen)
        if floor_first:
            floor = raw_floor(t, host, ops_seen)
        counting.counts.clear()
        start = time.perf_counter()
        result = run_attempt(t, req, adapter_for("cmd", agent))
        took = time.perf_counter() - start
        if result.status != "finished":
            raise SystemExit(f"attempt {n}: {result.status} {result.reason}: {result.error}")
        ops = ops_seen = dict(counting.counts)
        if not floor_first:
            floor = raw_floor(t, host, ops)
        if n >= warm:
            times.append(took)
            floors.append(floor)
            for k, v in ops.items():
                per[k] = per.get(k, 0) + v / attempts
    t.close()
    return times, floors, per


def raw_floor(t: Transport, host: Host, ops: dict[str, int]) -> float:
    """The same operations as one attempt, done raw on the same connection: its Python starts (``python -S -c
    pass``, the cheapest a launcher could have), commands (``true``), reads and writes of a small file."""
    # The transport's own methods, not the counting wrappers (they are instance attributes).
    shell, get, put = type(t).shell.__get__(t), type(t).get.__get__(t), type(t).put.__get__(t)
    probe = f"{host.workdir}/bench-floor.txt"
    if "probe" not in t.memo:
        put(probe, b"x" * 200)
        t.memo["probe"] = "1"
    py = f"exec {host.python} -S -c pass"
    start = time.perf_counter()
    for _ in range(ops.get("python", 0)):
        shell(py, timeout=30)
    for _ in range(ops.get("shell", 0)):
        shell("true", timeout=30)
    for _ in range(ops.get("get", 0)):
        get(probe)
    for _ in range(ops.get("put", 0)):
        put(probe, b"x" * 200)
    return time.perf_counter() - start


@contextlib.contextmanager
def noop_worker(redis_url: str, tmp: Path) -> Iterator[Callable[[int], list[float]]]:
    """A solo Celery worker of ``bench/_celery_noop.py`` on ``redis_url`` (its own queue, beside the harness's): gives
    a function that times N raw round trips (a task that does nothing, sent and its result read)."""
    env = {**os.environ, "BENCH_REDIS_URL": redis_url, "PYTHONPATH": str(REPO)}
    log = open(tmp / "noop-worker.log", "wb")
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "bench._celery_noop", "worker", "-P", "solo",
                               "--loglevel", "WARNING"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        os.environ["BENCH_REDIS_URL"] = redis_url
        from bench._celery_noop import noop

        noop.delay().get(timeout=60)  # the worker is up, the connections are made

        def round_trips(runs: int) -> list[float]:
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                noop.delay().get(timeout=30)
                times.append(time.perf_counter() - start)
            return times

        yield round_trips
    finally:
        worker.terminate()
        worker.wait(20)


def through_celery(host_toml: str, host: Host, ops: dict[str, int], tmp: Path, redis: RedisServer, cells: int,
                   round_trips: Callable[[int], list[float]], beside: int = 10) -> dict[str, Any]:
    """Sweeps of N and 2N cells, three times each; before each, ``beside`` raw floors (the in-process attempt's
    operations, raw, on a connection of their own) and raw Celery round trips, so the floor is measured in the same
    minutes as the sweeps it is compared with (between them: no coordinator runs beside it)."""
    namespace = f"bench{uuid.uuid4().hex[:6]}"
    inv = tmp / "celery-inv.toml"
    inv.write_text("schema_version = 1\n" + host_toml)
    prompts = tmp / "prompts"
    write_prompts(prompts, {f"{i:03d}-noop": "do nothing\n" for i in range(cells)}, timeout_s=60)
    worker = Worker(tmp, redis.url, namespace, ["bench"], inv)
    walls: dict[int, list[float]] = {}
    cycles: list[float] = []
    floors: list[float] = []
    trips: list[float] = []
    t = connect_for(host)
    t.open()
    try:
        worker.wait_ready()
        for n, repeat in enumerate((1, 2, 1, 2, 1, 2)):
            floors += [raw_floor(t, host, ops) for _ in range(beside)]
            trips += round_trips(beside)
            runs = tmp / f"runs-{n}"
            start = time.perf_counter()
            r = subprocess.run(FLEET + ["sweep", "-i", str(inv), "--prompts", str(prompts), "--broker", redis.url,
                                        "--runs", str(runs), "--repeat", str(repeat), "--json"],
                               cwd=REPO, env=fleet_env(namespace), capture_output=True, text=True, timeout=900)
            wall = time.perf_counter() - start
            if r.returncode != 0:
                raise SystemExit(f"sweep --repeat {repeat}: {r.stderr[-2000:]}")
            done = sum(1 for c in json.loads(r.stdout)["cells"] if c["status"] == "finished")
            if done != cells * repeat:
                raise SystemExit(f"sweep --repeat {repeat}: {done} of {cells * repeat} cells finished")
            walls.setdefault(repeat, []).append(wall)
            # The host's own clock, to the microsecond: when each agent ended (its supervisor's signed exit record).
            # meta.json's agent_started_at is to the millisecond, which made the median a whole number of ms.
            # An attempt with no exit record (a harness failure, retried) has no agent's end.
            ends = sorted(json.loads(e.read_text())["time"] for e in runs.glob("*/*/*/*/*/attempt-*/harness/exit.json"))
            cycles += [b - a for a, b in zip(ends, ends[1:])]
    finally:
        t.close()
        worker.stop()
    one, two = min(walls[1]), min(walls[2])  # the best of three runs each: the machine's noise only adds
    per = (two - one) / cells
    return {"cells": cells, "wall_n_s": round(one, 2), "wall_2n_s": round(two, 2), "per_attempt_ms": round(per * 1000, 1),
            "fixed_s": round(one - per * cells, 2), "cycle": _ms(cycles), "floor": _ms(floors),
            "celery_round_trip": _ms(trips)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=40)
    parser.add_argument("--cells", type=int, default=20)
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-attempt-"))
    key = tmp / "id_ed25519"
    ssh = SSHHost("bench", tmp / "bench", keygen(key))
    ssh.setup()
    ssh.start()
    redis = RedisServer(tmp / "redis")
    redis.start()
    try:
        host_toml = ssh.toml(key, agent=["true"])
        inv = tmp / "inv.toml"
        inv.write_text("schema_version = 1\n" + host_toml)
        host = load_inventory(str(inv)).hosts["bench"]
        attempt, floor, per = in_process(host, args.attempts)
        ops = {k: int(v + 0.5) for k, v in per.items()}  # a typical attempt's counts (they are whole numbers today)
        with noop_worker(redis.url, tmp) as round_trips:
            sweep = through_celery(host_toml, host, ops, tmp, redis, args.cells, round_trips)
    finally:
        redis.stop()
        ssh.stop()
    a, f = _ms(attempt), _ms(floor)
    sf, c = sweep["floor"], sweep.pop("celery_round_trip")  # kept once, at the top of the row
    row = {
        "attempts": args.attempts,
        "attempt": a, "floor": f, "ratio": round(a["median_ms"] / f["median_ms"], 2),
        "per_attempt_ops": {k: round(v, 2) for k, v in sorted(per.items())},
        "celery_round_trip": c,
        "sweep": sweep,
        "sweep_floor_ms": round(sf["median_ms"] + c["median_ms"], 1),
        "sweep_ratio": round(sweep["cycle"]["median_ms"] / (sf["median_ms"] + c["median_ms"]), 2),
        "load_average": os.getloadavg()[0],
        "measured_at": utc_now(),
    }
    print(json.dumps(row, indent=1))
    print(f"\nattempt over SSH, in process: median {a['median_ms']} ms (p90 {a['p90_ms']}); floor {f['median_ms']} ms "
          f"(the same {', '.join(f'{v:g} {k}' for k, v in row['per_attempt_ops'].items())} raw): {row['ratio']}x")
    print(f"through Celery (Redis, one fleet worker): {sweep['cycle']['median_ms']} ms per attempt (median of one agent's "
          f"end to the next's on the host; {sweep['per_attempt_ms']} ms by whole sweeps of N and 2N cells), "
          f"{sweep['fixed_s']} s once per sweep; floor {row['sweep_floor_ms']} ms (raw {sf['median_ms']} ms + a Celery "
          f"round trip of {c['median_ms']} ms, both measured beside the sweeps): {row['sweep_ratio']}x")
    record(args.json_path, "attempt_ssh", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
