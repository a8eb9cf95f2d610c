"""Many-files benchmark: recording one attempt whose workspace holds N files, beside its baseline.

An agent's workspace may hold tens of thousands of files (`pip install --target lib`, a generated site): the
store checks every name against every other (given twice, or one the folder of another) before it writes any.
The baseline is that check as it was, `list.count` per artifact (quadratic), measured on the same names in
the same run; the store's own figure is a whole `record_attempt` of N empty files (names, checks, writes,
fsyncs, meta.json, index rows), which includes that check done the new way.

Run: .venv/bin/python bench/bench_many_files.py [--sizes 1000,10000,30000] [--baseline-max 10000] [--json F]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.records import Artifact, AttemptResult, AttemptSummary, Cell, HostSummary, utc_now  # noqa: E402
from harness.core.sweep import SweepRecord  # noqa: E402
from harness.core.catalog import Item  # noqa: E402
from harness.store import Store  # noqa: E402
from bench.record import record as record_figures  # noqa: E402


def names(n: int) -> list[str]:
    return [f"workspace/lib/pkg{i // 1000}/mod{i}.py" for i in range(n)]


def baseline_check(rels: list[PurePosixPath]) -> float:
    """The check as the store made it before: ``rels.count(rel)`` for every artifact."""
    t = time.perf_counter()
    names_ = set(rels)
    for rel in rels:
        if rels.count(rel) > 1 or any(parent in names_ for parent in rel.parents):
            raise AssertionError(rel)
    return time.perf_counter() - t


def record(n: int, folder: Path) -> float:
    item = Item(id="01-item", number="01", kind="open", title="t", prompt="p", timeout_s=900)
    cell = Cell(id=Cell.make_id("h", item.id, "builtin", 1), host="h", item=item.id, agent="builtin", rep=1, seed=1)
    host = HostSummary(name="h", transport="ssh", os="linux", address="a", slots=1, tags=[], model_id="m",
                       model_base_url="http://x/v1", context=1, max_output=1)
    sweep = SweepRecord(id="bench", created_at=utc_now(), inventory="i", prompts="p", harness_commit="c",
                        hosts={"h": host}, items={item.id: item}, cells=[cell])
    arts = [Artifact.of(name, b"") for name in names(n)]
    store = Store(folder)
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.dispatched(sweep, cell.id, AttemptSummary(attempt=1, task_id="t", status="dispatched"))
        result = AttemptResult(sweep_id=sweep.id, cell_id=cell.id, attempt=1, status="finished", exit_code=0,
                               host="h", agent="builtin", item=item.id, artifacts=arts)
        t = time.perf_counter()
        assert w.record_attempt(sweep, result)
        return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,30000")
    ap.add_argument("--baseline-max", type=int, default=10000)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            whole = record(n, Path(tmp))
        check = baseline_check([PurePosixPath(x) for x in names(n)]) if n <= args.baseline_max else None
        rows.append({"files": n, "record_attempt_s": round(whole, 2),
                     "baseline_name_check_alone_s": None if check is None else round(check, 2)})
        print(f"{n:>7} files: record_attempt {whole:7.2f} s; baseline name check alone "
              f"{'-' if check is None else f'{check:7.2f} s'}", flush=True)
    record_figures(args.json or None, "many_files", rows)


if __name__ == "__main__":
    main()
