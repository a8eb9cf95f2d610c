"""A large sweep through Redis: N cells of an agent that does nothing, on many inventory hosts that all live on this
machine (local transport, one slot each, a workdir each), with one `fleet worker`.

* **figure**: the sweep's wall time and attempts per second, the coordinator's peak memory (VmHWM of the
  `fleet sweep` process, read from /proc while it runs), the worker's (its main process and pool), and Redis's
  peak `used_memory`;
* **beside it**, measured in the same run: the same command on a sweep of N/10 cells, so the growth from one
  size to the other is seen (a cost per attempt that grows with the sweep shows as a per-attempt time that grows).

Run: .venv/bin/python bench/bench_scale.py [--cells 10000] [--hosts 40] [--concurrency 4] [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.core.records import utc_now  # noqa: E402
from tests.integration.fleetkit import FLEET, RedisServer, Worker, children_of, fleet_env  # noqa: E402
from bench.record import record  # noqa: E402
from tests.integration.conftest import write_prompts  # noqa: E402

HOST = """[hosts.{name}]
transport = "local"
workdir = "{work}"
python = "{python}"
slots = 1
model = {{ base_url = "http://127.0.0.1:9/v1", id = "m", context = 1024, max_output = 256 }}
[hosts.{name}.agents.noop]
command = ["true"]
"""


def _kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Peak:
    """Samples the peak resident memory of some processes (and of Redis) every 0.5 s while a sweep runs."""

    def __init__(self, pids: "callable[[], list[int]]", redis_cli: list[str]) -> None:  # type: ignore[valid-type]
        self.pids, self.redis_cli = pids, redis_cli
        self.rss_kb = 0
        self.redis_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.rss_kb = max(self.rss_kb, sum(_kb(p, "VmRSS") for p in self.pids()))
            out = subprocess.run(self.redis_cli + ["info", "memory"], capture_output=True, text=True).stdout
            for line in out.splitlines():
                if line.startswith("used_memory:"):
                    self.redis_bytes = max(self.redis_bytes, int(line.split(":")[1]))

    def __enter__(self) -> "Peak":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def sweep(tmp: Path, redis: RedisServer, namespace: str, inv: Path, cells: int, hosts: int, tag: str) -> dict:
    items = cells // hosts
    if not 0 < items < 1000:
        raise SystemExit(f"{cells} cells on {hosts} hosts: 1 to 999 items per host (open prompts are numbered NN or NNN)")
    prompts = tmp / f"prompts-{tag}"
    write_prompts(prompts, {f"{i:03d}-noop": "do nothing\n" for i in range(items)}, timeout_s=60)
    start = time.perf_counter()
    # Its --json output goes to a file: a pipe read only at the end fills and stops the sweep in its last write.
    out_path, err_path = tmp / f"sweep-{tag}.json", tmp / f"sweep-{tag}.err"
    proc = subprocess.Popen(FLEET + ["sweep", "-i", str(inv), "--prompts", str(prompts), "--broker", redis.url,
                                     "--runs", str(tmp / f"runs-{tag}"), "--json"], cwd=REPO, env=fleet_env(namespace),
                            stdout=open(out_path, "w"), stderr=open(err_path, "w"), text=True)
    hwm = 0
    redis_cli = ["redis-cli", "-p", redis.url.rsplit(":", 1)[1].split("/")[0]]
    with Peak(lambda: [proc.pid], redis_cli) as peak:
        while proc.poll() is None:
            hwm = max(hwm, _kb(proc.pid, "VmHWM"))
            time.sleep(0.5)
    wall = time.perf_counter() - start
    out, err = out_path.read_text(), err_path.read_text()
    if proc.returncode != 0:
        raise SystemExit(f"{tag}: exit {proc.returncode}: {err[-2000:]}")
    done = sum(1 for c in json.loads(out)["cells"] if c["status"] == "finished")
    if done != items * hosts:
        raise SystemExit(f"{tag}: {done} of {items * hosts} cells finished")
    return {"cells": done, "wall_s": round(wall, 1), "attempts_per_s": round(done / wall, 1),
            "per_attempt_ms": round(wall / done * 1000, 1), "coordinator_peak_mb": round(max(hwm, peak.rss_kb) / 1024),
            "redis_peak_mb": round(peak.redis_bytes / 1e6, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=10000)
    ap.add_argument("--hosts", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    redis = RedisServer(tmp / "redis")
    redis.start()
    namespace = f"bench{uuid.uuid4().hex[:6]}"
    inv = tmp / "inv.toml"
    inv.write_text("schema_version = 1\n" + "".join(
        HOST.format(name=f"h{i:03d}", work=tmp / f"work-{i:03d}", python=sys.executable) for i in range(args.hosts)))
    worker = Worker(tmp, redis.url, namespace, [f"h{i:03d}" for i in range(args.hosts)], inv,
                    concurrency=args.concurrency)
    try:
        worker.wait_ready()
        small = sweep(tmp, redis, namespace, inv, args.cells // 10, args.hosts, "small")
        worker_pids = lambda: [worker.proc.pid, *children_of(worker.proc.pid)]  # noqa: E731
        worker_peak = Peak(worker_pids, ["true"])
        with worker_peak:
            large = sweep(tmp, redis, namespace, inv, args.cells, args.hosts, "large")
    finally:
        worker.stop()
        redis.stop()
    row = {"hosts": args.hosts, "concurrency": args.concurrency, "small": small, "large": large,
           "worker_peak_mb": round(worker_peak.rss_kb / 1024), "load_average": os.getloadavg()[0],
           "measured_at": utc_now()}
    print(json.dumps(row, indent=1))
    record(args.json_path, "scale", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
