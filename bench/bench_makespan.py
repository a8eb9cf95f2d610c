"""Does a host ever wait on the harness while it has work queued? 6 hosts (each a real loopback sshd with a pinned
key, one slot), 15 items each of mixed length (agents that sleep 0.5 to 4.5 s, 2.2 s on average), through Redis
with one `fleet worker` for all of them.

* **figure**: the sweep's makespan (the first agent's start to the last agent's end, from each attempt's
  meta.json and signed harness/exit.json) over the busiest host's agent time (the launcher's ``ran_s`` added
  up), each host's span over its own agent time, and the gap between one agent's end and the next one's start
  on a host (mean, and the largest);
* **floor**: 1.0 and 0 s: a fleet whose hosts never wait on the harness.

Run: .venv/bin/python bench/bench_makespan.py [--hosts 6] [--items 15] [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.core.records import utc_now  # noqa: E402
from tests.integration.fleetkit import FLEET, RedisServer, SSHHost, Worker, fleet_env, keygen  # noqa: E402
from bench.record import record  # noqa: E402
from tests.integration.conftest import write_prompts  # noqa: E402

DURATIONS = (0.5, 1.0, 2.0, 3.0, 4.5)
"""Each item's agent sleeps one of these (item i: DURATIONS[i % 5]): a mix of short and long attempts."""
AGENT = ["sh", "-c", 'sleep "$(cat "$1")"', "sh", "{prompt_file}"]


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=6)
    ap.add_argument("--items", type=int, default=15)
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-makespan-"))
    key = tmp / "id_ed25519"
    pub = keygen(key)
    hosts = [SSHHost(f"h{i}", tmp / f"h{i}", pub) for i in range(args.hosts)]
    for h in hosts:
        h.setup()
        h.start()
    redis = RedisServer(tmp / "redis")
    redis.start()
    namespace = f"bench{uuid.uuid4().hex[:6]}"
    inv = tmp / "inv.toml"
    inv.write_text("schema_version = 1\n" + "".join(h.toml(key, agent=AGENT) for h in hosts))
    prompts = tmp / "prompts"
    write_prompts(prompts, {f"{i:03d}-sleep": f"{DURATIONS[i % len(DURATIONS)]}\n" for i in range(args.items)},
                  timeout_s=60)
    worker = Worker(tmp, redis.url, namespace, [h.name for h in hosts], inv)  # its default pool: slots + 1 per host
    runs = tmp / "runs"
    try:
        worker.wait_ready()
        start = time.perf_counter()
        r = subprocess.run(FLEET + ["sweep", "-i", str(inv), "--prompts", str(prompts), "--broker", redis.url,
                                    "--runs", str(runs), "--json"], cwd=REPO, env=fleet_env(namespace),
                           capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - start
        if r.returncode != 0:
            raise SystemExit(r.stderr[-2000:])
    finally:
        worker.stop()
        redis.stop()
        for h in hosts:
            h.stop()
    spans: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for meta_file in runs.glob("*/*/*/*/*/attempt-*/meta.json"):
        meta = json.loads(meta_file.read_text())
        exit_record = json.loads((meta_file.parent / "harness" / "exit.json").read_text())
        spans[meta["host"]].append((_epoch(meta["agent_started_at"]), exit_record["time"], exit_record["ran_s"]))
    cells = sum(len(s) for s in spans.values())
    if cells != args.hosts * args.items:
        raise SystemExit(f"{cells} attempts recorded, {args.hosts * args.items} planned")
    gaps: list[float] = []
    per_host = {}
    for host, s in sorted(spans.items()):
        s.sort()
        gaps += [b[0] - a[1] for a, b in zip(s, s[1:])]
        ran = sum(x[2] for x in s)
        per_host[host] = {"span_s": round(s[-1][1] - s[0][0], 2), "agents_ran_s": round(ran, 2),
                          "span_over_agent_time": round((s[-1][1] - s[0][0]) / ran, 3)}
    first = min(x[0] for s in spans.values() for x in s)
    last = max(x[1] for s in spans.values() for x in s)
    busiest = max(sum(x[2] for x in s) for s in spans.values())
    row = {
        "hosts": args.hosts, "items": args.items, "durations_s": list(DURATIONS),
        "makespan_s": round(last - first, 2), "busiest_host_agent_s": round(busiest, 2),
        "makespan_over_busiest": round((last - first) / busiest, 3),
        "mean_gap_s": round(statistics.mean(gaps), 3), "max_gap_s": round(max(gaps), 3),
        "sweep_wall_s": round(wall, 2), "per_host": per_host, "floor_ratio": 1.0, "floor_gap_s": 0.0,
        "load_average": os.getloadavg()[0], "measured_at": utc_now(),
    }
    print(json.dumps(row, indent=1))
    record(args.json_path, "makespan", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
