"""The OpenClaw importers on real sessions (tests/agents/data/openclaw, written by the real OpenClaw: see its
README): both stores, session versions 3 and 4, zstd rows, results OpenClaw flags differently from the
harness, truncated details, endpoint failures; and on malformed input made from them, which is refused with
the file and the line or row named. Nothing here needs a server."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import zstandard

from harness.core.errors import TranscriptImportError
from harness.importers import IMPORTERS, grade_folder, import_to_folder
from harness.importers.openclaw_jsonl import read_runs as read_jsonl
from harness.importers.openclaw_sqlite import read_runs as read_sqlite
from harness.core.transcript import (
    ModelError,
    ModelRequest,
    ModelResponse,
    RunEnd,
    RunStart,
    StopEvent,
    ToolCall,
    ToolResult,
    read_transcript,
)
from tests.support import assert_one_line_error, run_fleet

DATA = Path(__file__).parent / "data" / "openclaw"
JSONL = DATA / "jsonl"
TOUR_EXIT_3 = "call_2_1"
TOUR_TRUNCATED = "call_3_1"


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The gzipped real databases, unpacked: name -> path."""
    folder = tmp_path_factory.mktemp("openclaw-sqlite")
    out = {}
    for gz in sorted((DATA / "sqlite").glob("*.sqlite.gz")):
        path = folder / gz.name.removesuffix(".gz")
        path.write_bytes(gzip.decompress(gz.read_bytes()))
        out[path.stem] = path
    return out


def one(runs):
    (run, events), = runs
    return run, events


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def results(events) -> dict[str, ToolResult]:
    return {e.call_id: e for e in of(events, ToolResult)}


def test_the_formats_are_registered():
    assert IMPORTERS["openclaw-jsonl"] == "harness.importers.openclaw_jsonl"
    assert IMPORTERS["openclaw-sqlite"] == "harness.importers.openclaw_sqlite"


# --- real sessions --------------------------------------------------------------------------------------

def test_sqlite_v4_a_failed_command_is_failed_whatever_openclaw_flagged(dbs):
    run, events = one(read_sqlite(dbs["tour-v4"]))
    r = results(events)
    exit3 = r[TOUR_EXIT_3]
    assert exit3.agent_is_error is False and exit3.agent_details["exitCode"] == 3  # OpenClaw's own record
    assert exit3.is_error and exit3.details.status == "failed" and exit3.details.exit_code == 3
    assert exit3.details.cwd == "/tmp/oc/tour4/workspace" and exit3.details.duration_s == 0.613
    # details over 8 KiB are truncated by OpenClaw: the exit code survives, and still counts.
    cut = r[TOUR_TRUNCATED]
    assert cut.agent_details["persistedDetailsTruncated"] is True and cut.agent_is_error is False
    assert cut.is_error and cut.details.exit_code == 4 and "aggregated" not in cut.agent_details
    assert cut.text.startswith("1\n2\n3\n")
    # Bad input to a file tool is an error; a command that could not start is failed; a good edit is ok.
    assert [(r[c].name, r[c].details.status) for c in ("call_4_1", "call_5_1", "call_6_1", "call_7_1")] == [
        ("read", "error"), ("edit", "error"), ("exec", "failed"), ("edit", "ok")]
    assert (r["call_7_1"].details.path, r["call_7_1"].details.replacements) == ("hello.py", 1)
    assert r["call_1_1"].details.path == "hello.py" and r["call_1_1"].details.bytes == 12


def test_sqlite_v4_a_result_without_its_call_is_kept_and_said_so(dbs):
    run, events = one(read_sqlite(dbs["tour-v4"]))
    (orphan,) = [e for e in of(events, ToolCall) if e.call_id == "call_8_1"]
    assert orphan.name == "no_such_tool" and orphan.arguments is None and "not recorded" in orphan.arguments_error
    assert results(events)["call_8_1"].is_error
    assert any("call_8_1" in line and "seq 26" in line for line in run.limits)
    # Every call of the session is there, in order, each followed by its result.
    calls = of(events, ToolCall)
    assert [c.call_id for c in calls] == [f"call_{n}_1" for n in range(1, 9)]
    pairs = [(a.event, b.event) for a, b in zip(events, events[1:]) if isinstance(a, ToolCall)]
    assert pairs == [("tool_call", "tool_result")] * 8


def test_sqlite_v4_a_malformed_tool_call_ends_the_run_as_the_agents_error_not_the_fleets(dbs):
    run, events = one(read_sqlite(dbs["tour-v4"]))
    end = events[-1]
    assert isinstance(end, RunEnd) and end.outcome == "agent_error" and end.reason == "stop_reason_error"
    assert "incomplete or malformed tool call" in end.message and end.tool_calls == 8 and end.rounds == 9
    last = of(events, ModelResponse)[-1]
    assert last.finish_reason == "error" and last.tool_calls == []
    assert run.delivered is None


def test_sqlite_v4_the_photo_renamer_from_a_fleet_sweep(dbs):
    conn = sqlite3.connect(dbs["renamer-v4"])
    compressed = conn.execute("SELECT count(*) FROM transcript_events WHERE event_zstd IS NOT NULL").fetchone()[0]
    conn.close()
    assert compressed >= 4  # the writes' arguments and results are over 1 KiB
    run, events = one(read_sqlite(dbs["renamer-v4"]))
    start = events[0]
    assert isinstance(start, RunStart) and start.agent == "openclaw" and start.agent_version == "2026.9.6"
    assert start.model == "fleet/scripted-model" and start.workspace.endswith("/attempt-1/workspace")
    assert start.prompt == (Path(__file__).parents[2] / "prompts/open/07-photo-renamer/prompt.md").read_text()
    assert [e.round for e in of(events, ModelRequest)] == [1, 2, 3, 4]
    assert of(events, ModelRequest)[0].messages_added == [{"role": "user", "content": start.prompt}]
    responses = of(events, ModelResponse)
    assert [r.finish_reason for r in responses] == ["tool_calls", "tool_calls", "tool_calls", "stop"]
    assert all(r.usage is not None and r.usage.prompt_tokens > 0 for r in responses)
    written = [r for r in of(events, ToolResult) if r.name == "write"]
    # OpenClaw reports the absolute path; the transcript keeps it relative to the workspace.
    assert written[0].text.startswith("Successfully wrote 2386 bytes to /")
    assert [(w.details.path, w.details.bytes) for w in written] == [
        ("Playground/photo-renamer/rename_photos.py", 2386), ("Playground/photo-renamer/test_rename_photos.py", 2038)]
    test = of(events, ToolResult)[-1].details.test
    assert test is not None and (test.runner, test.verdict, test.passed) == ("unittest", "passed", 5)
    end = events[-1]
    assert isinstance(end, RunEnd) and end.outcome == "completed" and end.usage.total_tokens > 0
    assert run.delivered == responses[-1].text and run.delivered.startswith("I wrote Playground/photo-renamer")
    assert run.facts["agent_schema"] == 23 and run.facts["session_version"] == 4


def test_both_stores_read_one_session_the_same_way(dbs):
    """The 2026.7.35 JSONL file and the same session after `openclaw doctor` moved it into SQLite (version 3,
    its large events now zstd rows)."""
    conn = sqlite3.connect(dbs["renamer-v3"])
    assert conn.execute("SELECT count(*) FROM transcript_events WHERE event_zstd IS NOT NULL").fetchone()[0] >= 2
    conn.close()
    jrun, jevents = one(read_jsonl(JSONL / "renamer-v3.jsonl"))
    srun, sevents = one(read_sqlite(dbs["renamer-v3"]))
    assert jrun.label == srun.label and jrun.facts["session_version"] == srun.facts["session_version"] == 3

    def essence(events):
        return [e.model_dump(exclude={"ts", "seq"}) for e in events if not isinstance(e, (RunStart, RunEnd))]

    assert essence(jevents) == essence(sevents)
    assert (jrun.prompt, jrun.delivered) == (srun.prompt, srun.delivered)
    assert jevents[0].imported.format == "openclaw-jsonl" and sevents[0].imported.format == "openclaw-sqlite"


def test_jsonl_v3_the_tour(tmp_path):
    run, events = one(read_jsonl(JSONL / "tour-v3.jsonl"))
    r = results(events)
    # 2026.7.35 flagged the exit-3 command itself; the transcript says the same either way.
    assert r[TOUR_EXIT_3].agent_is_error is True and r[TOUR_EXIT_3].is_error and r[TOUR_EXIT_3].details.exit_code == 3
    assert r[TOUR_TRUNCATED].agent_details["persistedDetailsTruncated"] and r[TOUR_TRUNCATED].details.exit_code == 4
    # The raw streamed arguments of a cut call (partialArgs) are the response's tool call; the call ran.
    cut = [c for resp in of(events, ModelResponse) for c in resp.tool_calls if c.id == "call_9_1"][0]
    assert cut.arguments == '{"command": "echo cut'
    assert r["call_9_1"].text == "cut" and not r["call_9_1"].is_error
    assert events[-1].outcome == "completed" and run.delivered == "Done: hello.py prints hello."


def test_endpoint_failures_are_infrastructure(dbs):
    cases = {
        "http500-v4": (read_sqlite(dbs["http500-v4"]), "http", 500, "model_http_500"),
        "refused-v4": (read_sqlite(dbs["refused-v4"]), "connection", None, "model_connection"),
        "http500-v3": (read_jsonl(JSONL / "http500-v3.jsonl"), "http", 500, "model_http_500"),
    }
    for name, (runs, kind, status, reason) in cases.items():
        run, events = one(runs)
        (error,) = of(events, ModelError)
        assert (error.kind, error.status) == (kind, status), name
        assert not of(events, ModelResponse), name
        end = events[-1]
        assert (end.outcome, end.reason) == ("infrastructure", reason), name
        assert run.delivered is None


def test_a_context_overflow_stops_the_run(dbs):
    run, events = one(read_sqlite(dbs["context-v4"]))
    (stop,) = of(events, StopEvent)
    assert (stop.rule, stop.reason) == ("context", "context_full") and "maximum context length" in stop.text
    assert (events[-1].outcome, events[-1].reason) == ("stopped", "context_full")


def test_a_compaction_is_said_and_nothing_is_dropped():
    run, events = one(read_jsonl(JSONL / "compaction-v3.jsonl"))
    assert any(line.startswith("1 compaction(s)") for line in run.limits)
    assert run.facts["compactions"][0]["at"] == "line 11"
    assert any("custom model-snapshot" in line for line in run.limits)
    assert events[-1].outcome == "completed" and len(of(events, ToolResult)) == 2


def test_folders_and_grades(tmp_path, dbs):
    folders = import_to_folder("openclaw-sqlite", dbs["http500-v4"], tmp_path / "a")
    assert grade_folder(folders[0]).grade == "HARNESS_FAILURE"
    (folder,) = import_to_folder("openclaw-sqlite", dbs["renamer-v4"], tmp_path / "b")
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["agent"] == "openclaw" and meta["source_format"] == "openclaw-sqlite" and meta["calls"] == 3
    session = json.loads((folder / "session.json").read_text())
    assert session["entries"][0]["type"] == "session" and len(session["entries"]) == 15
    assert (folder / "answer.txt").read_text().startswith("I wrote Playground/photo-renamer")
    events = read_transcript(folder / "transcript.jsonl")
    assert events[0].imported.sha256 == meta["source_sha256"]
    grade = grade_folder(folder)
    assert "2 file(s) written or changed by recorded tool calls" in grade.reasons[0]
    # A sessions folder: every session file, not the trajectory sidecars.
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    shutil.copy(JSONL / "tour-v3.jsonl", sessions / "bd640018-25ea-4ced-80ad-4c879c084907.jsonl")
    (sessions / "bd640018-25ea-4ced-80ad-4c879c084907.trajectory.jsonl").write_text('{"not": "a session"}\n')
    (folder,) = import_to_folder("openclaw-jsonl", sessions, tmp_path / "c")
    assert folder.name == "bd640018-25ea-4ced-80ad-4c879c084907"


def test_fleet_import_both_formats(tmp_path, dbs):
    proc = run_fleet("import", "openclaw-jsonl", str(JSONL / "renamer-v3.jsonl"), "--out", str(tmp_path / "j"),
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{tmp_path / 'j' / 'd6653f93-ca53-4c8f-8e7f-9ce695bc0da7'}: PARTIAL (outcome none)"
    proc = run_fleet("import", "openclaw-sqlite", str(dbs["refused-v4"]), "--out", str(tmp_path / "s"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("2c52b94d-661f-4497-b252-95781a80d23f: HARNESS_FAILURE (outcome none)")
    assert (tmp_path / "s" / "2c52b94d-661f-4497-b252-95781a80d23f" / "grade.json").is_file()


# --- malformed input, made from the real sessions ----------------------------------------------------------

def _lines(name: str) -> list[str]:
    return (JSONL / name).read_text().splitlines(keepends=True)


def _jsonl_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.jsonl"
    path.write_text(text)
    with pytest.raises(TranscriptImportError) as err:
        read_jsonl(path)
    assert err.value.file == str(path)
    return str(err.value)


def _edit_line(lines: list[str], number: int, change) -> list[str]:
    data = json.loads(lines[number - 1])
    change(data)
    return lines[:number - 1] + [json.dumps(data) + "\n"] + lines[number:]


def test_jsonl_malformed(tmp_path):
    lines = _lines("renamer-v3.jsonl")
    cut = "".join(lines[:7]) + lines[7][: len(lines[7]) // 2]
    message = _jsonl_error(tmp_path, cut)
    assert "s.jsonl: line 8: incomplete last line (Unterminated string" in message
    assert message.endswith("the file ends early: is it cut short?")
    assert "line 3: not valid JSON" in _jsonl_error(tmp_path, "".join(lines[:2]) + "{oops\n" + "".join(lines[3:]))
    assert "line 2: an entry must be a JSON object, got list" in _jsonl_error(tmp_path, lines[0] + "[1, 2]\n")
    for version in (2, 5):
        text = "".join(_edit_line(lines, 1, lambda d: d.update(version=version)))
        assert f"line 1: session version {version} is not supported (this importer reads 3 and 4" in \
            _jsonl_error(tmp_path, text)
    assert "line 1: expected the session header (type 'session') first, got type 'model_change'" in \
        _jsonl_error(tmp_path, "".join(lines[1:]))
    assert "line 4: type: unknown entry type 'telepathy'" in \
        _jsonl_error(tmp_path, "".join(_edit_line(lines, 4, lambda d: d.update(type="telepathy"))))
    assert "line 7: message: isError: missing" in \
        _jsonl_error(tmp_path, "".join(_edit_line(lines, 7, lambda d: d["message"].pop("isError"))))
    assert "line 7: message: isError: expected true or false, got a string" in \
        _jsonl_error(tmp_path, "".join(_edit_line(lines, 7, lambda d: d["message"].update(isError="no"))))
    assert "line 12: message: stopReason: 'finished' is not one of stop, length, toolUse, error, aborted" in \
        _jsonl_error(tmp_path, "".join(_edit_line(lines, 12, lambda d: d["message"].update(stopReason="finished"))))
    assert "line 9: message: toolCallId: 'call_1_1' already has a result (line 7)" in \
        _jsonl_error(tmp_path, "".join(_edit_line(lines, 9, lambda d: d["message"].update(toolCallId="call_1_1"))))
    hologram = _edit_line(lines, 6, lambda d: d["message"]["content"][1].update(type="hologram"))
    message = _jsonl_error(tmp_path, "".join(hologram))
    assert "line 6: message: content[1].type: 'hologram' blocks are not read" in message
    assert "line 5: message: role: unknown message role 'oracle'" in \
        _jsonl_error(tmp_path, "".join(_edit_line(lines, 5, lambda d: d["message"].update(role="oracle"))))
    assert "empty: no session entries" in _jsonl_error(tmp_path, "\n\n")
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(lines[0].encode() + b"\xff\n")
    with pytest.raises(TranscriptImportError, match="not UTF-8 text"):
        read_jsonl(path)
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    with pytest.raises(TranscriptImportError, match="no \\*.jsonl session file in this folder"):
        read_jsonl(empty)


def _copy(dbs: dict[str, Path], name: str, tmp_path: Path) -> Path:
    path = tmp_path / f"{name}.sqlite"
    shutil.copy(dbs[name], path)
    return path


def _sqlite_error(path: Path) -> str:
    with pytest.raises(TranscriptImportError) as err:
        read_sqlite(path)
    assert err.value.file == str(path)
    return str(err.value)


def test_sqlite_malformed(tmp_path, dbs):
    session = "8f1b24c0-a273-4de3-bf49-1ee729c921f5"
    path = _copy(dbs, "renamer-v4", tmp_path)
    conn = sqlite3.connect(path)
    (seq, blob, size), = conn.execute("SELECT seq, event_zstd, event_utf8_bytes FROM transcript_events "
                                      "WHERE event_zstd IS NOT NULL ORDER BY seq LIMIT 1")
    broken = blob[:4] + b"\x00" * 16 + blob[20:]  # the frame header kept, its first bytes zeroed
    conn.execute("UPDATE transcript_events SET event_zstd = ? WHERE seq = ?", (broken, seq))
    conn.commit()
    conn.close()
    message = _sqlite_error(path)
    assert f"transcript_events session {session} seq {seq}: event_zstd: not a readable zstd frame" in message

    path = _copy(dbs, "renamer-v4", tmp_path)
    conn = sqlite3.connect(path)
    # A frame of other bytes (the table's own checks pass): it decompresses, but not to the recorded length.
    other = zstandard.ZstdCompressor(level=1).compress(b'{"type": "message"}' + b" " * 1100)
    conn.execute("UPDATE transcript_events SET event_zstd = ? WHERE seq = ?", (other, seq))
    conn.commit()
    conn.close()
    assert f"seq {seq}: event_zstd: decompressed to 1119 bytes, the row says event_utf8_bytes {size}" in \
        _sqlite_error(path)

    path = _copy(dbs, "renamer-v4", tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE transcript_events SET event_json = '{\"type\": \"session\", \"version\": 5, \"id\": \"x\"}' "
                 "WHERE seq = 0")
    conn.commit()
    conn.close()
    assert f"transcript_events session {session} seq 0: session version 5 is not supported" in _sqlite_error(path)

    path = _copy(dbs, "explain-v4", tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE transcript_events SET event_json = '{\"type\": \"message\", ' WHERE seq = 4")
    conn.commit()
    conn.close()
    assert "seq 4: event_json: not valid JSON" in _sqlite_error(path)

    path = tmp_path / "noise.sqlite"
    path.write_bytes(b"not a database at all\n" * 100)
    assert _sqlite_error(path).endswith("noise.sqlite: not an SQLite database")

    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    assert "no transcript_events table: not an OpenClaw agent database" in _sqlite_error(path)

    path = tmp_path / "cut.sqlite"
    path.write_bytes(dbs["renamer-v4"].read_bytes()[: 200 * 1024])
    assert "cut.sqlite: cannot read the database" in _sqlite_error(path)

    assert "file not found" in _sqlite_error(tmp_path / "missing.sqlite")


def test_cli_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(_lines("renamer-v3.jsonl")[:4]) + '{"type": "message", "mess')
    assert_one_line_error(run_fleet("import", "openclaw-jsonl", str(bad), cwd=tmp_path), str(bad),
                          "line 5: incomplete last line")
    noise = tmp_path / "noise.sqlite"
    noise.write_bytes(b"\x00" * 512)
    assert_one_line_error(run_fleet("import", "openclaw-sqlite", str(noise), cwd=tmp_path),
                          f"{noise}: not an SQLite database")


def test_rows_still_in_the_wal_are_read_and_the_source_is_left_alone(tmp_path, dbs):
    """A database copied while its writer had not checkpointed: committed rows are only in the -wal file."""
    live = tmp_path / "live" / "openclaw-agent.sqlite"
    live.parent.mkdir()
    shutil.copy(dbs["explain-v4"], live)
    writer = sqlite3.connect(live)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("DELETE FROM transcript_events WHERE seq > 4")  # the model's reply, committed to the WAL only
    writer.commit()
    copy = tmp_path / "copy" / "openclaw-agent.sqlite"
    copy.parent.mkdir()
    shutil.copy(live, copy)
    before = copy.read_bytes()
    _, events = one(read_sqlite(copy))  # without the WAL: the old main file, reply and all
    assert events[-1].outcome == "completed"
    shutil.copy(live.with_name(live.name + "-wal"), copy.with_name(copy.name + "-wal"))
    _, events = one(read_sqlite(copy))
    writer.close()
    assert (events[-1].outcome, events[-1].reason) == ("interrupted", "no_reply")
    assert copy.read_bytes() == before


# --- a final reply cut at the output limit (seed 002) ------------------------------------------------------

def _cut_at_the_output_limit(data: dict) -> None:
    assert data["message"]["role"] == "assistant" and data["message"]["stopReason"] == "stop"
    data["message"]["stopReason"] = "length"


def _assert_the_run_stopped_at_the_output_limit(events) -> None:
    (stop,) = of(events, StopEvent)
    assert (stop.rule, stop.reason, stop.text) == ("output_limit", "output_limit", "cut at output limit")
    assert (events[-1].outcome, events[-1].reason) == ("stopped", "output_limit")
    assert of(events, ModelResponse)[-1].finish_reason == "length"


def test_jsonl_a_final_reply_cut_at_the_output_limit_is_the_runs_stop(tmp_path):
    """The real photo renamer (version 3), its last assistant message's stopReason changed to length: OpenClaw's
    record of a reply cut at the output limit."""
    lines = _lines("renamer-v3.jsonl")
    cut = tmp_path / "d6653f93-ca53-4c8f-8e7f-9ce695bc0da7.jsonl"
    cut.write_text("".join(_edit_line(lines, 12, _cut_at_the_output_limit)))
    run, events = one(read_jsonl(cut))
    _assert_the_run_stopped_at_the_output_limit(events)
    assert run.delivered is not None and run.delivered.startswith("I wrote Playground/photo-renamer")
    (folder,) = import_to_folder("openclaw-jsonl", cut, tmp_path / "out")
    grade = grade_folder(folder)
    assert grade.stop is not None and (grade.stop.reason, grade.stop.text) == ("output_limit", "cut at output limit")
    assert grade.reasons[0] == "stopped: cut at output limit" and grade.grade == "PARTIAL"
    # The uncut session has no stop.
    assert of(one(read_jsonl(JSONL / "renamer-v3.jsonl"))[1], StopEvent) == []


def test_sqlite_a_final_reply_cut_at_the_output_limit_is_the_runs_stop(tmp_path, dbs):
    """The real words-only answer (version 4), its assistant row's stopReason changed to length."""
    path = _copy(dbs, "explain-v4", tmp_path)
    conn = sqlite3.connect(path)
    (seq, text), = conn.execute("SELECT seq, event_json FROM transcript_events "
                                "WHERE event_json LIKE '%\"role\":\"assistant\"%'").fetchall()
    data = json.loads(text)
    _cut_at_the_output_limit(data)
    conn.execute("UPDATE transcript_events SET event_json = ? WHERE seq = ?", (json.dumps(data), seq))
    conn.commit()
    conn.close()
    _, events = one(read_sqlite(path))
    _assert_the_run_stopped_at_the_output_limit(events)
    assert of(one(read_sqlite(dbs["explain-v4"]))[1], StopEvent) == []
