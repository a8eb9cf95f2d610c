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

from tests.integration.fleetkit import RedisServer  # noqa: E402

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


def run(mode: str, cells: int, slots: int, tmp: Path, env: dict[str, str]) -> dict:
    inv = tmp / f"{mode}.toml"
    inv.write_text(INVENTORY.format(work=tmp / f"work-{mode}", slots=slots))
    prompts = tmp / "prompts"
    if not prompts.exists():
        for i in range(cells):
            d = prompts / "open" / f"{i:03d}-cell"
            d.mkdir(parents=True)
            (d / "item.toml").write_text('schema_version = 1\ntitle = "noop"\ntimeout_s = 60\n')
            (d / "prompt.md").write_text("do nothing\n")
    t0 = time.perf_counter()
    r = fleet(["sweep", "-i", str(inv), "--prompts", str(prompts), "--runs", str(tmp / f"runs-{mode}"), "--json"], env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{mode}: {r.stderr[-2000:]}")
    done = sum(1 for c in json.loads(r.stdout)["cells"] if c["status"] == "finished")
    return {"mode": mode, "cells": done, "wall_s": wall, "per_s": done / wall, "overhead_s": wall * slots / done}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=40)
    ap.add_argument("--slots", type=int, default=2)
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
        print(f"{r['mode']:>8}: {r['cells']} attempts in {r['wall_s']:.1f} s, {r['per_s']:.2f}/s, "
              f"harness overhead {r['overhead_s']:.2f} s per attempt per slot")


if __name__ == "__main__":
    main()
