"""How long a host waits on the harness between one agent and the next: N attempts of an agent that sleeps S
seconds on one local host with one slot, through the embedded default (the same lifecycle as over SSH).

* **figure**: makespan (first agent's start to last agent's end, from each attempt's harness/exit.json and
  meta.json) over the agents' own run time (the launcher's ``ran_s`` added up), and the mean gap between one
  agent's end and the next one's start;
* **floor**: 1.0 and 0 s: a host that never waits on the harness while it has work queued.

Run: .venv/bin/python bench/bench_gap.py [--cells 10] [--sleep 1.0] [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.record import record  # noqa: E402
from tests.integration.conftest import write_prompts  # noqa: E402

INVENTORY = """schema_version = 1
[hosts.bench]
transport = "local"
workdir = "{work}"
slots = 1
model = {{ base_url = "http://127.0.0.1:9/v1", id = "m", context = 1024, max_output = 256 }}
[hosts.bench.agents.sleeper]
command = ["sleep", "{sleep}"]
"""


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=10)
    ap.add_argument("--sleep", type=float, default=1.0)
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env["PYTHONPATH"] = str(REPO)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        inv = tmp / "inv.toml"
        inv.write_text(INVENTORY.format(work=tmp / "work", sleep=args.sleep))
        write_prompts(tmp / "prompts", {f"{i:03d}-cell": "wait\n" for i in range(args.cells)}, timeout_s=60)
        runs = tmp / "runs"
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "sweep", "-i", str(inv), "--prompts",
                               str(tmp / "prompts"), "--runs", str(runs), "--json"], cwd=REPO, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-2000:])
        spans = []
        for meta_file in runs.glob("*/*/*/*/*/attempt-1/meta.json"):
            meta = json.loads(meta_file.read_text())
            exit_record = json.loads((meta_file.parent / "harness" / "exit.json").read_text())
            spans.append((_epoch(meta["agent_started_at"]), exit_record["time"], exit_record["ran_s"]))
    spans.sort()
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    makespan = spans[-1][1] - spans[0][0]
    ran = sum(s[2] for s in spans)
    row = {"cells": len(spans), "sleep_s": args.sleep, "makespan_s": round(makespan, 2), "agents_ran_s": round(ran, 2),
           "makespan_over_agent_time": round(makespan / ran, 3), "mean_gap_s": round(statistics.mean(gaps), 3),
           "max_gap_s": round(max(gaps), 3), "floor_ratio": 1.0, "floor_gap_s": 0.0}
    print(json.dumps(row, indent=1))
    record(args.json_path, "gap", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
