"""``fleet dashboard``: the results directory in a browser (docs/dashboard.md), served, or one sweep's pages
exported as static HTML with ``--export``.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from harness.cli.console import console
from harness.cli.options import common_runs, open_store
from harness.core.errors import UsageError

__all__ = ["dashboard"]


@click.command()
@common_runs
@click.option("--host", "bind", default="127.0.0.1", show_default=True,
              help="Address to listen on (loopback by default: the dashboard serves every stored transcript).")
@click.option("--port", type=click.IntRange(0, 65535), default=8780, show_default=True, help="Port to listen on.")
@click.option("--token", default=None, help="Allow grade overrides to whoever gives this token (default: "
              "$FLEET_DASHBOARD_TOKEN; without one the dashboard is read-only). The variable keeps it out of ps.")
@click.option("--export", "export_dir", default=None, metavar="DIR",
              help="Write one sweep's pages as static HTML into DIR and exit (to publish a nightly).")
@click.option("--sweep", "sweep_id", default=None, help="The sweep --export writes (default: the latest).")
def dashboard(runs, bind, port, token, export_dir, sweep_id) -> None:
    """Serve the results directory in a browser: sweeps and their trend, a sweep's matrix (live while it runs),
    a cell's story, compare, replays, hosts, and grade overrides with the token (docs/dashboard.md).

    \b
    Examples:
      fleet dashboard
      FLEET_DASHBOARD_TOKEN=s3cret fleet dashboard --port 8780
      fleet dashboard --export site/ --sweep 20261204-031500-nightly
    """
    store = open_store(runs)
    token = token if token is not None else os.environ.get("FLEET_DASHBOARD_TOKEN") or None
    if export_dir is not None:
        from harness.dashboard.export import export_sweep

        written = export_sweep(store, sweep_id or store.latest_sweep(), Path(export_dir))
        console.print(f"wrote {written.pages} page(s) and {written.files} file(s) of {written.sweep} to {export_dir}", markup=False)
        return
    if sweep_id is not None:
        raise UsageError("--sweep goes with --export (the server shows every sweep)")
    from harness.dashboard.serve import serve

    serve(store.root, bind, port, token)
