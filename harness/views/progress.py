"""Live progress of a sweep: a bar per host with running / finished / failed counts, then the table."""

from __future__ import annotations

from collections import defaultdict

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.markup import escape
from rich.table import Table

from harness.coordinator.dispatch import Event
from harness.views.labels import table_label
from harness.core.sweep import SweepRecord

__all__ = ["SweepProgress", "matrix_table"]


class SweepProgress:
    """Feeds dispatcher events into rich bars (on a terminal) or one line per result (elsewhere)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description:<12}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("running {task.fields[running]}  finished {task.fields[finished]}  failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
        )
        self.tasks: dict[str, TaskID] = {}
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: {"running": 0, "finished": 0, "failed": 0})

    def start(self, sweep: SweepRecord) -> None:
        per_host: dict[str, int] = defaultdict(int)
        for c in sweep.cells:
            per_host[c.host] += 1
        for host, total in per_host.items():
            self.tasks[host] = self.progress.add_task(host, total=total, running=0, finished=0, failed=0)
            done = sum(1 for c in sweep.cells if c.host == host and (a := sweep.last(c.id)) is not None
                       and a.status != "dispatched" and not a.failure)
            self.progress.update(self.tasks[host], completed=done)
        self.progress.start()

    def stop(self) -> None:
        self.progress.stop()

    def notice(self, text: str) -> None:
        """A line about the sweep as a whole (the queue unreachable, back again): shown above the bars, or on its
        own line; with --json it goes to stderr like the rest of the progress."""
        self.console.print(f"fleet: {text}", markup=False, highlight=False, style="yellow", soft_wrap=True)

    def __call__(self, e: Event) -> None:
        host = e.cell.host
        c = self.counts[host]
        if e.kind == "started":
            c["running"] += 1
        elif e.kind == "recorded" and e.result is not None:
            c["running"] = max(0, c["running"] - 1)
            r = e.result
            harness_failed = r.status == "harness_failure" or e.grade == "HARNESS_FAILURE"
            if harness_failed:
                c["failed"] += 1
            if e.final:
                c["finished"] += 1
                self.progress.advance(self.tasks[host])
            if not self.console.is_terminal:
                detail = f" {r.reason}: {r.error}" if r.status == "harness_failure" else (
                    f" exit {r.exit_code}" if r.status == "finished" else "")
                graded = f" -> {e.grade}" if e.grade else ""
                self.console.print(f"{e.cell.id} attempt {r.attempt}: {r.status}{detail}{graded}", markup=False, highlight=False)
        elif e.kind == "warning":
            self.console.print(f"warning: {e.text}", markup=False, highlight=False, style="yellow")
        elif e.kind == "retry_scheduled" and not self.console.is_terminal:
            self.console.print(f"{e.cell.id}: retrying as attempt {e.attempt} in {e.delay_s:.0f} s", markup=False)
        if host in self.tasks:
            self.progress.update(self.tasks[host], running=c["running"], finished=c["finished"], failed=c["failed"])


def attempts_suffix(attempts: int, rerun: bool) -> str:
    """What a cell's label adds: ``(2 attempts)`` when the harness tried more than once (retries, reruns), with
    ``rerun`` when its latest attempt came from `fleet rerun` (its result is newer than the sweep's)."""
    marks = [f"{attempts} attempts"] if attempts > 1 else []
    marks += ["rerun"] if rerun else []
    return f" ({', '.join(marks)})" if marks else ""


def matrix_table(sweep: SweepRecord, live: bool = True, whole_lines: bool = False) -> Table:
    """Item x host (and agent, when several), each cell listing its repetitions' outcomes (``live``: a
    coordinator still writes the sweep, so an attempt without a result is running, not abandoned; ``whole_lines``:
    for a console that is not a terminal, wide enough for any table's line, where nothing is ever folded).

    Always one orientation, an item per row and a host per column, whatever the counts: a nightly log read
    (or grepped) one night after another has its rows where it had them, and each line starts with its item.
    """
    agents = sorted({c.agent for c in sweep.cells})
    items = list(sweep.items)
    cells: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for c in sweep.cells:
        runner = c.host if len(agents) == 1 else f"{c.host} / {c.agent}"
        text, style = table_label(sweep.last(c.id), live)
        suffix = attempts_suffix(len(sweep.attempts.get(c.id) or []), sweep.rerun_of(c.id) is not None)
        cells[runner][c.item].append(f"[{style}]{escape(text + suffix)}[/]")
    runners = list(cells)
    runner_title = "host" if len(agents) == 1 else "host / agent"
    table = Table(title=f"sweep {sweep.id}", show_lines=False)
    # On a terminal narrower than the table, rich cuts a word that does not fit to "HARNESS_F…" (an 80-column
    # terminal and five hosts did): which grade it was is the table's whole point, so a long word is folded.
    # Where lines are whole (a log, a pipe) a cell is never folded, and rich is told so: working out where each of
    # 10,000 cells would fold took half of the table's time (a second of `fleet status` and `fleet grade`).
    wrap = {"no_wrap": True, "overflow": "ignore"} if whole_lines else {"overflow": "fold"}
    table.add_column(f"item \\ {runner_title}", style="bold", **wrap)
    for runner in runners:
        table.add_column(escape(runner), **wrap)
    for item in items:
        table.add_row(escape(item), *(" ".join(cells[r].get(item, ["-"])) for r in runners))
    return table
