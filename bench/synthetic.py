"""Large sweeps built on disk for the benchmarks (bench_dashboard.py, bench_commands.py): planned in memory and
recorded through the real ``SweepWriter``, as a coordinator would record them.

- ``plan``: hosts x items x agents cells, one repetition.
- ``write``: every cell's attempt recorded and graded. By default a small attempt (an ``answer.txt``) with a grade
  from a nightly's mix (``GRADES``; what the dashboard's pages count). With ``results=golden_results(...)``: each
  attempt is a copy of a real attempt folder of ``tests/golden`` (meta.json's fields, every artifact: the answer,
  the transcript, the workspace and its manifest, checks.json, receipt.json, the launcher's records), graded by the
  real grader from those files, as the coordinator grades an attempt after it is recorded.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.core.catalog import Item  # noqa: E402
from harness.grading import Grade  # noqa: E402
from harness.core.records import Artifact, AttemptMeta, AttemptResult, Cell, HostSummary, read_meta  # noqa: E402
from harness.core.sweep import SweepRecord  # noqa: E402
from harness.store import Store  # noqa: E402
from bench.record import setup_without_syncs  # noqa: E402

__all__ = ["GRADES", "GOLDEN", "Golden", "golden_results", "plan", "write"]

GRADES = ("DELIVERED",) * 12 + ("PARTIAL",) * 3 + ("NOTHING",) * 2 + ("CODE_IN_CHAT", "HARNESS_FAILURE", "")
"""A nightly's mix: mostly delivered, a few of every other grade, one in twenty not graded."""

REPO = Path(__file__).resolve().parents[1]
_G = REPO / "tests" / "golden"
GOLDEN: list[tuple[Path, int]] = [
    # (a real attempt folder, how many items in twenty are like it): a nightly's mix again, from real records.
    (_G / "v2/runs/20261201-214544-new/local/07-photo-renamer/builtin/r1/attempt-1", 12),  # DELIVERED, pytest passed
    (_G / "v1/runs/20261201-213416-golden/local/12-explain-only/builtin/r1/attempt-1", 3),  # DELIVERED, an answer
    (_G / "v2/runs/20261201-214544-new/local/27-log-stats/builtin/r1/attempt-1", 3),  # NOTHING, guard stop, check failed
    (_G / "v1-before-agent-kind/runs/20261201-213755-before-failure-code/local/30-roman-numerals/builtin/r1/attempt-1",
     2),  # HARNESS_FAILURE(model_endpoint), from the transcript
]
"""The real attempts a golden sweep is made of (tests/golden/README.md says where each came from)."""

_NOT_ARTIFACTS = ("meta.json", "grade.json", "grades.jsonl")
"""The records the store writes itself: the rest of an attempt folder is what the worker sent."""


@dataclass(frozen=True)
class Golden:
    """One real attempt: its meta.json (read through its model, older versions migrated), every artifact, and the
    deliverable of the item it ran (what the grader needs of the item)."""

    meta: AttemptMeta
    artifacts: list[Artifact]
    deliverable: str


def _golden(folder: Path) -> Golden:
    import json

    meta = read_meta(folder / "meta.json")
    assert isinstance(meta, AttemptMeta), folder
    artifacts = [Artifact.of(str(p.relative_to(folder)), p.read_bytes()) for p in sorted(folder.rglob("*"))
                 if p.is_file() and str(p.relative_to(folder)) not in _NOT_ARTIFACTS]
    sweep_file = next(p for p in folder.parents if (p / "sweep.json").is_file()) / "sweep.json"
    deliverable = json.loads(sweep_file.read_text())["items"][meta.item]["deliverable"]
    return Golden(meta=meta, artifacts=artifacts, deliverable=deliverable)


def golden_results(sweep: SweepRecord) -> Callable[[Cell, int], AttemptResult]:
    """Give each of ``sweep``'s items one of the GOLDEN attempts (in their proportions, by the item's position) and
    its deliverable; returns what ``write(results=...)`` records for a cell: that attempt, named as the cell's."""
    goldens = [_golden(folder) for folder, _ in GOLDEN]
    turns = [g for g, (_, n) in zip(goldens, GOLDEN) for _ in range(n)]
    # Item i takes turn 3i mod 20: the turns are spread, so even ten items have every kind of attempt.
    of_item = {item_id: turns[i * 3 % len(turns)] for i, item_id in enumerate(sweep.items)}
    sweep.items = {i: it.model_copy(update={"deliverable": of_item[i].deliverable}) for i, it in sweep.items.items()}

    def result(cell: Cell, n: int) -> AttemptResult:
        g = of_item[cell.item]
        fields = g.meta.model_dump(exclude={"artifacts", "schema_version", "kind"})
        fields.update(sweep_id=sweep.id, cell_id=cell.id, attempt=1, host=cell.host, agent=cell.agent, item=cell.item,
                      seed=cell.seed, values=cell.values)
        return AttemptResult(**fields, artifacts=g.artifacts)

    return result


def plan(sweep_id: str, label: str, created_at: str, hosts: int, items: int, agents: int) -> SweepRecord:
    """A planned sweep of hosts x items x agents cells (one repetition), hosts ``gpu-NN``, items ``NNN-item``."""
    host_names = [f"gpu-{i:02d}" for i in range(hosts)]
    its = [Item(id=f"{i:03d}-item", number=f"{i:03d}", kind="open", title=f"item {i}", prompt="p" * 200, timeout_s=900)
           for i in range(items)]
    agent_names = [f"agent{a}" for a in range(agents)]
    cells = [Cell(id=Cell.make_id(h, it.id, a, 1), host=h, item=it.id, agent=a, rep=1, seed=1)
             for h in host_names for it in its for a in agent_names]
    summary = HostSummary(name="h", transport="ssh", os="linux", address="a", slots=1, tags=[], model_id="qwen3-coder-30b",
                          model_base_url="http://x/v1", context=32768, max_output=4096)
    return SweepRecord(id=sweep_id, label=label, created_at=created_at, inventory="/inv.toml", prompts="/prompts",
                       harness_commit="bench", hosts={h: summary.model_copy(update={"name": h}) for h in host_names},
                       items={i.id: i for i in its}, cells=cells)


def write(store: Store, sweep: SweepRecord, shift: int = 0,
          results: Callable[[Cell, int], AttemptResult] | None = None) -> None:
    """Record every cell's attempt and its grade with the real SweepWriter, and finish the sweep. Without
    ``results``: a small attempt and a grade from GRADES (``shift`` varies the mix); with it: the attempt it gives
    for each cell (its n-th), graded by the real grader (``harness.coordinator.dispatch.grade_attempt``)."""
    from harness.coordinator.dispatch import grade_attempt

    with setup_without_syncs(), store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        for n, c in enumerate(sweep.cells):
            if results is not None:
                w.record_attempt(sweep, results(c, n))
                grade_attempt(w, sweep, c, 1)
                continue
            w.record_attempt(sweep, AttemptResult(
                sweep_id=sweep.id, cell_id=c.id, attempt=1, status="finished", exit_code=0, host=c.host,
                agent=c.agent, item=c.item, duration_s=30.0 + n % 300,
                artifacts=[Artifact.of("answer.txt", f"answer {c.id}".encode())]))
            g = GRADES[(n * 7 + shift) % len(GRADES)]
            if g:
                w.record_grade(sweep, c.id, 1, Grade(grade=g, outcome="none",  # type: ignore[arg-type]
                                                     failure="model_endpoint" if g == "HARNESS_FAILURE" else ""))
        w.set_status(sweep, "finished")
