"""Stored and transmitted records of attempts: the plan's cells, attempt results, meta.json, the sweep's summaries.

The two records that embed the plan's inputs (items, hosts, agents, checks), ``SweepRecord`` and ``AttemptRequest``,
are in harness/core/sweep.py, so that reading an attempt folder does not build the catalog's and inventory's models.

Everything here is a pydantic model with a ``schema_version``; documented field by field in
docs/store.md. A record of an older version must keep loading: bump the version and migrate in a
``model_validator(mode="before")`` when a field changes meaning.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Literal

from pydantic import (BaseModel, ConfigDict, Discriminator, Field, JsonValue, SerializerFunctionWrapHandler, Tag, TypeAdapter,
                      PrivateAttr, ValidationInfo, model_serializer, model_validator)
from pydantic_core import PydanticCustomError

from harness.core.recordfile import check_version, read_record

if TYPE_CHECKING:
    from harness.core.inventory import Host

__all__ = [
    "AttemptStatus",
    "SweepStatus",
    "Cell",
    "ArtifactRecord",
    "Artifact",
    "AttemptResult",
    "AttemptSummary",
    "AttemptMeta",
    "ImportedMeta",
    "MetaRecord",
    "META_ADAPTER",
    "META_SCHEMA_VERSION",
    "ManifestEntry",
    "MANIFEST_ADAPTER",
    "read_meta",
    "HostSummary",
    "RerunRecord",
    "Record",
    "RECORD_SCHEMA_VERSION",
    "utc_now",
    "sha256_hex",
]

RECORD_SCHEMA_VERSION = 1

META_SCHEMA_VERSION: Final = 2
"""The version of meta.json (docs/store.md). 1 -> 2: ``kind`` tells a sweep attempt (``run``) from an
imported session (``imported``, which version 1 marked ``imported: true``); a run's ``agent_kind`` always
names what ran it (version 1 files written before commit 70cc816 left it out, and a builtin attempt was
known only by ``workers.agent`` in its command line); an import's recorded facts are under ``facts``
(version 1 spread them among the record's own keys, where a fact could shadow a field). Version 1 files
are migrated when read."""

AttemptStatus = Literal["dispatched", "finished", "timeout", "harness_failure"]
"""dispatched: sent, no result yet. finished: the agent ran and exited (any exit code).
timeout: the agent started and ran past the item's limit (a model result, not retried).
harness_failure: the fleet failed (reason says how); retried a bounded number of times."""

SweepStatus = Literal["planned", "running", "finished", "interrupted"]
"""A sweep's state in sweep.json (``SweepRecord.status``)."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Record(BaseModel):
    """A stored or sent record: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")


class Cell(Record):
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


class ArtifactRecord(Record):
    """A file of an attempt as stored: its path under the attempt folder, size and sha256; for a file the store
    had to rename (a name that is not UTF-8, a part over 255 bytes, a path too long, or one that then clashed
    with another), the name it had on the host, as text and as its exact bytes."""

    name: str
    size: int
    sha256: str
    original: str | None = Field(default=None, description="The name as the host had it, when it is stored under "
                                 "another: bytes that are not UTF-8 written as \\udcXX escapes; else absent.")
    original_b64: str | None = Field(default=None, description="The exact bytes of that name, base64; absent when "
                                     "the file kept its name.")

    _absent_when_none: ClassVar[tuple[str, ...]] = ("original", "original_b64")

    @model_serializer(mode="wrap")
    def _without_absent_original(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Most files keep their name: their records stay {name, size, sha256}, as every older meta.json has them.
        data = handler(self)
        for key in self._absent_when_none:
            if data.get(key) is None:
                data.pop(key, None)
        return data


class Artifact(ArtifactRecord):
    """An artifact in transit from a worker to the coordinator: its content base64-encoded, or, for a large one on
    Redis, the key that holds its bytes (``blob``, workers/blobs.py; ``data_b64`` is then empty)."""

    data_b64: str
    blob: str | None = Field(default=None, description="The Redis key holding the bytes (workers/blobs.py); "
                             "absent when they are inline.")
    _held: bytes | None = PrivateAttr(default=None)
    _absent_when_none: ClassVar[tuple[str, ...]] = ("original", "original_b64", "blob")

    @classmethod
    def of(cls, name: str, data: bytes) -> "Artifact":
        return cls(name=name, size=len(data), sha256=sha256_hex(data), data_b64=base64.b64encode(data).decode())

    def hold(self, data: bytes) -> None:
        """The bytes of a blob, read by the coordinator (checked against size and sha256 by the caller)."""
        self._held = data

    def data(self) -> bytes:
        if self._held is not None:
            return self._held
        if self.blob is not None:
            raise ValueError(f"{self.name}: its bytes are in {self.blob}, not read yet")
        return base64.b64decode(self.data_b64)


class AttemptResult(Record):
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

    @model_validator(mode="before")
    @classmethod
    def _agent_kind_of_older_workers(cls, data: Any) -> Any:
        # A worker of a harness from before agent_kind (commit 70cc816) sends none; its builtin attempts are
        # still known by their command line, and the grade depends on it (a builtin run always leaves a transcript).
        if isinstance(data, dict) and "agent_kind" not in data:
            return _builtin_by_command(data)
        return data

    def to_meta(self) -> "AttemptMeta":
        """The attempt's meta.json record: the result with artifact records instead of contents."""
        data = self.model_dump(exclude={"artifacts", "schema_version"})
        return AttemptMeta(**data, artifacts=[ArtifactRecord(name=a.name, size=a.size, sha256=a.sha256, original=a.original,
                                                             original_b64=a.original_b64) for a in self.artifacts])

    def meta(self) -> dict[str, Any]:
        """meta.json content as JSON data, made through ``AttemptMeta`` (what the store's writer dumps)."""
        return self.to_meta().model_dump(mode="json")


def _builtin_by_command(data: dict[str, Any]) -> dict[str, Any]:
    """``agent_kind: builtin`` for a record that names no kind but started ``python -m workers.agent``: the
    builtin agent's command line (its module's name then), the only way attempts recorded before commit 70cc816
    say what ran."""
    command = data.get("agent_command")
    if not data.get("agent_kind") and isinstance(command, list) and "workers.agent" in command:
        return {**data, "agent_kind": "builtin"}
    return data


class ManifestEntry(Record):
    """One file of the workspace the agent left (``workspace.manifest.json``, written by the launcher's pack)."""

    path: str = Field(description="Relative to the workspace; a skipped folder ends with '/'.")
    size: int | None = Field(description="Bytes; null for a skipped folder or a file that is not a regular one.")
    sha256: str | None = Field(description="Of the file's bytes; null where size is null.")
    packed: bool = Field(description="A copy is in the attempt's workspace/ folder.")
    why: str = Field(description="Why it was not packed: skipped folder, not a regular file, over the size cap, "
                     "cannot read ...; '' when packed.")
    path_b64: str | None = Field(default=None, description="The path's exact bytes, base64, when they are not UTF-8 "
                                 "(``path`` then shows each bad byte as a \\udcXX escape); absent otherwise.")
    link: str | None = Field(default=None, description="A symbolic link's target text (the link is never followed); "
                             "absent for anything else.")
    link_b64: str | None = Field(default=None, description="The target's exact bytes, base64, when they are not UTF-8.")


MANIFEST_ADAPTER: TypeAdapter[list[ManifestEntry]] = TypeAdapter(list[ManifestEntry])


class AttemptMeta(Record):
    """meta.json of one attempt of a sweep: what ran, where, how it ended, and every artifact's sha256.

    Written last, by the coordinator, from the worker's ``AttemptResult`` (``AttemptResult.to_meta``); an
    attempt folder with it is complete. Documented field by field in docs/store.md."""

    schema_version: Literal[2] = Field(default=META_SCHEMA_VERSION, description="The record's format version.")
    kind: Literal["run"] = Field(default="run", description="A sweep attempt (an imported session is 'imported').")
    sweep_id: str = Field(description="The sweep the attempt belongs to.")
    cell_id: str = Field(description="HOST/ITEM/AGENT/rREP, also the cell's folder.")
    attempt: int = Field(ge=1, description="The attempt's number within the cell, from 1.")
    status: AttemptStatus = Field(description="finished, timeout or harness_failure (never dispatched: meta.json "
                                  "is written with the result).")
    reason: str = Field(default="", description="A harness failure's stable code (harness.core.failures); else ''.")
    error: str = Field(default="", description="For people: the harness failure, the timeout, the signal that ended "
                       "the agent.")
    exit_code: int | None = Field(default=None, description="The agent's exit code when it exited by itself; null "
                                  "for a timeout, a signal or a harness failure.")
    host: str = Field(description="The cell's host name.")
    agent: str = Field(description="The cell's agent name (its key in the host's inventory entry).")
    item: str = Field(description="The cell's item id.")
    model: dict[str, str | int] = Field(default_factory=dict, description="The host's model as used: id, base_url, "
                                        "context, max_output; {} when the attempt failed before it was known.")
    agent_command: list[str] = Field(default_factory=list, description="The argv the launcher started, "
                                     "placeholders filled in.")
    agent_version: str = Field(default="", description="The agent's version, when known.")
    agent_kind: str = Field(default="", description="The adapter that ran it (builtin, command, openclaw, opencode, "
                            "hermes); '' when the attempt failed before an adapter was chosen.")
    harness_commit: str = Field(default="", description="The harness source the worker ran.")
    worker: str = Field(default="", description="The Celery worker node that ran the attempt.")
    workspace: str = Field(default="", description="The attempt's working folder on the host.")
    host_facts: dict[str, str] = Field(default_factory=dict, description="uname, python, disk_free_mb, "
                                       "harness_release as the host reported them.")
    values: dict[str, str] = Field(default_factory=dict, description="The cell's template values.")
    seed: int | None = Field(default=None, description="The seed the values were drawn from.")
    started_at: str = Field(default="", description="When the worker began the attempt (UTC, ISO 8601).")
    agent_started_at: str = Field(default="", description="When the launcher reported the agent running; '' if it "
                                  "never started.")
    ended_at: str = Field(default="", description="When the attempt ended (UTC, ISO 8601).")
    duration_s: float = Field(default=0.0, description="The attempt's wall-clock length in seconds.")
    artifacts: list[ArtifactRecord] = Field(default_factory=list, description="Every other file of the folder: "
                                            "name, size, sha256.")

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and check_version(data, (1, META_SCHEMA_VERSION), info) == 1:
            data = {**_builtin_by_command(data), "schema_version": META_SCHEMA_VERSION, "kind": "run"}
        return data


_IMPORTED_V1_FIELDS = frozenset({
    "schema_version", "imported", "source_format", "source_file", "source_sha256", "run", "status", "reason",
    "error", "exit_code", "host", "agent", "item", "deliverable", "answer_recorded", "calls", "imported_at",
    "artifacts",
})
"""The keys version 1 of an imported meta.json wrote itself; every other key was one of the recorded facts."""


class ImportedMeta(Record):
    """meta.json of a session recorded outside the harness (``fleet import``): an attempt-like folder that
    belongs to no sweep, so it names its item's deliverable itself. Written by harness/importers/folder.py."""

    schema_version: Literal[2] = Field(default=META_SCHEMA_VERSION, description="The record's format version.")
    kind: Literal["imported"] = Field(default="imported", description="An imported session (a sweep attempt is "
                                      "'run').")
    source_format: str = Field(description="The importer, e.g. pixel-fleet, openclaw-sqlite.")
    source_file: str = Field(description="The recorded file, as given to fleet import.")
    source_sha256: str = Field(description="The recorded file's sha256.")
    run: str = Field(description="Which run of the file (a file may hold several); also the folder's name.")
    status: AttemptStatus = Field(default="finished", description="Always finished: the session ran and ended.")
    reason: str = Field(default="", description="Always '': no harness failure is recorded for an import.")
    error: str = Field(default="", description="Always ''.")
    exit_code: int | None = Field(default=None, description="Always null: no recording keeps the agent's exit code.")
    host: str = Field(default="", description="The host the recording names; '' when it names none.")
    agent: str = Field(description="The agent that recorded the session: pixel, openclaw, opencode, hermes.")
    item: str = Field(description="What was asked, as an item id: the importer's choice (e.g. the file's stem).")
    deliverable: Literal["workspace", "answer"] = Field(default="workspace", description="The product: files, or a "
                                                        "written answer.")
    answer_recorded: bool = Field(description="The recording says what the owner got (then answer.txt holds it).")
    calls: int = Field(ge=0, description="How many tool calls the recording holds.")
    imported_at: str = Field(description="When the folder was written (UTC, ISO 8601).")
    facts: dict[str, JsonValue] = Field(default_factory=dict, description="Other facts the recording holds, by the "
                                        "importer's names: session_id, recorded_grade, evidence, title ...")
    artifacts: list[ArtifactRecord] = Field(default_factory=list, description="Every other file of the folder: "
                                            "name, size, sha256.")

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and check_version(data, (1, META_SCHEMA_VERSION), info) == 1:
            if data.get("imported") is not True:
                raise PydanticCustomError("imported", "imported: a version 1 imported session's record has imported: true")
            own = {k: v for k, v in data.items() if k in _IMPORTED_V1_FIELDS and k != "imported"}
            facts = {k: v for k, v in data.items() if k not in _IMPORTED_V1_FIELDS}
            data = {**own, "schema_version": META_SCHEMA_VERSION, "kind": "imported", "facts": facts}
        return data


def _meta_kind(data: Any) -> str | None:
    """Which form a meta.json is: ``kind``, else (version 1) ``imported: true`` for an import."""
    if isinstance(data, dict):
        kind = data.get("kind")
        if kind is None:
            return "imported" if data.get("imported") is True else "run"
        return kind if isinstance(kind, str) else None
    return getattr(data, "kind", None)


MetaRecord = Annotated[
    Annotated[AttemptMeta, Tag("run")] | Annotated[ImportedMeta, Tag("imported")],
    Discriminator(_meta_kind, custom_error_type="kind", custom_error_message="not a meta.json record: kind must be 'run' or 'imported'"),
]
"""A meta.json of either form."""
META_ADAPTER: TypeAdapter[AttemptMeta | ImportedMeta] = TypeAdapter(MetaRecord)


def read_meta(path: Path) -> AttemptMeta | ImportedMeta:
    """A meta.json, migrated to today's version; a missing or bad file is a ``StoreError`` naming the file
    and the key."""
    return read_record(path, META_ADAPTER, tags=("run", "imported"))


class AttemptSummary(Record):
    """One attempt of a cell as sweep.json lists it."""

    attempt: int = Field(ge=1, description="The attempt's number in its cell, from 1.")
    task_id: str
    status: AttemptStatus
    reason: str = ""
    exit_code: int | None = None
    dispatched_at: str = ""
    recorded_at: str = ""
    duration_s: float = 0.0
    grade: str = Field(default="", description="The latest grade of this attempt (grade.json), if graded.")
    failure: str = Field(default="", description="The harness failure code (harness.core.failures.classify) when the "
                         "attempt or its grade is a harness failure, else empty.")
    stop: str = Field(default="", description="The latest grade's guard stop reason (a stable code), if the run was "
                      "stopped; '' otherwise and in sweeps recorded before it was kept here.")
    override: str = Field(default="", description="A reviewer's grade that overrides the automatic one (the latest "
                          "override, harness/grading/override.py); '' when there is none.")


class HostSummary(Record):
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
    model_server: str = Field(default="", description="What serves the model (the inventory's model.server, for "
                              "people); '' when not given, and for sweeps planned before it was recorded.")

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
            model_server=h.model.server,
        )


class RerunRecord(Record):
    """One `fleet rerun` of a sweep: which cells it ran again, from which attempt number on."""

    at: str = Field(description="When the rerun was planned (UTC, ISO 8601).")
    host: str = Field(description="The host whose cells were run again.")
    cells: dict[str, int] = Field(description="cell id -> the first attempt number this rerun gave it (earlier "
                                  "attempts are kept; the cell's latest attempt is the one that counts).")
