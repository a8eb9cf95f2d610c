"""Results directories for the dashboard's tests, written by the real SweepWriter."""

from __future__ import annotations

from pathlib import Path

from harness.grading.model import Grade, StopRecord
from harness.core.sweep import SweepRecord
from harness.store import Store
from tests.support import finished_result, synthetic_sweep

__all__ = ["sweep_of", "write_sweep", "cid"]


def cid(host: int, item: int, rep: int = 1, agent: str = "builtin") -> str:
    return f"host{host}/{item:02d}-item/{agent}/r{rep}"


def sweep_of(sweep_id: str, *, label: str = "", created_at: str = "", hosts: int = 1, items: int = 3,
             reps: int = 1) -> SweepRecord:
    s = synthetic_sweep(sweep_id, hosts=hosts, items=items, reps=reps)
    s.label = label
    if created_at:
        s.created_at = created_at
    return s


def write_sweep(store: Store, sweep: SweepRecord, grades: dict[str, list[str]], *, finish: bool = True,
                stops: dict[str, str] | None = None) -> SweepRecord:
    """Plan ``sweep`` and record, per cell id, an attempt per grade named ("HF": the attempt itself a harness
    failure; "": finished, not graded); ``stops``: a cell's last grade's guard stop."""
    stops = stops or {}
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        for cell_id, names in grades.items():
            cell = sweep.cell(cell_id)
            for k, g in enumerate(names, start=1):
                if g == "HF":
                    w.record_attempt(sweep, finished_result(sweep, cell, k, status="harness_failure", reason="host_lost",
                                                            exit_code=None))
                    continue
                w.record_attempt(sweep, finished_result(sweep, cell, k, duration_s=2.5 * k))
                if g:
                    stop = StopRecord(reason=stops[cell_id], text="stopped", at_call=3) if cell_id in stops else None
                    w.record_grade(sweep, cell_id, k, Grade(grade=g, outcome="none", stop=stop))  # type: ignore[arg-type]
        if finish:
            w.set_status(sweep, "finished")
    return store.load_sweep(sweep.id)


def runs_of(tmp_path: Path) -> Store:
    return Store(tmp_path / "runs")
