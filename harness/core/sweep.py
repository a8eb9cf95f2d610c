"""The two records that carry the plan's inputs: ``SweepRecord`` (sweep.json) and ``AttemptRequest`` (what a worker
is sent for one attempt).

They embed the catalog's items, the inventory's hosts and agents and the acceptance checks, so they live apart from
the attempt records in harness/core/records.py: a command that reads or writes attempt folders only (``fleet import``,
``fleet replay``) starts without building those models. Documented field by field in docs/store.md.
"""

from __future__ import annotations

from pydantic import Field

from harness.core.catalog import Item
from harness.core.checks.spec import CheckSpec
from harness.core.errors import UsageError
from harness.core.inventory import AgentConfig, Host
from harness.core.records import RECORD_SCHEMA_VERSION, AttemptSummary, Cell, HostSummary, Record, RerunRecord, SweepStatus

__all__ = ["AttemptRequest", "SweepRecord"]


class AttemptRequest(Record):
    """What the coordinator sends a worker: everything needed, so workers need no shared files."""

    schema_version: int = RECORD_SCHEMA_VERSION
    sweep_id: str
    sweep_uid: str = Field(default="", description="The sweep's uid: part of the attempt's folder on the host.")
    cell: Cell
    attempt: int = Field(ge=1)
    host: Host
    agent: AgentConfig
    item: Item
    prompt: str = Field(description="The rendered prompt text, uploaded to the host as a file.")
    harness_commit: str
    checks: list[CheckSpec] = Field(default_factory=list, description="Acceptance checks run after the agent ends.")
    namespace: str = Field(default="", description="Queue and lock namespace (several fleets on one broker).")
    task_id: str = ""


class SweepRecord(Record):
    """sweep.json: the plan, every attempt's summary, and the sweep's state."""

    schema_version: int = RECORD_SCHEMA_VERSION
    id: str
    label: str = ""
    created_at: str
    finished_at: str = ""
    status: SweepStatus = "planned"
    inventory: str = Field(description="The inventory file's absolute path (older sweeps: as it was given).")
    inventory_sha256: str = Field(default="", description="sha256 of the inventory file when the sweep was planned.")
    uid: str = Field(default="", description="Random, drawn when the sweep is planned. The id is unique in its results "
                     "directory; task ids and the hosts' attempt folders also carry the uid, so two coordinators with "
                     "their own results directories, one broker and one label in the same second never share them "
                     "(sweeps planned before it: '').")
    prompts: str
    harness_commit: str
    options: dict[str, str | int | list[str] | None] = Field(default_factory=dict)
    hosts: dict[str, HostSummary]
    items: dict[str, Item]
    cells: list[Cell]
    attempts: dict[str, list[AttemptSummary]] = Field(default_factory=dict, description="cell id -> attempts.")
    reruns: list[RerunRecord] = Field(default_factory=list, description="Every `fleet rerun` of this sweep, oldest "
                                      "first (sweeps recorded before it, or never rerun: []).")

    def cell(self, cell_id: str) -> Cell:
        for c in self.cells:
            if c.id == cell_id:
                return c
        raise KeyError(cell_id)

    def cells_matching(
        self, host: str | None = None, item: str | None = None, agent: str | None = None, rep: int | None = None
    ) -> list[Cell]:
        """Cells by host, item (id or open-prompt number), agent and repetition; None matches any."""
        return [
            c for c in self.cells
            if (host is None or c.host == host) and (item is None or item in (c.item, self.items[c.item].number))
            and (agent is None or c.agent == agent) and (rep is None or c.rep == rep)
        ]

    def one_cell(self, host: str, item: str, agent: str | None = None, rep: int | None = None) -> Cell:
        """The single cell a command names; none or several is the user's error, said in one line."""
        matches = self.cells_matching(host, item, agent, rep)
        if not matches:
            raise UsageError(f"sweep {self.id} has no cell for host {host!r} and item {item!r}")
        if len(matches) > 1:
            names = ", ".join(c.id for c in matches[:6])
            raise UsageError(f"{len(matches)} cells match ({names}); narrow with --agent and --rep")
        return matches[0]

    def last(self, cell_id: str) -> AttemptSummary | None:
        runs = self.attempts.get(cell_id) or []
        return runs[-1] if runs else None

    def rerun_of(self, cell_id: str) -> RerunRecord | None:
        """The latest rerun that gave the cell its latest attempt (None: the cell's result is from the sweep
        itself, or a rerun was planned but sent nothing)."""
        last = self.last(cell_id)
        for r in reversed(self.reruns):
            first = r.cells.get(cell_id)
            if first is not None and last is not None and last.attempt >= first:
                return r
        return None
