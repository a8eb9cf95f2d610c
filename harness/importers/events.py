"""The one road from a recorded run to the normalized transcript: ``to_events(RecordedRun) -> [Event]``.

Every importer (Pixel fleet, OpenClaw, OpenCode, Hermes) and every real-agent adapter's ``normalize`` ends
here, so a transcript says the same thing the same way whoever recorded the run: ``run_start`` with where it
came from, each round's ``model_request`` / ``model_error`` / ``model_response`` in its place among the calls,
each call's ``tool_call``, the guard's decisions on it and its ``tool_result``, then the stop that ended the
run, the owner receipt and ``run_end``. ``seq`` and ``ts`` are stamped by the one transcript writer.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.importers.recorded import RecordedCall, RecordedRound, RecordedRun, verdict_of
from harness.core.transcript import (
    Event,
    ImportedFrom,
    ModelRequest,
    ModelResponse,
    ReceiptEvent,
    RunEnd,
    RunStart,
    ToolCall,
    ToolDetails,
    ToolResult,
    TranscriptWriter,
    Usage,
)

__all__ = ["to_events", "transcript_bytes", "write_runs", "folder_name"]


def _run_start(run: RecordedRun) -> RunStart:
    return RunStart(
        run_id=run.run_id or run.label, agent=run.agent, agent_version=run.agent_version, harness_commit="",
        model=run.model, base_url=run.base_url, context=run.context, max_output=run.max_output, stream=False,
        timeout_s=0.0, retries=0, exec_timeout_s=0.0, workspace=run.workspace, prompt_file="", prompt=run.prompt,
        system_prompt=run.system_prompt, tools=list(run.tools), budget_policy={}, python="", platform="",
        imported=ImportedFrom(format=run.format, file=run.file, sha256=run.sha256, run=run.label, limits=run.limits),
    )


def _round_events(rnd: RecordedRound) -> Iterator[Event]:
    if rnd.request is not None:
        yield ModelRequest(round=rnd.number, max_tokens=0, stream=False, prompt_tokens_estimate=0,
                           messages_added=rnd.request)
    yield from (error.model_copy(update={"round": rnd.number}) for error in rnd.errors)
    if rnd.replied:
        yield ModelResponse(round=rnd.number, text=rnd.text, reasoning=rnd.reasoning, tool_calls=rnd.tool_calls,
                            finish_reason=rnd.finish_reason, usage=rnd.usage, latency_s=round(rnd.latency_s, 3),
                            attempts=rnd.attempts, model=rnd.model)


def _call_events(call: RecordedCall) -> Iterator[Event]:
    yield ToolCall(round=call.round, call_id=call.call_id, name=call.called_as or call.name, arguments=call.arguments,
                   arguments_error=call.arguments_error)
    if not call.finished:
        return
    yield from call.guard
    ok = call.status == "ok"
    details = ToolDetails(
        status=call.status, duration_s=round(call.duration_s, 3), exit_code=call.exit_code, timed_out=call.timed_out,
        cwd=call.cwd, path=call.path if ok else None, bytes=call.bytes, truncated=call.truncated,
        replacements=call.replacements, test=verdict_of(call),
    )
    yield ToolResult(round=call.round, call_id=call.call_id, name=call.name, is_error=not ok, text=call.text,
                     details=details, agent_is_error=call.agent_is_error, agent_details=call.agent_details)
    yield from call.guard_after


def _usage_total(rounds: Sequence[RecordedRound]) -> Usage:
    used = [r.usage for r in rounds if r.usage is not None]
    return Usage(prompt_tokens=sum(u.prompt_tokens for u in used),
                 completion_tokens=sum(u.completion_tokens for u in used),
                 total_tokens=sum(u.total_tokens for u in used))


def to_events(run: RecordedRun) -> list[Event]:
    """The run as normalized transcript events (``seq`` and ``ts`` are stamped by the writer)."""
    events: list[Event] = [_run_start(run)]
    written = 0
    for rnd in run.rounds:
        for call in run.calls[written:rnd.after_calls]:
            events.extend(_call_events(call))
        written = max(written, rnd.after_calls)
        events.extend(_round_events(rnd))
    for call in run.calls[written:]:
        events.extend(_call_events(call))
    if run.end_stop is not None:
        events.append(run.end_stop)
    if run.receipt is not None:
        events.append(ReceiptEvent(receipt=run.receipt))
    if run.outcome is not None:
        # A round is counted once however many of its calls were recorded; round 0 is "not recorded".
        rounds = {r.number for r in run.rounds if r.number} | {c.round for c in run.calls if c.round}
        events.append(RunEnd(
            outcome=run.outcome, reason=run.reason, message=run.message, exit_code=None, rounds=len(rounds),
            tool_calls=len(run.calls), duration_s=round(run.duration_s, 3),
            usage=run.usage if run.usage is not None else _usage_total(run.rounds),
        ))
    return events


def transcript_bytes(events: Sequence[Event]) -> bytes:
    """The events as ``transcript.jsonl`` bytes, written by the one transcript writer (an adapter's
    ``normalize``)."""
    with tempfile.TemporaryDirectory(prefix="fleet-transcript-") as tmp:
        path = Path(tmp) / "transcript.jsonl"
        with TranscriptWriter(path) as writer:
            for event in events:
                writer.append(event)
        return path.read_bytes()


def folder_name(label: str) -> str:
    """A run's folder name: its label, with anything but letters, digits, '.', '_' and '-' replaced (importers
    that check their labels already give plain names)."""
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in label)[:128] or "session"


def write_runs(runs: Sequence[RecordedRun], out_dir: str | os.PathLike[str]) -> list[Path]:
    """One attempt-like folder per run under ``out_dir`` (``harness.importers.folder``), named by its label. The
    caller has read every run first, so bad input writes nothing."""
    # Here, not at the top: writing a folder needs the records' models and the grader, reading a session (replay,
    # the agents' normalize) does not.
    from harness.importers.folder import write_run_folder  # lazy: the grader and records, to write only

    out = Path(out_dir)
    return [write_run_folder(run, to_events(run), out / folder_name(run.label)) for run in runs]
