"""The one intermediate model of every importer: a run another agent recorded, as the importer read it.

Importers differ in how they read a format; what a recorded run *is* does not: model rounds (replies with
their usage, latency and finish reason, or the endpoint's errors), tool calls with their arguments and
results, refusals by the agent's own guard, how the run ended, what the owner got, and facts about the
source. Every importer fills ``RecordedRun``; ``harness.importers.events.to_events`` turns it into
``harness.core.transcript`` events, the same way for all (docs/importers.md, "One road").

What a recorded signal *means* is the importer's to decide, so the model holds decisions, not raw
flags: a call's ``status``, the stop that ended the run. Two readings of a tool result are shared here,
because two families of recordings share them: OpenClaw's tool results (OpenClaw and the Pixel fleet,
an OpenClaw plugin), ``settle_by_details``; and agents that flag errors and exit codes apart (OpenCode,
Hermes), ``settle_by_flags``.

Nothing is guessed. A field the source did not record gets an empty placeholder ("", 0, None) and a
line in ``limits``, which the transcript's ``run_start.imported`` carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.guard.results import is_failed, recorded_view
from harness.guard.verdict import TestVerdict, is_test_command, recognize
from harness.core.transcript import (
    GuardDecision,
    ModelError,
    OwnerReceipt,
    StopEvent,
    ToolCallRecord,
    Usage,
)

__all__ = ["RecordedCall", "RecordedRound", "RecordedRun", "CallStatus", "RunOutcome", "ReceiptSource",
           "OUTPUT_LIMIT_STOP", "output_limit_stop", "closing_stop", "verdict_of", "settle_by_details",
           "settle_by_flags"]

CallStatus = Literal["ok", "failed", "error", "blocked"]
RunOutcome = Literal["completed", "stopped", "infrastructure", "interrupted", "agent_error"]
ReceiptSource = Literal["model", "refusal_receipt", "budget_stop", "agent_guard"]

OUTPUT_LIMIT_STOP = "cut at output limit"
"""The stop's text for a final reply cut at the output limit, the builtin agent's words (seed 002: "graded
NOTHING with stop cut-at-output-limit")."""

_WROTE = re.compile(r"^Successfully wrote (\d+) bytes")
_REPLACED = re.compile(r"^Successfully replaced (\d+) block")
_FILE_TOOLS = ("write", "edit", "read", "apply_patch")


def output_limit_stop(round_: int, text: str = OUTPUT_LIMIT_STOP) -> StopEvent:
    """The run's stop when its final reply was cut at the output limit: the same rule and reason code for every
    agent, imported or run (``output_limit``), so a grade shows the stop whoever recorded it."""
    return StopEvent(round=round_, rule="output_limit", reason="output_limit", text=text)


@dataclass
class RecordedCall:
    """One tool call and what it returned, as the source recorded them, with the importer's reading of it."""

    call_id: str
    name: str
    """The tool the model called (``tool_call`` for a Tool Search transport)."""
    arguments: dict[str, Any] | None
    """As recorded (None when they were not a JSON object: ``arguments_error`` says why); where the source kept
    only a digest or a length, that is what is here."""
    called_as: str | None = None
    """The tool's name in the model's call when its result names the tool otherwise (OpenClaw keeps both);
    ``tool_call`` is written with this name, ``tool_result`` with ``name``."""
    arguments_text: str = ""
    """The arguments as the model sent them (JSON text), where the source keeps them."""
    arguments_error: str | None = None
    round: int = 0
    """The model round that made the call; 0 when not recorded."""
    recorded_n: int | None = None
    """The source's own number for the call, when it numbers them."""
    finished: bool = True
    """False when no result is recorded (no ``tool_result`` is written)."""
    ran: bool = True
    """False when a guard or the agent's policy refused the call: it did not run."""
    refusal: str | None = None
    """A refused call's refusal text (None when the source did not record it)."""
    refusal_reason: str | None = None
    """The agent's own reason code for a refusal, when it gives one (OpenCode's ``permission_rejected``)."""
    refused_by_budget_stop: bool = False
    """The source marks the call as refused by a budget stop that came before it."""
    text: str = ""
    """The result text as recorded: what the model saw ("" when the source kept none)."""
    output: str | None = None
    """A command's output when recorded apart from ``text`` (for the test verdict)."""
    agent_is_error: bool | None = None
    agent_details: dict[str, Any] | None = None
    bad_input: bool = False
    """The agent rejected the call's input (unknown tool, invalid arguments, a file that is not there)."""
    shell: bool = False
    """A command tool: its exit code decides failure, and a test command gets the harness's verdict."""
    command: str | None = None
    status: CallStatus = "ok"
    """The importer's reading of the result (``settle_by_details`` or ``settle_by_flags``)."""
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    cwd: str | None = None
    path: str | None = None
    """File tools: the path (relative to the workspace when inside it); written only when the call is ok."""
    bytes: int | None = None
    replacements: int | None = None
    truncated: bool = False
    guard: list[GuardDecision | StopEvent] = field(default_factory=list)
    """The agent's guard decisions on this call, written between the call and its result."""
    guard_after: list[GuardDecision | StopEvent] = field(default_factory=list)
    """Guard decisions taken on the call's result (a budget stop at the stopping call), written after it."""

    def budget_view(self) -> dict[str, Any]:
        """The result as the run-progress budget reads it (``isError`` and ``details``)."""
        return recorded_view(self.agent_is_error, self.agent_details, self.ran)


@dataclass
class RecordedRound:
    """One model round: what was sent (when recorded), the reply or the endpoint's errors."""

    number: int
    """The transcript's round number."""
    after_calls: int = 0
    """How many of the run's calls were recorded before this round: its place in the transcript."""
    request: list[dict[str, Any]] | None = None
    """The messages sent since the last round, when the source records them (a ``model_request``)."""
    errors: list[ModelError] = field(default_factory=list)
    """Failed attempts at this round (``model_error`` events, before the reply)."""
    replied: bool = True
    """False when the round has no recorded reply (only its calls, or the endpoint's error)."""
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    """The calls as the model sent them (``model_response.tool_calls``)."""
    finish_reason: str | None = None
    usage: Usage | None = None
    latency_s: float = 0.0
    attempts: int = 0
    model: str | None = None


@dataclass
class RecordedRun:
    """One recorded run: everything an importer read, ready to become a transcript and a folder."""

    format: str
    file: str
    sha256: str
    label: str
    """Which run of the file; also its folder name."""
    prompt: str
    """What the agent was given."""
    calls: list[RecordedCall]
    """Every tool call, in the order the source recorded their results."""
    limits: list[str]
    """What the source does not record, in words (``run_start.imported.limits``)."""
    rounds: list[RecordedRound] = field(default_factory=list)
    agent: str = ""
    run_id: str = ""
    agent_version: str = ""
    model: str = ""
    base_url: str = ""
    context: int = 0
    max_output: int = 0
    workspace: str = ""
    system_prompt: str = ""
    tools: list[str] = field(default_factory=list)
    host: str = ""
    item: str = ""
    """What was asked, as an item id for ``meta.json`` (the importer's choice: e.g. the file's name)."""
    deliverable: Literal["workspace", "answer"] = "workspace"
    """What the product is, as an item's ``deliverable``: files, or a written answer."""
    end_stop: StopEvent | None = None
    """The stop that ended the run where no call shows it (a cut final reply, a full context, a refusal that
    ended the run), written after the last round."""
    receipt: OwnerReceipt | None = None
    """The owner receipt, when the source records the product outcome."""
    outcome: RunOutcome | None = None
    """How the run ended (None: the source does not say; no ``run_end`` is written)."""
    reason: str | None = None
    message: str | None = None
    duration_s: float = 0.0
    usage: Usage | None = None
    """The run's token totals when the source keeps them for the run only (else summed over the rounds)."""
    final_text: str | None = None
    """The model's own last reply, when recorded."""
    delivered: str | None = None
    """What the owner got (``answer.txt``), when recorded."""
    facts: dict[str, Any] = field(default_factory=dict)
    """Other recorded facts for ``meta.json`` (session id, the source's own notes and evidence)."""
    raw: bytes = b""
    """The run's recording, kept beside the transcript as ``session.json``."""


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


def verdict_of(call: RecordedCall) -> TestVerdict | None:
    """What the harness's recognizer makes of a test command that ran (None for anything else)."""
    if not call.shell or not call.finished or not call.ran or call.command is None:
        return None
    if not is_test_command(call.command):
        return None
    return recognize(call.output if call.output is not None else call.text, call.exit_code, call.command)


def settle_by_details(call: RecordedCall) -> RecordedCall:
    """Read an OpenClaw tool result (``isError`` and ``details``): failed when any signal says so (``isError``,
    a failed status, a non-zero ``exitCode``, a nested failure: the budget's own reading), ``error`` for
    ``details.status: error``, ``blocked`` when refused; the exit code, duration, working folder, a file tool's
    path, and the bytes or blocks of a write or edit. ``exec`` is the command tool."""
    raw = call.agent_details or {}
    if not call.ran:
        call.status = "blocked"
    elif raw.get("status") == "error":
        call.status = "error"
    elif is_failed(call.budget_view()):
        call.status = "failed"
    else:
        call.status = "ok"
    call.shell = call.name == "exec"
    command = (call.arguments or {}).get("command")
    call.command = command if isinstance(command, str) else None
    call.exit_code = _int(raw.get("exitCode"))
    duration = raw.get("durationMs")
    call.duration_s = duration / 1000 if isinstance(duration, (int, float)) and not isinstance(duration, bool) else 0.0
    call.cwd = raw["cwd"] if isinstance(raw.get("cwd"), str) else None
    path = (call.arguments or {}).get("path")
    call.path = path if call.name in _FILE_TOOLS and isinstance(path, str) else None
    wrote = _WROTE.match(call.text) if call.name == "write" else None
    replaced = _REPLACED.match(call.text) if call.name == "edit" else None
    call.bytes = int(wrote.group(1)) if wrote else None
    call.replacements = int(replaced.group(1)) if replaced else None
    return call


def settle_by_flags(call: RecordedCall) -> RecordedCall:
    """Read a result whose agent flags errors apart from exit codes (OpenCode, Hermes): ``blocked`` when the
    agent's policy refused it, ``failed`` for a command that exited non-zero or timed out whatever the agent
    flagged, ``error`` for bad input or the tool's own error, else ok. A failed call wrote no bytes."""
    if not call.ran:
        call.status = "blocked"
    elif call.shell and (call.timed_out or call.exit_code not in (None, 0)):
        call.status = "failed"
    elif call.bad_input:
        call.status = "error"
    elif call.agent_is_error:
        call.status = "failed" if call.shell else "error"
    else:
        call.status = "ok"
    if call.status != "ok":
        call.bytes = None
    return call


def closing_stop(run: RecordedRun) -> StopEvent | None:
    """The stop of a run that ended without a guard's stop at a call: the agent's policy refused a call and the
    run ended for it (a stop, as a guard's would be), or the final reply was cut at the output limit (``message``
    says how). Read from how the run ended, so it follows a later change of ``outcome``."""
    refused = [c for c in run.calls if c.finished and c.refusal_reason]
    if run.outcome is not None and refused and run.reason == refused[-1].refusal_reason:
        last = refused[-1]
        return StopEvent(round=len(run.rounds), rule="tool_policy", reason=last.refusal_reason,
                         text=f"the agent's permission policy refused {last.name} and ended the run",
                         call_id=last.call_id)
    if run.outcome == "stopped" and run.reason == "output_limit":
        return output_limit_stop(len(run.rounds), run.message or "the reply was cut at the model's output limit")
    return None
