"""The transcript schema: every event round-trips through the file, and bad lines are named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import InputError, TranscriptError
from harness.guard.verdict import TestVerdict
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
    read_transcript,
)

VERDICT = TestVerdict(runner="unittest", verdict="passed", passed=5)
EVENTS = [
    RunStart(run_id="r1", agent="builtin", agent_version="0.1.0", harness_commit="abc", model="m",
             base_url="http://127.0.0.1:1/v1", context=32768, max_output=2048, stream=True, timeout_s=600,
             retries=3, exec_timeout_s=120, workspace="/w", prompt_file="/p.md", prompt="write it",
             system_prompt="You are ...", tools=["read", "exec"], budget_policy={"consecutive_failures": 4},
             python="3.11.7", platform="Linux"),
    ModelRequest(round=1, max_tokens=2048, stream=True, prompt_tokens_estimate=900,
                 messages_added=[{"role": "user", "content": "write it"}]),
    ModelError(round=1, attempt=1, kind="http", status=500, message="HTTP 500: boom", retry_in_s=2.0),
    ModelResponse(round=1, text="", reasoning="thinking", tool_calls=[ToolCallRecord(id="c1", name="exec",
                  arguments='{"command": "python3 -m unittest"}')], finish_reason="tool_calls",
                  usage=Usage(prompt_tokens=900, completion_tokens=12, total_tokens=912), latency_s=0.5, attempts=2,
                  model="m"),
    ToolCall(round=1, call_id="c1", name="exec", arguments={"command": "python3 -m unittest"}),
    ToolResult(round=1, call_id="c1", name="exec", is_error=False, text="OK\n[exit code 0, 0.1 s]",
               details=ToolDetails(status="ok", exit_code=0, duration_s=0.1, cwd="/w", bytes=3, test=VERDICT)),
    GuardDecision(round=1, rule="budget", decision="allow", call_id="c1", data={"failures": 0}),
    StopEvent(round=1, rule="recursive_delete", reason="recursive_delete", text="refused recursive delete: rm -rf x",
              call_id="c1"),
    ReceiptEvent(receipt=OwnerReceipt(status="passed", text="done", source="refusal_receipt",
                                      test_state="passed_current", test=VERDICT)),
    RunEnd(outcome="stopped", reason="recursive_delete", exit_code=0, rounds=1, tool_calls=1, duration_s=1.5,
           usage=Usage()),
]


def write(path: Path) -> list[Any]:
    with TranscriptWriter(path) as writer:
        return [writer.append(event) for event in EVENTS]


def test_every_event_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    written = write(path)
    assert [event.seq for event in written] == list(range(1, len(EVENTS) + 1))
    assert all(event.ts.endswith("Z") and event.schema_version == 1 for event in written)
    assert read_transcript(path) == written
    first = json.loads(path.read_text().splitlines()[0])
    assert first["event"] == "run_start" and first["seq"] == 1


def test_each_event_is_on_disk_when_append_returns(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    with TranscriptWriter(path) as writer:
        writer.append(EVENTS[0])
        assert len(read_transcript(path)) == 1
        writer.append(EVENTS[1])
        assert [event.event for event in read_transcript(path)] == ["run_start", "model_request"]


def _corrupt(tmp_path: Path, line: int, text: str, newline: bool = True) -> Path:
    path = tmp_path / "transcript.jsonl"
    write(path)
    lines = path.read_text().splitlines()
    lines[line - 1] = text
    path.write_text("\n".join(lines) + ("\n" if newline else ""))
    return path


def _valid(line: int, **changes: object) -> str:
    data = json.loads(EVENTS[line - 1].model_copy(update={"seq": line, "ts": "2026-01-01T00:00:00.000Z"})
                      .model_dump_json())
    data.update(changes)
    return json.dumps({k: v for k, v in data.items() if v is not ...})


@pytest.mark.parametrize(("line", "text", "problem"), [
    (3, "{not json", "line 3: not valid JSON: Expecting property name enclosed in double quotes (column 2)"),
    (2, "[1, 2]", "line 2: an event must be a JSON object"),
    (4, _valid(4, event="model_reply"), "line 4: Input tag 'model_reply' found using 'event' does not match"),
    (5, _valid(5, call_id=...), "line 5: call_id: Field required"),
    (6, _valid(6, is_error="maybe"), "line 6: is_error: Input should be a valid boolean"),
    (7, _valid(7, colour="red"), "line 7: colour: Extra inputs are not permitted"),
    (2, _valid(2, schema_version=2), "line 2: schema_version 2 is not supported (expected 1)"),
    (3, _valid(3, seq=9), "line 3: seq 9 where 3 was expected"),
])
def test_a_bad_line_is_named(tmp_path: Path, line: int, text: str, problem: str) -> None:
    path = _corrupt(tmp_path, line, text)
    with pytest.raises(TranscriptError) as caught:
        read_transcript(path)
    assert str(caught.value).startswith(f"{path}: {problem}")
    assert caught.value.key == f"line {line}" and isinstance(caught.value, InputError)


def test_an_unfinished_last_line_is_reported_as_such(tmp_path: Path) -> None:
    path = _corrupt(tmp_path, len(EVENTS), '{"schema_version": 1, "event": "run_e', newline=False)
    with pytest.raises(TranscriptError, match=f"line {len(EVENTS)}: incomplete last line"):
        read_transcript(path)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="file not found"):
        read_transcript(tmp_path / "none.jsonl")
