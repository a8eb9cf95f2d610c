"""Store benchmark: the cost of recording one attempt as the sweep grows, beside its baseline.

For each sweep size N (default 1,000, 10,000 and 100,000 cells) a sweep is planned whose N - K cells are
already recorded, and then K more attempts go through the coordinator's writes: dispatched, then recorded with
its grade (three 20 kB artifacts, meta.json, grade.json, grades.jsonl, index rows: ``SweepWriter.record_graded``).
Each write is made durable as in a real sweep.

- journal: today's store: each state change is one line appended to journal.jsonl.
- snapshot (baseline, measured in the same run): the writes of the store before the journal (dispatched, recorded,
  graded), each followed by a rewrite of the whole sweep.json.

Also: the time to load the sweep (snapshot + journal replay) and the peak memory of this process.
Run: .venv/bin/python bench/bench_store.py [--sizes 1000,10000,100000] [--k 100] [--baseline-k 10] [--json F]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.catalog import Item  # noqa: E402
from harness.grading import Grade  # noqa: E402
from harness.core.records import Artifact, AttemptResult, AttemptSummary, Cell, HostSummary, utc_now  # noqa: E402
from harness.core.sweep import SweepRecord  # noqa: E402
from harness.store import Store, SweepWriter  # noqa: E402

PAYLOAD = b"x" * 20_000


def plan(n: int) -> SweepRecord:
    hosts = [f"host{i}" for i in range(6)]
    items = [Item(id=f"{i:02d}-item", number=f"{i:02d}", kind="open", title="t", prompt="p" * 200, timeout_s=900)
             for i in range(50)]
    reps = -(-n // (len(hosts) * len(items)))
    cells = [Cell(id=Cell.make_id(h, it.id, "builtin", r), host=h, item=it.id, agent="builtin", rep=r, seed=r)
             for r in range(1, reps + 1) for h in hosts for it in items][:n]
    host_summary = HostSummary(name="h", transport="ssh", os="linux", address="a", slots=1, tags=[], model_id="m",
                               model_base_url="http://x/v1", context=1, max_output=1)
    return SweepRecord(id="bench", created_at=utc_now(), inventory="i", prompts="p", harness_commit="c",
                       hosts={h: host_summary.model_copy(update={"name": h}) for h in hosts},
                       items={i.id: i for i in items}, cells=cells)


def one_attempt(w: SweepWriter, sweep: SweepRecord, cell: Cell, k: int, snapshot: bool) -> float:
    """Dispatch, record and grade one attempt; return the seconds it took."""
    grade = Grade(grade="DELIVERED", outcome="passed", reasons=["bench"], graded_at=utc_now())
    t = time.perf_counter()
    w.dispatched(sweep, cell.id, AttemptSummary(attempt=1, task_id=f"t{k}", status="dispatched"))
    if snapshot:
        w.save_sweep(sweep)
    result = AttemptResult(
        sweep_id=sweep.id, cell_id=cell.id, attempt=1, status="finished", exit_code=0, host=cell.host,
        agent=cell.agent, item=cell.item,
        artifacts=[Artifact.of(n, PAYLOAD) for n in ("agent.stdout", "answer.txt", "workspace/a.py")])
    if not snapshot:
        graded = w.record_graded(sweep, result, lambda folder: grade)
        assert graded is not None and graded.grade is grade
        return time.perf_counter() - t
    w.record_attempt(sweep, result)
    w.save_sweep(sweep)
    w.record_grade(sweep, cell.id, 1, grade)
    w.save_sweep(sweep)
    return time.perf_counter() - t


def measure(n: int, k: int, snapshot: bool) -> dict[str, float]:
    sweep = plan(n)
    # Every cell but the last k is already recorded (in the state, not on disk: only its size matters here).
    for c in sweep.cells[: n - k]:
        sweep.attempts[c.id] = [AttemptSummary(attempt=1, task_id="t", status="finished", exit_code=0,
                                               grade="DELIVERED", recorded_at=utc_now())]
    with tempfile.TemporaryDirectory() as d:
        store = Store(d)
        with store.writer(sweep.id) as w:
            w.save_sweep(sweep)
            times = [one_attempt(w, sweep, c, i, snapshot) for i, c in enumerate(sweep.cells[n - k:])]
            t = time.perf_counter()
            loaded = store.load_sweep(sweep.id)
            load_s = time.perf_counter() - t
            assert sum(len(v) for v in loaded.attempts.values()) == n
    return {"per_attempt_ms": statistics.median(times) * 1000, "mean_ms": statistics.fmean(times) * 1000,
            "load_s": load_s, "attempts_timed": float(len(times))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--k", type=int, default=100, help="attempts timed per size (journal)")
    ap.add_argument("--baseline-k", type=int, default=10, help="attempts timed per size (snapshot baseline)")
    ap.add_argument("--json", default="", help="append the figures to this JSON file")
    args = ap.parse_args()
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        journal = measure(n, args.k, snapshot=False)
        baseline = measure(n, args.baseline_k, snapshot=True)
        rows.append({"cells": n, "journal": journal, "snapshot_baseline": baseline})
        print(f"{n:>7} cells: record one attempt (dispatch + result + grade) {journal['per_attempt_ms']:6.1f} ms "
              f"(baseline, whole sweep.json each time: {baseline['per_attempt_ms']:8.1f} ms); "
              f"load the sweep {journal['load_s'] * 1000:.0f} ms", flush=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {rss_mb:.0f} MB")
    if args.json:
        path = Path(args.json)
        data = json.loads(path.read_text()) if path.is_file() else {}
        data["store"] = {"rows": rows, "peak_rss_mb": round(rss_mb), "measured_at": utc_now()}
        path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
