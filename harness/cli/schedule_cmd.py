"""``fleet schedule list``, ``run`` and ``service``: sweeps that run themselves (docs/schedules.md). Beat and the
coordinator service are two processes, so both need Redis; ``list`` only reads the schedules file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from harness.cli.console import console, err_console, print_json
from harness.cli.options import common_broker, common_log_file, common_runs, resolve_settings
from harness.core.errors import UsageError, one_line

if TYPE_CHECKING:
    from harness.core.settings import Settings

__all__ = ["schedule"]


@click.group()
def schedule() -> None:
    """Sweeps that run themselves: schedules.toml, beat, the coordinator service (docs/schedules.md)."""


common_schedules = click.option("--file", "-f", "file", default="schedules.toml", show_default=True,
                                help="The schedules file (docs/schedules.md).")


def _schedule_settings(runs: str | None, broker: str | None, log_file: str | None = None) -> "Settings":
    settings = resolve_settings(runs=runs, broker_url=broker, log_file=log_file)
    if settings.embedded:
        raise UsageError("fleet schedule needs Redis (--broker or FLEET_BROKER_URL): the embedded broker lives inside "
                         "one fleet process, and beat and the coordinator service are two")
    return settings


@schedule.command("list")
@common_schedules
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with a schema_version.")
def schedule_list(file, as_json) -> None:
    """Check the schedules file and print each schedule with its next fire time, e.g. `fleet schedule list -f
    inventory/schedules.example.toml`.

    \b
    Examples:
      fleet schedule list -f inventory/schedules.example.toml
      fleet schedule list -f schedules.toml --json
    """
    from harness.schedule.config import load_schedules, next_fire, schedules_json

    parsed = load_schedules(file)
    rows = [(s, next_fire(s)) for s in parsed.schedules.values()]
    if as_json:
        print_json(schedules_json(parsed, rows))
        return
    table = [("schedule", "when", "next fire", "label", "on late")]
    table += [(s.name, s.when(), n.strftime("%Y-%m-%d %H:%M:%S %Z"), s.label or "-", s.on_late) for s, n in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for row in table:
        console.print(one_line("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip()), markup=False,
                      soft_wrap=True)


@schedule.command("run")
@common_schedules
@click.option("--state", default=None, help="Beat's state file (default: <runs>/.schedules/beat-state).")
@click.option("--loglevel", default="INFO", show_default=True, help="Beat's log level.")
@common_runs
@common_broker
def schedule_run(file, state, loglevel, runs, broker) -> None:
    """Run Celery beat: each schedule's fire goes to the control queue, where `fleet schedule service` runs the
    sweep. Needs Redis, e.g. `fleet schedule run -f schedules.toml --broker redis://127.0.0.1:6379/0`.

    \b
    Examples:
      fleet schedule run -f schedules.toml --broker redis://127.0.0.1:6379/0
    """
    from harness.schedule import load_schedules
    from harness.schedule.beat import run_beat

    parsed = load_schedules(file)
    settings = _schedule_settings(runs, broker)
    err_console.print(f"fleet schedule run: {len(parsed.schedules)} schedule(s) from {parsed.path}; "
                      f"{settings.one_line('coordinator')}", markup=False, soft_wrap=True)
    run_beat(parsed, settings, Path(state) if state else settings.runs / ".schedules" / "beat-state", loglevel)


@schedule.command("service")
@common_runs
@common_broker
@common_log_file
def schedule_service(runs, broker, log_file) -> None:
    """The coordinator service: run each fired schedule's sweep, its report, comparison and notification; resume
    a sweep a stopped service left. Needs Redis, e.g. `fleet schedule service --broker redis://127.0.0.1:6379/0`.

    \b
    Examples:
      fleet schedule service --broker redis://127.0.0.1:6379/0 --log-file /var/log/fleet/service.log
    """
    from harness.schedule.service import Service, line_logger

    settings = _schedule_settings(runs, broker, log_file)
    say = line_logger(settings.log_file)
    say(f"fleet schedule service: {settings.one_line('coordinator')}")
    Service(settings, say=say).serve()
