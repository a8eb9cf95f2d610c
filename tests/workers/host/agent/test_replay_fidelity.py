"""Replay fidelity: the builtin agent's own transcript, replayed through the guard as shipped, gives back what the
run did: the same stop (rule, reason, call), the same refusals, the same receipt and the same delivered bytes.
Every ending the agent has is run for real (a subprocess against the scripted model server); what the replay
cannot know (a full context, a dead endpoint) it says it cannot know."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from harness.guard.policy import DEFAULT_GUARD
from harness.replay.engine import SessionGuard, replay_session
from harness.replay.outcome import ReplayOutcome
from harness.replay.sources import read_source
from harness.core.transcript import GuardDecision, StopEvent, ToolCall, ToolResult
from tests.workers.host.agent.test_agent_runs import FOREST_PROMPT, PHOTO_PROMPT, ROOT, Run, run_agent, serve

__all__ = ["serve"]  # the fixture, used by name below

FAMILY = {"budget": "run_progress", "recursive_delete": "recursive_delete", "output_limit": "output_limit"}
CUT = {"text": "Writing.", "cut_at_output_limit": True,
       "tool_calls": [{"name": "write", "arguments": {"path": "Playground/p/index.html", "content": "x" * 400}}]}
SCENARIOS: dict[str, tuple[Any, str]] = {
    "delivered": (str(ROOT / "prompts" / "open" / "07-photo-renamer" / "model.toml"), PHOTO_PROMPT),
    "budget stop": ("budget-stop.toml", PHOTO_PROMPT),
    "continued at the output limit": ("output-limit.toml", FOREST_PROMPT),
    "reported at the output limit": ({"turns": [CUT, CUT]}, FOREST_PROMPT),
    "refused delete": ("refused-delete.toml", PHOTO_PROMPT),
    "written answer": (str(ROOT / "prompts" / "open" / "12-explain-only" / "model.toml"),
                       (ROOT / "prompts" / "open" / "12-explain-only" / "prompt.md").read_text(encoding="utf-8")),
    "log stats": (str(ROOT / "prompts" / "open" / "27-log-stats" / "model.toml"),
                  (ROOT / "prompts" / "open" / "27-log-stats" / "prompt.md").read_text(encoding="utf-8")),
}


def replayed(run: Run) -> ReplayOutcome:
    transcript = run.workspace.parent / "transcript.jsonl"
    (item,) = read_source(str(transcript), run.workspace.parent)
    (session,) = item.sessions
    return replay_session(session, SessionGuard(DEFAULT_GUARD, session), "default")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_shipped_guard_replays_the_agents_own_run_exactly(scenario: str, tmp_path: Path, serve: Any) -> None:
    script, prompt = SCENARIOS[scenario]
    run = run_agent(tmp_path, serve(script).url, prompt)
    outcome = replayed(run)
    stops = run.of(StopEvent)
    calls = [c.call_id for c in run.of(ToolCall)]
    assert outcome.stopped == bool(stops)
    if stops:
        stop = stops[0]
        assert (outcome.stop_reason, outcome.stop_detail) == (FAMILY[stop.rule], stop.reason)
        if stop.call_id is not None:
            assert outcome.stop_call == calls.index(stop.call_id) + 1
    blocked = [calls.index(r.call_id) + 1 for r in run.of(ToolResult) if r.details.status == "blocked"]
    assert outcome.refused_calls == blocked
    refusals = {g.call_id: g.reason for g in run.of(GuardDecision) if g.decision == "refuse"}
    assert {calls[r.call - 1]: r.reason for r in outcome.refusals if r.reason != "after_stop"} == refusals
    assert (outcome.receipt_status, outcome.receipt_source) == (run.receipt["status"], run.receipt["source"])
    assert outcome.delivered == run.answer
    assert outcome.delivered_sha256 == hashlib.sha256(run.answer.encode("utf-8")).hexdigest()


def test_a_full_context_is_beyond_what_the_replay_can_know(tmp_path: Path, serve: Any) -> None:
    run = run_agent(tmp_path, serve({"context_size": 200, "fallback": {"text": "unused"}}).url)
    outcome = replayed(run)
    assert outcome.unrecorded_call == 1 and outcome.receipt_status is None  # no call: nothing after the recording


def test_a_dead_endpoint_is_beyond_what_the_replay_can_know(tmp_path: Path, serve: Any) -> None:
    run = run_agent(tmp_path, "http://127.0.0.1:9/v1", PHOTO_PROMPT, "--retries", "0")
    assert run.proc.returncode == 75
    assert replayed(run).unrecorded_call == 1
