"""Whole runs of ``python -m workers.host.agent`` as a real subprocess against the real scripted model server.

Each test starts a ``ScriptedModelServer`` on a free port, runs the agent in a fresh attempt folder
(``prompt.md``, ``workspace/``), and reads what the run left: the transcript (through the schema's own
reader), ``receipt.json``, ``answer.txt`` and the workspace.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.guard.delete import RECURSIVE_DELETE_REFUSAL
from harness.guard.output_limit import OUTPUT_LIMIT_CONTINUATION_PROMPT, OUTPUT_LIMIT_CONTINUED_TEXT
from harness.guard.receipt import RECEIPT_COMPLETE, RECEIPT_LEAD
from harness.modelserver import ScriptedModelServer, load_script, parse_script
from harness.core.transcript import (
    Event,
    GuardDecision,
    ModelError,
    ModelRequest,
    ModelResponse,
    RunEnd,
    StopEvent,
    ToolCall,
    ToolResult,
    read_transcript,
)
from tests.support import REPO

ROOT = REPO
SCRIPTS = ROOT / "prompts" / "scripts" / "builtin"
PHOTO_PROMPT = (ROOT / "prompts" / "open" / "07-photo-renamer" / "prompt.md").read_text(encoding="utf-8")
FOREST_PROMPT = "make me a cool looking webpage with a forest theme"


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    events: list[Event]
    receipt: dict[str, Any]
    answer: str
    workspace: Path

    def of(self, kind: type) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]

    @property
    def end(self) -> RunEnd:
        last = self.events[-1]
        assert isinstance(last, RunEnd)
        return last


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ScriptedModelServer] = []

    def start(script: str | dict[str, Any]) -> ScriptedModelServer:
        loaded = load_script(SCRIPTS / script) if isinstance(script, str) else parse_script(
            {"schema_version": 1, **script})
        server = ScriptedModelServer(loaded)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _argv(base: Path, url: str, extra: tuple[str, ...]) -> list[str]:
    return [
        sys.executable, "-m", "workers.host.agent", "--prompt-file", str(base / "prompt.md"),
        "--workspace", str(base / "workspace"), "--out-dir", str(base), "--base-url", url, "--model", "local-model",
        "--context", "32768", "--max-output", "2048", "--retry-backoff-s", "0.05", *extra,
    ]


def _attempt(tmp_path: Path, prompt: str) -> Path:
    base = tmp_path / "attempt-1"
    (base / "workspace").mkdir(parents=True)
    (base / "prompt.md").write_text(prompt, encoding="utf-8")
    return base


def run_agent(tmp_path: Path, url: str, prompt: str = PHOTO_PROMPT, *extra: str) -> Run:
    base = _attempt(tmp_path, prompt)
    proc = subprocess.run(_argv(base, url, extra), cwd=base / "workspace", capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    events = read_transcript(base / "transcript.jsonl")
    assert isinstance(events[-1], RunEnd) and events[-1].exit_code == proc.returncode
    receipt = json.loads((base / "receipt.json").read_text(encoding="utf-8"))
    answer = (base / "answer.txt").read_text(encoding="utf-8")
    assert receipt["text"] == answer
    return Run(proc, events, receipt, answer, base / "workspace")


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_the_photo_renamer_is_delivered_with_a_passing_test(tmp_path: Path, serve: Any, stream: str) -> None:
    run = run_agent(tmp_path, serve(str(ROOT / "prompts" / "open" / "07-photo-renamer" / "model.toml")).url, PHOTO_PROMPT, stream)
    assert run.proc.returncode == 0 and run.proc.stdout == "completed: receipt passed\n"
    assert run.end.outcome == "completed" and run.end.rounds == 4 and run.end.tool_calls == 3
    project = run.workspace / "Playground" / "photo-renamer"
    assert sorted(p.name for p in project.glob("*.py")) == ["rename_photos.py", "test_rename_photos.py"]
    results = run.of(ToolResult)
    assert [r.name for r in results] == ["write", "write", "exec"] and not any(r.is_error for r in results)
    test = results[-1].details
    assert test.exit_code == 0 and test.cwd == str(project) and test.test is not None
    assert test.test.to_json() == {"runner": "unittest", "verdict": "passed", "passed": 5, "failed": 0, "skipped": 0}
    assert run.receipt["status"] == "passed" and run.receipt["source"] == "model"
    assert run.receipt["test"]["verdict"] == "passed"
    assert run.answer.startswith("I wrote Playground/photo-renamer/rename_photos.py.")
    responses = run.of(ModelResponse)
    assert [r.finish_reason for r in responses] == ["tool_calls"] * 3 + ["stop"]
    assert all(r.usage is not None and r.model == "qwen3.5-9b-scripted" for r in responses)
    requests = run.of(ModelRequest)
    assert requests[0].messages_added[0]["role"] == "system" and requests[0].messages_added[1] == {
        "role": "user", "content": PHOTO_PROMPT}
    assert "Playground/<project>/" in requests[0].messages_added[0]["content"]
    assert "at most about 2048 output tokens" in requests[0].messages_added[0]["content"]
    assert not run.of(StopEvent)


def test_the_fourth_consecutive_failure_stops_the_run(tmp_path: Path, serve: Any) -> None:
    server = serve("budget-stop.toml")
    run = run_agent(tmp_path, server.url)
    assert run.proc.returncode == 0 and run.end.outcome == "stopped" and run.end.reason == "consecutive_failures"
    results = run.of(ToolResult)
    assert len(results) == 4 and all(r.is_error and r.details.exit_code not in (0, None) for r in results)
    (stop,) = run.of(StopEvent)
    assert (stop.rule, stop.reason, stop.text, stop.call_id) == (
        "budget", "consecutive_failures", "4 consecutive failures", results[3].call_id)
    budget = [g for g in run.of(GuardDecision) if g.rule == "budget"]
    assert [g.decision for g in budget] == ["allow", "allow", "allow", "stop"]
    assert budget[-1].data["consecutive_failures"] == 4
    assert len([r for r in server.requests if r.path.endswith("/chat/completions")]) == 4  # the 5th turn never asked
    assert run.receipt["status"] == "failed" and run.receipt["source"] == "budget_stop"
    assert "4 consecutive failures" in run.answer


def test_a_stop_refuses_the_rest_of_the_reply(tmp_path: Path, serve: Any) -> None:
    calls = [{"name": "exec", "arguments": {"command": f"exit {n}"}} for n in range(1, 6)]
    run = run_agent(tmp_path, serve({"turns": [{"tool_calls": calls}]}).url)
    results = run.of(ToolResult)
    assert [r.details.status for r in results] == ["failed"] * 4 + ["blocked"]
    assert results[-1].text == "error: the run was stopped (4 consecutive failures); this call did not run."
    assert run.of(StopEvent)[0].call_id == results[3].call_id and run.end.reason == "consecutive_failures"


def test_a_cut_reply_is_continued_once_and_then_finishes(tmp_path: Path, serve: Any) -> None:
    server = serve("output-limit.toml")
    run = run_agent(tmp_path, server.url, FOREST_PROMPT)
    assert run.proc.returncode == 0 and run.end.outcome == "completed"
    first = run.of(ModelResponse)[0]
    assert first.finish_reason == "length" and first.tool_calls[0].name == "write"
    assert [call.round for call in run.of(ToolCall)] == [2, 2]  # the cut call never ran
    (decision,) = [g for g in run.of(GuardDecision) if g.rule == "output_limit"]
    assert decision.decision == "continue" and decision.data["calls_not_run"] == ["write"]
    continuation = run.of(ModelRequest)[1].messages_added
    assert continuation[-1] == {"role": "user", "content": OUTPUT_LIMIT_CONTINUATION_PROMPT}
    assert server.requests[1].request["messages"][-1]["content"] == OUTPUT_LIMIT_CONTINUATION_PROMPT
    page = run.workspace / "Playground" / "forest-page"
    assert (page / "index.html").read_text().startswith("<!doctype html>\n<html lang=\"en\">")
    assert (page / "styles.css").exists()
    assert run.receipt["status"] == "none" and run.answer.startswith("The forest page is in")
    assert not run.of(StopEvent)


def test_a_continuation_cut_again_gets_the_report(tmp_path: Path, serve: Any) -> None:
    cut = {"text": "Writing.", "cut_at_output_limit": True,
           "tool_calls": [{"name": "write", "arguments": {"path": "Playground/p/index.html", "content": "x" * 400}}]}
    run = run_agent(tmp_path, serve({"turns": [cut, cut]}).url, FOREST_PROMPT)
    assert run.proc.returncode == 0 and run.end.outcome == "stopped" and run.end.reason == "output_limit"
    decisions = [g for g in run.of(GuardDecision) if g.rule == "output_limit"]
    assert [g.decision for g in decisions] == ["continue", "report"]
    assert "is_continuation" in decisions[1].data["refusals"]
    (stop,) = run.of(StopEvent)
    assert (stop.rule, stop.reason, stop.text) == ("output_limit", "output_limit", "cut at output limit")
    assert run.receipt["status"] == "failed" and run.receipt["source"] == "output_limit_report"
    assert run.answer.startswith(OUTPUT_LIMIT_CONTINUED_TEXT)
    assert not run.of(ToolResult) and not (run.workspace / "Playground").exists()


def test_a_refused_recursive_delete_ends_tool_use_with_the_receipt(tmp_path: Path, serve: Any) -> None:
    server = serve("refused-delete.toml")
    run = run_agent(tmp_path, server.url)
    assert run.proc.returncode == 0 and run.end.outcome == "stopped" and run.end.reason == "recursive_delete"
    refusals = [g for g in run.of(GuardDecision) if g.rule == "recursive_delete"]
    assert [(g.decision, g.reason) for g in refusals] == [("refuse", "recursive_delete"), ("refuse", "latch")]
    assert refusals[0].data == {"fragment": "rm -rf test_manual"}
    blocked = run.of(ToolResult)[-2:]
    assert all(r.details.status == "blocked" and r.text == RECURSIVE_DELETE_REFUSAL for r in blocked)
    (stop,) = run.of(StopEvent)
    assert stop.rule == "recursive_delete" and stop.call_id == blocked[0].call_id
    project = run.workspace / "Playground" / "photo-renamer"
    assert not (project / "test_manual").exists()  # the refused command ran nothing, not even its mkdir
    assert len([r for r in server.requests if r.path.endswith("/chat/completions")]) == 4
    assert run.receipt["status"] == "passed" and run.receipt["source"] == "refusal_receipt"
    assert run.receipt["test_state"] == "passed_current"
    assert run.answer.startswith(RECEIPT_LEAD) and run.answer.endswith(RECEIPT_COMPLETE)
    assert f"- File written: `{project / 'rename_photos.py'}`." in run.answer
    assert f"`python3 test_rename_photos.py` in `{project}`, passed" in run.answer


def test_malformed_tool_call_json_is_a_failed_call_not_a_crash(tmp_path: Path, serve: Any) -> None:
    script = {"turns": [{"tool_calls": [{"name": "exec", "arguments": '{"command": "ls'}]}, {"text": "Sorry."}]}
    server = serve(script)
    run = run_agent(tmp_path, server.url)
    assert run.proc.returncode == 0 and run.end.outcome == "completed"
    (call,) = run.of(ToolCall)
    assert call.arguments is None and call.arguments_error is not None
    (result,) = run.of(ToolResult)
    assert result.is_error and result.details.status == "error" and "not a valid JSON object" in result.text
    echoed = server.requests[1].request["messages"][2]
    assert echoed["tool_calls"][0]["function"]["arguments"] == "{}"  # servers re-parse history arguments
    assert [g.data["failures"] for g in run.of(GuardDecision)] == [1]
    assert run.answer == "Sorry." and run.receipt["status"] == "none"


def test_an_unknown_tool_is_a_failed_call(tmp_path: Path, serve: Any) -> None:
    script = {"turns": [{"tool_calls": [{"name": "browser", "arguments": {"url": "https://example.com"}}]},
                        {"text": "I cannot browse."}]}
    run = run_agent(tmp_path, serve(script).url)
    (result,) = run.of(ToolResult)
    assert result.is_error and "unknown tool 'browser'" in result.text
    assert run.end.outcome == "completed" and run.answer == "I cannot browse."


def test_a_500_storm_is_an_infrastructure_failure(tmp_path: Path, serve: Any) -> None:
    server = serve({"fallback": {"http_status": 500, "error_body": '{"error": {"message": "CUDA out of memory"}}'}})
    run = run_agent(tmp_path, server.url, PHOTO_PROMPT, "--retries", "2")
    assert run.proc.returncode == 75
    assert (run.end.outcome, run.end.reason) == ("infrastructure", "model_http_500")
    assert "after 3 attempts: HTTP 500: CUDA out of memory" in (run.end.message or "")
    errors = run.of(ModelError)
    assert [(e.attempt, e.status, e.retry_in_s) for e in errors] == [(1, 500, 0.05), (2, 500, 0.1), (3, 500, None)]
    assert not run.of(ModelResponse) and len(server.requests) == 3
    assert run.receipt["status"] == "none" and run.receipt["source"] == "infrastructure" and run.answer == ""
    assert run.proc.stdout.startswith("infrastructure (model_http_500): receipt none: POST http://")


def test_a_hanging_model_times_out_as_infrastructure(tmp_path: Path, serve: Any) -> None:
    run = run_agent(tmp_path, serve({"fallback": {"hang": True}}).url, PHOTO_PROMPT,
                    "--timeout-s", "0.5", "--retries", "1")
    assert run.proc.returncode == 75
    assert (run.end.outcome, run.end.reason) == ("infrastructure", "model_timeout")
    assert [e.kind for e in run.of(ModelError)] == ["timeout", "timeout"]


def test_an_endpoint_that_refuses_connections_is_infrastructure(tmp_path: Path, serve: Any) -> None:
    server = serve({"fallback": {"text": "unused"}})
    url = server.url
    server.stop()
    run = run_agent(tmp_path, url, PHOTO_PROMPT, "--retries", "0")
    assert run.proc.returncode == 75 and run.end.reason == "model_connection"


def test_a_full_context_is_the_runs_own_stop(tmp_path: Path, serve: Any) -> None:
    run = run_agent(tmp_path, serve({"context_size": 200, "fallback": {"text": "unused"}}).url)
    assert run.proc.returncode == 0 and (run.end.outcome, run.end.reason) == ("stopped", "context_full")
    (error,) = run.of(ModelError)
    assert error.status == 400 and error.retry_in_s is None
    assert run.of(StopEvent)[0].rule == "context" and run.receipt["status"] == "failed"


def test_sigterm_records_the_end(tmp_path: Path, serve: Any) -> None:
    base = _attempt(tmp_path, PHOTO_PROMPT)
    proc = subprocess.Popen(_argv(base, serve({"fallback": {"hang": True}}).url, ()), cwd=base / "workspace",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    transcript = base / "transcript.jsonl"
    deadline = time.monotonic() + 20
    while '"model_request"' not in (transcript.read_text() if transcript.exists() else ""):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 143 and "Traceback" not in stderr
    end = read_transcript(transcript)[-1]
    assert isinstance(end, RunEnd) and (end.outcome, end.reason) == ("interrupted", "sigterm")


@pytest.mark.parametrize(("change", "message"), [
    ({"--prompt-file": "missing.md"}, "error: --prompt-file missing.md: cannot read:"),
    ({"--workspace": "nowhere"}, "error: --workspace nowhere:"),
    ({"--context": "0"}, "error: --context must be positive"),
    ({"--api-key-env": "FLEET_NO_SUCH_KEY"}, "error: --api-key-env FLEET_NO_SUCH_KEY: the environment variable is not set"),
])
def test_bad_arguments_are_one_line(tmp_path: Path, change: dict[str, str], message: str) -> None:
    base = _attempt(tmp_path, PHOTO_PROMPT)
    argv = _argv(base, "http://127.0.0.1:9/v1", ())
    for flag, value in change.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    proc = subprocess.run(argv, cwd=base, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.startswith(message) and proc.stderr.count("\n") == 1
    assert not (base / "transcript.jsonl").exists()
