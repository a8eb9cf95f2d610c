"""``fleet grade`` (regrade stored attempts, or a reviewer's ``--override`` of one) and ``fleet report`` (REPORT.md,
junit.xml, results.json): what is made of a sweep's results after it ran, without running anything.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from harness.cli.console import console, err_console
from harness.cli.options import common_runs, open_store
from harness.cli.sweep_cmd import print_sweep
from harness.core.errors import UsageError, one_line

if TYPE_CHECKING:
    from harness.store import Store

__all__ = ["grade", "report"]


@click.command()
@click.argument("sweep_id")
@click.option("--host", default=None, help="Only this host's cells.")
@click.option("--item", default=None, help="Only this item's cells (number or id).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: the sweep's, as `fleet status --json`; with --override the override record.")
@click.option("--override", "override", default=None, metavar="GRADE",
              help="A reviewer's grade for one cell (--host and --item, with --agent and --rep when needed), counted "
              "in place of the automatic one, which stays; needs --reason and --author (docs/grading.md, Overrides).")
@click.option("--reason", default=None, help="Why the override (required with --override).")
@click.option("--author", default=None, help="Who gives the override (required with --override).")
@click.option("--agent", default=None, help="With --override: the cell's agent, when the sweep has several.")
@click.option("--rep", type=int, default=None, help="With --override: the cell's repetition, when it has several.")
@click.option("--attempt", type=int, default=None, help="With --override: the attempt (default: the last recorded).")
@common_runs
def grade(sweep_id, host, item, as_json, override, reason, author, agent, rep, attempt, runs) -> None:
    """Regrade stored attempts without rerunning anything; every earlier grade is kept in grades.jsonl. With
    --override: a reviewer's grade of one cell's attempt instead, with its reason and author.

    \b
    Examples:
      fleet grade 20261204-031500-nightly
      fleet grade 20261204-031500-nightly --host tower1 --item 07
      fleet grade 20261204-031500-nightly --host tower1 --item 07 --override PARTIAL --reason 'renames only half' --author ana
    """
    from harness.coordinator.regrade import regrade
    store = open_store(runs)
    if override is not None:
        _override(store, sweep_id, host, item, agent, rep, attempt, override, reason, author, as_json)
        return
    extra = [name for name, value in (("--reason", reason), ("--author", author), ("--agent", agent),
                                      ("--rep", rep), ("--attempt", attempt)) if value is not None]
    if extra:
        raise UsageError(f"{', '.join(extra)}: only with --override GRADE (a regrade takes --host and --item)")
    rec = store.load_sweep(sweep_id)
    cells = rec.cells_matching(host, item)
    if not cells:
        raise UsageError(f"sweep {sweep_id} has no cell for host {host!r} and item {item!r}")
    n = regrade(store, rec, [(c, a.attempt) for c in cells for a in rec.attempts.get(c.id) or [] if a.status != "dispatched"])
    if not as_json:
        err_console.print(f"regraded {n} attempt(s)", markup=False)
    print_sweep(rec, store, as_json)


def _override(store: "Store", sweep_id: str, host: str | None, item: str | None, agent: str | None, rep: int | None,
              attempt: int | None, grade: str, reason: str | None, author: str | None, as_json: bool) -> None:
    """``fleet grade --override``: one reviewer's grade, checked whole before anything is written."""
    from harness.grading.override import check_override_input
    from harness.store import override_grade

    if host is None or item is None:
        raise UsageError("--override grades one cell: give --host and --item (and --agent, --rep when needed)")
    for flag, value in (("--reason", reason), ("--author", author)):
        if value is None:
            raise UsageError(f"--override needs {flag}")
    check_override_input(grade, reason or "", author or "")  # bad input is said before the sweep is read
    cell = store.load_sweep(sweep_id).one_cell(host, item, agent, rep)
    done = override_grade(store, sweep_id, cell.id, attempt, grade, reason or "", author or "")
    if as_json:
        sys.stdout.write(done.model_dump_json(indent=2) + "\n")
        return
    console.print(one_line(f"{cell.id}: {done.grade} by {done.author} (override of {done.automatic or 'ungraded'}, "
                           f"at {done.at}): {done.reason}"), markup=False, soft_wrap=True)


@click.command()
@click.argument("sweep_id", required=False)
@common_runs
def report(sweep_id, runs) -> None:
    """Write REPORT.md, junit.xml and results.json for a sweep (the latest if no id is given).

    \b
    Examples:
      fleet report
      fleet report 20261204-031500-nightly
    """
    from harness.views.report import write_report
    store = open_store(runs)
    sweep_id = sweep_id or store.latest_sweep()
    for path in write_report(store, store.load_sweep(sweep_id)):
        console.print(str(path), markup=False)
