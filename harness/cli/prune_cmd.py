"""``fleet prune``: remove old sweeps from the results directory, never one that is running (docs/retention.md).
What is removed, and how a prune cut short is finished, is ``harness.store.prune``'s; this prints it.
"""

from __future__ import annotations

import click

from harness.cli.console import console, size_text, warn
from harness.cli.options import common_runs, open_store
from harness.core.errors import UsageError, one_line

__all__ = ["prune_"]


@click.command("prune")
@click.option("--keep", type=int, default=None, metavar="N", help="Keep the newest N sweeps (of --label), remove the rest.")
@click.option("--older-than", "older_than", default=None, metavar="AGE",
              help="Remove the sweeps created longer than AGE ago: 30d, 12h, 90m, 2w (with --keep: both must hold).")
@click.option("--label", default=None, help="Only the sweeps with this label.")
@click.option("--dry-run", "dry_run", is_flag=True, help="List what would be removed, and remove nothing.")
@common_runs
def prune_(keep, older_than, label, dry_run, runs) -> None:
    """Remove old sweeps from the results directory (their folders and their index rows), never one that is
    running; print each one removed and the space freed (docs/retention.md).

    Examples: `fleet prune --keep 30`; `fleet prune --older-than 30d --label nightly --dry-run`."""
    from harness.store.prune import parse_age, prune

    if keep is not None and keep < 0:
        raise UsageError(f"--keep {keep}: must be 0 or more")
    age = parse_age(older_than) if older_than is not None else None
    result = prune(open_store(runs), keep=keep, older_than=age, label=label, dry_run=dry_run)
    for line in result.skipped:
        warn(one_line(line))
    verb = "would remove" if dry_run else "removed"
    for p in result.removed:
        say = f"{verb} {p.id} (label {p.label or '-'}, created {p.created_at[:16].replace('T', ' ')}, {size_text(p.size)})"
        console.print(one_line(say), markup=False, soft_wrap=True)
    for sweep_id in result.kept_running:
        console.print(one_line(f"kept {sweep_id}: it is running (or being written)"), markup=False, soft_wrap=True)
    if result.finished_trash:
        console.print(f"finished an interrupted prune: {size_text(result.finished_trash)}", markup=False)
    total = f"{len(result.removed)} sweep(s), {size_text(result.freed)}"
    console.print(f"would prune {total} (dry run: nothing removed)" if dry_run else f"pruned {total} freed",
                  markup=False, soft_wrap=True)
