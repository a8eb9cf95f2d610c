"""Issue 14's goals, each as a figure of ``bench/results.json`` beside its floor (or baseline) and its goal.

``python -m bench`` prints this table after the benchmarks ran; ``python -m bench.goals [RESULTS]`` prints it from a
results file alone. A goal whose benchmark has not recorded a figure yet is shown as ``-``, never as met.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GOALS", "Goal", "table"]

Results = dict[str, Any]


@dataclass(frozen=True)
class Goal:
    what: str
    figure: Callable[[Results], str]
    """The figure as shown, from the results (a KeyError or TypeError: not measured yet)."""
    beside: Callable[[Results], str]
    """Its floor or baseline measured in the same run."""
    goal: str
    met: Callable[[Results], bool]


def _row(rows: list[dict], cells: int) -> dict:
    return next(r for r in rows if int(r["cells"]) == cells)


def _cmd(d: Results, name: str) -> float:
    return float(_row(d["commands"]["rows"], 10000)[f"{name}_s"])


def _embedded(d: Results) -> dict:
    return next(r for r in d["dispatch"]["runs"] if r["mode"] == "embedded")


def _store(d: Results, cells: int) -> float:
    return float(_row(d["store"]["rows"], cells)["journal"]["per_attempt_ms"])


def _startup(d: Results, name: str) -> float:
    return float(d["startup"][f"pyc: fleet {name}"]["median_ms"])


GOALS: list[Goal] = [
    Goal("harness time per attempt over SSH, agent `true`, in process",
         lambda d: f"{d['attempt_ssh']['attempt']['median_ms']} ms",
         lambda d: f"{d['attempt_ssh']['floor']['median_ms']} ms raw ({d['attempt_ssh']['ratio']}x)",
         "<= 1.5x", lambda d: d["attempt_ssh"]["ratio"] <= 1.5),
    Goal("the same through Celery (Redis, one `fleet worker`)",
         lambda d: f"{d['attempt_ssh']['sweep']['cycle']['median_ms']} ms",
         lambda d: f"{d['attempt_ssh']['sweep_floor_ms']} ms raw ({d['attempt_ssh']['sweep_ratio']}x)",
         "<= 1.5x", lambda d: d["attempt_ssh"]["sweep_ratio"] <= 1.5),
    Goal("embedded default, per attempt per slot",
         lambda d: f"{_embedded(d)['per_attempt_per_slot_s']} s", lambda d: "-", "<= 0.3 s",
         lambda d: _embedded(d)["per_attempt_per_slot_s"] <= 0.3),
    Goal("6 hosts x 15 mixed items: makespan / busiest host's agent time",
         lambda d: f"{d['makespan']['makespan_over_busiest']} (gap {d['makespan']['mean_gap_s']} s)",
         lambda d: "1.0 (gap 0 s)", "<= 1.05", lambda d: d["makespan"]["makespan_over_busiest"] <= 1.05),
    Goal("10,000 cells through Redis: wall",
         lambda d: f"{d['scale']['large']['wall_s']} s", lambda d: f"1,000 cells: {d['scale']['small']['wall_s']} s",
         "< 600 s", lambda d: d["scale"]["large"]["cells"] >= 10000 and d["scale"]["large"]["wall_s"] < 600),
    Goal("10,000 cells: the coordinator's peak memory",
         lambda d: f"{d['scale']['large']['coordinator_peak_mb']} MB",
         lambda d: f"1,000 cells: {d['scale']['small']['coordinator_peak_mb']} MB", "< 300 MB",
         lambda d: d["scale"]["large"]["cells"] >= 10000 and d["scale"]["large"]["coordinator_peak_mb"] < 300),
    Goal("recording one attempt, 1k -> 100k cells",
         lambda d: f"{_store(d, 1000):.1f} -> {_store(d, 100000):.1f} ms",
         lambda d: f"sweep.json rewritten: {_row(d['store']['rows'], 100000)['snapshot_baseline']['per_attempt_ms']:.0f} ms",
         "flat", lambda d: _store(d, 100000) <= 1.5 * _store(d, 1000)),
    Goal("`fleet grade` of 10,000 cells", lambda d: f"{_cmd(d, 'grade'):.1f} s",
         lambda d: f"grading alone {_cmd(d, 'grading_alone'):.1f} s", "< 10 s", lambda d: _cmd(d, "grade") < 10),
    Goal("`fleet status` of 10,000 cells", lambda d: f"{_cmd(d, 'status'):.1f} s",
         lambda d: f"load alone {_cmd(d, 'load'):.2f} s", "< 10 s", lambda d: _cmd(d, "status") < 10),
    Goal("`fleet report` of 10,000 cells", lambda d: f"{_cmd(d, 'report'):.1f} s",
         lambda d: f"load alone {_cmd(d, 'load'):.2f} s", "< 10 s", lambda d: _cmd(d, "report") < 10),
    Goal("Redis's peak per in-flight 5 MB workspace", lambda d: f"{d['blobs']['redis_peak_mb']} MB",
         lambda d: f"inline base64: {d['blobs']['baseline_inline_redis_peak_mb']} MB", "< 2x the workspace",
         lambda d: d["blobs"]["redis_peak_mb"] < 2 * d["blobs"]["artifact_mb"]),
    Goal("`fleet --version`", lambda d: f"{_startup(d, 'version'):.0f} ms",
         lambda d: f"python -c pass {d['startup']['pyc: python -c pass']['median_ms']:.0f} ms", "< 300 ms",
         lambda d: _startup(d, "version") < 300),
    Goal("`fleet import` of one session", lambda d: f"{_startup(d, 'import'):.0f} ms",
         lambda d: f"the work alone {d['startup']['in-process import']['median_ms']:.0f} ms", "< 300 ms",
         lambda d: _startup(d, "import") < 300),
    Goal("`fleet replay` of one session", lambda d: f"{_startup(d, 'replay'):.0f} ms",
         lambda d: f"the work alone {d['startup']['in-process replay']['median_ms']:.0f} ms", "< 300 ms",
         lambda d: _startup(d, "replay") < 300),
]


def _shown(fn: Callable[[Results], Any], d: Results) -> Any:
    try:
        return fn(d)
    except (KeyError, TypeError, StopIteration, ValueError, ZeroDivisionError):
        return None


def table(results: Results) -> str:
    """The goals table: what, figure, beside it, goal, met (yes / NO / - when not measured)."""
    rows = [("goal", "figure", "beside it, same run", "aim", "met")]
    for g in GOALS:
        figure, beside, met = _shown(g.figure, results), _shown(g.beside, results), _shown(g.met, results)
        rows.append((g.what, figure or "-", beside or "-", g.goal, "-" if met is None else ("yes" if met else "NO")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else Path(__file__).resolve().parent / "results.json"
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"bench.goals: {path}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(results, dict):
        print(f"bench.goals: {path}: not an object of figures", file=sys.stderr)
        return 2
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
