"""Stored and transmitted records: the plan (cells), attempt requests and results, the sweep.

Everything here is a pydantic model with a ``schema_version``; documented field by field in
docs/store.md. A record of an older version must keep loading: bump the version and migrate in a
``model_validator(mode="before")`` when a field changes meaning.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.catalog import Item
from harness.errors import UsageError
from harness.checks.spec import CheckSpec
from harness.inventory import AgentConfig, Host

__all__ = [
    "AttemptStatus",
    "Cell",
    "ArtifactRecord",
    "Artifact",
    "AttemptRequest",
    "AttemptResult",
    "AttemptSummary",
    "SweepRecord",
    "HostSummary",
    "utc_now",
    "sha256_hex",
]

RECORD_SCHEMA_VERSION = 1

AttemptStatus = Literal["dispatched", "finished", "timeout", "harness_failure"]
"""dispatched: sent, no result yet. finished: the agent ran and exited (any exit code).
timeout: the agent started and ran past the item's limit (a model result, not retried).
harness_failure: the fleet failed (reason says how); retried a bounded number of times."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Cell(_Record):
    """One planned cell: host x item x agent x repetition."""

    id: str = Field(description="Stable within the sweep: HOST/ITEM/AGENT/rREP; also the cell's folder.")
    host: str
    item: str = Field(description="Item id.")
    agent: str = Field(description="Agent name (key in the host's inventory entry).")
    rep: int = Field(ge=1, description="Repetition number, from 1.")
    seed: int = Field(description="Seed the template values were drawn from.")
    values: dict[str, str] = Field(default_factory=dict, description="Template values drawn for this cell.")

    @staticmethod
    def make_id(host: str, item: str, agent: str, rep: int) -> str:
        return f"{host}/{item}/{agent}/r{rep}"


class ArtifactRecord(_Record):
    """A file of an attempt as stored: its path under the attempt folder, size and sha256."""

    name: str
    size: int
    sha256: str


class Artifact(ArtifactRecord):
    """An artifact in transit from a worker to the coordinator (content base64-encoded)."""

    data_b64: str

    @classmethod
    def of(cls, name: str, data: bytes) -> "Artifact":
        return cls(name=name, size=len(data), sha256=sha256_hex(data), data_b64=base64.b64encode(data).decode())

    def data(self) -> bytes:
        return base64.b64decode(self.data_b64)


class AttemptRequest(_Record):
    """What the coordinator sends a worker: everything needed, so workers need no shared files."""

    schema_version: int = RECORD_SCHEMA_VERSION
    sweep_id: str
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


class AttemptResult(_Record):
    """What a worker sends back, and (without artifact contents) what meta.json stores."""

    schema_version: int = RECORD_SCHEMA_VERSION
    sweep_id: str
    cell_id: str
    attempt: int
    status: AttemptStatus
    reason: str = Field(default="", description="Stable code of a harness failure (host_unreachable, ...).")
    error: str = Field(default="", description="Human text of a harness failure.")
    exit_code: int | None = None
    host: str
    agent: str
    item: str
    model: dict[str, str | int] = Field(default_factory=dict, description="Model id, base URL, context, max output.")
    agent_command: list[str] = Field(default_factory=list)
    agent_version: str = ""
    agent_kind: str = Field(default="", description="The adapter that ran it (builtin, command, openclaw, ...).")
    harness_commit: str = ""
    worker: str = Field(default="", description="Celery worker node that ran the attempt.")
    workspace: str = Field(default="", description="The attempt's workspace path on the host.")
    host_facts: dict[str, str] = Field(default_factory=dict, description="uname, python version, disk free.")
    values: dict[str, str] = Field(default_factory=dict)
    seed: int | None = None
    started_at: str = ""
    agent_started_at: str = ""
    ended_at: str = ""
    duration_s: float = 0.0
    artifacts: list[Artifact] = Field(default_factory=list)

    def meta(self) -> dict:
        """meta.json content: the result with artifact records instead of contents."""
        data = self.model_dump(exclude={"artifacts"})
        data["artifacts"] = [ArtifactRecord.model_validate(a.model_dump(exclude={"data_b64"})).model_dump() for a in self.artifacts]
        return data


class AttemptSummary(_Record):
    """One attempt of a cell as sweep.json lists it."""

    attempt: int
    task_id: str
    status: AttemptStatus
    reason: str = ""
    exit_code: int | None = None
    dispatched_at: str = ""
    recorded_at: str = ""
    duration_s: float = 0.0
    grade: str = Field(default="", description="The latest grade of this attempt (grade.json), if graded.")
    failure: str = Field(default="", description="The harness failure code (harness.failures.classify) when the "
                         "attempt or its grade is a harness failure, else empty.")


class HostSummary(_Record):
    """A host as the sweep saw it (no secrets: no identity file, no environment values)."""

    name: str
    transport: str
    os: str
    address: str
    slots: int
    tags: list[str]
    model_id: str
    model_base_url: str
    context: int
    max_output: int

    @classmethod
    def of(cls, h: Host) -> "HostSummary":
        return cls(
            name=h.name,
            transport=h.transport,
            os=h.os,
            address=h.address,
            slots=h.slots,
            tags=list(h.tags),
            model_id=h.model.id,
            model_base_url=h.model.base_url,
            context=h.model.context,
            max_output=h.model.max_output,
        )


class SweepRecord(_Record):
    """sweep.json: the plan, every attempt's summary, and the sweep's state."""

    schema_version: int = RECORD_SCHEMA_VERSION
    id: str
    label: str = ""
    created_at: str
    finished_at: str = ""
    status: Literal["planned", "running", "finished", "interrupted"] = "planned"
    inventory: str = Field(description="The inventory file's absolute path (older sweeps: as it was given).")
    inventory_sha256: str = Field(default="", description="sha256 of the inventory file when the sweep was planned.")
    prompts: str
    harness_commit: str
    options: dict[str, str | int | list[str] | None] = Field(default_factory=dict)
    hosts: dict[str, HostSummary]
    items: dict[str, Item]
    cells: list[Cell]
    attempts: dict[str, list[AttemptSummary]] = Field(default_factory=dict, description="cell id -> attempts.")

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
