"""A run recorded by another agent, as an importer reads it, and its normalized transcript events.

Importers differ in how they read a format; what a recorded run *is* does not: calls with their
arguments and results, refusals by the agent's own guard, what the owner got. So every importer fills
``RecordedRun`` and this module turns it into ``harness.transcript`` events, the same way for all.

Nothing is guessed. A field the source did not record gets an empty placeholder ("", 0, None) and a
line in ``limits``, which the transcript's ``run_start.imported`` carries.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from harness.guard.results import is_failed
from harness.guard.verdict import TestVerdict, is_test_command, recognize
from harness.transcript import (
    Event,
    GuardDecision,
    ImportedFrom,
    ModelResponse,
    OwnerReceipt,
    ReceiptEvent,
    ReceiptStatus,
    RunEnd,
    RunStart,
    StopEvent,
    ToolCall,
    ToolDetails,
    ToolResult,
    Usage,
)

__all__ = ["RecordedCall", "RecordedRun", "GuardPlan", "GuardPlanner", "ReceiptSource", "to_events", "tool_details",
           "verdict_of", "OUTPUT_LIMIT_STOP", "output_limit_stop"]

OUTPUT_LIMIT_STOP = "cut at output limit"
"""The stop's text for a final reply cut at the output limit, the builtin agent's words (seed 002: "graded
NOTHING with stop cut-at-output-limit")."""


def output_limit_stop(round_: int, text: str = OUTPUT_LIMIT_STOP) -> StopEvent:
    """The run's stop when its final reply was cut at the output limit: the same rule and reason code for every
    agent, imported or run (``output_limit``), so a grade shows the stop whoever recorded it."""
    return StopEvent(round=round_, rule="output_limit", reason="output_limit", text=text)

ReceiptSource = Literal["model", "refusal_receipt", "budget_stop", "agent_guard"]

_WROTE = re.compile(r"^Successfully wrote (\d+) bytes")
_REPLACED = re.compile(r"^Successfully replaced (\d+) block")
_FILE_TOOLS = ("write", "edit", "read", "apply_patch")


@dataclass(frozen=True)
class RecordedCall:
    """One tool call and its result, as the source recorded them."""

    call_id: str
    name: str
    """The tool the model called (``tool_call`` for a Tool Search transport)."""
    arguments: dict[str, Any]
    """As recorded; where the source kept only a digest or a length, that is what is here."""
    round: int = 0
    """The model round (the source's own number); 0 when not recorded."""
    text: str = ""
    """The result text as recorded ("" when the source kept none)."""
    agent_is_error: bool | None = None
    agent_details: dict[str, Any] | None = None
    ran: bool = True
    """False when a guard refused the call: it did not run."""
    refusal: str | None = None
    """A refused call's refusal text (None when the source did not record it)."""
    output: str | None = None
    """The command's output when recorded apart from ``text`` (for the test verdict)."""
    recorded_n: int | None = None
    """The source's own number for the call, when it numbers them."""
    refused_by_budget_stop: bool = False
    """The source marks the call as refused by a budget stop that came before it."""

    def budget_view(self) -> dict[str, Any]:
        """The result as the run-progress budget reads it (``isError`` and ``details``)."""
        details = dict(self.agent_details or {})
        if not self.ran and "status" not in details:
            details["status"] = "blocked"
        return {"isError": self.agent_is_error is True or not self.ran, "details": details}

    def command(self) -> str | None:
        command = self.arguments.get("command")
        return command if isinstance(command, str) else None

    def exit_code(self) -> int | None:
        """The command's recorded exit code (``details.exitCode``), when it is an integer."""
        return _int((self.agent_details or {}).get("exitCode"))


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
    limits: list[str]
    agent: str = ""
    run_id: str = ""
    host: str = ""
    item: str = ""
    """What was asked, as an item id for ``meta.json`` (the importer's choice: e.g. the file's name)."""
    deliverable: Literal["workspace", "answer"] = "workspace"
    """What the product is, as an item's ``deliverable``: files, or a written answer."""
    final_text: str | None = None
    """The model's own last reply, when recorded."""
    final_stop_reason: str | None = None
    final_error: str | None = None
    delivered: str | None = None
    """What the owner got (``answer.txt``), when recorded."""
    delivered_status: ReceiptStatus | None = None
    """The product outcome of what the owner got, when recorded."""
    facts: dict[str, Any] = field(default_factory=dict)
    """Other recorded facts for ``meta.json`` (session id, the source's own notes and evidence)."""
    raw: bytes = b""
    """The run's recording, kept beside the transcript as ``session.json``."""


@dataclass
class GuardPlan:
    """The guard events of a run, by call index: before the call's result, and after it."""

    before: dict[int, list[GuardDecision | StopEvent]] = field(default_factory=dict)
    after: dict[int, list[GuardDecision | StopEvent]] = field(default_factory=dict)
    stop: StopEvent | None = None


GuardPlanner = Callable[[Sequence[RecordedCall], Sequence[TestVerdict | None]], GuardPlan]
"""Reads an agent's own guard texts in the calls: what it refused and where it stopped the run."""


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


def verdict_of(call: RecordedCall) -> TestVerdict | None:
    """What the harness's recognizer makes of a test command that ran (None for anything else)."""
    command = call.command()
    if not call.ran or call.name != "exec" or command is None or not is_test_command(command):
        return None
    return recognize(call.output if call.output is not None else call.text, call.exit_code(), command)


def _details(call: RecordedCall, test: TestVerdict | None) -> ToolDetails:
    raw = call.agent_details or {}
    status: Literal["ok", "failed", "error", "blocked"]
    if not call.ran:
        status = "blocked"
    elif raw.get("status") == "error":
        status = "error"
    elif is_failed(call.budget_view()):
        status = "failed"
    else:
        status = "ok"
    duration = raw.get("durationMs")
    seconds = duration / 1000 if isinstance(duration, (int, float)) and not isinstance(duration, bool) else 0.0
    path = call.arguments.get("path")
    wrote = _WROTE.match(call.text) if call.name == "write" else None
    replaced = _REPLACED.match(call.text) if call.name == "edit" else None
    return ToolDetails(
        status=status,
        duration_s=round(seconds, 3),
        exit_code=_int(raw.get("exitCode")),
        cwd=raw["cwd"] if isinstance(raw.get("cwd"), str) else None,
        path=path if status == "ok" and call.name in _FILE_TOOLS and isinstance(path, str) else None,
        bytes=int(wrote.group(1)) if wrote else None,
        replacements=int(replaced.group(1)) if replaced else None,
        test=test,
    )


def tool_details(call: RecordedCall, test: TestVerdict | None) -> ToolDetails:
    """The normalized ``details`` of a recorded call's result (status, exit code, path, bytes ...), for an
    importer that builds its events itself: the same mapping ``to_events`` uses."""
    return _details(call, test)


def to_events(run: RecordedRun, plan_guard: GuardPlanner, receipt_source: Callable[[RecordedRun], ReceiptSource]
              ) -> list[Event]:
    """The run as normalized transcript events (``seq`` and ``ts`` are stamped by the writer)."""
    tests = [verdict_of(call) for call in run.calls]
    plan = plan_guard(run.calls, tests)
    events: list[Event] = [RunStart(
        run_id=run.run_id or run.label, agent=run.agent, agent_version="", harness_commit="", model="", base_url="",
        context=0, max_output=0, stream=False, timeout_s=0.0, retries=0, exec_timeout_s=0.0, workspace="",
        prompt_file="", prompt=run.prompt, system_prompt="", tools=[], budget_policy={}, python="", platform="",
        imported=ImportedFrom(format=run.format, file=run.file, sha256=run.sha256, run=run.label, limits=run.limits),
    )]
    for index, (call, test) in enumerate(zip(run.calls, tests)):
        events.append(ToolCall(round=call.round, call_id=call.call_id, name=call.name, arguments=call.arguments))
        events.extend(plan.before.get(index, []))
        details = _details(call, test)
        events.append(ToolResult(
            round=call.round, call_id=call.call_id, name=call.name, is_error=details.status != "ok", text=call.text,
            details=details, agent_is_error=call.agent_is_error, agent_details=call.agent_details,
        ))
        events.extend(plan.after.get(index, []))
    last_round = max((call.round for call in run.calls), default=0)
    if run.final_text is not None:
        events.append(ModelResponse(round=last_round, text=run.final_text, tool_calls=[],
                                    finish_reason=run.final_stop_reason, usage=None, latency_s=0.0, attempts=0,
                                    model=None))
    stop = plan.stop
    if stop is None and run.final_stop_reason == "length":
        # The final reply was cut at the output limit (stopReason length): that ended the run. A guard stop
        # recorded earlier stays the run's one stop.
        stop = output_limit_stop(last_round)
        events.append(stop)
    if run.delivered is not None and run.delivered_status is not None:
        latest = next((t for t in reversed(tests) if t is not None), None)
        events.append(ReceiptEvent(receipt=OwnerReceipt(status=run.delivered_status, text=run.delivered,
                                                        source=receipt_source(run), test=latest)))
    outcome: Literal["completed", "stopped", "interrupted"] | None = None
    if stop is not None:
        outcome = "stopped"
    elif run.final_stop_reason == "aborted":
        outcome = "interrupted"
    elif run.final_text is not None or run.final_stop_reason is not None:
        outcome = "completed"
    if outcome is not None:
        message = run.final_error or (f"the last model call ended: {run.final_stop_reason}"
                                      if run.final_stop_reason and outcome != "completed" else None)
        events.append(RunEnd(
            outcome=outcome, reason=stop.reason if stop else None, message=message, exit_code=None,
            rounds=len({call.round for call in run.calls if call.round}), tool_calls=len(run.calls), duration_s=0.0,
            usage=Usage(),
        ))
    return events
