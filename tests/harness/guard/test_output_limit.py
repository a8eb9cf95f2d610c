"""A reply cut at the output limit: prevention line, one continuation, the worded report."""

from __future__ import annotations

import pytest

from harness.guard.output_limit import (
    INGRESS_RECEIPT_BOUND,
    OUTPUT_LIMIT_ANSWER_TEXT,
    OUTPUT_LIMIT_CONTINUATION_PROMPT,
    OUTPUT_LIMIT_CONTINUED_TEXT,
    OUTPUT_LIMIT_WORKSPACE_TEXT,
    ContinuationLedger,
    CutTurn,
    continuation_failed_text,
    decide,
    is_cut,
    output_budget_line,
    report_text,
    runnable_tool_calls,
)

# Seed 002's owner-visible texts, verbatim.
SEED_WORKSPACE = (
    "Pixel's reply reached the model's output limit before it finished, so anything that reply was still writing, "
    "such as a large file, was not saved. Files saved by earlier steps are kept. Ask Pixel to continue in smaller "
    "steps, with large content split across several smaller files."
)
SEED_ANSWER = (
    "Pixel's answer reached the model's output limit before it finished and was cut off. "
    "Ask for a shorter answer, or ask Pixel to answer in parts."
)
SEED_CONTINUED = "Pixel already continued this request once automatically after an earlier reply was cut off."
SEED_STRIXY_LINE = (
    "One reply, including its thinking and tool-call arguments, can hold at most about 8192 output tokens; a longer "
    "reply is cut off and its unfinished tool call does not run. This limits each reply, not the size of your work: "
    "write large content as several files or several smaller writes (for a web page, separate index.html, styles.css "
    "and script.js), each well under 4096 tokens (about 12288 characters)."
)
SEED_CONTINUATION_FAILED = (
    "Pixel's automatic continuation after the output limit did not complete (gateway HTTP 502). It may have acted "
    "before it stopped; check what it changed before asking Pixel to continue."
)

INCOMPLETE_TURN_TEXT = "⚠️ Agent couldn't generate a response. Please try again."

# strixy, 2026-09-25: one sentence, then the whole forest page in one write call, cut at 8192 tokens.
STRIXY_CUT = CutTurn(cut=True, workspace_task=True, incomplete_turn_text=True)


def test_texts_are_worded_as_in_the_seed() -> None:
    assert OUTPUT_LIMIT_WORKSPACE_TEXT == SEED_WORKSPACE
    assert OUTPUT_LIMIT_ANSWER_TEXT == SEED_ANSWER
    assert OUTPUT_LIMIT_CONTINUED_TEXT == SEED_CONTINUED
    assert continuation_failed_text("", 502).endswith(SEED_CONTINUATION_FAILED)
    # The fixed continuation message: no owner text, no tool call, no per-turn variable.
    assert OUTPUT_LIMIT_CONTINUATION_PROMPT.startswith("ODS internal continuation: ")
    assert "smaller steps" in OUTPUT_LIMIT_CONTINUATION_PROMPT
    assert "index.html, styles.css and script.js" in OUTPUT_LIMIT_CONTINUATION_PROMPT
    assert not any(char.isdigit() for char in OUTPUT_LIMIT_CONTINUATION_PROMPT)


def test_prevention_line_states_the_hosts_limit() -> None:
    assert output_budget_line(8192) == SEED_STRIXY_LINE
    assert output_budget_line(8192) == output_budget_line(8192)  # byte-stable per host
    assert "at most about 4096 output tokens" in output_budget_line(4096)
    for missing in (None, 0, -1, True):
        assert output_budget_line(missing) == ""  # type: ignore[arg-type]


def test_a_cut_reply_is_detected_and_its_unfinished_tool_call_never_runs() -> None:
    write = {"name": "write", "arguments": '{"path": "Playground/forest/index.html", "content": "<!doctype html>'}
    assert is_cut("length")
    assert not is_cut("stop") and not is_cut("tool_calls") and not is_cut(None)
    assert runnable_tool_calls("length", [write]) == []
    assert runnable_tool_calls("tool_calls", [write]) == [write]


def test_strixy_cut_workspace_task_gets_one_continuation_with_the_fixed_message() -> None:
    decision = decide(STRIXY_CUT)
    assert decision.action == "continue"
    assert decision.message == OUTPUT_LIMIT_CONTINUATION_PROMPT


def test_a_cut_text_answer_replaced_by_the_incomplete_turn_text_is_continued() -> None:
    assert decide(CutTurn(cut=True, workspace_task=False, incomplete_turn_text=True)).action == "continue"


def test_at_most_one_continuation_per_owner_turn() -> None:
    ledger = ContinuationLedger()
    assert ledger.decide("chat-1:turn-1", STRIXY_CUT).action == "continue"
    assert ledger.granted("chat-1:turn-1")
    # The same owner turn asks again: the grant was used up when it was given.
    again = ledger.decide("chat-1:turn-1", STRIXY_CUT)
    assert again.action == "report" and "continuation_used" in again.refusals
    # The continuation run itself is cut too: reported, never continued, and it says so.
    cut_again = STRIXY_CUT.model_copy(update={"is_continuation": True})
    decision = ledger.decide("chat-1:turn-1", cut_again)
    assert decision.action == "report" and "is_continuation" in decision.refusals
    assert report_text(cut_again) == f"{SEED_CONTINUED} {SEED_WORKSPACE}"
    assert report_text(cut_again.model_copy(update={"workspace_task": False})) == f"{SEED_CONTINUED} {SEED_ANSWER}"
    # Another owner turn has its own pass.
    assert ledger.decide("chat-1:turn-2", STRIXY_CUT).action == "continue"


@pytest.mark.parametrize(
    ("update", "refusal"),
    [
        ({"latest_test": "failed"}, "test_failed"),
        ({"latest_test": "running"}, "test_running"),
        ({"lane_stopped": True}, "lane_stopped"),
        ({"coding_loop_stopped": True}, "coding_loop_stopped"),
        ({"preview_attempted": True}, "preview_attempted"),
        ({"unrequested_visual_write": True}, "unrequested_visual_write"),
        ({"edited_published_page": True}, "edited_published_page"),
        ({"denial_fuse_spent": True}, "denial_fuse_spent"),
        ({"cancelled": True}, "cancelled"),
        ({"stop": "progress_budget"}, "stopped_progress_budget"),
        ({"stop": "web_loop"}, "stopped_web_loop"),
        ({"stop": "recursive_delete"}, "stopped_recursive_delete"),
        ({"waiting_on_owner": True}, "waiting_on_owner"),
        ({"durable_request": True}, "durable_request"),
    ],
)
def test_no_continuation_when_the_run_established_something_it_would_not_inherit(update: dict, refusal: str) -> None:
    turn = STRIXY_CUT.model_copy(update={**update, "receipt_status": "failed"})
    decision = decide(turn)
    assert decision.action == "report" and refusal in decision.refusals
    # It keeps its own receipt, with the report leading.
    own = "Pixel could not complete this task successfully because the latest verification check failed."
    assert report_text(turn, own) == f"{SEED_WORKSPACE}\n\n{own}"


def test_a_passed_test_run_does_not_block_the_continuation() -> None:
    assert decide(STRIXY_CUT.model_copy(update={"latest_test": "passed"})).action == "continue"


def test_a_verified_or_pending_result_is_never_reported_over() -> None:
    for status in ("passed", "pending"):
        assert decide(STRIXY_CUT.model_copy(update={"receipt_status": status})).action == "deliver"


def test_heartbeat_cron_and_team_runs_and_uncut_turns_are_unchanged() -> None:
    assert decide(STRIXY_CUT.model_copy(update={"owner_chat_turn": False})).action == "deliver"
    assert decide(CutTurn(cut=False, workspace_task=True)).action == "deliver"


def test_a_written_answer_whose_own_text_was_delivered_keeps_it_with_the_report_after() -> None:
    turn = CutTurn(cut=True, workspace_task=False, incomplete_turn_text=False)
    decision = decide(turn)
    assert decision.action == "report" and "written_answer_delivered" in decision.refusals
    partial = "The three main causes of the fall of Rome were: 1. economic decline, 2. military"
    assert report_text(turn, delivered_text=partial) == f"{partial}\n\n{SEED_ANSWER}"
    # In place of an empty reply, NO_REPLY or the incomplete-turn text: the report alone.
    for replaced in ("", "NO_REPLY", None):
        assert report_text(turn, delivered_text=replaced) == SEED_ANSWER
    incomplete = turn.model_copy(update={"incomplete_turn_text": True, "continuation_used": True})
    assert report_text(incomplete, delivered_text=INCOMPLETE_TURN_TEXT) == SEED_ANSWER


def test_a_workspace_task_after_a_tool_error_is_still_continued() -> None:
    # After a tool error the agent delivers the cut reply's own text; a workspace task continues anyway.
    assert decide(CutTurn(cut=True, workspace_task=True, incomplete_turn_text=False)).action == "continue"


def test_the_report_and_the_runs_receipt_must_fit_the_ingress_bound() -> None:
    turn = STRIXY_CUT.model_copy(update={"receipt_status": "failed", "continuation_used": True})
    fits = "Pixel did not create or verify the requested website files."
    assert report_text(turn, fits) == f"{SEED_WORKSPACE}\n\n{fits}"
    huge = "x" * INGRESS_RECEIPT_BOUND
    assert report_text(turn, huge) == SEED_WORKSPACE
    assert continuation_failed_text(SEED_WORKSPACE, 502) == f"{SEED_WORKSPACE}\n\n{SEED_CONTINUATION_FAILED}"
    assert len(continuation_failed_text("y" * INGRESS_RECEIPT_BOUND, 503)) <= INGRESS_RECEIPT_BOUND
