"""Replay reads every real agent's recorded sessions (tests/agents/data: OpenClaw JSONL and SQLite, OpenCode store,
export and event stream, Hermes store and export), by content alone, and replays them through the shipped guard.

Expectations come from the recordings themselves: a session whose agent answered runs to the end and delivers
that answer (its last reply, with no call); one whose run ended on the endpoint's failure goes past what was recorded; and the OpenClaw tour,
whose recorded results hold four failures in a row, is stopped where the fixture's results say."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from harness.guard.policy import DEFAULT_GUARD
from harness.importers import importer
from harness.importers.events import to_events
from harness.guard.results import is_failed
from harness.replay.engine import SessionGuard, replay_session
from harness.replay.sources import read_source, sniff
from harness.core.transcript import ModelResponse, ToolResult
from tests.support import REPO

DATA = REPO / "tests" / "agents" / "data"
SESSIONS = {
    "openclaw/jsonl/renamer-v3.jsonl": "openclaw-jsonl", "openclaw/jsonl/tour-v3.jsonl": "openclaw-jsonl",
    "openclaw/jsonl/http500-v3.jsonl": "openclaw-jsonl", "openclaw/sqlite/renamer-v4.sqlite.gz": "openclaw-sqlite",
    "openclaw/sqlite/tour-v4.sqlite.gz": "openclaw-sqlite", "openclaw/sqlite/explain-v4.sqlite.gz": "openclaw-sqlite",
    "opencode/photo-renamer.db.gz": "opencode", "opencode/photo-renamer.export.json": "opencode",
    "opencode/photo-renamer.jsonl": "opencode", "opencode/endpoint-down.jsonl": "opencode",
    "hermes/photo-renamer.state.db.gz": "hermes", "hermes/photo-renamer.export.jsonl": "hermes",
    "hermes/endpoint-down.export.jsonl": "hermes",
}


def unpacked(name: str, tmp_path: Path) -> Path:
    src = DATA / name
    if not name.endswith(".gz"):
        return src
    out = tmp_path / Path(name).name.removesuffix(".gz")
    with gzip.open(src) as f, out.open("wb") as g:
        shutil.copyfileobj(f, g)
    return out


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_each_recording_is_read_by_content_and_replayed(name: str, tmp_path: Path) -> None:
    path = unpacked(name, tmp_path)
    assert sniff(path) == SESSIONS[name]
    (item,) = read_source(str(path), tmp_path)
    (session,) = item.sessions
    outcome = replay_session(session, SessionGuard(DEFAULT_GUARD, session), "default")
    module = importer(SESSIONS[name])
    runs = getattr(module, "read_sessions", None) or module.read_runs  # type: ignore[attr-defined]
    (run,) = runs(path)
    events = to_events(run[0] if isinstance(run, tuple) else run)
    replies = [e for e in events if isinstance(e, ModelResponse)]
    answer = replies[-1].text if replies and not replies[-1].tool_calls and replies[-1].finish_reason != "length" \
        else None
    results = [e for e in events if isinstance(e, ToolResult)]
    views = [{"isError": r.agent_is_error is True, "details": r.agent_details or {}} if r.agent_details is not None
             or r.agent_is_error is not None else {"isError": r.is_error, "details": {"status": r.details.status}}
             for r in results]
    streak = longest = 0
    for view in views:
        streak = streak + 1 if is_failed(view) else 0
        longest = max(longest, streak)
    if longest >= 4:
        # The budget's fuse: the fourth failure in a row stops the run there.
        fourth = next(i for i in range(len(views)) if all(is_failed(v) for v in views[i - 3:i + 1]) and i >= 3)
        assert (outcome.stop_detail, outcome.stop_call) == ("consecutive_failures", fourth + 1)
    elif answer is not None:
        assert not outcome.stopped and outcome.unrecorded_call is None
        assert outcome.delivered == answer
    else:
        assert outcome.unrecorded_call == len(session.calls) + 1  # ended on an endpoint failure: nothing more


def test_the_tour_is_the_one_our_guard_would_have_stopped(tmp_path: Path) -> None:
    stopped = []
    for name in sorted(SESSIONS):
        (item,) = read_source(str(unpacked(name, tmp_path)), tmp_path)
        (session,) = item.sessions
        if replay_session(session, SessionGuard(DEFAULT_GUARD, session), "default").stopped:
            stopped.append(name)
    assert stopped == ["openclaw/jsonl/tour-v3.jsonl", "openclaw/sqlite/tour-v4.sqlite.gz"]
