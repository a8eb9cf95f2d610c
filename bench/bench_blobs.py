"""What one in-flight attempt with a large workspace costs Redis: the peak of Redis's used memory while a worker's
result holding a 5 MB workspace file (random bytes) is stored through Celery's Redis backend (which also publishes
it to the waiting coordinator, subscribed as the coordinator is) and read back by the coordinator, on a fresh
redis-server each time.

* **figure**: the result as the worker stores it now, the file beside it as raw bytes (workers/blobs.py);
* **baseline**, in the same run: the same result with the file inline, base64 in the result (before).

Run: .venv/bin/python bench/bench_blobs.py [--mb 5] [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workers.blobs import BlobStore  # noqa: E402
from harness.core.records import Artifact, AttemptResult, utc_now  # noqa: E402
from harness.core.settings import Settings  # noqa: E402
from tests.integration.fleetkit import RedisServer  # noqa: E402
from bench.record import record  # noqa: E402


def peak_mb(mode: str, size: int, tmp: Path) -> float:
    import redis

    from workers.app import app, configure

    server = RedisServer(tmp / mode)
    server.start()
    try:
        configure(Settings.resolve({"broker_url": server.url, "namespace": "bench"}, {}))
        client = redis.Redis.from_url(server.url)
        task_id = uuid.uuid4().hex
        listener = client.pubsub()
        listener.subscribe(app.backend.get_key_for_task(task_id).decode())
        result = AttemptResult(sweep_id="s", cell_id="h/01-x/a/r1", attempt=1, status="finished", host="h", agent="a",
                               item="01-x", harness_commit="bench", started_at=utc_now(),
                               artifacts=[Artifact.of("workspace/big.bin", os.urandom(size))])
        before = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory-policy", "noeviction")
        if mode == "blob":
            result = BlobStore(server.url).offload(result, "bench", task_id)
        app.backend.store_result(task_id, result.model_dump(mode="json"), "SUCCESS")
        # The coordinator reads it: the result, and the blobs beside it.
        taken = AttemptResult.model_validate(app.AsyncResult(task_id).result)
        if mode == "blob":
            BlobStore(server.url).resolve(taken, "bench", task_id)
        assert taken.artifacts[0].size == size and len(taken.artifacts[0].data()) == size
        peak = int(client.info("memory")["used_memory_peak"])
        listener.close()
        return round((peak - before) / 1e6, 1)
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=5.0)
    ap.add_argument("--json", dest="json_path", default=None)
    ap.add_argument("--one", choices=("blob", "inline"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    size = int(args.mb * 1e6)
    tmp = Path(tempfile.mkdtemp(prefix="bench-blobs-"))
    if args.one:  # each mode in a process of its own: the Celery app keeps the backend it first connected to
        print(peak_mb(args.one, size, tmp))
        return 0

    def one(mode: str) -> float:
        out = subprocess.run([sys.executable, __file__, "--mb", str(args.mb), "--one", mode], capture_output=True,
                             text=True, check=True).stdout
        return float(out.strip().splitlines()[-1])

    row = {"artifact_mb": args.mb, "redis_peak_mb": one("blob"), "baseline_inline_redis_peak_mb": one("inline"),
           "measured_at": utc_now()}
    print(json.dumps(row, indent=1))
    record(args.json_path, "blobs", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
