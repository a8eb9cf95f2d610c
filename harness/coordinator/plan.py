"""Planning: which cells a sweep has. A cell is host x item x agent x repetition."""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from datetime import datetime, timezone

from harness.core.catalog import Catalog, Item, draw_values
from harness.core.errors import UsageError
from harness.core.inventory import Host, Inventory
from harness.core.records import Cell, HostSummary, utc_now
from harness.core.sweep import SweepRecord
from harness.core.version import harness_commit

__all__ = ["plan_sweep", "new_sweep_id"]

MAX_REPEAT = 1000
"""The most repetitions ``--repeat`` may ask for, as ``repetitions`` of a round (harness/core/catalog.py)."""

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def new_sweep_id(label: str) -> str:
    """``YYYYmmdd-HHMMSS-<label>``: sorts by time, says what it was for. Only a proposal: the store's
    ``claim_sweep_id`` makes it unique (``-2``, ``-3``, ...) by creating the sweep's folder."""
    if label and not _LABEL.match(label):
        raise UsageError(f"--label {label!r}: use letters, digits, '.', '_' and '-' (at most 64)")
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S") + "-" + (label or "sweep")


def _agents_for(host: Host, agents: list[str] | None, inventory: Inventory) -> list[str]:
    if not agents:
        return [host.default_agent]
    missing = [a for a in agents if a not in host.agents]
    if missing:
        raise UsageError(
            f"{inventory.path}: hosts.{host.name}.agents has no {missing[0]!r} "
            f"(it has: {', '.join(host.agents)}); choose --hosts that have it"
        )
    return agents


def make_cell(host: str, item: Item, agent: str, rep: int) -> Cell:
    seed = secrets.randbits(63)
    return Cell(
        id=Cell.make_id(host, item.id, agent, rep),
        host=host, item=item.id, agent=agent, rep=rep, seed=seed, values=draw_values(item.vars, seed),
    )


def plan_sweep(
    inventory: Inventory,
    catalog: Catalog,
    *,
    hosts: list[str] | None = None,
    items: list[str] | None = None,
    round_name: str | None = None,
    agents: list[str] | None = None,
    repeat: int = 1,
    label: str = "",
) -> SweepRecord:
    """The sweep record with every cell planned and no attempt yet."""
    if repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if repeat > MAX_REPEAT:
        # A typo (--repeat 1000000) would otherwise plan millions of cells in memory before anything is said.
        raise UsageError(f"--repeat {repeat}: at most {MAX_REPEAT} (a round's own repetitions have the same bound)")
    # A name given twice (--hosts a,a, --agents x,x) planned every cell of it twice under one cell id: two
    # attempts raced for one cell and its table row. Once each, in the order first given.
    hosts = list(dict.fromkeys(hosts)) if hosts else hosts
    agents = list(dict.fromkeys(agents)) if agents else agents
    chosen_hosts = inventory.select(hosts)
    chosen_items = catalog.select(items, round_name)
    if not chosen_items:
        raise UsageError(f"{catalog.root}: no items to run")
    cells = [
        make_cell(h.name, item, agent, rep)
        for h in chosen_hosts
        for item in chosen_items
        for agent in _agents_for(h, agents, inventory)
        for rep in range(1, item.repetitions * repeat + 1)
    ]
    return SweepRecord(
        id=new_sweep_id(label),
        label=label,
        created_at=utc_now(),
        inventory=inventory.absolute_path or inventory.path,
        inventory_sha256=inventory.sha256,
        uid=secrets.token_hex(6),
        prompts=str(Path(catalog.root).resolve()),
        harness_commit=harness_commit(),
        options={"hosts": hosts, "items": items, "round": round_name, "agents": agents, "repeat": repeat},
        hosts={h.name: HostSummary.of(h) for h in chosen_hosts},
        items={i.id: i for i in chosen_items},
        cells=cells,
    )
