"""The builtin agent's turn loop, with the guard wired in.

One run is one owner turn: the system prompt (``contract.py``) and the owner's request, then model
rounds until the model answers without a tool call, a guard rule stops the run, or the endpoint
fails. Every step is written to the transcript as it happens (``harness.core.transcript``).

The guard, in the order it acts on a round (the rules themselves live in ``harness.guard``):

* **run-progress budget** (seed 000): ``on_round`` before each model request, ``check_call`` before
  each call, ``on_result`` after each result. When it stops the run, the rest of that reply's calls
  are refused and no further request is made (the stop is sticky).
* **recursive delete** (seed 003): every call is checked before it runs. A refused call does not
  run, every later call of the reply is refused by the latch, and tool use ends: the owner gets the
  receipt ``harness.guard.receipt`` builds from what the tools recorded, never model text.
* **output limit** (seed 002): a reply with ``finish_reason == "length"`` was cut; its tool calls never
  run. ``harness.guard.output_limit`` decides: one continuation turn with the fixed message, or the
  report, or (a passed receipt) delivery unchanged.
* **test verdicts** (seed 003): an ``exec`` of a test command carries its verdict in the result's
  details (``tools.py``), and the latest one decides the receipt's status.

Outcomes: ``completed`` (the model answered) and ``stopped`` (a guard rule or a full context) are the
model's results, exit 0. ``infrastructure`` (the endpoint failed after retries) is the fleet's fault,
exit 75 (EX_TEMPFAIL), so it is retried and never graded as the model's. A run always ends with a
``receipt`` and a ``run_end`` event, and ``answer.txt`` and ``receipt.json`` beside the transcript.
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness import __version__
from harness.core.agents import EXIT_INFRASTRUCTURE
from harness.core.files import atomic_write
from harness.guard import RunProgressBudget, Stop
from harness.guard.output_limit import is_cut, runnable_tool_calls
from harness.guard.policy import DEFAULT_GUARD
from harness.guard.receipt import CommandRun, FileChange
from harness.guard.turn import GuardSession
from harness.core.transcript import (
    GuardDecision,
    ModelError,
    ModelRequest,
    ModelResponse,
    OwnerReceipt,
    ReceiptEvent,
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
from harness.core.version import harness_commit
from workers.host.agent.chat import ChatClient, ContextOverflow, EndpointError, Reply, ReplyToolCall
from workers.host.agent.contract import system_prompt
from workers.host.agent.tools import TOOL_NAMES, TOOL_SPECS, Toolbox, ToolOutcome

__all__ = [
    "TRANSCRIPT_FILE",
    "ANSWER_FILE",
    "RECEIPT_FILE",
    "EXIT_OK",
    "EXIT_INFRASTRUCTURE",
    "EXIT_AGENT_ERROR",
    "Interrupted",
    "RunSettings",
    "run_agent",
]

TRANSCRIPT_FILE = "transcript.jsonl"
ANSWER_FILE = "answer.txt"
RECEIPT_FILE = "receipt.json"

EXIT_OK = 0
# EX_TEMPFAIL, 75: the endpoint failed, not the model; the harness retries the attempt. Declared with the
# builtin kind in harness.core.agents, which the adapter reads the exit code from.
EXIT_AGENT_ERROR = 70
"""EX_SOFTWARE: a bug in the agent itself."""

CHARS_PER_TOKEN = 3
"""Prompt size estimate before the endpoint reports usage: conservative for code and JSON."""
MIN_REPLY_TOKENS = 256
"""Below this much room for a reply, the context is treated as full."""
CONTEXT_FULL_TEXT = (
    "The conversation reached the model's context size ({context} tokens) before the work was finished. "
    "The request is not complete; files saved before that are kept."
)
INVALID_ARGUMENTS_TEXT = (
    "error: the arguments of this call are not a valid JSON object ({problem}); nothing ran. "
    "Send the call again with its arguments as one JSON object."
)


class Interrupted(BaseException):
    """The agent was told to stop (SIGTERM from the launcher on a timeout or a revoke, or SIGINT)."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


@dataclass(frozen=True)
class RunSettings:
    prompt: str
    prompt_file: str
    out_dir: Path
    model: str
    base_url: str
    context: int
    max_output: int
    stream: bool
    timeout_s: float
    retries: int
    exec_timeout_s: float


@dataclass(frozen=True)
class _End:
    outcome: Literal["completed", "stopped", "infrastructure", "interrupted", "agent_error"]
    receipt: OwnerReceipt
    exit_code: int = EXIT_OK
    reason: str | None = None
    message: str | None = None


def _parse_arguments(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """(arguments, None), or (None, the problem) when they are not one JSON object."""
    if not raw.strip():
        return {}, None  # some servers send "" for a call without arguments
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at character {exc.pos}"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    return value, None


class _Run:
    def __init__(self, settings: RunSettings, client: ChatClient, toolbox: Toolbox, writer: TranscriptWriter,
                 run_id: str) -> None:
        self.settings = settings
        self.client = client
        self.toolbox = toolbox
        self.writer = writer
        self.run_id = run_id
        self.root = str(toolbox.workspace.root)
        self.system = system_prompt(self.root, settings.max_output, settings.context)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": settings.prompt},
        ]
        self.recorded = 0
        """Messages already written in a model_request event."""
        self.tools_chars = len(json.dumps(TOOL_SPECS))
        self.measured: tuple[int, int] | None = None
        """(prompt tokens the endpoint reported, conversation characters at that request)."""
        self.request_chars = 0
        self.guard = GuardSession(settings.prompt, self.root, DEFAULT_GUARD)
        budget = self.guard.budget
        assert budget is not None, "the shipped guard runs the budget"
        self.budget: RunProgressBudget = budget
        self.continuing = False
        self.call_ids: set[str] = set()
        self.rounds = 0
        self.tool_calls = 0
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}

    # -- the loop ------------------------------------------------------------------------------------

    def start(self) -> None:
        s = self.settings
        self.writer.append(RunStart(
            run_id=self.run_id, agent="builtin", agent_version=__version__, harness_commit=harness_commit(),
            model=s.model, base_url=s.base_url, context=s.context, max_output=s.max_output, stream=s.stream,
            timeout_s=s.timeout_s, retries=s.retries, exec_timeout_s=s.exec_timeout_s, workspace=self.root,
            prompt_file=s.prompt_file, prompt=s.prompt, system_prompt=self.system, tools=list(TOOL_NAMES),
            budget_policy=self.budget.policy.model_dump(mode="json"), python=platform.python_version(),
            platform=platform.platform(),
        ))

    def run(self) -> _End:
        while True:
            self.rounds += 1
            round_ = self.rounds
            decision = self.budget.on_round()
            if decision.stop is not None:
                self._guard(round_, "budget", "stop", reason=decision.stop.reason, text=decision.stop.text,
                            data=self.budget.snapshot())
                return self._budget_stop(round_, decision.stop)
            estimate = self._prompt_estimate()
            room = self.settings.context - estimate
            if room < min(MIN_REPLY_TOKENS, self.settings.max_output):
                return self._context_full(round_, f"about {estimate} tokens leave no room for a reply")
            max_tokens = min(self.settings.max_output, room)  # the output limit, unless the context is nearly full
            self._record_request(round_, estimate, max_tokens)
            try:
                reply = self.client.complete(self.messages, TOOL_SPECS, max_tokens,
                                             lambda attempt, exc, delay: self._record_error(round_, attempt, exc, delay))
            except ContextOverflow as exc:
                return self._context_full(round_, str(exc))
            except EndpointError as exc:
                noun = "attempt" if exc.attempts == 1 else "attempts"
                message = f"POST {self.client.base_url}/chat/completions failed after {exc.attempts} {noun}: {exc}"
                return _End("infrastructure", OwnerReceipt(status="none", text="", source="infrastructure"),
                            EXIT_INFRASTRUCTURE, exc.reason, message)
            runnable = runnable_tool_calls(reply.finish_reason, self._record_response(round_, reply))
            if is_cut(reply.finish_reason):
                end = self._on_cut(round_, reply)
            elif runnable:
                end = self._run_calls(round_, reply, runnable)
            else:
                end = self._completed(reply.text)
            if end is not None:
                return end

    # -- model requests ------------------------------------------------------------------------------

    def _conversation_chars(self) -> int:
        return len(json.dumps(self.messages, ensure_ascii=False)) + self.tools_chars

    def _prompt_estimate(self) -> int:
        """Tokens of the next prompt: the endpoint's last count plus an estimate of what was added since
        (or an estimate of everything, before the endpoint reported any usage)."""
        chars = self._conversation_chars()
        if self.measured is None:
            return math.ceil(chars / CHARS_PER_TOKEN)
        tokens, at_chars = self.measured
        return tokens + math.ceil(max(0, chars - at_chars) / CHARS_PER_TOKEN)

    def _record_request(self, round_: int, estimate: int, max_tokens: int) -> None:
        added = self.messages[self.recorded:]
        self.recorded = len(self.messages)
        self.request_chars = self._conversation_chars()
        self.writer.append(ModelRequest(round=round_, max_tokens=max_tokens, stream=self.settings.stream,
                                        prompt_tokens_estimate=estimate, messages_added=added))

    def _record_error(self, round_: int, attempt: int, exc: EndpointError, delay: float | None) -> None:
        self.writer.append(ModelError(round=round_, attempt=attempt, kind=exc.kind, status=exc.status,
                                      message=str(exc), retry_in_s=delay))

    def _record_response(self, round_: int, reply: Reply) -> list[ReplyToolCall]:
        """Record the reply; returns its tool calls with ids unique in the run (the budget de-duplicates
        results by call id, so a server that repeats or omits ids must not make results vanish)."""
        calls = []
        for n, call in enumerate(reply.tool_calls, start=1):
            call_id = call.id if call.id and call.id not in self.call_ids else f"fleet_call_{round_}_{n}"
            self.call_ids.add(call_id)
            calls.append(ReplyToolCall(call_id, call.name, call.arguments))
        usage = Usage(**reply.usage) if reply.usage else None
        if usage is not None:
            for key in self.usage:
                self.usage[key] += getattr(usage, key)
            if usage.prompt_tokens:
                self.measured = (usage.prompt_tokens, self.request_chars)
        self.writer.append(ModelResponse(
            round=round_, text=reply.text, reasoning=reply.reasoning,
            tool_calls=[ToolCallRecord(id=c.id, name=c.name, arguments=c.arguments) for c in calls],
            finish_reason=reply.finish_reason, usage=usage, latency_s=reply.latency_s, attempts=reply.attempts,
            model=reply.model,
        ))
        return calls

    # -- tool calls ----------------------------------------------------------------------------------

    def _run_calls(self, round_: int, reply: Reply, calls: list[ReplyToolCall]) -> _End | None:
        parsed = [_parse_arguments(call.arguments) for call in calls]
        self.messages.append({
            "role": "assistant",
            "content": reply.text or None,
            "tool_calls": [
                # Servers re-parse the arguments of earlier calls: invalid or empty JSON goes back as {}.
                {"id": call.id, "type": "function",
                 "function": {"name": call.name,
                              "arguments": call.arguments if error is None and call.arguments.strip() else "{}"}}
                for call, (_, error) in zip(calls, parsed)
            ],
        })
        stop: Stop | None = None
        refused = False
        for call, (arguments, error) in zip(calls, parsed):
            self.tool_calls += 1
            self.writer.append(ToolCall(round=round_, call_id=call.id, name=call.name, arguments=arguments,
                                        arguments_error=error))
            outcome, observed = self._one_call(round_, call, arguments, error)
            refused = refused or self.guard.deletion_refused
            self.writer.append(ToolResult(round=round_, call_id=call.id, name=call.name, is_error=outcome.is_error,
                                          text=outcome.text, details=outcome.details))
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.text})
            if observed:
                decision = self.guard.after_result(call.id, call.name, arguments or {}, outcome.details.budget_view(outcome.is_error),
                                                   outcome.details.test, outcome.details.exit_code)
                assert decision is not None
                data = self.budget.snapshot()
                if decision.deferral is not None:
                    data["deferral"] = {"action": decision.deferral.action, "counter": decision.deferral.counter,
                                        "failed_call_id": decision.deferral.failed_call_id}
                if decision.stop is not None:  # later calls of this reply are refused by check_call
                    stop = decision.stop
                    self._guard(round_, "budget", "stop", call.id, stop.reason, stop.text, data)
                    self.writer.append(StopEvent(round=round_, rule="budget", reason=stop.reason, text=stop.text,
                                                 call_id=call.id))
                else:
                    self._guard(round_, "budget", "allow", call.id, data=data)
        if refused:
            return self._refusal_receipt()
        if stop is not None:
            return self._budget_stop(round_, stop, recorded=True)
        if self.guard.coding_stopped:
            return _End("stopped", self.guard.coding_stop_receipt(), reason="coding_loop")
        return None

    def _one_call(self, round_: int, call: ReplyToolCall, arguments: dict[str, Any] | None,
                  error: str | None) -> tuple[ToolOutcome, bool]:
        """Guard, then run one call. Returns the outcome and whether the budget observes it (a call
        a guard refused ran nothing, so it is neither a success nor a failure of the model's work)."""
        check = self.guard.before_call(call.name, arguments or {})
        if not check.allowed:
            if check.rule == "recursive_delete":
                self._guard(round_, "recursive_delete", "refuse", call.id, check.reason, check.text,
                            {"fragment": check.fragment} if check.fragment else {})
                if check.stops:
                    self.writer.append(StopEvent(round=round_, rule="recursive_delete", reason="recursive_delete",
                                                 text=f"refused recursive delete: {check.fragment}", call_id=call.id))
            elif check.rule == "coding_loop":
                self._guard(round_, "coding_loop", "stop" if check.stops else "refuse", call.id, check.reason,
                            check.text)
                if check.stops:
                    self.writer.append(StopEvent(round=round_, rule="coding_loop", reason="coding_loop",
                                                 text=check.text or "", call_id=call.id))
            # a budget refusal after its stop: the stop event was written when it stopped
            return ToolOutcome(True, check.text or "", ToolDetails(status="blocked")), False
        if error is not None or arguments is None:
            return ToolOutcome(True, INVALID_ARGUMENTS_TEXT.format(problem=error), ToolDetails(status="error")), True
        started = time.time()
        outcome = self.toolbox.run(call.name, arguments)
        self._host_event(round_, call.name, arguments, outcome, started)
        return outcome, True

    def _host_event(self, round_: int, name: str, arguments: dict[str, Any], outcome: ToolOutcome,
                    started: float) -> None:
        """What the receipt needs to know about a call that ran: files changed and commands run."""
        response_id = f"round-{round_}"
        details = outcome.details
        if name in ("write", "edit") and not outcome.is_error and details.path is not None:
            self.guard.record(FileChange(
                path=str(Path(self.root, details.path)), time=time.time(),
                change="written" if name == "write" else "changed", response_id=response_id,
            ))
        elif name == "exec" and details.cwd is not None:
            self.guard.record(CommandRun(
                command=str(arguments.get("command", "")), cwd=details.cwd, start=started, end=time.time(),
                output=outcome.output or "", exit_code=details.exit_code, response_id=response_id,
            ))

    # -- endings -------------------------------------------------------------------------------------

    def _completed(self, text: str) -> _End:
        return _End("completed", self.guard.completed(text))

    def _refusal_receipt(self) -> _End:
        return _End("stopped", self.guard.refusal_receipt(), reason="recursive_delete")

    def _budget_stop(self, round_: int, stop: Stop, recorded: bool = False) -> _End:
        if not recorded:
            self.writer.append(StopEvent(round=round_, rule="budget", reason=stop.reason, text=stop.text,
                                         call_id=stop.call_id))
        return _End("stopped", self.guard.budget_stop_receipt(stop), reason=stop.reason)

    def _context_full(self, round_: int, why: str) -> _End:
        self.writer.append(StopEvent(round=round_, rule="context", reason="context_full", text=f"context full: {why}"))
        text = CONTEXT_FULL_TEXT.format(context=self.settings.context)
        return _End("stopped", OwnerReceipt(status="failed", text=text, source="context_full",
                                            test=self.guard.latest_verdict(), reasons=("context_full",)),
                    reason="context_full", message=why)

    def _on_cut(self, round_: int, reply: Reply) -> _End | None:
        """A reply cut at the output limit: its calls never run; continue once, deliver, or report."""
        decision = self.guard.on_cut(self.continuing)
        dropped = [call.name for call in reply.tool_calls]
        self._guard(round_, "output_limit", decision.action, reason="cut_at_output_limit",
                    text=decision.message, data={"refusals": list(decision.refusals), "calls_not_run": dropped})
        if decision.action == "continue" and decision.message:
            self.continuing = True
            self.messages.append({"role": "assistant", "content": reply.text})
            self.messages.append({"role": "user", "content": decision.message})
            return None
        if decision.action == "deliver":
            return self._completed(reply.text)
        self.writer.append(StopEvent(round=round_, rule="output_limit", reason="output_limit",
                                     text="cut at output limit"))
        return _End("stopped", self.guard.cut_report(decision, self.continuing), reason="output_limit")

    def _guard(self, round_: int, rule: Literal["budget", "recursive_delete", "output_limit", "coding_loop"],
               decision: Literal["allow", "stop", "refuse", "continue", "report", "deliver"],
               call_id: str | None = None, reason: str | None = None, text: str | None = None,
               data: dict[str, Any] | None = None) -> None:
        self.writer.append(GuardDecision(round=round_, rule=rule, decision=decision, call_id=call_id,
                                         reason=reason, text=text, data=data or {}))

    def finish(self, end: _End, started: float) -> int:
        """Deliver: the receipt event, ``answer.txt`` and ``receipt.json``, then ``run_end``."""
        self.writer.append(ReceiptEvent(receipt=end.receipt))
        out = self.settings.out_dir
        atomic_write(out / ANSWER_FILE, end.receipt.text.encode("utf-8"))
        atomic_write(out / RECEIPT_FILE, (end.receipt.model_dump_json(indent=2) + "\n").encode("utf-8"))
        self.writer.append(RunEnd(
            outcome=end.outcome, reason=end.reason, message=end.message, exit_code=end.exit_code,
            rounds=self.rounds, tool_calls=self.tool_calls, duration_s=round(time.monotonic() - started, 3),
            usage=Usage(**self.usage),
        ))
        return end.exit_code


def run_agent(settings: RunSettings, client: ChatClient, toolbox: Toolbox, run_id: str) -> tuple[int, str]:
    """Run the agent to its end; returns (exit code, one summary line). Writes the transcript,
    ``answer.txt`` and ``receipt.json`` into ``settings.out_dir``. Never raises for a model's or an
    endpoint's failure; an unexpected error in the agent itself is recorded as ``agent_error``."""
    started = time.monotonic()
    with TranscriptWriter(settings.out_dir / TRANSCRIPT_FILE) as writer:
        run = _Run(settings, client, toolbox, writer, run_id)
        try:
            run.start()
            end = run.run()
        except Interrupted as exc:
            end = _End("interrupted", OwnerReceipt(status="none", text="", source="interrupted"),
                       128 + (15 if exc.signal_name == "SIGTERM" else 2), exc.signal_name.lower(),
                       f"stopped by {exc.signal_name}")
        except Exception as exc:  # noqa: BLE001 - a bug in the agent: recorded, and its traceback kept
            traceback.print_exc(file=sys.stderr)
            end = _End("agent_error", OwnerReceipt(status="none", text="", source="agent_error"),
                       EXIT_AGENT_ERROR, type(exc).__name__, str(exc))
        code = run.finish(end, started)
    summary = f"{end.outcome}" + (f" ({end.reason})" if end.reason else "") + f": receipt {end.receipt.status}"
    if end.message and end.outcome != "completed":
        summary += f": {end.message}"
    return code, summary
