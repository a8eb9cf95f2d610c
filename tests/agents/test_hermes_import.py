"""The Hermes importer on sessions the real Hermes Agent 0.19.0 recorded (tests/agents/data/hermes/, made by
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

from harness.core.catalog import load_open_item
from harness.core.errors import AgentUnsuited, TranscriptImportError
from harness.importers import grade_folder, import_to_folder
from harness.importers.events import to_events
from harness.importers.recorded import RecordedRun
from harness.importers.hermes import endpoint_failure, read_attempt, read_sessions
from harness.core.inventory import AgentConfig, Host
from harness.core.transcript import ModelResponse, RunEnd, RunStart, ToolCall, ToolResult, read_transcript
from workers.adapters.base import AttemptPaths
from workers.adapters.hermes import DB, FINAL, USAGE, HermesAdapter

DATA = Path(__file__).parent / "data" / "hermes"
REPO = Path(__file__).resolve().parents[2]
PROMPT = (REPO / "prompts" / "open" / "07-photo-renamer" / "prompt.md").read_text()
FINAL_TEXT = tomllib.loads((REPO / "prompts" / "open" / "07-photo-renamer" / "models" / "hermes.toml").read_text()
                           )["turns"][-1]["text"]


def _db(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.state.db"
    path.write_bytes(gzip.decompress((DATA / f"{name}.state.db.gz").read_bytes()))
    return path


def _one(path: Path) -> RecordedRun:
    (session,) = read_sessions(path)
    return session


def _calls(session: RecordedRun) -> list[tuple]:
    return [(e.call_id, e.name, e.is_error, e.details.status, e.details.exit_code, e.agent_is_error,
             e.details.test.verdict if e.details.test else None) for e in to_events(session)
            if isinstance(e, ToolResult)]


def _adapter() -> HermesAdapter:
    return HermesAdapter("hermes", AgentConfig(kind="hermes"))


def test_the_photo_renamer_from_the_session_store(tmp_path):
    session = _one(_db(tmp_path, "photo-renamer"))
    assert (session.prompt, session.model) == (PROMPT, "scripted-model")
    events = to_events(session)
    start = events[0]
    assert isinstance(start, RunStart) and start.imported.format == "hermes" and start.imported.run == session.label
    assert start.system_prompt.startswith("You are Hermes Agent") and start.base_url.startswith("http://127.0.0.1:")
    assert [(e.name, e.arguments.get("path") or e.arguments.get("command")) for e in events if isinstance(e, ToolCall)] == [
        ("write_file", "Playground/photo-renamer/rename_photos.py"),
        ("write_file", "Playground/photo-renamer/test_rename_photos.py"), ("terminal", "python3 -m unittest -v")]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [(r.details.path, r.details.bytes) for r in results[:2]] == [
        ("Playground/photo-renamer/rename_photos.py", 2386), ("Playground/photo-renamer/test_rename_photos.py", 2038)]
    assert results[0].agent_details["bytes_written"] == 2386
    test = results[2].details.test
    assert (test.runner, test.verdict, test.passed) == ("unittest", "passed", 5)
    assert results[2].details.cwd == f"{start.workspace}/Playground/photo-renamer"
    assert "output" not in results[2].agent_details and results[2].agent_details["exit_code"] == 0
    responses = [e for e in events if isinstance(e, ModelResponse)]
    assert [r.finish_reason for r in responses] == ["tool_calls", "tool_calls", "tool_calls", "stop"]
    assert responses[-1].text == FINAL_TEXT == session.final_text
    end = events[-1]
    assert isinstance(end, RunEnd) and (end.outcome, end.rounds, end.tool_calls) == ("completed", 4, 3)
    assert end.usage.prompt_tokens > 0 and end.duration_s > 0


def test_the_export_says_the_same_as_the_store(tmp_path):
    store = _one(_db(tmp_path, "photo-renamer"))
    export = _one(DATA / "photo-renamer.export.jsonl")
    assert _calls(store) == _calls(export)
    assert (export.prompt, export.final_text, export.label, export.outcome) == (store.prompt, store.final_text,
                                                                                store.label, "completed")
    assert export.system_prompt == store.system_prompt and export.usage == store.usage


def test_a_command_that_exited_non_zero_is_failed_whatever_hermes_said(tmp_path):
    session = _one(DATA / "mixed.export.jsonl")
    results = {e.call_id: e for e in to_events(session) if isinstance(e, ToolResult)}
    exited = results["call_2_1"]
    assert (exited.name, exited.details.exit_code, exited.details.status, exited.is_error) == ("terminal", 3, "failed", True)
    assert exited.agent_is_error is False and exited.agent_details == {"exit_code": 3, "error": None}
    missing = results["call_3_1"]
    assert (missing.name, missing.details.status, missing.agent_is_error) == ("read_file", "error", True)
    assert missing.agent_details["error"] == "File not found: proj/nothere.py"
    unknown = results["call_4_1"]
    assert (unknown.name, unknown.details.status, unknown.agent_is_error) == ("write", "error", None)
    assert unknown.text.startswith("Tool 'write' does not exist.")
    patched = results["call_5_1"]
    assert (patched.name, patched.details.status, patched.details.path) == ("patch", "ok", "proj/hello.py")
    assert session.outcome == "completed" and session.final_text == "Done: proj/hello.py prints hello."


def test_the_words_only_answer():
    session = _one(DATA / "explain-only.export.jsonl")
    events = to_events(session)
    assert not [e for e in events if isinstance(e, ToolCall)]
    (reply,) = [e for e in events if isinstance(e, ModelResponse)]
    assert reply.text + "\n" == (DATA / "explain-only.final.txt").read_text()


def test_the_endpoint_down_run_is_the_fleets_failure(tmp_path):
    db = _db(tmp_path, "endpoint-down")
    alone = _one(db)
    # The store keeps only the prompt: how the run ended is not in it.
    assert (alone.outcome, alone.rounds, alone.prompt) == (None, [], alone.prompt)
    assert not [e for e in to_events(alone) if isinstance(e, RunEnd)]
    final, usage = (DATA / "endpoint-down.final.txt").read_bytes(), (DATA / "endpoint-down.usage.json").read_bytes()
    assert final == b"API call failed after 3 retries: Connection error.\n"
    session = read_attempt({DB: db.read_bytes()}, DB, final, usage)
    assert (session.outcome, session.reason) == ("infrastructure", "model_connection")
    collected = {DB: db.read_bytes(), FINAL: final, USAGE: usage}
    adapter = _adapter()
    assert adapter.infrastructure_failure(0, collected) == (
        "the model endpoint failed: model_connection: API call failed after 3 retries: Connection error.")
    (tmp_path / "t.jsonl").write_bytes(adapter.normalize(collected))
    end = read_transcript(tmp_path / "t.jsonl")[-1]
    assert (end.outcome, end.reason) == ("infrastructure", "model_connection")
    ok = {DB: _db(tmp_path, "photo-renamer").read_bytes(), FINAL: (DATA / "photo-renamer.final.txt").read_bytes(),
          USAGE: (DATA / "photo-renamer.usage.json").read_bytes()}
    assert adapter.infrastructure_failure(0, ok) is None
    assert adapter.normalize({}) is None


def test_an_http_error_hermes_does_not_retry_is_the_fleets_failure_too(tmp_path):
    """A 4xx (here 404, model not found; a real run of item 30 against a script answering 404): Hermes stops at
    once, prints only "HTTP 404: ...", exits 0 and marks its run report failed. Not the model's answer."""
    db = _db(tmp_path, "endpoint-404")
    final = (DATA / "endpoint-404.final.txt").read_bytes()
    usage = (DATA / "endpoint-404.usage.json").read_bytes()
    assert final == b"HTTP 404: model scripted-model not found\n" and json.loads(usage)["failed"] is True
    collected = {DB: db.read_bytes(), FINAL: final, USAGE: usage}
    adapter = _adapter()
    assert adapter.infrastructure_failure(0, collected) == (
        "the model endpoint failed: model_http_404: HTTP 404: model scripted-model not found")
    (tmp_path / "t.jsonl").write_bytes(adapter.normalize(collected))
    end = read_transcript(tmp_path / "t.jsonl")[-1]
    assert (end.outcome, end.reason) == ("infrastructure", "model_http_404")
    # Without the failed flag, the same words are an answer like any other.
    assert endpoint_failure("HTTP 404: model scripted-model not found") is None


@pytest.mark.parametrize("output, reason", [
    ("API call failed after 3 retries: Connection error.", "model_connection"),
    ("API call failed after 3 retries: HTTP 500: the GPU fell over", "model_http_500"),
    ("API call failed after 2 retries: Error code: 503 - overloaded", "model_http_503"),
    ("API call failed after 3 retries: Request timed out.", "model_timeout"),
    ("Invalid API response after 3 retries: empty choices", "model_protocol"),
])
def test_endpoint_failures_by_hermes_final_words(output, reason):
    assert endpoint_failure(output + "\n") == (reason, output)
    assert endpoint_failure("The API call failed, so I stopped.") is None


def test_the_adapter_config_and_command(tmp_path):
    host = Host.model_validate({"name": "h", "transport": "local", "agents": {"hermes": {"kind": "hermes"}},
                                "model": {"base_url": "http://127.0.0.1:8080/v1", "id": "Qwen3.5-27B", "context": 65536,
                                          "max_output": 8192, "api_key_env": "MY_KEY"}})
    item = load_open_item(REPO / "prompts" / "open" / "12-explain-only")
    paths = AttemptPaths("/w/a")
    adapter = _adapter()
    config = adapter.files(host, item, paths)["hermes-config.yaml"].decode()
    assert 'base_url: "http://127.0.0.1:8080/v1"' in config and 'default: "Qwen3.5-27B"' in config
    assert "context_length: 65536" in config and "max_tokens: 8192" in config and 'api_key: "${MY_KEY}"' in config
    argv = adapter.argv(host, item, paths)
    assert argv[3:] == ["sh", "/w/a/prompt.md", "/w/a/hermes-config.yaml", "/w/a/hermes/final.txt", "hermes",
                        "--usage-file", "/w/a/hermes/usage.json"]
    assert adapter.env(host, paths)["HERMES_HOME"] == "/w/a/hermes/home/.hermes"
    # The prompt reaches Hermes byte for byte, as one argument, whatever it holds.
    prompt = '-rf "$(touch pwned)" `id`\n\n'
    root = tmp_path / "a"
    (root / "workspace").mkdir(parents=True)
    (root / "prompt.md").write_text(prompt)
    (root / "hermes-config.yaml").write_text("model: {}\n")
    spy = tmp_path / "spy.py"
    spy.write_text("import sys, json; print(json.dumps(sys.argv[1:]))\n")
    script = adapter.argv(host, item, AttemptPaths(str(root)))[:7] + [sys.executable, str(spy)]
    env = {"PATH": "/usr/bin:/bin", **adapter.env(host, AttemptPaths(str(root)))}
    done = subprocess.run(script, cwd=root / "workspace", env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [f"--oneshot={prompt}"]
    assert (root / "hermes" / "home" / ".hermes" / "config.yaml").read_text() == "model: {}\n"
    assert not (tmp_path / "pwned").exists() and not (root / "workspace" / "pwned").exists()
    small = host.model_copy(update={"model": host.model.model_copy(update={"context": 32768})})
    with pytest.raises(AgentUnsuited, match="at least 64000 tokens; the inventory gives 32768"):
        adapter.argv(small, item, paths)


def test_fleet_import_writes_a_graded_folder_per_session(tmp_path):
    (folder,) = import_to_folder("hermes", DATA / "photo-renamer.export.jsonl", tmp_path / "out")
    meta = json.loads((folder / "meta.json").read_text())
    assert (meta["source_format"], meta["agent"], meta["calls"], meta["facts"]["source"]) == ("hermes", "hermes", 3, "cli")
    assert (folder / "answer.txt").read_text() == FINAL_TEXT and (folder / "prompt.md").read_text() == PROMPT
    # The grader finds an imported run's files in successful file-tool results (harness/grading/evidence.py),
    # Hermes' write_file among them; no checks ran and no exit code was recorded, so it is not DELIVERED.
    grade = grade_folder(folder)
    assert grade.grade == "PARTIAL" and grade.reasons[0].startswith("2 file(s) written or changed by recorded tool calls"), grade.reasons
    r = subprocess.run([sys.executable, "-m", "harness.cli", "import", "hermes", str(_db(tmp_path, "photo-renamer")),
                        "--out", str(tmp_path / "cli")], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(tmp_path / "cli"))


# --- malformed input: one clear error naming the file and the row or line ---------------------------------


def _error(path: Path) -> str:
    with pytest.raises(TranscriptImportError) as caught:
        read_sessions(path)
    return str(caught.value)


def test_a_bad_export(tmp_path):
    lines = (DATA / "mixed.export.jsonl").read_text().splitlines()
    session = json.loads(lines[0])
    cases = {
        "cut": lines[0][:300],
        "nomessages": json.dumps({k: v for k, v in session.items() if k != "messages"}),
        "role": json.dumps({**session, "messages": [*session["messages"][:1], {**session["messages"][1], "role": "robot"}]}),
        "orphan": json.dumps({**session, "messages": [session["messages"][0], session["messages"][2]]}),
        "unanswered": json.dumps({**session, "messages": [*session["messages"][:2], session["messages"][-1]]}),
    }
    problems = {}
    for name, text in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(text if name == "cut" else text + "\n")
        problems[name] = _error(path).split(": ", 1)[1]
    call = session["messages"][1]["tool_calls"][0]["id"]
    assert problems == {
        "cut": "line 1: not valid JSON (Unterminated string starting at, column 253); the file ends early: is it cut short?",
        "nomessages": "line 1.messages: missing: a Hermes export holds one session per line with its messages",
        "role": "line 1.messages[1].role: unknown role 'robot' (expected one of assistant, system, tool, user)",
        "orphan": f"line 1.messages[1].tool_call_id: '{call}' answers no call of the round before it",
        "unanswered": f"line 1.messages[2]: a assistant message while call {call} has no result",
    }


def test_a_corrupt_session_store(tmp_path):
    db = _db(tmp_path, "photo-renamer")
    con = sqlite3.connect(db)
    (row,) = con.execute("SELECT id FROM messages WHERE tool_calls IS NOT NULL ORDER BY id LIMIT 1").fetchone()
    con.execute("UPDATE messages SET tool_calls = ? WHERE id = ?", ('[{"id": "call_1_1", "function": ', row))
    con.commit()
    con.close()
    assert _error(db) == f"{db}: messages row {row}.tool_calls: not valid JSON (Expecting value)"
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE session (id TEXT)").connection.commit()
    assert _error(other) == f"{other}: table sessions: missing: this is not a Hermes session store"
    assert _error(tmp_path / "nothere.db") == f"{tmp_path / 'nothere.db'}: file not found"
    r = subprocess.run([sys.executable, "-m", "harness.cli", "import", "hermes", str(other)], cwd=REPO,
                       capture_output=True, text=True)
    assert (r.returncode, r.stderr.strip()) == (2, f"fleet: error: {other}: table sessions: missing: this is not a "
                                                   "Hermes session store")


def test_a_tool_result_with_hermes_loop_warning_after_its_json_is_still_read():
    from harness.importers.recorded import RecordedCall
    from harness.importers.hermes import _result

    call = RecordedCall(call_id="c1", name="terminal", arguments={"command": "cat access.log"}, arguments_text="{}",
                       arguments_error=None, shell=True, finished=False)
    _result(call, '{"output": "cat: access.log: No such file or directory", "exit_code": 1, "error": null}'
            "\n\n[Tool loop warning: the same command failed 3 times]", "/w")
    assert (call.exit_code, call.output) == (1, "cat: access.log: No such file or directory")


@pytest.mark.parametrize("cwd, command, after", [
    ("/w", "cd Playground/app && python3 -m unittest", "/w/Playground/app"),
    ("/w/Playground/app", "cd .. ; ls", "/w/Playground"),
    ("/w", "cd 'my dir'", "/w/my dir"),
    ("/w", "ls && cd elsewhere", "/w"),       # a cd later in the command is not followed (documented limit)
    ("/w", "cd ~/x", "/w"),
])
def test_the_terminal_folder_follows_a_leading_cd(cwd, command, after):
    from harness.importers.hermes import _next_cwd

    assert _next_cwd(cwd, command) == after


# --- a final reply cut at the output limit (seed 002) ------------------------------------------------------

def _stop_of(events) -> tuple:
    (stop,) = [e for e in events if e.event == "stop"]
    return stop.rule, stop.reason, events[-1].outcome, events[-1].reason


def test_a_final_text_reply_cut_at_the_output_limit_is_the_runs_stop(tmp_path):
    """Hermes asks for a continuation of a cut text reply up to four times; a run whose stored last reply still
    finished with "length" was cut. The real words-only export, its last finish reason changed."""
    real = (DATA / "explain-only.export.jsonl").read_text()
    assert real.count('"finish_reason": "stop"') == 1
    cut = tmp_path / "cut.export.jsonl"
    cut.write_text(real.replace('"finish_reason": "stop"', '"finish_reason": "length"'))
    events = to_events(_one(cut))
    assert _stop_of(events) == ("output_limit", "output_limit", "stopped", "output_limit")
    assert [e for e in to_events(_one(DATA / "explain-only.export.jsonl")) if e.event == "stop"] == []


def test_the_adapter_records_a_cut_final_reply_as_the_runs_stop(tmp_path):
    """The adapter's transcript of an attempt (the real photo renamer's store), once with its closing reply's finish
    reason changed to length, once as Hermes leaves a cut tool call: not stored, and `hermes -z` printing its
    truncation notice with a run report that is not completed."""
    adapter = _adapter()
    usage = (DATA / "photo-renamer.usage.json").read_bytes()
    db = _db(tmp_path, "photo-renamer")
    con = sqlite3.connect(db)
    con.execute("UPDATE messages SET finish_reason = 'length' WHERE id = (SELECT max(id) FROM messages)")
    con.commit()
    con.close()
    collected = {DB: db.read_bytes(), FINAL: (DATA / "photo-renamer.final.txt").read_bytes(), USAGE: usage}
    (tmp_path / "a.jsonl").write_bytes(adapter.normalize(collected))
    assert _stop_of(read_transcript(tmp_path / "a.jsonl")) == ("output_limit", "output_limit", "stopped", "output_limit")

    db = _db(tmp_path, "photo-renamer")
    con = sqlite3.connect(db)
    con.execute("DELETE FROM messages WHERE id = (SELECT max(id) FROM messages)")
    con.commit()
    con.close()
    report = json.loads(usage) | {"completed": False}
    collected = {DB: db.read_bytes(), FINAL: b"Response truncated due to output length limit\n",
                 USAGE: json.dumps(report).encode()}
    assert adapter.infrastructure_failure(0, collected) is None
    (tmp_path / "b.jsonl").write_bytes(adapter.normalize(collected))
    events = read_transcript(tmp_path / "b.jsonl")
    assert _stop_of(events) == ("output_limit", "output_limit", "stopped", "output_limit")
    assert events[-1].message == "Response truncated due to output length limit"
