"""Store benchmark: plan a large sweep and record one attempt per cell, as the coordinator does.

Measures plan time, the time to record an attempt (artifacts + meta.json + index + sweep.json) as the
sweep grows, and peak memory. Run: .venv/bin/python bench/bench_store.py [--cells N]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.catalog import Item  # noqa: E402
from harness.records import Artifact, AttemptResult, AttemptSummary, Cell, HostSummary, SweepRecord, utc_now  # noqa: E402
from harness.store import Store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=3000)
    args = ap.parse_args()
    hosts = [f"host{i}" for i in range(6)]
    items = [Item(id=f"{i:02d}-item", number=f"{i:02d}", kind="open", title="t", prompt="p" * 200, timeout_s=900) for i in range(50)]
    reps = max(1, args.cells // (len(hosts) * len(items)))
    t0 = time.perf_counter()
    cells = [Cell(id=Cell.make_id(h, it.id, "builtin", r), host=h, item=it.id, agent="builtin", rep=r, seed=r)
             for h in hosts for it in items for r in range(1, reps + 1)]
    host_summary = HostSummary(name="h", transport="ssh", os="linux", address="a", slots=1, tags=[], model_id="m",
                               model_base_url="http://x/v1", context=1, max_output=1)
    sweep = SweepRecord(id="bench", created_at=utc_now(), inventory="i", prompts="p", harness_commit="c",
                        hosts={h: host_summary.model_copy(update={"name": h}) for h in hosts},
                        items={i.id: i for i in items}, cells=cells)
    plan_s = time.perf_counter() - t0
    payload = b"x" * 20_000
    with tempfile.TemporaryDirectory() as d:
        store = Store(d)
        with store.writer(sweep.id) as w:
            w.save_sweep(sweep)
            times = []
            for k, c in enumerate(cells):
                sweep.attempts[c.id] = [AttemptSummary(attempt=1, task_id=f"t{k}", status="dispatched")]
                res = AttemptResult(sweep_id=sweep.id, cell_id=c.id, attempt=1, status="finished", exit_code=0,
                                    host=c.host, agent=c.agent, item=c.item,
                                    artifacts=[Artifact.of(n, payload) for n in ("agent.stdout", "answer.txt", "workspace/a.py")])
                t = time.perf_counter()
                w.record_attempt(sweep, res)
                times.append(time.perf_counter() - t)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n = len(cells)
    first = sum(times[: n // 10]) / max(1, n // 10)
    last = sum(times[-(n // 10):]) / max(1, n // 10)
    print(f"cells: {n}")
    print(f"plan: {plan_s * 1000:.0f} ms")
    print(f"record one attempt: first 10% {first * 1000:.1f} ms, last 10% {last * 1000:.1f} ms, all {sum(times):.1f} s")
    print(f"peak RSS: {rss_mb:.0f} MB")


if __name__ == "__main__":
    main()
