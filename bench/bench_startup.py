"""Start-up cost of the one-shot commands: `fleet --version`, a one-session `fleet import`, a one-session `fleet replay`.

* **figure**: the command's wall time in a fresh process (median and p90 of N runs) and the CPU time it used (median:
  on a shared machine another job's load stretches the wall time more than this), run two ways: the installed
  entry point (`.venv/bin/fleet`) and `python -m harness.cli`, both on this checkout's code (PYTHONPATH);
* **floors**, measured in the same run: the interpreter's own start (`python -c pass`, the same interpreter), and
  the same work done in-process in one warm Python (the version's commit lookup, the import and grading of the
  session, the replay of it), so what is left between a figure and its floors is start-up: imports, building models.

The session is a real recorded fleet session (tests/fixtures/pixel-fleet/photo-renamer-bfb62a2b.json, one run).
Each command runs with the bytecode cache as a user has it (a first run writes it); `--no-pyc` adds the same
commands with this checkout's `__pycache__` removed and PYTHONDONTWRITEBYTECODE=1 (every harness module compiled
from source on each start, as in a shell that sets it).

Run: .venv/bin/python bench/bench_startup.py [--runs 15] [--no-pyc] [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.record import record  # noqa: E402

SESSION = ROOT / "tests" / "fixtures" / "pixel-fleet" / "photo-renamer-bfb62a2b.json"
PYTHON = Path(sys.executable)
# The entry point pip installed beside the interpreter (not a pyenv shim found on PATH).
FLEET = PYTHON.parent / "fleet"


def _stats(ms: list[float], cpu: list[float] | None = None) -> dict[str, float]:
    xs = sorted(ms)
    out = {"median_ms": round(statistics.median(xs), 1), "p90_ms": round(xs[max(0, int(len(xs) * 0.9) - 1)], 1)}
    if cpu is not None:
        out["cpu_median_ms"] = round(statistics.median(cpu), 1)
    return out


def _env(no_pyc: bool) -> dict[str, str]:
    env = dict(os.environ)
    # This checkout's code, whichever checkout the editable install points at.
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if no_pyc:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _drop_pycache() -> None:
    for package in ("harness", "workers"):
        for folder in (ROOT / package).rglob("__pycache__"):
            shutil.rmtree(folder, ignore_errors=True)


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of ``argv`` in a fresh process, in ms. A failing command is no figure.
    The CPU time is there because the machine is shared: another job's load stretches the wall time, hardly this."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"bench_startup: {' '.join(argv)} exited {proc.returncode}: "
                         f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return wall, cpu


def _in_process(work: Callable[[int], None], runs: int) -> list[float]:
    work(-1)  # warm: the first call builds what is built once per process
    out = []
    for n in range(runs):
        start = time.perf_counter()
        work(n)
        out.append((time.perf_counter() - start) * 1000)
    return out


def _commands(scratch: Path) -> dict[str, Callable[[], list[str]]]:
    """Each command's arguments (after the program); each import gets a fresh --out folder (a new import, not a
    replacement of the last one)."""
    fresh = itertools.count()
    return {
        "version": lambda: ["--version"],
        "import": lambda: ["import", "pixel-fleet", str(SESSION), "--out", str(scratch / "imported" / str(next(fresh)))],
        "replay": lambda: ["replay", str(SESSION), "--runs", str(scratch / "runs")],
    }


def _works(scratch: Path) -> dict[str, Callable[[int], None]]:
    """The same work as each command, in this process (the modules imported once, before the clock)."""
    from harness.importers import grade_folder, import_to_folder
    from harness.replay.batch import render_text, run_replay
    from harness.grading.gradefiles import write_grade_files
    from harness.core.version import harness_commit

    def version(n: int) -> None:
        harness_commit.__wrapped__()  # uncached: the git calls a fresh process makes

    def import_(n: int) -> None:
        for folder in import_to_folder("pixel-fleet", SESSION, scratch / "in-process" / str(n)):
            write_grade_files(folder, grade_folder(folder))

    def replay(n: int) -> None:
        with redirect_stdout(io.StringIO()):
            run = run_replay([str(SESSION)], [], [], None, None, scratch / "runs")
            for line in render_text(run, False):
                print(line)

    return {"version": version, "import": import_, "replay": replay}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--no-pyc", dest="no_pyc", action="store_true",
                        help="also measure with no bytecode cache for this checkout (PYTHONDONTWRITEBYTECODE=1)")
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    if not FLEET.exists():
        print(f"bench_startup: no entry point {FLEET}: run `bash .ci/setup` first", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        programs = {"fleet": [str(FLEET)], "python -m harness.cli": [str(PYTHON), "-m", "harness.cli"]}
        commands = _commands(scratch)
        modes = [("pyc", False)] + ([("no pyc", True)] if args.no_pyc else [])
        load_before = Path("/proc/loadavg").read_text().split()[0]
        row: dict[str, object] = {"runs": args.runs, "session": str(SESSION.relative_to(ROOT))}
        lines: list[tuple[str, dict[str, float]]] = []
        for mode, no_pyc in modes:
            env = _env(no_pyc)
            if no_pyc:
                _drop_pycache()
            else:
                for argv in commands.values():  # write the bytecode cache, as a user's first run does
                    _run([*programs["fleet"], *argv()], env, scratch)
            # Every command once per round, beside its floor: a change of the machine's load in the middle of
            # the run weighs on all of them alike.
            runs: dict[str, list[tuple[float, float]]] = {}
            for _ in range(args.runs):
                runs.setdefault("python -c pass", []).append(_run([str(PYTHON), "-c", "pass"], env, scratch))
                for name, argv in commands.items():
                    for label, program in programs.items():
                        runs.setdefault(f"{label} {name}", []).append(_run([*program, *argv()], env, scratch))
            for what, times in runs.items():
                stats = _stats([w for w, _ in times], [c for _, c in times])
                row[f"{mode}: {what}"] = stats
                floor = " (floor: the interpreter's start)" if what == "python -c pass" else ""
                lines.append((f"[{mode}] {what}{floor}", stats))
        works = _works(scratch)
        for name, work in works.items():
            stats = _stats(_in_process(work, args.runs))
            row[f"in-process {name}"] = stats
            lines.append((f"in-process {name} (floor: the work alone, warm)", stats))
        load_after = Path("/proc/loadavg").read_text().split()[0]
        row["load_average"] = f"{load_before} before, {load_after} after"
        from harness.core.records import utc_now

        row["measured_at"] = utc_now()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    width = max(len(text) for text, _ in lines)
    print(f"{'what':<{width}}  wall median    p90  cpu median  ({args.runs} runs; load average {row['load_average']})")
    for text, stats in lines:
        cpu = f"{stats['cpu_median_ms']:10.1f}" if "cpu_median_ms" in stats else " " * 10
        print(f"{text:<{width}}  {stats['median_ms']:11.1f} {stats['p90_ms']:6.1f} {cpu}  ms")
    record(args.json_path, "startup", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
