"""A coding agent's own session store, read as model rounds, and its normalized transcript events.

OpenCode and Hermes record what the pixel-fleet files do not: every model round (its text, reasoning,
tool calls and token usage), the prompt, the model and the end of the run. Their importers read their
own formats (``harness/importers/opencode.py``, ``hermes.py``) into ``ChatSession``; this module turns
that into ``harness.transcript`` events the same way for both, so "failed" means one thing:

* a command that exited non-zero (or timed out) is ``failed``, whatever the agent flagged;
* a call the agent's own policy refused (it never ran) is ``blocked``, with a ``tool_policy`` guard event;
* a call the agent rejected for its input (unknown tool, bad arguments, a missing file) is ``error``;
* the agent's own flag and details stay beside it (``agent_is_error``, ``agent_details``).

Nothing is guessed: a field the store does not hold is empty and named in ``limits``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.guard.verdict import TestVerdict, is_test_command, recognize
from harness.importers.folder import write_run_folder
from harness.importers.recorded import RecordedCall, RecordedRun, output_limit_stop
from harness.transcript import (
    Event,
    GuardDecision,
    ImportedFrom,
    ModelError,
    ModelResponse,
    RunEnd,
    RunStart,
    StopEvent,
    ToolCall,
    ToolCallRecord,
    ToolDetails,
    ToolResult,
    TranscriptWriter,
    Usage,
)

__all__ = ["SessionCall", "SessionRound", "ChatSession", "RunOutcome", "session_events", "call_status",
           "transcript_bytes", "write_session_folders"]

RunOutcome = Literal["completed", "stopped", "infrastructure", "interrupted", "agent_error"]


@dataclass
class SessionCall:
    """One tool call and what it returned, as the agent stored it."""

    call_id: str
    name: str
    arguments: dict[str, Any] | None
    """The parsed arguments (None when they were not a JSON object: ``arguments_error`` says why)."""
    arguments_text: str
    """The arguments as the model sent them (JSON text), for ``model_response.tool_calls``."""
    arguments_error: str | None = None
    text: str = ""
    """What the model saw."""
    finished: bool = True
    """False when the run ended before the call returned (no ``tool_result`` is written)."""
    refused: str | None = None
    """The agent's own policy refused the call, which never ran: the reason code (e.g. ``permission_rejected``)."""
    bad_input: bool = False
    """The agent rejected the call's input (unknown tool, invalid arguments, a file that is not there)."""
    shell: bool = False
    """A command tool (its exit code decides failure)."""
    agent_is_error: bool | None = None
    agent_details: dict[str, Any] | None = None
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    cwd: str | None = None
    path: str | None = None
    """File tools: the path relative to the workspace (absolute when outside it)."""
    bytes: int | None = None
    truncated: bool = False
    command: str | None = None
    output: str | None = None
    """A command's output, when stored apart from ``text`` (for the test verdict)."""

    def verdict(self) -> TestVerdict | None:
        """The harness's own verdict on a test command that ran (None for anything else)."""
        if not self.shell or not self.finished or self.refused or self.command is None:
            return None
        if not is_test_command(self.command):
            return None
        return recognize(self.output if self.output is not None else self.text, self.exit_code, self.command)


@dataclass
class SessionRound:
    """One model round: the reply and the calls it made."""

    text: str = ""
    reasoning: str | None = None
    calls: list[SessionCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    latency_s: float = 0.0
    model: str | None = None
    errors: list[ModelError] = field(default_factory=list)
    """Failed attempts at this round that the agent retried (``model_error`` events before the reply)."""


@dataclass
class ChatSession:
    """One recorded run of an agent that keeps its own session store."""

    format: str
    file: str
    sha256: str
    label: str
    """Which run of the file; also its folder name in an import."""
    agent: str
    prompt: str
    rounds: list[SessionRound]
    limits: list[str]
    run_id: str = ""
    agent_version: str = ""
    model: str = ""
    base_url: str = ""
    context: int = 0
    max_output: int = 0
    workspace: str = ""
    system_prompt: str = ""
    tools: list[str] = field(default_factory=list)
    outcome: RunOutcome | None = None
    """How the run ended (None: the store does not say; no ``run_end`` is written)."""
    reason: str | None = None
    message: str | None = None
    duration_s: float = 0.0
    usage: Usage | None = None
    """The run's token totals when the store keeps them for the run only (else summed over the rounds)."""
    final_text: str | None = None
    """What the owner got: the text of the model's last reply (None when there was none)."""
    facts: dict[str, Any] = field(default_factory=dict)
    """Other recorded facts for an import's ``meta.json`` (session id, title, parent session ...)."""
    raw: bytes = b""
    """The run's own recording (``session.json`` of an import folder)."""


def call_status(call: SessionCall) -> Literal["ok", "failed", "error", "blocked"]:
    """ok, failed (a command that exited non-zero or timed out, whatever the agent flagged), error (bad
    input or the tool's own error), blocked (refused by the agent's policy, never ran)."""
    if call.refused:
        return "blocked"
    if call.shell and (call.timed_out or (call.exit_code not in (None, 0))):
        return "failed"
    if call.bad_input:
        return "error"
    if call.agent_is_error:
        return "failed" if call.shell else "error"
    return "ok"


def _details(call: SessionCall, test: TestVerdict | None) -> ToolDetails:
    status = call_status(call)
    return ToolDetails(
        status=status, duration_s=round(call.duration_s, 3), exit_code=call.exit_code, timed_out=call.timed_out,
        cwd=call.cwd, path=call.path if status == "ok" else None, bytes=call.bytes if status == "ok" else None,
        truncated=call.truncated, test=test,
    )


def _usage_total(rounds: list[SessionRound]) -> Usage:
    used = [r.usage for r in rounds if r.usage is not None]
    return Usage(prompt_tokens=sum(u.prompt_tokens for u in used),
                 completion_tokens=sum(u.completion_tokens for u in used),
                 total_tokens=sum(u.total_tokens for u in used))


def session_events(session: ChatSession) -> list[Event]:
    """The session as normalized transcript events (``seq`` and ``ts`` are stamped by the writer)."""
    events: list[Event] = [RunStart(
        run_id=session.run_id or session.label, agent=session.agent, agent_version=session.agent_version,
        harness_commit="", model=session.model, base_url=session.base_url, context=session.context,
        max_output=session.max_output, stream=False, timeout_s=0.0, retries=0, exec_timeout_s=0.0,
        workspace=session.workspace, prompt_file="", prompt=session.prompt, system_prompt=session.system_prompt,
        tools=list(session.tools), budget_policy={}, python="", platform="",
        imported=ImportedFrom(format=session.format, file=session.file, sha256=session.sha256, run=session.label,
                              limits=session.limits),
    )]
    calls = 0
    for number, rnd in enumerate(session.rounds, start=1):
        events.extend(e.model_copy(update={"round": number}) for e in rnd.errors)
        events.append(ModelResponse(
            round=number, text=rnd.text, reasoning=rnd.reasoning,
            tool_calls=[ToolCallRecord(id=c.call_id, name=c.name, arguments=c.arguments_text) for c in rnd.calls],
            finish_reason=rnd.finish_reason, usage=rnd.usage, latency_s=round(rnd.latency_s, 3), attempts=1,
            model=rnd.model,
        ))
        for call in rnd.calls:
            calls += 1
            events.append(ToolCall(round=number, call_id=call.call_id, name=call.name, arguments=call.arguments,
                                   arguments_error=call.arguments_error))
            if not call.finished:
                continue
            if call.refused:
                events.append(GuardDecision(round=number, rule="tool_policy", decision="refuse", call_id=call.call_id,
                                            reason=call.refused, text=call.text))
            test = call.verdict()
            details = _details(call, test)
            events.append(ToolResult(
                round=number, call_id=call.call_id, name=call.name, is_error=details.status != "ok", text=call.text,
                details=details, agent_is_error=call.agent_is_error, agent_details=call.agent_details,
            ))
    refused = [c for r in session.rounds for c in r.calls if c.finished and c.refused]
    if session.outcome is not None and refused and session.reason == refused[-1].refused:
        # The agent's policy refused a call and the run ended for it: a stop, as a guard's would be.
        last = refused[-1]
        events.append(StopEvent(round=len(session.rounds), rule="tool_policy", reason=last.refused,
                                text=f"the agent's permission policy refused {last.name} and ended the run",
                                call_id=last.call_id))
    if session.outcome == "stopped" and session.reason == "output_limit":
        events.append(output_limit_stop(len(session.rounds),
                                        session.message or "the reply was cut at the model's output limit"))
    if session.outcome is not None:
        events.append(RunEnd(
            outcome=session.outcome, reason=session.reason, message=session.message, exit_code=None,
            rounds=len(session.rounds), tool_calls=calls, duration_s=round(session.duration_s, 3),
            usage=session.usage or _usage_total(session.rounds),
        ))
    return events


def transcript_bytes(events: Sequence[Event]) -> bytes:
    """The events as ``transcript.jsonl`` bytes, written by the one transcript writer."""
    with tempfile.TemporaryDirectory(prefix="fleet-transcript-") as tmp:
        path = Path(tmp) / "transcript.jsonl"
        with TranscriptWriter(path) as writer:
            for event in events:
                writer.append(event)
        return path.read_bytes()


def _recorded_run(session: ChatSession) -> RecordedRun:
    """What ``write_run_folder`` needs to know of a session beside its events."""
    calls = [RecordedCall(call_id=c.call_id, name=c.name, arguments=c.arguments or {})
             for r in session.rounds for c in r.calls]
    return RecordedRun(format=session.format, file=session.file, sha256=session.sha256, label=session.label,
                       prompt=session.prompt, calls=calls, limits=session.limits, agent=session.agent,
                       run_id=session.run_id, delivered=session.final_text, facts=session.facts, raw=session.raw)


def _folder_name(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in label)[:128] or "session"


def write_session_folders(sessions: Sequence[ChatSession], out_dir: str | os.PathLike[str]) -> list[Path]:
    """One attempt-like folder per session under ``out_dir`` (``harness.importers.folder``), named by its label."""
    out = Path(out_dir)
    return [write_run_folder(_recorded_run(s), session_events(s), out / _folder_name(s.label)) for s in sessions]
