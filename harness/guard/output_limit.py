"""A reply cut at the output limit (seed 002): one continuation, otherwise a plain report.

Why: on strixy (Qwen3.6-35B-A3B, 8192 output tokens) "make me a cool looking webpage with a forest
theme" produced one whole-page ``write`` call; the reply stopped at ``finish_reason == "length"``
after 8192 tokens, the unfinished call never ran, nothing was saved and the owner got nothing. On
tower1 the sales-dashboard prompt was graded NOTHING with the stop cut-at-output-limit. Whether a
turn is cut depends on how large the model's reply happens to be, so the guard:

1. *prevents*: the prompt states the per-reply output limit (``output_budget_line``);
2. *continues first*: an owner turn that ended on a cut reply, whose result is not already settled,
   gets exactly one continuation turn carrying the fixed ``OUTPUT_LIMIT_CONTINUATION_PROMPT``;
3. *reports otherwise*: when no continuation ran, or the continuation was cut too, the owner gets a
   plain report in words that fit the request (workspace task or written answer).

The unfinished tool call of a cut reply never runs (``runnable_tool_calls``): the agent runs tool
calls only after a complete reply.

The continuation is refused when the cut run's own tools established something the continuation
would not inherit (it starts with a fresh budget and no test result of its own, so it could claim a
pass nothing checked, or retry stopped work): a latest test run that failed or is still running, any
preview attempt, an unrequested visual write or an edit of the published page, a stopped lane or
coding loop, a spent denial fuse. Such a turn keeps its own receipt with the report leading.

A verified (passed) or pending receipt is never reported over: only the closing reply was cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = [
    "OUTPUT_LIMIT_CONTINUATION_PROMPT",
    "OUTPUT_LIMIT_WORKSPACE_TEXT",
    "OUTPUT_LIMIT_ANSWER_TEXT",
    "OUTPUT_LIMIT_CONTINUED_TEXT",
    "OUTPUT_LIMIT_CONTINUATION_FAILED",
    "INGRESS_RECEIPT_BOUND",
    "is_cut",
    "runnable_tool_calls",
    "output_budget_line",
    "CutTurn",
    "OutputLimitDecision",
    "decide",
    "report_text",
    "continuation_failed_text",
    "ContinuationLedger",
]

OUTPUT_LIMIT_CONTINUATION_PROMPT = (
    "ODS internal continuation: The previous reply reached the model output limit before it finished, "
    "so its unfinished tool call did not run and nothing from it was saved. Continue the owner's request now in "
    "smaller steps. Do not repeat the cut-off call as one large write: split large content across several files or "
    "several smaller writes (for a web page, separate index.html, styles.css and script.js, each kept short), then "
    "finish the remaining requested steps and give the owner a visible answer. Do not repeat tool actions that "
    "already completed; build on their saved results. For a long written answer, give a complete but more concise "
    "answer."
)
"""The fixed message of the one continuation turn. It never repeats the owner's message or a tool
call, and it has no per-turn variable text (the team's guard holds the same bytes)."""

OUTPUT_LIMIT_WORKSPACE_TEXT = (
    "Pixel's reply reached the model's output limit before it finished, so anything that reply was still writing, "
    "such as a large file, was not saved. Files saved by earlier steps are kept. "
    "Ask Pixel to continue in smaller steps, with large content split across several smaller files."
)
"""The report for a workspace task: a requested file change, or one the run made."""

OUTPUT_LIMIT_ANSWER_TEXT = (
    "Pixel's answer reached the model's output limit before it finished and was cut off. "
    "Ask for a shorter answer, or ask Pixel to answer in parts."
)
"""The report for a written answer: it never says a file write was cut, and reads correctly after
the delivered part of the answer."""

OUTPUT_LIMIT_CONTINUED_TEXT = (
    "Pixel already continued this request once automatically after an earlier reply was cut off."
)
"""Leads the report when the continuation was cut too."""

OUTPUT_LIMIT_CONTINUATION_FAILED = (
    "Pixel's automatic continuation after the output limit did not complete (gateway HTTP {status}). "
    "It may have acted before it stopped; check what it changed before asking Pixel to continue."
)
"""Added to the cut turn's report when the gateway answered the continuation with a non-200 status."""

INGRESS_RECEIPT_BOUND = 32 * 1024
"""The ingress's receipt bound: the report plus the run's own receipt text must fit, else the report alone."""

CUT_FINISH_REASON = "length"

T = TypeVar("T")


def is_cut(finish_reason: str | None) -> bool:
    """Whether a model reply stopped at the output limit (OpenAI ``finish_reason == "length"``)."""
    return finish_reason == CUT_FINISH_REASON


def runnable_tool_calls(finish_reason: str | None, tool_calls: Sequence[T]) -> list[T]:
    """The tool calls of a reply that may run: none from a cut reply (its last call is unfinished)."""
    return [] if is_cut(finish_reason) else list(tool_calls)


def output_budget_line(max_output_tokens: int | None) -> str:
    """The prevention line for the prompt contract; empty when the host's limit is not configured.

    It depends only on the host's model configuration, so its bytes are the same on every turn (the
    local server's prompt cache survives).
    """
    if not isinstance(max_output_tokens, int) or isinstance(max_output_tokens, bool) or max_output_tokens < 1:
        return ""
    part = max_output_tokens // 2
    return (
        f"One reply, including its thinking and tool-call arguments, can hold at most about {max_output_tokens} "
        "output tokens; a longer reply is cut off and its unfinished tool call does not run. This limits each reply, "
        "not the size of your work: write large content as several files or several smaller writes (for a web page, "
        f"separate index.html, styles.css and script.js), each well under {part} tokens (about {part * 3} characters)."
    )


class CutTurn(BaseModel):
    """What the guard knows about an owner turn when it ends. Defaults describe a plain owner turn."""

    model_config = ConfigDict(frozen=True)

    cut: bool
    """The run's final saved reply stopped at the output limit (also after earlier tool calls)."""
    owner_chat_turn: bool = True
    """An owner chat turn; heartbeat, cron and team-worker runs are never continued or reported."""
    is_continuation: bool = False
    """This run is itself the continuation: it never gets another pass, and a cut says so."""
    continuation_used: bool = False
    """The owner turn already had a continuation of any kind."""
    cancelled: bool = False
    stop: Literal["progress_budget", "web_loop", "recursive_delete"] | None = None
    waiting_on_owner: bool = False
    """Waiting on owner questions or operations."""
    durable_request: bool = False
    """A host-operation, GitHub-extension or exact-download request (durable receipts, own continuations)."""
    latest_test: Literal["none", "passed", "failed", "running"] = "none"
    preview_attempted: bool = False
    """Any preview attempt: failed, stale or verified."""
    unrequested_visual_write: bool = False
    """A successful visual write whose preview the owner's words did not already require."""
    edited_published_page: bool = False
    lane_stopped: bool = False
    """A stopped mixed-task lane."""
    coding_loop_stopped: bool = False
    denial_fuse_spent: bool = False
    """A spent unrequested-Operations or private-network denial fuse."""
    receipt_status: Literal["passed", "failed", "pending", "none"] = "none"
    """The run's own delivery receipt."""
    incomplete_turn_text: bool = True
    """The agent replaced the cut reply with its incomplete-turn text (False: it delivered the cut text)."""
    workspace_task: bool = False
    """A requested file change or one the run made; otherwise the request is a written answer."""


class OutputLimitDecision(BaseModel):
    """``deliver``: unchanged; ``continue``: submit ``message`` as one new turn; ``report``: deliver the report."""

    model_config = ConfigDict(frozen=True)

    action: Literal["deliver", "continue", "report"]
    message: str | None = None
    refusals: tuple[str, ...] = ()
    """Why no continuation was granted (when action is report)."""


def _obligations(turn: CutTurn) -> list[str]:
    """What the cut run's own tools established that a fresh continuation run would not inherit."""
    found = []
    if turn.latest_test in ("failed", "running"):
        found.append(f"test_{turn.latest_test}")
    if turn.preview_attempted:
        found.append("preview_attempted")
    if turn.unrequested_visual_write:
        found.append("unrequested_visual_write")
    if turn.edited_published_page:
        found.append("edited_published_page")
    if turn.lane_stopped:
        found.append("lane_stopped")
    if turn.coding_loop_stopped:
        found.append("coding_loop_stopped")
    if turn.denial_fuse_spent:
        found.append("denial_fuse_spent")
    return found


def decide(turn: CutTurn) -> OutputLimitDecision:
    """Continue once, report, or leave the delivery unchanged."""
    if not turn.cut or not turn.owner_chat_turn or turn.receipt_status in ("passed", "pending"):
        return OutputLimitDecision(action="deliver")
    refusals: list[str] = []
    if turn.is_continuation:
        refusals.append("is_continuation")
    if turn.continuation_used:
        refusals.append("continuation_used")
    if turn.cancelled:
        refusals.append("cancelled")
    if turn.stop is not None:
        refusals.append(f"stopped_{turn.stop}")
    if turn.waiting_on_owner:
        refusals.append("waiting_on_owner")
    if turn.durable_request:
        refusals.append("durable_request")
    refusals.extend(_obligations(turn))
    if not (turn.incomplete_turn_text or turn.workspace_task):
        refusals.append("written_answer_delivered")  # keep the text the agent delivered; report after it
    if refusals:
        return OutputLimitDecision(action="report", refusals=tuple(refusals))
    return OutputLimitDecision(action="continue", message=OUTPUT_LIMIT_CONTINUATION_PROMPT)


def report_text(turn: CutTurn, own_receipt_text: str | None = None, delivered_text: str | None = None) -> str:
    """The failed receipt's text for a reported turn.

    A written answer with no receipt of its own keeps what the agent delivered, with the report
    after it ("after-reply"); an empty reply, NO_REPLY or the incomplete-turn text is replaced by the
    report alone. Otherwise the report leads, followed by the run's own receipt text when both fit
    the 32 KiB ingress bound, else the report stands alone.
    """
    report = (f"{OUTPUT_LIMIT_CONTINUED_TEXT} " if turn.is_continuation else "") + (
        OUTPUT_LIMIT_WORKSPACE_TEXT if turn.workspace_task else OUTPUT_LIMIT_ANSWER_TEXT
    )
    if not turn.workspace_task and turn.receipt_status == "none" and not own_receipt_text:
        kept = (delivered_text or "").strip()
        if kept and kept != "NO_REPLY" and not turn.incomplete_turn_text:
            combined = f"{kept}\n\n{report}"
            return combined if len(combined) <= INGRESS_RECEIPT_BOUND else report
        return report
    combined = "\n\n".join(part for part in (report, own_receipt_text) if part)
    return combined if len(combined) <= INGRESS_RECEIPT_BOUND else report


def continuation_failed_text(report: str, status: int) -> str:
    """The cut turn's report plus the continuation-failure line, within the same bound."""
    line = OUTPUT_LIMIT_CONTINUATION_FAILED.format(status=status)
    combined = f"{report}\n\n{line}"
    return combined if len(combined) <= INGRESS_RECEIPT_BOUND else line


class ContinuationLedger:
    """At most one continuation per owner turn: the grant is used up when it is given.

    Key each decision by the owner turn (chat and turn id); the continuation run decides with
    ``is_continuation=True`` under the same key, so a cut continuation is reported, never continued.
    """

    def __init__(self) -> None:
        self._granted: set[str] = set()

    def decide(self, turn_key: str, turn: CutTurn) -> OutputLimitDecision:
        """Decide one turn end; a granted continuation is recorded before it is returned."""
        if turn_key in self._granted and not turn.continuation_used:
            turn = turn.model_copy(update={"continuation_used": True})
        decision = decide(turn)
        if decision.action == "continue":
            self._granted.add(turn_key)
        return decision

    def granted(self, turn_key: str) -> bool:
        """Whether this owner turn already used its continuation."""
        return turn_key in self._granted
