"""One road for importers: every format is read into one ``RecordedRun`` and written by one ``to_events``.

On the real recordings (tests/fixtures/pixel-fleet, tests/agents/data) and on OpenClaw sessions cut or
reordered from a real one: calls that got no result, a result recorded after the model moved on."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from harness.importers import import_to_folder
from harness.importers.events import to_events
from harness.importers.recorded import RecordedRun
from harness.core.transcript import Event, ModelResponse, RunEnd, ToolCall, ToolResult, read_transcript
from tests.fixtures import PIXEL_FLEET
from tests.support import TESTS

DATA = TESTS / "agents" / "data"
TOUR = DATA / "openclaw" / "jsonl" / "tour-v3.jsonl"


def _stripped(events: list[Event]) -> list[dict]:
    """The events without what the writer stamps (``seq``, ``ts``)."""
    return [e.model_dump(exclude={"seq", "ts"}) for e in events]


def _sources(tmp_path: Path) -> list[tuple[str, Path, object]]:
    """(format, file, the function that reads it into RecordedRuns) for a real recording of every format."""
    from harness.importers import hermes, opencode, openclaw_jsonl, openclaw_sqlite, pixel_fleet

    def unzipped(path: Path) -> Path:
        out = tmp_path / path.name.removesuffix(".gz")
        out.write_bytes(gzip.decompress(path.read_bytes()))
        return out

    return [
        ("pixel-fleet", PIXEL_FLEET / "inspection-budget-replay-round106-107.json", pixel_fleet.read_runs),
        ("pixel-fleet", PIXEL_FLEET / "unittest-verdict-strixy-tail-d4a61f33.json", pixel_fleet.read_runs),
        ("openclaw-jsonl", TOUR, openclaw_jsonl.read_sessions),
        ("openclaw-sqlite", unzipped(DATA / "openclaw" / "sqlite" / "refused-v4.sqlite.gz"), openclaw_sqlite.read_sessions),
        ("opencode", unzipped(DATA / "opencode" / "mixed.db.gz"), opencode.read_sessions),
        ("opencode", DATA / "opencode" / "photo-renamer.jsonl", opencode.read_sessions),
        ("hermes", unzipped(DATA / "hermes" / "photo-renamer.state.db.gz"), hermes.read_sessions),
        ("hermes", DATA / "hermes" / "mixed.export.jsonl", hermes.read_sessions),
    ]


def test_every_format_is_one_recorded_run_whose_transcript_is_to_events(tmp_path: Path) -> None:
    for fmt, src, read in _sources(tmp_path):
        runs = read(src)  # type: ignore[operator]
        assert runs and all(isinstance(run, RecordedRun) for run in runs), fmt
        folders = import_to_folder(fmt, src, tmp_path / "out" / fmt / src.name)
        assert [f.name for f in folders] == [run.label for run in runs], src
        for run, folder in zip(runs, folders):
            written = read_transcript(folder / "transcript.jsonl")
            assert _stripped(written) == _stripped(to_events(run)), src
            meta = json.loads((folder / "meta.json").read_text())
            assert meta["calls"] == len({c.call_id for c in run.calls}), src


def _session(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _tour() -> list[str]:
    lines = TOUR.read_text().splitlines()
    # The real session: line 6 is the first reply with call_1_1, line 7 its result, line 8 the next reply.
    assert json.loads(lines[6])["message"]["toolCallId"] == "call_1_1"
    assert json.loads(lines[8])["message"]["toolCallId"] == "call_2_1"
    return lines


def test_a_call_with_no_result_is_a_call_the_recording_holds(tmp_path: Path) -> None:
    """meta.json's ``calls`` and run_end's ``tool_calls`` count the same calls: one with no result too."""
    lines = _tour()
    (folder,) = import_to_folder("openclaw-jsonl", _session(tmp_path, "unanswered", lines[:6] + lines[7:]),
                                 tmp_path / "out")
    events = read_transcript(folder / "transcript.jsonl")
    calls = [e.call_id for e in events if isinstance(e, ToolCall)]
    results = [e.call_id for e in events if isinstance(e, ToolResult)]
    assert "call_1_1" in calls and "call_1_1" not in results
    end = events[-1]
    assert isinstance(end, RunEnd) and end.tool_calls == len(calls) == 9
    assert json.loads((folder / "meta.json").read_text())["calls"] == 9
    start = events[0]
    assert any(line.startswith("call call_1_1 (write, round 1): no result is recorded") for line in start.imported.limits)


def test_a_result_recorded_after_the_model_moved_on_keeps_its_place(tmp_path: Path) -> None:
    """The call is written when the model moved on without its result, and again where its result is: the
    transcript is in the session's order, and the call is counted once."""
    lines = _tour()
    late = lines[:8] + [lines[9], lines[8]] + lines[10:]
    (folder,) = import_to_folder("openclaw-jsonl", _session(tmp_path, "late", late), tmp_path / "out")
    events = read_transcript(folder / "transcript.jsonl")
    order = [(e.event, e.round, getattr(e, "call_id", None)) for e in events
             if isinstance(e, (ModelResponse, ToolCall, ToolResult)) and e.round in (2, 3)]
    assert order[:5] == [("model_response", 2, None), ("tool_call", 2, "call_2_1"), ("model_response", 3, None),
                         ("tool_call", 2, "call_2_1"), ("tool_result", 2, "call_2_1")]
    assert json.loads((folder / "meta.json").read_text())["calls"] == 9
