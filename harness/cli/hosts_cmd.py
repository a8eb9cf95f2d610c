"""``fleet hosts check``, ``prepare`` and ``clean``: the fleet's hosts before and after sweeps (docs/inventory.md,
docs/retention.md). Each works on the inventory's chosen hosts side by side and exits 1 when one is not ready or
failed, after every host's line is printed.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from harness.cli.console import console, print_json, size_text
from harness.cli.options import common_inventory, listed
from harness.core.errors import InfrastructureError, UsageError, one_line

if TYPE_CHECKING:
    from rich.table import Table

    from harness.coordinator.hostcheck import HostCheck
    from harness.core.inventory import Host, Inventory

__all__ = ["hosts"]


@click.group()
def hosts() -> None:
    """Look at the fleet's hosts."""


@hosts.command("check")
@common_inventory
@click.option("--hosts", "names", help="Comma-separated host names (default: all).")
@click.option("--agents", "agents", help="Comma-separated agent names the sweep will use: only these count towards "
              "a host being ready (default: none; a missing agent is shown, the host stays ready).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: hosts, ready, not_ready.")
def hosts_check(inventory, names, agents, as_json) -> None:
    """Per host: SSH reachable, host key matches the pin, model endpoint answers /v1/models, free disk, agents;
    a closing line names the hosts that are not ready and why. Exit 1 if any is not ready.

    \b
    Examples:
      fleet hosts check -i fleet.toml
      fleet hosts check -i fleet.toml --hosts tower1,mac --agents builtin,opencode --json
    """
    from harness.coordinator.hostcheck import check_hosts, summary_line
    from harness.core.inventory import load_inventory

    inv = load_inventory(inventory)
    chosen = inv.select(listed("--hosts", names))
    counted = _counted_agents(inv, chosen, listed("--agents", agents))
    results = check_hosts(chosen, counted)
    if as_json:
        from harness.views.jsonout import hosts_check_json

        print_json(hosts_check_json(inv, counted, results))
    else:
        console.print(_hosts_check_table(f"hosts in {inv.path}", results))
        # The table may fold a long value; this line is never cut (soft_wrap), so what to fix is always whole.
        console.print(summary_line(results), markup=False, soft_wrap=True)
    if not all(r.ok for r in results):
        sys.exit(1)


def _counted_agents(inv: "Inventory", chosen: list["Host"], agents: list[str] | None) -> list[str] | None:
    """--agents as given, each checked to be some chosen host's agent (a typo would otherwise count for nothing)."""
    if not agents:
        return None
    known = {a for h in chosen for a in h.agents}
    unknown = [a for a in agents if a not in known]
    if unknown:
        raise UsageError(f"--agents: no chosen host of {inv.path} has agent {unknown[0]!r} "
                         f"(they have: {', '.join(sorted(known)) or 'none'})")
    return agents


def _hosts_check_table(title: str, results: list["HostCheck"]) -> "Table":
    """The hosts table. Every column folds instead of cutting: a fingerprint, a model id or an error must be
    read whole (a host key mismatch is fixed by comparing two SHA256 strings)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(title))
    for col in ("host", "ok", "ssh", "host key", "model /v1/models", "disk free", "agents"):
        t.add_column(col, overflow="fold")
    for r in results:
        cells = (r.host, "yes" if r.ok else "no", r.ssh, r.host_key, r.model,
                 f"{r.disk_free_mb} MB" if r.disk_free_mb is not None else "?",
                 ", ".join(f"{k}: {v}" for k, v in r.agents.items()))
        # Text from the host (an error, a version line) is shown as it is, never read as rich markup.
        t.add_row(*(escape(one_line(c)) for c in cells), style=None if r.ok else "red")
    return t


@hosts.command("prepare")
@common_inventory
@click.option("--hosts", "names", help="Comma-separated host names (default: all).")
def hosts_prepare(inventory, names) -> None:
    """Install this harness (this exact code) into a virtual environment on each host, if not there yet.

    \b
    Examples:
      fleet hosts prepare -i fleet.toml
      fleet hosts prepare -i fleet.toml --hosts tower1
    """
    from concurrent.futures import ThreadPoolExecutor

    from harness.core.inventory import load_inventory
    from workers.install import ensure_harness, source_release
    from workers.transport import connect_for

    inv = load_inventory(inventory)
    chosen = inv.select(listed("--hosts", names))
    release = source_release()

    def prepare(host):
        t = connect_for(host)
        try:
            return host.name, True, ensure_harness(t, host, release)
        except InfrastructureError as exc:
            return host.name, False, str(exc)
        finally:
            t.close()

    with ThreadPoolExecutor(max_workers=min(8, len(chosen))) as pool:
        results = list(pool.map(prepare, chosen))
    for name, ok, text in results:
        console.print(f"{name}: {'ready' if ok else 'FAILED'} {text}", markup=False, soft_wrap=True)
    console.print(f"release {release.id}", markup=False)
    if not all(ok for _, ok, _ in results):
        sys.exit(1)


@hosts.command("clean")
@common_inventory
@click.option("--hosts", "names", help="Comma-separated host names (default: all).")
@click.option("--keep-attempts-days", "keep_days", type=click.FloatRange(min=0), default=14.0, show_default=True,
              metavar="D", help="Remove attempt folders untouched for D days (0: every one that is not running).")
@click.option("--dry-run", "dry_run", is_flag=True, help="List what would be removed, and remove nothing.")
def hosts_clean(inventory, names, keep_days, dry_run) -> None:
    """Remove old harness releases (every one but this harness's, one being installed or in use) and attempt
    folders older than D days (never one whose attempt is running) from each host's work dir (docs/retention.md).

    Example: `fleet hosts clean -i fleet.toml --hosts tower1,tower2 --keep-attempts-days 7 --dry-run`."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.coordinator.hostclean import clean_host
    from harness.core.inventory import load_inventory
    from workers.install import source_release
    from workers.transport import connect_for

    inv = load_inventory(inventory)
    chosen = inv.select(listed("--hosts", names) if names is not None else None)
    release = source_release().id

    def clean(host):
        t = connect_for(host)
        try:
            return host.name, clean_host(t, host, release, keep_days, dry_run), ""
        except InfrastructureError as exc:
            return host.name, None, str(exc)
        finally:
            t.close()

    with ThreadPoolExecutor(max_workers=min(8, len(chosen))) as pool:
        results = list(pool.map(clean, chosen))
    verb = "would remove" if dry_run else "removed"

    def say(text: str) -> None:
        console.print(one_line(text), markup=False, soft_wrap=True)

    for name, report, error in results:
        if report is None:
            say(f"{name}: FAILED {error}")
            continue
        for r in report.releases:
            say(f"{name}: {verb} release {r.path} ({size_text(r.size)})")
        for r in report.attempts:
            say(f"{name}: {verb} attempt folder {r.path} ({size_text(r.size)})")
        for path, why in report.kept:
            say(f"{name}: kept {path}: {why}")
        for note in report.notes:
            say(f"{name}: {note}")
        if report.trash:
            say(f"{name}: finished an interrupted clean: {size_text(report.trash)}")
        total = (f"{len(report.releases)} release(s) and {len(report.attempts)} attempt folder(s), "
                 f"{size_text(report.freed)}")
        say(f"{name}: would free {total} (dry run: nothing removed)" if dry_run else f"{name}: cleaned {total} freed")
    console.print(f"current release {release}", markup=False)
    if any(report is None for _, report, _ in results):
        sys.exit(1)
