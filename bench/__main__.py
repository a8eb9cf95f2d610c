"""``python -m bench``: run every benchmark, one after the other, and print what each measured.

Each benchmark is its own script (bench/README.md says what it measures and beside which baseline or floor);
this runs them in turn as separate processes, so one's memory and threads never weigh on the next, records their
figures in ``bench/results.json`` (``--json``), and ends with a table of each one's exit status and wall time, then
the table of issue 14's goals, each figure beside its floor or baseline (``bench/goals.py``). Benchmarks are never tests: run this by hand, on a quiet machine, after a change that may move a
figure, and copy the figures into bench/README.md.

    python -m bench                 # everything (about 10 minutes on the 2-core development machine, 4 of them the
                                    # 10,000-cell sweep of bench_scale; a minute and a half more the first time,
                                    # when bench_commands builds the sweeps it then keeps, see CACHED)
    python -m bench --only ssh,gap  # some of them
    python -m bench --quick         # smaller sizes, for a first look (bench/README.md's figures use the defaults)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"

# name -> (script, its arguments, the smaller arguments of --quick); "{json}" is the results file.
BENCHES: dict[str, tuple[str, list[str], list[str]]] = {
    "ssh": ("bench_ssh.py", ["--runs", "50", "--json", "{json}"], ["--runs", "20", "--json", "{json}"]),
    "gap": ("bench_gap.py", ["--cells", "10", "--json", "{json}"], ["--cells", "4", "--json", "{json}"]),
    "dispatch": ("bench_dispatch.py", ["--cells", "40", "--slots", "2", "--json", "{json}"], ["--cells", "10", "--slots", "2"]),
    "attempt": ("bench_attempt.py", ["--attempts", "40", "--cells", "20", "--json", "{json}"],
                ["--attempts", "10", "--cells", "5"]),
    "makespan": ("bench_makespan.py", ["--json", "{json}"], ["--hosts", "3", "--items", "5"]),
    "blobs": ("bench_blobs.py", ["--json", "{json}"], ["--mb", "1"]),
    "scale": ("bench_scale.py", ["--cells", "10000", "--hosts", "40", "--json", "{json}"], ["--cells", "1000", "--hosts", "20"]),
    "store": ("bench_store.py", ["--json", "{json}"], ["--sizes", "1000,10000", "--json", "{json}"]),
    "many_files": ("bench_many_files.py", ["--json", "{json}"], ["--sizes", "1000", "--baseline-max", "1000"]),
    "replay": ("bench_replay.py", ["--json", "{json}"], ["--sessions", "100", "--json", "{json}"]),
    "dashboard": ("bench_dashboard.py", ["--json", "{json}"], ["--cells", "1000", "--sweeps", "100", "--repeat", "2"]),
    "startup": ("bench_startup.py", ["--runs", "15", "--json", "{json}"], ["--runs", "5"]),
    "commands": ("bench_commands.py", ["--json", "{json}", "--keep", "{cache:commands}"], ["--sizes", "1000", "--repeat", "1"]),
}

CACHED: dict[str, tuple[str, ...]] = {
    "commands": ("bench/synthetic.py", "bench/bench_commands.py", "harness/store", "harness/core/records.py",
                 "harness/core/sweep.py", "harness/grading", "harness/core/transcript.py", "harness/core/catalog.py",
                 "tests/golden"),
}
"""What a benchmark's kept setup is built from: the sweeps bench_commands writes (a minute and a half for 10,000
cells) are kept under ~/.cache/fleet-harness/bench/ and used again while none of these changed."""


def cache_dir(name: str) -> str:
    """The folder a benchmark keeps its setup in, named by a hash of what the setup is built from."""
    import hashlib

    repo = HERE.parent
    h = hashlib.sha256()
    for top in CACHED[name]:
        paths = [repo / top] if (repo / top).is_file() else sorted(p for p in (repo / top).rglob("*") if p.is_file())
        for path in paths:
            h.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes())
    folder = Path.home() / ".cache" / "fleet-harness" / "bench" / f"{name}-{h.hexdigest()[:16]}"
    for old in folder.parent.glob(f"{name}-*") if folder.parent.is_dir() else ():
        if old != folder:  # built from what has changed since: never used again (hundreds of MB each)
            import shutil

            shutil.rmtree(old, ignore_errors=True)
    return str(folder)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help=f"comma-separated names: {', '.join(BENCHES)}")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (figures not for bench/README.md)")
    ap.add_argument("--json", default=str(RESULTS), help="where the figures go (default: bench/results.json)")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown benchmark {unknown[0]!r} (benchmarks: {', '.join(BENCHES)})")
    rows: list[tuple[str, int, float]] = []
    for name in names:
        script, full, quick = BENCHES[name]
        argv_ = [cache_dir(a[len("{cache:"):-1]) if a.startswith("{cache:") else a.replace("{json}", args.json)
                 for a in (quick if args.quick else full)]
        print(f"== {name}: {script} {' '.join(argv_)}", flush=True)
        start = time.monotonic()
        rc = subprocess.run([sys.executable, str(HERE / script), *argv_]).returncode
        rows.append((name, rc, time.monotonic() - start))
    print("\nbenchmark    exit  wall")
    for name, rc, wall in rows:
        print(f"{name:<12} {rc:>4}  {wall:6.1f} s")
    print(f"{'all':<12} {'':>4}  {sum(w for _, _, w in rows):6.1f} s")
    if not args.quick:
        from bench.goals import table

        try:
            results = json.loads(Path(args.json).read_text())
        except (OSError, ValueError):
            results = {}
        print("\n" + table(results if isinstance(results, dict) else {}))
    return 0 if all(rc == 0 for _, rc, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
