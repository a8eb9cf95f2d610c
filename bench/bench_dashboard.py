"""Dashboard benchmark: the server's time for its pages at fleet scale, each beside a baseline measured in the
same run.

- matrix: a 10,000-cell sweep (10 hosts x 100 items x 10 agents, every attempt recorded and graded by the real
  SweepWriter) with a previous sweep of its label (also 10,000 cells, so the regressions are worked out):
  ``GET /sweeps/ID`` through Starlette's TestClient (the whole app: routing, the thread hop, the headers), the
  render function ``harness.dashboard.sweeps.sweep_page`` alone, and the baseline ``Store.load_sweep`` of the
  sweep alone (what the page costs on top of reading the state) and of both sweeps.
- list: a results directory of 100, then 1,000 small sweeps (8 cells each, 10 labels), and one of 100 sweeps
  of 100 cells each (the list's cost must not follow the sweeps' sizes): ``GET /`` and its
  peak memory (tracemalloc: every Python allocation, the app's thread included), ``harness.views.sweeplist.
  list_sweeps`` (what ``fleet sweeps`` and the page share: the index), and the baseline: every sweep.json read
  (``Store.load_sweep`` and a line made from it for every sweep, what the list did before the index kept the
  lines).
- cell: a 1,000-event transcript's cell page, beside parsing that transcript alone.

Times are the median of --repeat runs after one warm-up run; the results directory is written under /dev/shm
when it exists (building it is not what is measured; the reads come from the page cache either way).
Run: .venv/bin/python bench/bench_dashboard.py [--cells 10000] [--sweeps 100,1000] [--big-sweeps 100] [--repeat 5]
     [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlette.testclient import TestClient  # noqa: E402

from harness.dashboard.app import make_app  # noqa: E402
from harness.dashboard.context import Dashboard, Links  # noqa: E402
from harness.dashboard.sweeps import sweep_page  # noqa: E402
from harness.core.records import Artifact  # noqa: E402
from harness.store import Store  # noqa: E402
from harness.views.sweeplist import _line, list_sweeps  # noqa: E402

from bench.synthetic import plan, write  # noqa: E402


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The median seconds of ``repeat`` runs after one warm-up run, and the last result."""
    out = fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def peak_mb(fn: Callable[[], Any]) -> float:
    """Peak Python memory allocated while ``fn`` runs, MB (tracemalloc, after a warm-up run)."""
    fn()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return (tracemalloc.get_traced_memory()[1] - base) / 1e6
    finally:
        tracemalloc.stop()


def bench_matrix(root: Path, cells: int, repeat: int) -> dict[str, float]:
    store = Store(root / "matrix")
    hosts, agents = 10, 10
    items = max(1, cells // (hosts * agents))
    t = time.perf_counter()
    for n, (sid, day) in enumerate((("20261201-000000-prev", "01"), ("20261202-000000-big", "02"))):
        write(store, plan(sid, "nightly", f"2026-12-{day}T00:00:00+00:00", hosts, items, agents), shift=n * 3)
    built = time.perf_counter() - t
    sid = "20261202-000000-big"
    client = TestClient(make_app(store.root))
    dash = Dashboard(store=store)

    def get() -> int:
        r = client.get(f"/sweeps/{sid}")
        assert r.status_code == 200, r.status_code
        return len(r.content)

    get_s, size = timed(get, repeat)
    render_s, _ = timed(lambda: sweep_page(dash, sid, Links()), repeat)
    load_s, loaded = timed(lambda: store.load_sweep(sid), repeat)
    both_s, _ = timed(lambda: (store.load_sweep(sid), store.load_sweep("20261201-000000-prev")), repeat)
    page = client.get(f"/sweeps/{sid}").text
    return {"cells": float(len(loaded.cells)), "build_s": built, "get_s": get_s, "render_s": render_s,
            "load_s": load_s, "load_both_s": both_s, "page_mb": size / 1e6,
            "regressed": float(page.count('class="badge regressed-badge"')), "peak_mb": peak_mb(get)}


def bench_list(root: Path, counts: list[int], repeat: int, items: int = 4, agents: int = 2) -> list[dict[str, float]]:
    """The list of ``counts`` sweeps of ``items`` x ``agents`` cells (one host) each."""
    store = Store(root / f"list-{items * agents}")
    rows = []
    made = 0
    for n in sorted(counts):
        t = time.perf_counter()
        while made < n:
            # One sweep an hour, ten labels (nightly-0 .. nightly-9) taking turns.
            at = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(hours=made)
            sid = at.strftime("%Y%m%d-%H%M%S") + f"-s{made}"
            write(store, plan(sid, f"nightly-{made % 10}", at.isoformat(), hosts=1, items=items, agents=agents), shift=made)
            made += 1
        built = time.perf_counter() - t
        client = TestClient(make_app(store.root))

        def get() -> int:
            r = client.get("/")
            assert r.status_code == 200, r.status_code
            return len(r.content)

        def every_file() -> int:
            return len([_line(store, store.load_sweep(s)) for s in store.list_sweeps()])

        get_s, size = timed(get, repeat)
        index_s, listed = timed(lambda: list_sweeps(store), repeat)
        files_s, read = timed(every_file, repeat)
        assert len(listed.sweeps) == read == n, (len(listed.sweeps), read, n)
        rows.append({"sweeps": float(n), "cells_each": float(items * agents), "build_s": built, "get_s": get_s, "get_peak_mb": peak_mb(get),
                     "page_mb": size / 1e6, "list_sweeps_s": index_s, "list_sweeps_peak_mb": peak_mb(lambda: list_sweeps(store)),
                     "every_file_s": files_s, "every_file_peak_mb": peak_mb(every_file)})
    return rows


def bench_cell(root: Path, events: int, repeat: int) -> dict[str, float]:
    """The cell page of an ``events``-event transcript (``GET /sweeps/ID/cells/CELL`` through TestClient, and
    ``cell_page`` alone), beside ``harness.core.transcript.parse_transcript`` of that file alone: the page must be
    under 200 ms. The transcript is the cell test's (turns, tool calls, errors, guard decisions)."""
    from harness.dashboard.cell import cell_page
    from harness.core.transcript import parse_transcript
    from tests.dashboard.test_cell import _long_transcript
    from tests.support import finished_result, synthetic_sweep

    store = Store(root / "cell")
    sweep = synthetic_sweep("20261201-000000-cell", hosts=1, items=1)
    data = _long_transcript(root / "transcript.jsonl", events)
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.record_attempt(sweep, finished_result(sweep, sweep.cells[0], 1, artifacts=[
            Artifact.of("transcript.jsonl", data), Artifact.of("answer.txt", b"done")]))
        w.set_status(sweep, "finished")
    app = make_app(store.root)
    client, dash, url = TestClient(app), app.state.dash, Links().cell(sweep.id, sweep.cells[0].id)

    def get() -> int:
        r = client.get(url)
        assert r.status_code == 200, r.status_code
        return len(r.content)

    get_s, size = timed(get, repeat)
    render_s, _ = timed(lambda: cell_page(dash, sweep.id, sweep.cells[0].id, None, Links()), repeat)
    parse_s, _ = timed(lambda: parse_transcript(data, "transcript.jsonl"), repeat)
    return {"events": float(data.count(b"\n")), "get_s": get_s, "render_s": render_s, "parse_s": parse_s,
            "page_mb": size / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=10_000, help="cells of the matrix's sweep")
    ap.add_argument("--sweeps", default="100,1000", help="sizes of the sweeps list")
    ap.add_argument("--big-sweeps", type=int, default=100, help="sweeps of 100 cells each in the list")
    ap.add_argument("--events", type=int, default=1000, help="events of the cell page's transcript")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default="", help="record the figures in this JSON file (key 'dashboard')")
    args = ap.parse_args()
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-", dir=shm if shm.is_dir() else None) as d:
        root = Path(d)
        m = bench_matrix(root, args.cells, args.repeat)
        print(f"matrix of {m['cells']:,.0f} cells ({m['regressed']:.0f} regressed; page {m['page_mb']:.1f} MB; "
              f"written in {m['build_s']:.0f} s)", flush=True)
        print(f"  GET /sweeps/ID (TestClient)          {m['get_s'] * 1000:8.0f} ms   peak {m['peak_mb']:.0f} MB")
        print(f"  sweep_page alone                     {m['render_s'] * 1000:8.0f} ms")
        print(f"  baseline: Store.load_sweep alone     {m['load_s'] * 1000:8.0f} ms")
        print(f"  baseline: load_sweep of it and of its previous {m['load_both_s'] * 1000:.0f} ms", flush=True)
        lists = bench_list(root, [int(x) for x in args.sweeps.split(",")], args.repeat)
        # The same number of sweeps, each 12.5 times larger: the list's cost must not follow the sweeps' sizes.
        lists += bench_list(root, [args.big_sweeps], args.repeat, items=25, agents=4)
        print("sweeps list                      GET /            list_sweeps (index)   every sweep.json (baseline)")
        for r in lists:
            print(f"  {r['sweeps']:>6,.0f} sweeps of {r['cells_each']:>3.0f} cells  {r['get_s'] * 1000:5.0f} ms {r['get_peak_mb']:5.1f} MB   "
                  f"{r['list_sweeps_s'] * 1000:5.0f} ms {r['list_sweeps_peak_mb']:5.1f} MB     "
                  f"{r['every_file_s'] * 1000:6.0f} ms {r['every_file_peak_mb']:5.1f} MB   (page {r['page_mb']:.2f} MB)")
        cell = bench_cell(root, args.events, args.repeat)
        print(f"cell page of a {cell['events']:,.0f}-event transcript (page {cell['page_mb']:.2f} MB)")
        print(f"  GET /sweeps/ID/cells/CELL            {cell['get_s'] * 1000:8.0f} ms")
        print(f"  cell_page alone                      {cell['render_s'] * 1000:8.0f} ms")
        print(f"  baseline: parse_transcript alone     {cell['parse_s'] * 1000:8.0f} ms")
    if args.json:
        from harness.core.records import utc_now

        path = Path(args.json)
        data = json.loads(path.read_text()) if path.is_file() else {}
        data["dashboard"] = {"matrix": m, "list": lists, "cell": cell, "measured_at": utc_now()}
        path.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
