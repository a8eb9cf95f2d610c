"""The normalized transcript: what an agent run did, one JSON event per line.

Why one schema: the builtin agent writes it, importers translate external agents' sessions into it,
graders and the dashboard read it, and replay feeds it through a changed guard. If each of them read
its own idea of a transcript, a grade could not be traced back to what happened. So the events are
defined once, here, as pydantic models: a tagged union on ``event``, each with ``schema_version``,
``seq`` (1, 2, 3 ... in file order) and ``ts`` (UTC, ISO 8601). The format is documented with an
example in ``docs/transcript.md``.

Why JSONL, flushed and fsynced per event: a run may be killed at any moment (item timeout, lost host,
OOM). Each event is on disk before the next one starts, so a crash loses at most the event being
written, and what was written is still readable line by line.

Only the standard library and pydantic are imported (plus ``harness.core.nesting`` and
``harness.core.errors``, which import nothing heavier), so the agent can write transcripts on a fleet host
and a replay can read them without Celery or Fabric.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import IO, Annotated, Any, ClassVar, Final, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    model_serializer,
)

from harness.core.nesting import MAX_DEPTH, loads_json
from harness.core.errors import TranscriptError

__all__ = [
    "SCHEMA_VERSION",
    "Runner",
    "VerdictName",
    "TestVerdict",
    "ReceiptStatus",
    "ToolDetails",
    "ToolCallRecord",
    "Usage",
    "OwnerReceipt",
    "ImportedFrom",
    "RunStart",
    "ModelRequest",
    "ModelResponse",
    "ModelError",
    "ToolCall",
    "ToolResult",
    "GuardDecision",
    "StopEvent",
    "ReceiptEvent",
    "RunEnd",
    "Event",
    "EVENT_ADAPTER",
    "TranscriptWriter",
    "read_transcript",
    "parse_transcript",
    "utc_now",
]

# A test command's verdict (seed 003, "Unittest verdict"): recognized by ``harness.guard.verdict.recognize`` from
# the runner's own summary, stored with the ``exec`` result that ran it and in receipts and grades.
Runner = Literal["unittest", "pytest", "jest", "vitest", "node_test", "cargo", "go"]
VerdictName = Literal["passed", "failed", "no_test_ran", "no_passing_test", "unrecognized"]


class TestVerdict(BaseModel):
    """What one finished test command established."""

    __test__: ClassVar[bool] = False  # not a pytest test class, despite the name
    model_config = ConfigDict(frozen=True)

    runner: Runner | None
    verdict: VerdictName
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    deselected: int = 0
    """Tests a selection left out (pytest ``-k``/``-m`` "deselected", cargo "filtered out"): never run."""
    said: str | None = None
    """``no_test_ran``: the runner's own words for it ("NO TESTS RAN", "3 deselected", "No tests found")."""

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # deselected and said are left out when unset, so every verdict stored before they existed
        # (transcripts, receipts, grades) is written byte for byte as it was.
        data: dict[str, Any] = handler(self)
        if not data.get("deselected"):
            data.pop("deselected", None)
        if data.get("said") is None:
            data.pop("said", None)
        return data

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form stored in transcripts and grades (``deselected``/``said`` only when set)."""
        return self.model_dump()


SCHEMA_VERSION: Final = 1

ReceiptStatus = Literal["passed", "failed", "pending", "none"]


def utc_now() -> str:
    """The event time format: UTC, milliseconds, ``Z`` (as the store's records)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Strict(BaseModel):
    """Unknown keys are errors: a misspelt field would otherwise vanish silently on a round trip."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _ImportFields(BaseModel):
    """Leaves the imported-session fields out when unset, so the builtin agent's lines are as before."""

    _import_fields: tuple[str, ...] = ()

    @model_serializer(mode="wrap")
    def _omit_unset_import_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self._import_fields:
            if data.get(key) is None:
                data.pop(key, None)
        return data


# --------------------------------------------------------------------------------------------------
# Parts shared by several events


class ToolDetails(_Strict):
    """Structured facts about one tool result, beside its text. ``status`` and ``exit_code`` are what
    the run-progress budget reads (as ``details.status`` / ``details.exitCode``)."""

    status: Literal["ok", "failed", "error", "blocked"]
    """ok; failed (a command ran and failed, or timed out); error (bad input: arguments, path, unknown
    tool); blocked (a guard refused the call, which did not run)."""
    duration_s: float = 0.0
    exit_code: int | None = None
    """exec: the command's exit code; None when it was killed (timeout) or did not run."""
    timed_out: bool = False
    cwd: str | None = None
    """exec: the absolute directory the command ran in."""
    path: str | None = None
    """File tools: the path relative to the workspace, after confinement."""
    bytes: int | None = None
    """write: bytes written; read: bytes returned; exec: bytes of output the command printed."""
    truncated: bool = False
    """The text given to the model is shorter than the output (exec's output cap, read's limit)."""
    replacements: int | None = None
    """edit: how many occurrences were replaced."""
    test: TestVerdict | None = None
    """exec of a recognized test command: what ``harness.guard.verdict.recognize`` made of it."""

    def budget_view(self, is_error: bool) -> dict[str, Any]:
        """The result as the run-progress budget reads it (``isError``, ``details.status`` / ``exitCode``): what the
        builtin agent shows its budget, and what a replay of its transcript shows the same budget."""
        details: dict[str, Any] = {"status": self.status}
        if self.exit_code is not None:
            details["exitCode"] = self.exit_code
        return {"isError": is_error, "details": details}


class ToolCallRecord(_Strict):
    """A tool call as the model sent it; ``arguments`` is the raw JSON text (possibly invalid or cut)."""

    id: str
    name: str
    arguments: str


class Usage(_Strict):
    """Token counts as the endpoint reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class OwnerReceipt(_Strict):
    """What the owner was delivered: the same content as ``receipt.json`` beside the transcript."""

    status: ReceiptStatus
    text: str
    """The answer (also ``answer.txt``): the model's last reply, or a guard's receipt or report."""
    source: Literal[
        "model", "refusal_receipt", "output_limit_report", "budget_stop", "coding_loop_stop", "context_full",
        "infrastructure", "interrupted", "agent_error", "agent_guard",
    ]
    """Who wrote ``text``: the model, or the guard path that replaced it. ``agent_guard``: an imported
    session's own guard replaced the model's answer (e.g. a failed-verification notice)."""
    test_state: str | None = None
    """Refusal receipts: the latest test's state (``passed_current``, ``failed``, ...)."""
    test: TestVerdict | None = None
    """The latest recognized test command's verdict, when one ran."""
    reasons: tuple[str, ...] = ()
    """Why the status is not passed, when the guard says (refusal receipt reasons, output-limit refusals)."""


# --------------------------------------------------------------------------------------------------
# Events


class _Event(_Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    seq: int = 0
    """Position in the file from 1; 0 until ``TranscriptWriter.append`` stamps it."""
    ts: str = ""
    """When the event was written (UTC, ISO 8601); stamped by the writer."""


class ImportedFrom(_Strict):
    """Where an imported transcript came from (``harness.importers``). Its ``limits`` say what the source
    did not record; the fields they name hold empty placeholders ("", 0, null), never guesses."""

    format: str
    """The importer, e.g. ``pixel-fleet``."""
    file: str
    """The source file, as given to the importer."""
    sha256: str
    """The source file's sha256."""
    run: str
    """Which run of the file (a file may hold several)."""
    limits: list[str] = Field(default_factory=list)
    """What the source did not record, in words."""


class RunStart(_ImportFields, _Event):
    """The run's configuration: enough to reproduce it (model, limits, harness version, prompt)."""

    _import_fields = ("imported",)

    event: Literal["run_start"] = "run_start"
    run_id: str
    agent: str
    agent_version: str
    harness_commit: str
    model: str
    base_url: str
    context: int
    max_output: int
    stream: bool
    timeout_s: float
    retries: int
    exec_timeout_s: float
    workspace: str
    prompt_file: str
    prompt: str
    system_prompt: str
    tools: list[str]
    budget_policy: dict[str, Any]
    python: str
    platform: str
    imported: ImportedFrom | None = None
    """Set when an importer wrote this transcript from another agent's recorded session."""


class ModelRequest(_Event):
    """One model round is asked for. ``messages_added`` holds the messages appended to the conversation
    since the previous request (the first has the system and user messages), so the whole conversation
    can be rebuilt without storing it again on every round."""

    event: Literal["model_request"] = "model_request"
    round: int
    max_tokens: int
    stream: bool
    prompt_tokens_estimate: int
    messages_added: list[dict[str, Any]]


class ModelError(_Event):
    """One failed attempt at a model request: retried after ``retry_in_s``, or given up (None)."""

    event: Literal["model_error"] = "model_error"
    round: int
    attempt: int
    kind: Literal["http", "timeout", "connection", "protocol"]
    status: int | None = None
    message: str
    retry_in_s: float | None


class ModelResponse(_Event):
    """The model's reply to one round."""

    event: Literal["model_response"] = "model_response"
    round: int
    text: str
    reasoning: str | None = None
    tool_calls: list[ToolCallRecord]
    finish_reason: str | None
    usage: Usage | None
    latency_s: float
    attempts: int
    model: str | None
    """The model id the endpoint reported in its reply."""


class ToolCall(_Event):
    """A tool call the agent is about to handle. ``arguments`` is None when they were not a JSON object
    (``arguments_error`` says why); the call then fails without running."""

    event: Literal["tool_call"] = "tool_call"
    round: int
    call_id: str
    name: str
    arguments: dict[str, Any] | None
    arguments_error: str | None = None


class ToolResult(_ImportFields, _Event):
    """What a tool call returned: ``text`` is what the model saw."""

    _import_fields = ("agent_is_error", "agent_details")

    event: Literal["tool_result"] = "tool_result"
    round: int
    call_id: str
    name: str
    is_error: bool
    text: str
    details: ToolDetails
    agent_is_error: bool | None = None
    """Imported sessions: the agent's own error flag as recorded (None when it recorded none). It can
    differ from ``is_error``, which also counts a non-zero exit, a failed status and a nested failure."""
    agent_details: dict[str, Any] | None = None
    """Imported sessions: the result's details as the agent recorded them (for a Tool Search envelope,
    ``{"tool": {"name": ...}, "result": inner}``), so a replay reads the same failure signals."""


class GuardDecision(_Event):
    """A guard rule decided something. ``budget``: after every tool result the budget observed
    (``data`` holds its counters); ``recursive_delete``: a refused call (``data.fragment``, or the latch);
    ``output_limit``: a reply cut at the output limit (``decision`` continue / report / deliver)."""

    event: Literal["guard"] = "guard"
    round: int
    rule: Literal["budget", "recursive_delete", "output_limit", "coding_loop", "workspace_route", "tool_policy",
                  "unrecognized"]
    """The builtin agent's rules are the first three; imported sessions also carry their agent's own:
    ``coding_loop`` (a no-progress test-and-repair loop stopped), ``workspace_route`` (path corrections,
    nothing run before the first write), ``tool_policy`` (a call refused for its arguments or target), and
    ``unrecognized`` (a refusal the importer has no rule for; ``text`` keeps it)."""
    decision: Literal["allow", "stop", "refuse", "continue", "report", "deliver"]
    call_id: str | None = None
    reason: str | None = None
    text: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class StopEvent(_Event):
    """The run was stopped by a guard rule (at most one per run)."""

    event: Literal["stop"] = "stop"
    round: int
    rule: Literal["budget", "recursive_delete", "output_limit", "context", "coding_loop", "tool_policy"]
    reason: str
    """Stable code: consecutive_failures, total_failures, no_progress, lanes_exhausted,
    recursive_delete, output_limit, context_full; imported: run_progress (a budget stop whose counter the
    recording does not show), failed_verification_limit (rule coding_loop), permission_rejected /
    permission_denied (rule tool_policy: the agent's own permission policy refused a call and ended the run)."""
    text: str
    """For people, e.g. "4 consecutive failures"."""
    call_id: str | None = None


class ReceiptEvent(_Event):
    """What the owner was delivered."""

    event: Literal["receipt"] = "receipt"
    receipt: OwnerReceipt


class RunEnd(_Event):
    """The run is over. ``infrastructure`` is the fleet's fault (endpoint unreachable, HTTP errors,
    timeouts after retries), never a model result; ``completed`` and ``stopped`` are model results."""

    event: Literal["run_end"] = "run_end"
    outcome: Literal["completed", "stopped", "infrastructure", "interrupted", "agent_error"]
    reason: str | None = None
    message: str | None = None
    exit_code: int | None
    """The agent's exit code; None when not recorded (imported sessions)."""
    rounds: int
    tool_calls: int
    duration_s: float
    usage: Usage


Event = Annotated[
    RunStart | ModelRequest | ModelError | ModelResponse | ToolCall | ToolResult | GuardDecision | StopEvent
    | ReceiptEvent | RunEnd,
    Field(discriminator="event"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

E = TypeVar("E", bound=_Event)


class TranscriptWriter:
    """Writes one run's events to a new file, each flushed and fsynced before ``append`` returns."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file: IO[str] = self.path.open("w", encoding="utf-8")
        self._seq = 0

    def append(self, event: E) -> E:
        """Stamp ``seq`` and ``ts``, write the event as one line, and return the stamped event."""
        stamped = event.model_copy(update={"seq": self._seq + 1, "ts": utc_now()})
        self._file.write(stamped.model_dump_json() + "\n")
        self._seq = stamped.seq  # counted once written, so an interrupted append leaves no gap in seq
        self._file.flush()
        os.fsync(self._file.fileno())
        return stamped

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"][1:])  # [0] is the union tag
    more = error.error_count() - 1
    message = str(first["msg"]) + (f" (and {more} more)" if more else "")
    return f"{where}: {message}" if where else message


def read_transcript(path: str | os.PathLike[str]) -> list[Event]:
    """Read and validate a transcript. A bad line raises ``TranscriptError(file, "line N", problem)``."""
    file = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise TranscriptError(file, "", "file not found") from None
    except OSError as exc:
        raise TranscriptError(file, "", f"cannot read: {exc}") from None
    return parse_transcript(data, file)


def parse_transcript(data: bytes, file: str) -> list[Event]:
    """Validate a transcript's bytes (for a reader that also hashes them: the file is read once). ``file`` names
    it in errors."""
    try:
        # As a text file is read: UTF-8, line ends made "\n" (a JSON line holds no raw CR of its own).
        raw = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise TranscriptError(file, "", f"cannot read: {exc}") from None
    events: list[Event] = []
    lines = raw.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        if line.count("[") + line.count("{") <= MAX_DEPTH:
            # The fast road for a line that cannot nest too deep: parsed and validated in one step by pydantic's
            # own JSON reader (twice as fast). Anything it refuses takes the road below, which names the problem.
            try:
                fast = EVENT_ADAPTER.validate_json(line)
            except ValidationError:
                fast = None
            if fast is not None and fast.seq == len(events) + 1:
                events.append(fast)
                continue
        try:
            data = loads_json(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):  # no newline after it: the writer died while writing it
                raise TranscriptError(file, where, "incomplete last line (the writer stopped while writing it)") from None
            raise TranscriptError(file, where, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(data, dict):
            raise TranscriptError(file, where, "an event must be a JSON object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise TranscriptError(file, where, f"schema_version {version!r} is not supported (expected {SCHEMA_VERSION})")
        try:
            event = EVENT_ADAPTER.validate_python(data)
        except ValidationError as exc:
            raise TranscriptError(file, where, _problem(exc)) from None
        expected = len(events) + 1
        if event.seq != expected:
            raise TranscriptError(file, where, f"seq {event.seq} where {expected} was expected")
        events.append(event)
    return events
