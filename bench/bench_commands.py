"""Commands benchmark: `fleet grade`, `fleet status` and `fleet report` on a finished sweep of 1,000 and 10,000 cells,
each a subprocess of the real CLI, beside its floor measured in the same run.

The sweep (10 hosts x N/100 items x 10 agents, ``bench/synthetic.py``) is written on disk in a temporary results
folder (under /tmp, the machine's disk: a regrade's fsyncs are part of its cost) by the real SweepWriter, every
cell a copy of a real attempt of ``tests/golden`` (meta.json, answer.txt, transcript.jsonl, the workspace and its
manifest, checks.json, receipt.json, the launcher's records) graded by the real grader, as a coordinator records
and grades it. Then, each the median of --repeat runs:

- ``fleet grade ID`` (a regrade of every attempt), ``fleet status ID``, ``fleet status ID --json`` and
  ``fleet report ID``, each a fresh process of the installed console script with this checkout first on its path;
- floor: ``Store.load_sweep`` of that sweep alone in a fresh process (Python's start and the imports included:
  what every one of the commands must do before its own work);
- floor of grade: the grading work alone, in this process (every attempt's evidence read from its folder and
  graded, nothing written), measured once.

Run: .venv/bin/python bench/bench_commands.py [--sizes 1000,10000] [--repeat 3] [--keep DIR] [--harness CHECKOUT]
     [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.grading import evidence_from_attempt, grade  # noqa: E402
from harness.core.records import utc_now  # noqa: E402
from harness.store import Store  # noqa: E402

from bench.record import record  # noqa: E402
from bench.synthetic import golden_results, plan, write  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HOSTS, AGENTS = 10, 10
LIMIT_S = 10.0
"""What each command must stay under on a 10,000-cell sweep (issue 14)."""


def fleet_argv() -> list[str]:
    """The installed `fleet` console script beside this Python, else ``python -m harness.cli``."""
    beside = Path(sys.executable).parent / "fleet"
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "harness.cli"]


HARNESS = REPO
"""The checkout whose commands are timed (--harness: another one, e.g. main's, for a before figure)."""


def env() -> dict[str, str]:
    """No FLEET_* settings of the caller; the timed checkout's harness first on the path (the console script of an
    editable install would import another checkout's otherwise); a plain 80-column width, as in a log."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k not in ("COLUMNS", "LINES")}
    out["PYTHONPATH"] = str(HARNESS) + (os.pathsep + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    out["COLUMNS"] = "80"
    return out


def run(argv: list[str], repeat: int, out_dir: Path, name: str) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    """The median wall seconds of ``repeat`` runs of ``argv`` (its output to files, as a nightly's log), and the
    last run; a failing run stops the benchmark with its stderr."""
    times = []
    proc: subprocess.CompletedProcess[bytes] | None = None
    for _ in range(repeat):
        with open(out_dir / f"{name}.out", "wb") as stdout:
            t = time.perf_counter()
            proc = subprocess.run(argv, env=env(), stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            times.append(time.perf_counter() - t)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    assert proc is not None
    return statistics.median(times), proc


def grading_alone(store: Store, sweep_id: str) -> tuple[float, int]:
    """Seconds to read every recorded attempt's evidence and grade it, in this process, nothing written."""
    sweep = store.load_sweep(sweep_id)
    t = time.perf_counter()
    n = 0
    for c in sweep.cells:
        for a in sweep.attempts.get(c.id) or []:
            if a.status != "dispatched":
                grade(evidence_from_attempt(store.attempt_dir(sweep.id, c.id, a.attempt), sweep.items[c.item]))
                n += 1
    return time.perf_counter() - t, n


def measure(root: Path, cells: int, repeat: int) -> dict[str, float | str | dict[str, int]]:
    store = Store(root / f"runs-{cells}")
    sid = f"20261204-000000-big{cells}"
    sweep = plan(sid, "nightly", "2026-12-04T00:00:00+00:00", HOSTS, max(1, cells // (HOSTS * AGENTS)), AGENTS)
    t = time.perf_counter()
    done = store.root / f".built-{sid}"
    if done.is_file():
        built = 0.0  # kept from an earlier run (--keep): the same sweep, already written and graded
    else:
        shutil.rmtree(store.root, ignore_errors=True)  # a build that was stopped midway is no sweep to time
        write(store, sweep, results=golden_results(sweep))
        os.sync()  # what was written is on the disk before anything is timed
        done.write_text("built\n")
        built = time.perf_counter() - t
    grades = Counter(a.grade for runs in store.load_sweep(sid).attempts.values() for a in runs)
    du = sum(p.stat().st_size for p in store.sweep_dir(sid).rglob("*") if p.is_file())
    runs = ["--runs", str(store.root)]
    out_dir = root / f"out-{cells}"
    out_dir.mkdir(exist_ok=True)
    load_s, _ = run([sys.executable, "-c", "import sys; from harness.store import Store; "
                     "Store(sys.argv[1]).load_sweep(sys.argv[2])", str(store.root), sid], repeat, out_dir, "load")
    status_s, status = run([*fleet_argv(), "status", sid, *runs], repeat, out_dir, "status")
    status_json_s, _ = run([*fleet_argv(), "status", sid, "--json", *runs], repeat, out_dir, "status-json")
    json.loads((out_dir / "status-json.out").read_bytes())  # it printed one JSON object
    report_s, _ = run([*fleet_argv(), "report", sid, *runs], repeat, out_dir, "report")
    assert (store.sweep_dir(sid) / "REPORT.md").is_file()
    grade_s, graded = run([*fleet_argv(), "grade", sid, *runs], repeat, out_dir, "grade")
    said = graded.stderr.decode(errors="replace").strip().splitlines()
    assert f"regraded {cells} attempt(s)" in said, said
    alone_s, n = grading_alone(store, sid)
    assert n == cells, n
    return {"cells": float(cells), "build_s": built, "folder_mb": du / 1e6, "grades": dict(grades),
            "load_s": load_s, "status_s": status_s, "status_json_s": status_json_s, "report_s": report_s,
            "grade_s": grade_s, "grading_alone_s": alone_s,
            "status_lines": float((out_dir / "status.out").read_bytes().count(b"\n")),
            "status_stdout_kb": (out_dir / "status.out").stat().st_size / 1e3}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000", help="cells of each sweep (multiples of 100)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command (the median is shown)")
    ap.add_argument("--keep", default="", help="build the results folders here and keep them (default: a temporary "
                    "folder under /tmp, removed at the end)")
    ap.add_argument("--harness", default="", help="time the commands of the harness in this checkout (e.g. main's, "
                    "for a before figure; the floors stay this checkout's)")
    ap.add_argument("--json", default="", help="record the figures in this JSON file (key 'commands')")
    args = ap.parse_args()
    global HARNESS
    if args.harness:
        HARNESS = Path(args.harness).resolve()
        assert (HARNESS / "harness" / "cli.py").is_file(), f"{HARNESS}: not a checkout of the harness"
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-commands-", dir="/tmp"))
    base.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for cells in (int(x) for x in args.sizes.split(",")):
            r = measure(base, cells, args.repeat)
            rows.append(r)
            print(f"{cells:,} cells ({r['folder_mb']:.0f} MB; written and graded in {r['build_s']:.0f} s; "
                  f"grades {r['grades']}); commands of {HARNESS}; load average {os.getloadavg()[0]:.2f}", flush=True)
            print(f"  floor: Store.load_sweep alone, fresh process     {r['load_s']:7.2f} s")
            print(f"  fleet status                                     {r['status_s']:7.2f} s   "
                  f"({r['status_lines']:.0f} lines, {r['status_stdout_kb']:.0f} kB)")
            print(f"  fleet status --json                              {r['status_json_s']:7.2f} s")
            print(f"  fleet report                                     {r['report_s']:7.2f} s")
            print(f"  fleet grade (regrade every attempt)              {r['grade_s']:7.2f} s")
            print(f"  floor of grade: the grading alone, in-process    {r['grading_alone_s']:7.2f} s "
                  f"(+ the load floor: {r['load_s'] + r['grading_alone_s']:.2f} s)", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    big = [r for r in rows if r["cells"] >= 10_000]
    for r in big:
        over = [k for k in ("grade_s", "status_s", "report_s") if float(r[k]) >= LIMIT_S]  # type: ignore[arg-type]
        print(f"{r['cells']:,.0f} cells: " + (f"over {LIMIT_S:.0f} s: {', '.join(over)}" if over
                                               else f"every command under {LIMIT_S:.0f} s"))
    record(args.json or None, "commands", {"rows": rows, "harness": str(HARNESS), "loadavg": list(os.getloadavg()),
                                           "kept": bool(args.keep), "measured_at": utc_now()})


if __name__ == "__main__":
    main()
