"""What several ``fleet`` commands take alike: the shared options (``--runs``, ``--broker``, ``-i``, ...), the
parsing of comma-separated names, and the settings and store a command works with.

Apart from the commands so that an option means, says and defaults the same on every verb that has it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable

import click

from harness.core.errors import UsageError

if TYPE_CHECKING:
    from harness.core.settings import Settings
    from harness.store import Store

__all__ = ["common_runs", "common_broker", "common_inventory", "common_log_file", "common_verbose",
           "common_fail_on", "common_sweep_json", "recorded_inventory",
           "common_no_worker_timeout", "common_model_port", "max_attempts_option", "csv_names", "listed",
           "resolve_settings", "open_store"]

common_runs = click.option("--runs", "runs", default=None, help="Results directory (default: $FLEET_RUNS or ./runs).")
common_broker = click.option(
    "--broker", default=None, help="Broker URL, e.g. redis://host:6379/0 (default: $FLEET_BROKER_URL, else embedded)."
)
common_inventory = click.option(
    "--inventory", "-i", default=None, help="Inventory TOML (default: the embedded inventory/local.toml)."
)
common_log_file = click.option(
    "--log-file", "log_file", default=None, help="Append the log to this file (default: $FLEET_LOG_FILE)."
)
common_verbose = click.option("--verbose", "-v", is_flag=True, help="Log to stderr (the resolved settings first).")


common_no_worker_timeout = click.option(
    "--no-worker-timeout", "no_worker_timeout", default=None, metavar="S",
    help="On Redis: give up on a host's cells as HARNESS_FAILURE(no_worker) when no worker consumed its queue for S "
         "seconds (default: $FLEET_NO_WORKER_TIMEOUT, else wait for one, warning every 30 s).")


common_fail_on = click.option(
    "--fail-on", "fail_on", default=None, metavar="GRADES",
    help="Exit 4 when a cell's grade is one of these, e.g. HARNESS_FAILURE,PARTIAL,NOTHING (for CI gating).")
common_sweep_json = click.option(
    "--json", "as_json", is_flag=True,
    help="Print one JSON object: {schema_version, sweep, path, status, cells} (docs/commands.md).")
recorded_inventory = click.option(
    "--inventory", "-i", default=None,
    help="Inventory TOML (default: the one the sweep recorded, by absolute path; a change since is warned about).")
common_model_port = click.option(
    "--model-port", "model_port", default=None, metavar="PORT",
    help="Serve the scripted model (the embedded default's) on PORT instead of the inventory's base_url port; "
         "without it a busy port is replaced by a free one (default: $FLEET_MODEL_PORT).")


def max_attempts_option(help_text: str) -> Callable[[Any], Any]:
    # No click default: an absent flag leaves the setting's own default (harness/core/settings.py) in force.
    return click.option("--max-attempts", "max_attempts", type=int, default=None, help=f"{help_text}  [default: 3]")


def csv_names(value: str | None) -> list[str] | None:
    """A comma-separated value's non-empty names; None when none was given or it names nothing."""
    if value is None:
        return None
    parts = [v.strip() for v in value.split(",") if v.strip()]
    return parts or None


def listed(flag: str, value: str | None) -> list[str] | None:
    """A comma-separated option's names. Given but naming nothing (``--items ""``, ``--items ,``) or with an
    empty name in it (``--hosts a,``, a stray comma from a script) is refused: taken as "all" or as "a", it
    would run what the caller did not ask for."""
    if value is None:
        return None
    parts = [v.strip() for v in value.split(",")]
    if not any(parts):
        raise UsageError(f"{flag} {value!r}: names nothing")
    if not all(parts):
        raise UsageError(f"{flag} {value!r}: an empty name (a stray comma?)")
    # A name given twice counts once (--agents x,x listed x twice in hosts check's agents_counted).
    return list(dict.fromkeys(parts))


def resolve_settings(**options: object) -> "Settings":
    """The settings of this command: defaults < FLEET_* variables < the flags given (harness/core/settings.py)."""
    from harness.core.settings import Settings

    return Settings.resolve(options, os.environ)


def open_store(runs: str | None) -> "Store":
    """The results directory's store, for the commands that only read or regrade it."""
    from harness.store import Store

    return Store(resolve_settings(runs=runs).runs)
