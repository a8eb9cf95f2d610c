"""The ``--json`` objects the ``fleet`` command builds itself, each from the records it shows; the CLI only prints them.

One version for them all, ``CLI_JSON_SCHEMA_VERSION``; the records printed whole (``fleet compare``, ``fleet sweeps``,
``fleet show``, an override, replay's lines) carry their own. Apart from the views that draw the same records for a
terminal (progress.py's table, labels.py) because these objects are a contract with scripts and CI jobs: keys are
only ever added, and a change of meaning gets a new version.

- ``sweep_json``: ``fleet sweep``, ``rerun``, ``resume``, ``status`` and ``grade`` with ``--json`` (docs/commands.md);
- ``plan_json``: ``fleet sweep --dry-run --json``;
- ``settings_json``: ``fleet settings --json`` (docs/settings.md);
- ``hosts_check_json``: ``fleet hosts check --json`` (docs/inventory.md, Checking the hosts).

``fleet schedule list --json`` is built beside the schedules it lists (``harness.schedule.config.schedules_json``),
with this version.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from harness.core.settings import setting_specs
from harness.views.labels import table_label

if TYPE_CHECKING:
    from harness.coordinator.hostcheck import HostCheck
    from harness.core.catalog import Catalog
    from harness.core.inventory import Inventory
    from harness.core.settings import Settings
    from harness.core.sweep import SweepRecord

__all__ = ["CLI_JSON_SCHEMA_VERSION", "sweep_json", "plan_json", "settings_json", "hosts_check_json"]

CLI_JSON_SCHEMA_VERSION: Final = 1
"""The version of the --json objects built here (sweep, status, rerun, resume, grade, --dry-run, settings, hosts
check, schedule list). Keys are only ever added; a change of meaning gets a new version."""


def sweep_json(sweep: SweepRecord, path: Path, live: bool) -> dict[str, Any]:
    """``{schema_version, sweep, path, status, cells}``: a sweep and each cell's last attempt; ``live``: a coordinator
    is writing the sweep (a cell it still runs is ``running``, else ``abandoned``, as in the table)."""
    cells = []
    for c in sweep.cells:
        last = sweep.last(c.id)
        cells.append(
            {
                "id": c.id, "host": c.host, "item": c.item, "agent": c.agent, "rep": c.rep,
                "attempts": len(sweep.attempts.get(c.id) or []),
                "status": last.status if last else "pending",
                "reason": last.reason if last else "",
                "exit_code": last.exit_code if last else None,
                "grade": last.grade if last else "",
                "failure": last.failure if last else "",
                "override": last.override if last else "",
                "label": table_label(last, live)[0],  # what the table shows (the receipt's outcome is in grade.json)
                "rerun": sweep.rerun_of(c.id) is not None,
            }
        )
    return {"schema_version": CLI_JSON_SCHEMA_VERSION, "sweep": sweep.id, "path": str(path), "status": sweep.status,
            "cells": cells}


def plan_json(inv: Inventory, cat: Catalog, planned: SweepRecord) -> dict[str, Any]:
    """``{schema_version, inventory, prompts, cells}``: the cells a sweep would have, and the inputs they came from."""
    cells = [{"id": c.id, "host": c.host, "item": c.item, "agent": c.agent, "rep": c.rep} for c in planned.cells]
    return {"schema_version": CLI_JSON_SCHEMA_VERSION, "inventory": inv.path, "prompts": cat.root, "cells": cells}


def settings_json(settings: Settings) -> dict[str, Any]:
    """``{schema_version, settings: [{name, value, from, env, flag}]}``: every setting, secrets redacted."""
    rows = [{"name": s.name, "value": settings.shown(s.name), "from": settings.origin(s.name), "env": s.env,
             "flag": s.flag} for s in setting_specs()]
    return {"schema_version": CLI_JSON_SCHEMA_VERSION, "settings": rows}


def hosts_check_json(inv: Inventory, counted: list[str] | None, results: list[HostCheck]) -> dict[str, Any]:
    """``{schema_version, inventory, agents_counted, hosts, ready, not_ready}``: each host's checks, and which hosts
    are ready for a sweep (and why the others are not)."""
    return {"schema_version": CLI_JSON_SCHEMA_VERSION, "inventory": str(inv.path), "agents_counted": counted,
            "hosts": [r.as_dict() for r in results], "ready": [r.host for r in results if r.ok],
            "not_ready": {r.host: r.why for r in results if not r.ok}}
