"""A recorded session as the replay reads it: the owner's request, then model rounds, each with its reply and the
calls it made, each call with what the recording says it returned.

It is read from the normalized transcript (``harness.core.transcript``), whoever recorded the run: the builtin agent
writes one, and every importer turns its format into one (``harness.importers.events.to_events``). So a replay
has one reader, and whatever an importer keeps (the agent's own error flag and details, a Tool Search
envelope) reaches the guard as the recording had it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.core.errors import ReplayError
from harness.guard.receipt import CommandRun, FileChange
from harness.guard.results import SHELL_TOOLS, recorded_view
from harness.guard.verdict import TestVerdict
from harness.core.transcript import (
    Event,
    GuardDecision,
    ModelResponse,
    ReceiptEvent,
    RunEnd,
    RunStart,
    StopEvent,
    ToolCall,
    ToolResult,
)

__all__ = ["MODELED_RULES", "RecordedResult", "ReplayCall", "ReplayRound", "ReplaySession", "session_from_events",
           "host_event"]

MODELED_RULES = frozenset({"budget", "recursive_delete", "coding_loop", "output_limit"})
"""The rules a policy decides. A call the recording's agent refused by another of its rules (a path correction, a
tool policy) stays refused in every replay, as the environment it ran in."""

FILE_TOOLS = {"write": "written", "edit": "changed", "apply_patch": "changed"}


@dataclass(frozen=True)
class RecordedResult:
    """What a call returned in the recording (or, for a counterfactual, what an edit says it returned)."""

    view: Mapping[str, Any]
    """The result as the run-progress budget reads it: ``isError`` and ``details``."""
    ran: bool = True
    """False: the recording's agent refused the call, which did not run (``refused_by`` says which rule)."""
    refused_by: str | None = None
    text: str = ""
    exit_code: int | None = None
    test: TestVerdict | None = None
    path: str | None = None
    """File tools: the path the tool reports (relative to the workspace)."""
    cwd: str | None = None


@dataclass(frozen=True)
class ReplayCall:
    call_id: str
    name: str
    arguments: Mapping[str, Any] | None
    result: RecordedResult | None
    """None: the recording holds no result for the call."""
    inserted: bool = False
    """Added by a counterfactual edit."""


@dataclass(frozen=True)
class ReplayRound:
    number: int
    """The recording's round number (0: it numbered none, so every call is its own round)."""
    calls: tuple[ReplayCall, ...]
    text: str | None = None
    """The reply's text, when the reply was recorded."""
    cut: bool = False
    """The reply stopped at the output limit (``finish_reason`` ``length``): its calls never ran."""


@dataclass(frozen=True)
class ReplaySession:
    source: str
    """The input it came from: a file, or a sweep's attempt folder."""
    name: str
    """Unique among the inputs of one replay: what tables, JSON lines and ``--edit`` call it."""
    sha256: str
    """Of the input file."""
    prompt: str
    workspace: str
    rounds: tuple[ReplayRound, ...]
    final_text: str | None = None
    """What the model said last, when the recording ends with the model's own answer."""
    ended_by_guard: bool = False
    """The recording ends at its own guard's stop: what the model would have done next is not recorded."""
    label: str = ""
    """The run's own name in its source (a file may hold several); ``--edit`` may use it."""
    edits: tuple[str, ...] = ()

    @property
    def calls(self) -> list[ReplayCall]:
        return [call for rnd in self.rounds for call in rnd.calls]

    def with_rounds(self, rounds: Sequence[ReplayRound], edit: str) -> ReplaySession:
        return replace(self, rounds=tuple(rounds), edits=(*self.edits, edit))


def _view(result: ToolResult, ran: bool) -> dict[str, Any]:
    if result.agent_is_error is not None or result.agent_details is not None:
        return recorded_view(result.agent_is_error, result.agent_details, ran)  # an imported result
    return result.details.budget_view(result.is_error)  # the builtin agent's own


def _result(result: ToolResult, refusal: GuardDecision | None, imported: bool) -> RecordedResult:
    ran = result.details.status != "blocked"
    refused_by = None
    if not ran:
        # The builtin agent writes no guard event for a call refused after its budget's stop. An imported call
        # with no refusal recorded before its result is refused by a rule the importer names none for (the
        # stopping call of a budget whose copy was saved after the fuse): kept as the recording has it.
        refused_by = refusal.rule if refusal is not None else ("recorded" if imported else "budget")
    return RecordedResult(view=_view(result, ran), ran=ran, refused_by=refused_by, text=result.text,
                          exit_code=result.details.exit_code, test=result.details.test, path=result.details.path,
                          cwd=result.details.cwd)


def _where(event: Event) -> str:
    return f"line {event.seq}" if event.seq else f"event {event.event}"


def session_from_events(events: Sequence[Event], *, source: str, name: str, sha256: str,
                        label: str = "") -> ReplaySession:
    """The replay's reading of a transcript. ``ReplayError`` when it holds no ``run_start``."""
    start = next((e for e in events if isinstance(e, RunStart)), None)
    if start is None:
        raise ReplayError(source, "", "the transcript has no run_start event: not a session")
    order: list[int] = []
    calls: dict[int, list[ReplayCall]] = {}
    replies: dict[int, ModelResponse] = {}
    pending: dict[str, tuple[int, int]] = {}  # call id -> (round key, position)
    answered: set[str] = set()
    refusal: dict[str, GuardDecision] = {}
    final_text: str | None = None
    stopped = False
    loose = 0  # calls of no recorded round: each its own round, keyed below zero

    def key_of(round_: int) -> int:
        nonlocal loose
        if round_ > 0:
            return round_
        loose += 1
        return -loose

    for event in events:
        if isinstance(event, ModelResponse):
            key = event.round if event.round > 0 else key_of(0)
            if key not in replies and key not in calls:
                order.append(key)
            replies[key] = event
            calls.setdefault(key, [])
        elif isinstance(event, ToolCall):
            if event.call_id in pending:
                # Two calls waiting under one id: which result is whose cannot be told.
                raise ReplayError(source, _where(event), f"call id {event.call_id!r} is given to a second call "
                                  "before the first one's result")
            key = key_of(event.round)
            if key not in calls:
                order.append(key)
                calls[key] = []
            pending[event.call_id] = (key, len(calls[key]))
            calls[key].append(ReplayCall(event.call_id, event.name, event.arguments, None))
        elif isinstance(event, GuardDecision) and event.call_id and event.decision in ("refuse", "stop"):
            refusal.setdefault(event.call_id, event)
        elif isinstance(event, ToolResult):
            if event.call_id not in pending:
                what = "a second result for" if event.call_id in answered else "a result for no earlier call"
                raise ReplayError(source, _where(event), f"{what} call id {event.call_id!r}")
            answered.add(event.call_id)
            key, at = pending.pop(event.call_id)
            calls[key][at] = replace(calls[key][at], result=_result(event, refusal.pop(event.call_id, None),
                                                                    start.imported is not None))
        elif isinstance(event, StopEvent):
            stopped = True
        elif isinstance(event, ReceiptEvent):
            if event.receipt.source == "model":
                final_text = event.receipt.text
            else:
                stopped = True
        elif isinstance(event, RunEnd) and event.outcome != "completed":
            stopped = True
    rounds = []
    for key in order:
        reply = replies.get(key)
        rounds.append(ReplayRound(number=max(key, 0), calls=tuple(calls.get(key, ())),
                                  text=reply.text if reply is not None else None,
                                  cut=reply is not None and reply.finish_reason == "length"))
    return ReplaySession(source=source, name=name, sha256=sha256, prompt=start.prompt, workspace=start.workspace,
                         rounds=tuple(rounds), final_text=final_text, ended_by_guard=stopped, label=label)


def host_event(call: ReplayCall, result: RecordedResult, workspace: str, clock: int,
               response_id: str) -> FileChange | CommandRun | None:
    """What the receipt needs to know about a call that ran, as the builtin agent records it (a file changed, a
    command run); the call's position stands in for the clock, so the order is the recording's."""
    args = call.arguments or {}
    root = workspace or "/workspace"
    if call.name in FILE_TOOLS:
        if result.view.get("isError") is True:
            return None
        path = args.get("path") if isinstance(args.get("path"), str) else result.path
        if not isinstance(path, str) or not path:
            return None
        full = path if path.startswith("/") else posixpath.join(root, path)
        return FileChange(path=full, time=float(clock), change=FILE_TOOLS[call.name],
                          response_id=response_id)
    command = args.get("command")
    if call.name in SHELL_TOOLS and isinstance(command, str):
        workdir = args.get("workdir")
        cwd = workdir if isinstance(workdir, str) and workdir else result.cwd
        return CommandRun(command=command, cwd=cwd, start=float(clock), end=clock + 0.5, output=result.text,
                          exit_code=result.exit_code, response_id=response_id)
    return None

