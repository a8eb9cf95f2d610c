"""The OpenCode importer on sessions the real OpenCode 1.18.33 recorded (tests/agents/data/opencode/, made by
make_sessions.py) and on malformed input; the adapter's transcript, answer and endpoint-failure check."""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness.core.errors import TranscriptImportError
from harness.importers import grade_folder, import_to_folder
from harness.importers.events import to_events
from harness.importers.recorded import RecordedRun
from harness.importers.opencode import final_text_of_stream, read_sessions
from harness.core.transcript import GuardDecision, ModelResponse, RunEnd, RunStart, ToolCall, ToolResult, read_transcript
from harness.core.inventory import AgentConfig
from workers.adapters.opencode import DB, OpenCodeAdapter

DATA = Path(__file__).parent / "data" / "opencode"
REPO = Path(__file__).resolve().parents[2]
PROMPT = (REPO / "prompts" / "open" / "07-photo-renamer" / "prompt.md").read_text()
FINAL = tomllib.loads((REPO / "prompts" / "open" / "07-photo-renamer" / "models" / "opencode.toml").read_text())["turns"][-1]["text"]


def _db(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.db"
    path.write_bytes(gzip.decompress((DATA / f"{name}.db.gz").read_bytes()))
    return path


def _one(path: Path) -> RecordedRun:
    (session,) = read_sessions(path)
    return session


def _calls(session: RecordedRun) -> list[tuple]:
    """What the store, the export and the stream all say about each call."""
    events = to_events(session)
    return [(e.call_id, e.name, e.is_error, e.details.status, e.details.exit_code, e.agent_is_error,
             e.details.test.verdict if e.details.test else None) for e in events if isinstance(e, ToolResult)]


def test_the_photo_renamer_from_the_session_store(tmp_path):
    session = _one(_db(tmp_path, "photo-renamer"))
    assert (session.prompt, session.model, session.agent_version) == (PROMPT, "scripted-model", "1.18.33")
    events = to_events(session)
    start = events[0]
    assert isinstance(start, RunStart) and start.imported.format == "opencode" and start.imported.run == session.label
    assert start.workspace.endswith("/workspace")
    assert [(e.name, e.arguments["filePath"] if e.name == "write" else e.arguments["command"])
            for e in events if isinstance(e, ToolCall)] == [
        ("write", "Playground/photo-renamer/rename_photos.py"), ("write", "Playground/photo-renamer/test_rename_photos.py"),
        ("bash", "python3 -m unittest -v")]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.details.path, r.details.bytes) for r in results[:2]] == [
        ("Playground/photo-renamer/rename_photos.py", 2386), ("Playground/photo-renamer/test_rename_photos.py", 2038)]
    test = results[2].details.test
    assert (test.runner, test.verdict, test.passed) == ("unittest", "passed", 5)
    assert results[2].details.cwd == f"{start.workspace}/Playground/photo-renamer"
    responses = [e for e in events if isinstance(e, ModelResponse)]
    assert [r.round for r in responses] == [1, 2, 3, 4] and responses[-1].text == FINAL
    assert [len(r.tool_calls) for r in responses] == [1, 1, 1, 0]
    assert json.loads(responses[0].tool_calls[0].arguments)["filePath"] == "Playground/photo-renamer/rename_photos.py"
    end = events[-1]
    assert isinstance(end, RunEnd) and (end.outcome, end.rounds, end.tool_calls) == ("completed", 4, 3)
    assert end.usage.total_tokens == sum(r.usage.total_tokens for r in responses) > 0
    assert session.final_text == FINAL


def test_the_export_and_the_event_stream_say_the_same_as_the_store(tmp_path):
    store = _one(_db(tmp_path, "photo-renamer"))
    export = _one(DATA / "photo-renamer.export.json")
    stream = _one(DATA / "photo-renamer.jsonl")
    assert _calls(store) == _calls(export) == _calls(stream)
    assert export.prompt == store.prompt and export.label == store.label == stream.label
    assert stream.prompt == "" and any("prompt" in limit for limit in stream.limits)
    assert store.final_text == export.final_text == stream.final_text == FINAL
    assert [r.usage for r in store.rounds] == [r.usage for r in stream.rounds]
    assert stream.outcome == store.outcome == "completed"


def test_a_command_that_exited_non_zero_is_failed_whatever_opencode_flagged(tmp_path):
    session = _one(_db(tmp_path, "mixed"))
    events = to_events(session)
    results = {e.call_id: e for e in events if isinstance(e, ToolResult)}
    calls = {e.call_id: e for e in events if isinstance(e, ToolCall)}
    exited = results["call_2_1"]
    assert (exited.name, exited.details.exit_code, exited.details.status, exited.is_error) == ("bash", 3, "failed", True)
    assert exited.agent_is_error is False and exited.agent_details["status"] == "completed"
    missing = results["call_3_1"]
    assert (missing.details.status, missing.agent_is_error) == ("error", True) and "File not found" in missing.text
    # An unknown tool: OpenCode answers through its own "invalid" tool; the transcript keeps what the model called.
    unknown = results["call_4_1"]
    assert (unknown.name, unknown.details.status, unknown.is_error) == ("write_file", "error", True)
    assert calls["call_4_1"].arguments is None and "unavailable tool 'write_file'" in calls["call_4_1"].arguments_error
    # `python3 -m unittest -v` in a folder with no tests: "Ran 0 tests ... OK", exit 0. No test ran, and the
    # verdict says so with the runner's words (it was "no_passing_test" before that case had a name).
    assert (results["call_5_1"].details.test.verdict, results["call_5_1"].details.test.said) == ("no_test_ran",
                                                                                                 "Ran 0 tests")
    # The write outside the workspace: OpenCode's permission policy refused it, and OpenCode ended the run.
    refused = results["call_6_1"]
    assert (refused.details.status, refused.is_error, refused.agent_is_error) == ("blocked", True, True)
    (guard,) = [e for e in events if isinstance(e, GuardDecision)]
    assert (guard.rule, guard.decision, guard.reason, guard.call_id) == ("tool_policy", "refuse", "permission_rejected",
                                                                          "call_6_1")
    end = events[-1]
    assert (end.outcome, end.reason) == ("stopped", "permission_rejected")
    # ... which graders read as the run's stop, at that call.
    (stop,) = [e for e in events if e.event == "stop"]
    assert (stop.rule, stop.reason, stop.call_id) == ("tool_policy", "permission_rejected", "call_6_1")
    assert _calls(session) == _calls(_one(DATA / "mixed.jsonl"))


def test_the_words_only_answer(tmp_path):
    session = _one(_db(tmp_path, "explain-only"))
    events = to_events(session)
    assert not [e for e in events if isinstance(e, ToolCall)]
    (reply,) = [e for e in events if isinstance(e, ModelResponse)]
    assert reply.finish_reason == "stop" and reply.text == session.final_text
    assert final_text_of_stream((DATA / "explain-only.jsonl").read_bytes()) == reply.text


def test_the_endpoint_down_run_is_the_fleets_failure(tmp_path):
    db = _db(tmp_path, "endpoint-down")
    for session in (_one(db), _one(DATA / "endpoint-down.jsonl")):
        assert (session.outcome, session.reason) == ("infrastructure", "model_connection"), session.file
        assert "Cannot connect to API" in session.message and session.rounds == []
    adapter = OpenCodeAdapter("opencode", AgentConfig(kind="opencode"))
    collected = {DB: db.read_bytes()}
    assert adapter.infrastructure_failure(1, collected) == (
        "the model endpoint failed: model_connection: Cannot connect to API: Unable to connect. "
        "Is the computer able to access the url?")
    assert adapter.infrastructure_failure(0, collected) is None
    assert adapter.infrastructure_failure(1, {DB: _db(tmp_path, "photo-renamer").read_bytes()}) is None
    (tmp_path / "t.jsonl").write_bytes(adapter.normalize(collected))
    end = read_transcript(tmp_path / "t.jsonl")[-1]
    assert (end.outcome, end.reason) == ("infrastructure", "model_connection")
    assert adapter.answer((DATA / "endpoint-down.jsonl").read_bytes(), None) == b""


def test_the_adapter_answers_from_the_stream_and_reads_the_collected_store(tmp_path):
    adapter = OpenCodeAdapter("opencode", AgentConfig(kind="opencode"))
    assert adapter.answer((DATA / "photo-renamer.jsonl").read_bytes(), None) == (FINAL + "\n").encode()
    assert adapter.answer(b"not json\n", None) == b""
    assert adapter.normalize({}) is None
    (tmp_path / "t.jsonl").write_bytes(adapter.normalize({DB: _db(tmp_path, "photo-renamer").read_bytes()}))
    events = read_transcript(tmp_path / "t.jsonl")
    assert events[0].imported.file == DB and events[-1].outcome == "completed"


def test_fleet_import_writes_a_graded_folder_per_session(tmp_path):
    (folder,) = import_to_folder("opencode", _db(tmp_path, "photo-renamer"), tmp_path / "out")
    meta = json.loads((folder / "meta.json").read_text())
    assert (meta["source_format"], meta["agent"], meta["calls"], meta["facts"]["title"]) == ("opencode", "opencode", 3,
                                                                                   "fleet 07-photo-renamer")
    assert (folder / "answer.txt").read_text() == FINAL and (folder / "prompt.md").read_text() == PROMPT
    assert json.loads((folder / "session.json").read_text())["session"]["id"] == folder.name
    grade = grade_folder(folder)
    # No workspace was captured and no check ran: the files come from the transcript; without a receipt or a
    # recorded exit code the harness does not call it delivered.
    assert grade.grade == "PARTIAL" and grade.reasons[0].startswith("2 file(s) written or changed by recorded tool calls")
    r = subprocess.run([sys.executable, "-m", "harness.cli", "import", "opencode", str(DATA / "mixed.jsonl"),
                        "--out", str(tmp_path / "cli")], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(": PARTIAL (outcome none; stop: the agent's permission policy refused write and ended the run at call 6)")


# --- malformed input: one clear error naming the file and the row or line ---------------------------------


def _error(path: Path) -> str:
    with pytest.raises(TranscriptImportError) as caught:
        read_sessions(path)
    return str(caught.value)


def test_a_cut_or_garbled_event_stream(tmp_path):
    lines = (DATA / "photo-renamer.jsonl").read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
    assert _error(cut) == f"{cut}: line 4: not valid JSON (Expecting ',' delimiter, column 41); the file ends early: is it cut short?"
    odd = tmp_path / "odd.jsonl"
    event = json.loads(lines[0])
    odd.write_text(lines[0] + "\n" + json.dumps({**event, "type": "telemetry"}) + "\n")
    assert _error(odd) == (f"{odd}: line 2.type: unknown event type 'telemetry' (the opencode importer reads error, "
                           "reasoning, step_finish, step_start, text, tool_use)")
    state = tmp_path / "state.jsonl"
    tool = next(json.loads(line) for line in lines if json.loads(line)["type"] == "tool_use")
    tool["part"]["state"]["status"] = "exploded"
    state.write_text(json.dumps(tool) + "\n")
    assert _error(state) == (f"{state}: line 1.part.state.status: unknown tool state 'exploded' "
                             "(expected one of completed, error, pending, running)")


def test_a_corrupt_session_store(tmp_path):
    db = _db(tmp_path, "photo-renamer")
    con = sqlite3.connect(db)
    (part_id, data) = con.execute("SELECT id, data FROM part WHERE data LIKE '%\"type\":\"tool\"%' ORDER BY id").fetchone()
    con.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps({**json.loads(data), "type": "hologram"}), part_id))
    con.commit()
    assert _error(db).startswith(f"{db}: part {part_id}.type: unknown part type 'hologram' (the opencode importer reads ")
    con.execute("UPDATE part SET data = ? WHERE id = ?", ('{"type": "tool", "tool": ', part_id))
    con.commit()
    con.close()
    assert _error(db) == f"{db}: part {part_id}: data: not valid JSON (Expecting value, column 26)"
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE sessions (id TEXT)").connection.commit()
    assert _error(other) == f"{other}: table session: missing: this is not an OpenCode session store"


def test_other_bad_files(tmp_path):
    assert _error(tmp_path / "nothere.db") == f"{tmp_path / 'nothere.db'}: file not found"
    assert _error(tmp_path).startswith(f"{tmp_path}: is a folder")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert _error(empty) == f"{empty}: empty file"
    export = tmp_path / "export.json"
    data = json.loads((DATA / "photo-renamer.export.json").read_text())
    export.write_text(json.dumps({"info": data["info"], "messages": "none"}, indent=2))
    assert _error(export) == f"{export}: messages: missing: an OpenCode export holds info and messages"
    cut = tmp_path / "cut.json"
    cut.write_text((DATA / "photo-renamer.export.json").read_text()[:500])
    assert _error(cut).startswith(f"{cut}: line ") and _error(cut).endswith("the file ends early: is it cut short?")
    r = subprocess.run([sys.executable, "-m", "harness.cli", "import", "opencode", str(empty)], cwd=REPO,
                       capture_output=True, text=True)
    assert (r.returncode, r.stderr.strip()) == (2, f"fleet: error: {empty}: empty file")


def test_a_final_answer_cut_at_the_output_limit_is_a_stop_not_a_completed_run(tmp_path):
    """`opencode run` exits 0 with no error when a text-only reply is cut at the limit; the stream's last step
    finishing with reason "length" is all that says so (the real words-only stream, its last finish changed)."""
    real = (DATA / "explain-only.jsonl").read_text()
    assert real.count('"reason":"stop"') == 1
    cut = tmp_path / "cut.jsonl"
    cut.write_text(real.replace('"reason":"stop"', '"reason":"length"'))
    events = to_events(_one(cut))
    (stop,) = [e for e in events if e.event == "stop"]
    assert (stop.rule, stop.reason) == ("output_limit", "output_limit")
    assert (events[-1].outcome, events[-1].reason) == ("stopped", "output_limit")
    assert [e for e in to_events(_one(DATA / "explain-only.jsonl")) if e.event == "stop"] == []
