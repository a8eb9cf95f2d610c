"""A transcript as the cell page shows it: a readable timeline, built once from the parsed events.

Pure: events in (``harness.core.transcript``), a ``Timeline`` out; no file is read here. Each model reply is a turn
with its token counts and latency, holding the tool calls it asked for, each with its arguments, its result
and the guard decisions about it; model errors, guard decisions about no call (an output-limit cut), the stop,
the receipt and run_end are entries of their own, in file order. Long texts are cut (``Clip``): the raw
transcript is one download away, and a page of 1,000 events must stay a page.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal, Sequence

from pydantic import BaseModel, Field

from harness.core.transcript import (Event, GuardDecision, ModelError, ModelRequest, ModelResponse, ReceiptEvent, RunEnd,
                                RunStart, StopEvent, ToolCall, ToolResult, Usage)

__all__ = ["Clip", "clip", "GuardStep", "ToolStep", "Turn", "ErrorStep", "StopStep", "ReceiptStep", "EndStep",
           "StartStep", "Entry", "Timeline", "build_timeline", "TEXT_CAP", "SMALL_CAP"]

TEXT_CAP = 64 * 1024
"""Characters of a model reply, reasoning, a tool result or an argument shown in the page; the rest is in the
raw transcript."""
SMALL_CAP = 600
"""Characters of a guard's counters (``data``): a summary line, not a dump."""


class Clip(BaseModel):
    """A text as shown: at most its first ``TEXT_CAP`` characters, and how many more there were."""

    text: str
    more: int = 0

    @property
    def long(self) -> bool:
        """Long enough to be folded (a file's content as a write call's argument)."""
        return self.more > 0 or len(self.text) > 1500 or self.text.count("\n") > 20


def clip(text: str, cap: int = TEXT_CAP) -> Clip:
    return Clip(text=text, more=0) if len(text) <= cap else Clip(text=text[:cap], more=len(text) - cap)


class GuardStep(BaseModel):
    seq: int
    kind: Literal["guard"] = "guard"
    round: int
    rule: str
    decision: str
    reason: str = ""
    text: Clip | None = None
    data: str = Field(default="", description="The rule's counters as compact JSON, cut to SMALL_CAP.")
    call_id: str = ""

    @property
    def quiet(self) -> bool:
        """The budget's "allow" after every tool result: shown small, it is most of a long transcript."""
        return self.decision == "allow"


class ToolStep(BaseModel):
    """One tool call: as the model asked for it, as the agent parsed it, and what it returned."""

    seq: int = Field(description="The tool_call event's seq; the reply's when the call never reached the agent.")
    kind: Literal["tool"] = "tool"
    round: int
    call_id: str
    name: str
    arguments: list[tuple[str, Clip]] = Field(default_factory=list, description="Each argument: a string as it is, "
                                              "anything else as JSON.")
    raw_arguments: Clip | None = Field(default=None, description="The arguments' text as the model sent it, when "
                                       "they were not a JSON object (or the call was never handled).")
    arguments_error: str = ""
    handled: bool = Field(default=False, description="A tool_call event was written: the agent took the call up.")
    result_seq: int = 0
    result: Clip | None = None
    is_error: bool = False
    status: str = ""
    exit_code: int | None = None
    duration_s: float | None = None
    timed_out: bool = False
    truncated: bool = False
    path: str = ""
    test: str = Field(default="", description="A recognized test command's verdict, e.g. 'pytest passed 5, failed 0'.")
    guards: list[GuardStep] = Field(default_factory=list)


class Turn(BaseModel):
    """One model reply, with the calls it asked for."""

    seq: int
    kind: Literal["turn"] = "turn"
    round: int
    at: str
    offset_s: float | None
    text: Clip
    reasoning: Clip | None = None
    finish_reason: str = ""
    usage: Usage | None = None
    latency_s: float
    tokens_per_s: float | None = Field(default=None, description="Completion tokens over the reply's latency.")
    attempts: int
    model: str = ""
    prompt_tokens_estimate: int | None = Field(default=None, description="The agent's estimate before asking.")
    tools: list[ToolStep] = Field(default_factory=list)


class ErrorStep(BaseModel):
    seq: int
    kind: Literal["error"] = "error"
    round: int
    attempt: int
    error_kind: str
    status: int | None = None
    message: Clip
    retry_in_s: float | None = None


class StopStep(BaseModel):
    seq: int
    kind: Literal["stop"] = "stop"
    round: int
    rule: str
    reason: str
    text: Clip
    call_id: str = ""


class ReceiptStep(BaseModel):
    seq: int
    kind: Literal["receipt"] = "receipt"
    status: str
    source: str
    text: Clip
    test_state: str = ""
    test: str = ""
    reasons: list[str] = Field(default_factory=list)


class EndStep(BaseModel):
    seq: int
    kind: Literal["end"] = "end"
    outcome: str
    reason: str = ""
    message: Clip | None = None
    exit_code: int | None = None
    rounds: int
    tool_calls: int
    duration_s: float
    usage: Usage


class StartStep(BaseModel):
    seq: int
    kind: Literal["start"] = "start"
    at: str
    agent: str
    agent_version: str
    model: str
    base_url: str
    context: int
    max_output: int
    tools: list[str]
    prompt: Clip
    system_prompt: Clip
    imported: str = Field(default="", description="An imported session: its format and file.")
    limits: list[str] = Field(default_factory=list, description="What an imported session's source did not record.")


Entry = Turn | ToolStep | GuardStep | ErrorStep | StopStep | ReceiptStep | EndStep


class Timeline(BaseModel):
    events: int
    start: StartStep | None = None
    entries: list[Entry] = Field(default_factory=list)
    receipt: ReceiptStep | None = None
    end: EndStep | None = None
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    usage: Usage = Field(default_factory=Usage, description="Summed over the replies that reported it.")
    model_latency_s: float = 0.0


def _time(ts: str) -> datetime | None:
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def _value(v: Any) -> Clip:
    return clip(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, indent=1))


def _test(verdict: Any) -> str:
    if verdict is None:
        return ""
    return f"{verdict.runner or 'tests'} {verdict.verdict}: passed {verdict.passed}, failed {verdict.failed}"


def _guard(e: GuardDecision) -> GuardStep:
    data = json.dumps(e.data, ensure_ascii=False, separators=(", ", ": ")) if e.data else ""
    return GuardStep(seq=e.seq, round=e.round, rule=e.rule, decision=e.decision, reason=e.reason or "",
                     text=clip(e.text) if e.text else None, data=data if len(data) <= SMALL_CAP else data[:SMALL_CAP] + " …",
                     call_id=e.call_id or "")


def build_timeline(events: Sequence[Event]) -> Timeline:
    """The timeline of a parsed transcript, in one pass over its events."""
    t = Timeline(events=len(events))
    began: datetime | None = None
    tools: dict[str, ToolStep] = {}
    turns: dict[int, Turn] = {}
    estimates: dict[int, int] = {}
    step: ToolStep | None
    for e in events:
        if isinstance(e, RunStart):
            began = _time(e.ts)
            t.start = StartStep(
                seq=e.seq, at=e.ts, agent=e.agent, agent_version=e.agent_version, model=e.model, base_url=e.base_url,
                context=e.context, max_output=e.max_output, tools=list(e.tools), prompt=clip(e.prompt),
                system_prompt=clip(e.system_prompt),
                imported=f"{e.imported.format}: {e.imported.file} (run {e.imported.run})" if e.imported else "",
                limits=list(e.imported.limits) if e.imported else [])
        elif isinstance(e, ModelRequest):
            estimates[e.round] = e.prompt_tokens_estimate
        elif isinstance(e, ModelResponse):
            at = _time(e.ts)
            usage = e.usage
            turn = Turn(seq=e.seq, round=e.round, at=e.ts, offset_s=(at - began).total_seconds() if at and began else None,
                        text=clip(e.text), reasoning=clip(e.reasoning) if e.reasoning else None,
                        finish_reason=e.finish_reason or "", usage=usage, latency_s=e.latency_s,
                        tokens_per_s=usage.completion_tokens / e.latency_s if usage and e.latency_s > 0 else None,
                        attempts=e.attempts, model=e.model or "", prompt_tokens_estimate=estimates.get(e.round))
            for call in e.tool_calls:
                announced = ToolStep(seq=e.seq, round=e.round, call_id=call.id, name=call.name,
                                     raw_arguments=clip(call.arguments))
                turn.tools.append(announced)
                tools[call.id] = announced
            turns[e.round] = turn
            t.entries.append(turn)
            t.turns += 1
            if usage is not None:
                t.usage = Usage(prompt_tokens=t.usage.prompt_tokens + usage.prompt_tokens,
                                completion_tokens=t.usage.completion_tokens + usage.completion_tokens,
                                total_tokens=t.usage.total_tokens + usage.total_tokens)
            t.model_latency_s += e.latency_s
        elif isinstance(e, ToolCall):
            step = tools.get(e.call_id)
            if step is None or step.handled:
                # A call no reply announced (an imported session may record only the calls): its own entry, in
                # its round's turn when there is one.
                step = ToolStep(seq=e.seq, round=e.round, call_id=e.call_id, name=e.name)
                tools[e.call_id] = step
                owner = turns.get(e.round)
                if owner is not None:
                    owner.tools.append(step)
                else:
                    t.entries.append(step)
            step.seq, step.name, step.handled = e.seq, e.name, True
            if e.arguments is not None:
                step.arguments = [(k, _value(v)) for k, v in e.arguments.items()]
                step.raw_arguments = None
            step.arguments_error = e.arguments_error or ""
            t.tool_calls += 1
        elif isinstance(e, ToolResult):
            step = tools.get(e.call_id)
            if step is None:
                step = ToolStep(seq=e.seq, round=e.round, call_id=e.call_id, name=e.name)
                tools[e.call_id] = step
                t.entries.append(step)
            d = e.details
            step.result_seq, step.result, step.is_error = e.seq, clip(e.text), e.is_error
            step.status, step.exit_code, step.duration_s = d.status, d.exit_code, d.duration_s
            step.timed_out, step.truncated, step.path, step.test = d.timed_out, d.truncated, d.path or "", _test(d.test)
            if e.is_error:
                t.tool_errors += 1
        elif isinstance(e, GuardDecision):
            g = _guard(e)
            owner_step = tools.get(e.call_id) if e.call_id else None
            if owner_step is not None:
                owner_step.guards.append(g)
            else:
                t.entries.append(g)
        elif isinstance(e, ModelError):
            t.entries.append(ErrorStep(seq=e.seq, round=e.round, attempt=e.attempt, error_kind=e.kind, status=e.status,
                                       message=clip(e.message), retry_in_s=e.retry_in_s))
        elif isinstance(e, StopEvent):
            t.entries.append(StopStep(seq=e.seq, round=e.round, rule=e.rule, reason=e.reason, text=clip(e.text),
                                      call_id=e.call_id or ""))
        elif isinstance(e, ReceiptEvent):
            r = e.receipt
            t.receipt = ReceiptStep(seq=e.seq, status=r.status, source=r.source, text=clip(r.text),
                                    test_state=r.test_state or "", test=_test(r.test), reasons=list(r.reasons))
            t.entries.append(t.receipt)
        elif isinstance(e, RunEnd):
            t.end = EndStep(seq=e.seq, outcome=e.outcome, reason=e.reason or "",
                            message=clip(e.message) if e.message else None, exit_code=e.exit_code, rounds=e.rounds,
                            tool_calls=e.tool_calls, duration_s=e.duration_s, usage=e.usage)
            t.entries.append(t.end)
    return t
