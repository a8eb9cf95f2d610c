"""Dispatch benchmark: the harness's own overhead per attempt, with an agent that does nothing.

Runs N cells of a `true` command agent on a local-transport host with S slots, through
(a) the embedded default (SQLite broker, in-process worker) and (b) Redis with one `fleet worker`
process, and reports wall time, attempts per second and the overhead per attempt (wall time x slots
/ attempts). Needs redis-server on PATH for (b). Run: .venv/bin/python bench/bench_dispatch.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.core.records import utc_now  # noqa: E402
from tests.integration.fleetkit import RedisServer  # noqa: E402
from bench.record import record  # noqa: E402
from tests.integration.conftest import write_prompts  # noqa: E402

INVENTORY = """schema_version = 1
[hosts.bench]
transport = "local"
workdir = "{work}"
slots = {slots}
model = {{ base_url = "http://127.0.0.1:9/v1", id = "m", context = 1024, max_output = 256 }}
[hosts.bench.agents.noop]
command = ["true"]
"""


def fleet(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, env=env, capture_output=True, text=True)


def sweep(mode: str, cells: int, slots: int, tmp: Path, env: dict[str, str], repeat: int) -> float:
    inv = tmp / f"{mode}.toml"
    inv.write_text(INVENTORY.format(work=tmp / f"work-{mode}", slots=slots))
    prompts = tmp / "prompts"
    if not prompts.exists():
        write_prompts(prompts, {f"{i:03d}-cell": "do nothing\n" for i in range(cells)}, timeout_s=60)
    t0 = time.perf_counter()
    r = fleet(["sweep", "-i", str(inv), "--prompts", str(prompts), "--runs", str(tmp / f"runs-{mode}-{repeat}"),
               "--repeat", str(repeat), "--json"], env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{mode}: {r.stderr[-2000:]}")
    done = sum(1 for c in json.loads(r.stdout)["cells"] if c["status"] == "finished")
    if done != cells * repeat:
        raise SystemExit(f"{mode}: {done} of {cells * repeat} cells finished")
    return wall


def run(mode: str, cells: int, slots: int, tmp: Path, env: dict[str, str]) -> dict:
    """N cells and 2N cells (--repeat 2): the difference is what N attempts cost, without what a sweep costs once
    (the command's start, planning, the report); that is given apart."""
    one = sweep(mode, cells, slots, tmp, env, 1)
    two = sweep(mode, cells, slots, tmp, env, 2)
    per_slot = (two - one) * slots / cells
    return {"mode": mode, "cells": cells, "wall_s": one, "wall_2n_s": two, "per_s": cells / one,
            "overhead_s": one * slots / cells, "per_attempt_per_slot_s": per_slot, "fixed_s": one - per_slot * cells / slots}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=40)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    base["PYTHONPATH"] = str(REPO)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        results = [run("embedded", args.cells, args.slots, tmp, base)]
        redis = RedisServer(tmp / "redis")
        redis.start()
        env = dict(base, FLEET_BROKER_URL=redis.url, FLEET_NAMESPACE="bench")
        inv = tmp / "redis.toml"
        inv.write_text(INVENTORY.format(work=tmp / "work-redis", slots=args.slots))
        worker = subprocess.Popen([sys.executable, "-m", "harness.cli", "worker", "-i", str(inv), "--loglevel", "WARNING"],
                                  cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(4)  # the worker's start-up is not part of the figure
            results.append(run("redis", args.cells, args.slots, tmp, env))
        finally:
            worker.terminate()
            worker.wait(30)
            redis.stop()
    for r in results:
        print(f"{r['mode']:>8}: {r['cells']} attempts in {r['wall_s']:.1f} s ({r['cells'] * 2} in {r['wall_2n_s']:.1f} s), "
              f"{r['per_attempt_per_slot_s']:.2f} s per attempt per slot, {r['fixed_s']:.1f} s once per sweep "
              f"(load average {os.getloadavg()[0]:.1f})")
    record(args.json_path, "dispatch", {"cells": args.cells, "slots": args.slots,
                            "runs": [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in results],
                            "load_average": os.getloadavg()[0], "measured_at": utc_now()})


if __name__ == "__main__":
    main()
