"""``fleet settings``: every setting as this command line and environment resolve it, and where each value came
from (docs/settings.md). The same resolution every verb uses (``resolve_settings``), shown instead of acted on.
"""

from __future__ import annotations

import click

from harness.cli.console import console, print_json
from harness.cli.options import (common_broker, common_log_file, common_model_port, common_no_worker_timeout,
                                 common_runs, max_attempts_option, resolve_settings)

__all__ = ["settings_"]


@click.command("settings")
@common_runs
@common_broker
@max_attempts_option("Attempts per cell when the harness fails.")
@common_log_file
@common_no_worker_timeout
@common_model_port
@click.option("--json", "as_json", is_flag=True,
              help="Print {schema_version, settings: [{name, value, from, env, flag}]}.")
def settings_(runs, broker, max_attempts, log_file, no_worker_timeout, model_port, as_json) -> None:
    """Print every setting as this command line and environment resolve it, and where each value came from
    (default, env FLEET_<NAME>, flag --x); secrets redacted. docs/settings.md says what each one means.

    \b
    Examples:
      fleet settings
      fleet settings --broker redis://127.0.0.1:6379/0 --json
    """
    settings = resolve_settings(runs=runs, broker_url=broker, max_attempts=max_attempts, log_file=log_file,
                                no_worker_timeout_s=no_worker_timeout, model_port=model_port)
    if as_json:
        from harness.views.jsonout import settings_json

        print_json(settings_json(settings))
        return
    table: list[tuple[str, str, str]] = [("setting", "value", "from"), *((n, v or "-", o) for n, v, o in settings.rows())]
    widths = [max(len(r[i]) for r in table) for i in range(2)]
    for name, value, origin in table:
        console.print(f"{name:<{widths[0]}}  {value:<{widths[1]}}  {origin}", markup=False, soft_wrap=True)
    queue = (f"embedded (SQLite under {settings.queue_dir}, a worker inside fleet)" if settings.embedded
             else settings.shown("broker_url"))
    console.print(f"queue: {queue}", markup=False, soft_wrap=True)
