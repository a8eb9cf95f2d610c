"""The pixel-fleet importer on the real recorded fleet sessions (tests/fixtures/pixel-fleet): every run
becomes a transcript and a gradable folder; the recorded guard stops and refusals become guard and stop
events at the calls the recordings show; the grades follow docs/grading.md; bad input is named."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import InputError, TranscriptError, TranscriptImportError, UsageError
from harness.grading import GRADER_VERSION, Grade
from harness.guard.budget import DEFAULT_POLICY, RunProgressBudget
from harness.importers import IMPORTERS, grade_folder, import_to_folder, importer
from harness.importers.pixel_fleet import read_runs
from harness.core.transcript import (
    Event,
    GuardDecision,
    ModelResponse,
    ReceiptEvent,
    RunEnd,
    RunStart,
    StopEvent,
    ToolCall,
    ToolResult,
    read_transcript,
)
from tests.support import assert_one_line_error, run_fleet
from tests.fixtures import PIXEL_FLEET

FIXTURES = PIXEL_FLEET

TOWER2 = "photo-renamer-tower2-d4a61f33.json"
TOWER3 = "photo-renamer-tower3-d4a61f33.json"
BFB = "photo-renamer-bfb62a2b.json"
TAIL = "unittest-verdict-strixy-tail-d4a61f33.json"
REPLAY = "inspection-budget-replay-round106-107.json"

# file -> {run: number of recorded calls}; a single-run file's run is its session id.
RUNS = {
    TOWER2: {"fe9ee859-c533-483c-b978-5c4a672dc126": 11},
    TOWER3: {"047d3145-2472-4aef-a626-f43b6e712f6b": 8},
    BFB: {"b121a8f7-dd71-4d6a-b502-a3ebc65a17c4": 8},
    TAIL: {"519cb0fa-5bbd-4653-8993-567054320464": 18},
    REPLAY: {"strixy-r107": 13, "mac-mini-r106": 14, "windows-laptop-wsl-beta-r107": 42},
}
OFF = DEFAULT_POLICY.model_copy(update={"deferral": False})


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every fixture file imported once: run label -> its folder."""
    out = tmp_path_factory.mktemp("imported")
    folders: dict[str, Path] = {}
    for name in RUNS:
        for folder in import_to_folder("pixel-fleet", FIXTURES / name, out / Path(name).stem):
            folders[folder.name] = folder
    return folders


def events_of(folder: Path) -> list[Event]:
    return read_transcript(folder / "transcript.jsonl")


def of(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def call_number(events: list[Event], call_id: str | None) -> int | None:
    ids = [e.call_id for e in of(events, ToolCall)]
    return ids.index(call_id) + 1 if call_id in ids else None


def run_of(name: str) -> str:
    return next(iter(RUNS[name]))


# --------------------------------------------------------------------------------------------------
# Every file imports, every call is there


def test_the_fixture_folder_holds_exactly_the_files_this_test_knows() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(RUNS)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_run_of_every_file_imports_with_all_its_calls(name: str, imported: dict[str, Path]) -> None:
    raw = (FIXTURES / name).read_bytes()
    for label, count in RUNS[name].items():
        folder = imported[label]
        events = events_of(folder)
        start = events[0]
        assert isinstance(start, RunStart) and start.imported is not None
        assert (start.imported.format, start.imported.run, start.imported.sha256) == (
            "pixel-fleet", label, hashlib.sha256(raw).hexdigest())
        assert start.imported.file.endswith(name) and start.imported.limits
        calls, results = of(events, ToolCall), of(events, ToolResult)
        assert len(calls) == len(results) == count
        assert [c.call_id for c in calls] == [r.call_id for r in results]
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        assert (meta["schema_version"], meta["kind"], meta["source_format"]) == (2, "imported", "pixel-fleet")
        assert (meta["run"], meta["calls"], meta["status"], meta["exit_code"]) == (label, count, "finished", None)
        assert meta["source_sha256"] == hashlib.sha256(raw).hexdigest()
        for artifact in meta["artifacts"]:
            data = (folder / artifact["name"]).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (artifact["size"], artifact["sha256"])
        assert sorted(p.name for p in folder.iterdir()) == sorted(["meta.json", *(a["name"] for a in meta["artifacts"])])
        assert not (folder / "workspace.manifest.json").exists() and not (folder / "checks.json").exists()


def test_a_single_run_file_is_kept_byte_for_byte_beside_its_transcript(imported: dict[str, Path]) -> None:
    for name in (TOWER2, TOWER3, BFB, TAIL):
        assert (imported[run_of(name)] / "session.json").read_bytes() == (FIXTURES / name).read_bytes()
    for session in load(REPLAY)["sessions"]:
        kept = json.loads((imported[session["label"]] / "session.json").read_text(encoding="utf-8"))
        assert kept == {"evidence": load(REPLAY)["evidence"], "session": session}


@pytest.mark.parametrize("name", [TOWER2, TOWER3])
def test_session_calls_are_mapped_faithfully(name: str, imported: dict[str, Path]) -> None:
    events = events_of(imported[run_of(name)])
    for call, tool_call, result in zip(load(name)["calls"], of(events, ToolCall), of(events, ToolResult), strict=True):
        recorded, details = call["result"], call["result"].get("details", {})
        assert (tool_call.call_id, tool_call.name, tool_call.arguments) == (call["id"], call["tool"], call["arguments"])
        assert (result.text, result.agent_is_error) == (recorded["text"], recorded["isError"])
        assert result.agent_details == (details or None)
        failed = recorded["isError"] or details.get("exitCode", 0) != 0 or details.get("status") == "blocked"
        assert result.is_error is failed
        assert result.details.exit_code == details.get("exitCode")


def test_tail_calls_keep_their_session_numbers_and_refusal_texts(imported: dict[str, Path]) -> None:
    events = events_of(imported[run_of(TAIL)])
    calls = load(TAIL)["calls"]
    for call, tool_call, result in zip(calls, of(events, ToolCall), of(events, ToolResult), strict=True):
        assert (tool_call.call_id, tool_call.arguments, tool_call.round) == (call["id"], call["arguments"],
                                                                             call["entries"][0])
        if "blocked" in call:
            assert (result.text, result.details.status, result.is_error) == (call["blocked"], "blocked", True)
        else:
            assert result.text == "".join(block["text"] for block in call["result"]["content"])
    refusals = [g.data["recorded_n"] for g in of(events, GuardDecision)]
    assert refusals == [38, 39, 40, 41]


def test_replay_calls_keep_digests_envelopes_and_both_error_flags(imported: dict[str, Path]) -> None:
    """A Tool Search envelope was persisted with isError false around a failed inspection: the harness
    counts it failed, and the agent's own flag stays beside it."""
    events = events_of(imported["strixy-r107"])
    calls, results = of(events, ToolCall), of(events, ToolResult)
    assert calls[0].arguments == {"argsSha256": "3578a94b7fb84c31530ebd7c7060bb86bdfc946496e03234d7570efe6b48ba48"}
    assert calls[7].name == "tool_call" and calls[7].arguments["id"] == "pixel_ods_workspace_preview_inspect"
    assert (results[7].is_error, results[7].agent_is_error, results[7].details.status) == (True, False, "failed")
    assert results[7].agent_details == {"tool": {"name": "pixel_ods_workspace_preview_inspect"},
                                        "result": load(REPLAY)["sessions"][0]["calls"][7]["result"]}
    assert results[7].text.startswith("Preview inspection request rejected before execution")
    assert [r.details.status for r in results[11:]] == ["blocked", "blocked"]


def test_events_that_set_no_import_field_are_written_without_them() -> None:
    """The builtin agent's transcripts keep their lines: the optional import fields appear only when set."""
    from harness.core.transcript import ToolDetails

    plain = ToolResult(round=1, call_id="c1", name="read", is_error=False, text="x", details=ToolDetails(status="ok"))
    assert "agent_is_error" not in plain.model_dump_json() and "agent_details" not in plain.model_dump()
    flagged = plain.model_copy(update={"agent_is_error": False, "agent_details": {"status": "completed"}})
    assert json.loads(flagged.model_dump_json())["agent_details"] == {"status": "completed"}


def test_a_non_zero_exit_is_a_failure_whatever_the_agent_flagged(tmp_path: Path) -> None:
    data = load(TOWER2)
    data["calls"][4]["result"]["isError"] = False  # exit code 1, as OpenClaw records some commands
    src = tmp_path / "flag.json"
    src.write_text(json.dumps(data), encoding="utf-8")
    result = of(events_of(import_to_folder("pixel-fleet", src, tmp_path / "out")[0]), ToolResult)[4]
    assert (result.is_error, result.agent_is_error, result.details.status, result.details.exit_code) == (
        True, False, "failed", 1)


def test_bfb62a2b_write_content_is_kept_as_recorded_its_length_only(imported: dict[str, Path]) -> None:
    events = events_of(imported[run_of(BFB)])
    writes = [c for c in of(events, ToolCall) if c.name == "write"]
    assert [w.arguments for w in writes] == [
        {"path": "Playground/photo-renamer/rename_photos.py", "contentChars": 5853},
        {"path": "Playground/photo-renamer/rename_photos.py", "contentChars": 3926},
    ]
    start = events[0]
    assert isinstance(start, RunStart) and start.imported is not None
    assert any("contentChars" in line for line in start.imported.limits)


def test_test_commands_get_the_harness_verdict(imported: dict[str, Path]) -> None:
    """tower3's unittest run said 'Ran 11 tests ... OK' (docs/guard-rules.md): passed, though the owner
    got the failed-verification text; strixy's six runs all failed."""
    tower3 = [r.details.test for r in of(events_of(imported[run_of(TOWER3)]), ToolResult) if r.details.test]
    assert [(t.verdict, t.passed) for t in tower3] == [("failed", 10), ("passed", 11)]
    tail = [r.details.test for r in of(events_of(imported[run_of(TAIL)]), ToolResult) if r.details.test]
    assert [t.verdict for t in tail] == ["failed"] * 6 and (tail[0].passed, tail[0].failed) == (11, 8)


# --------------------------------------------------------------------------------------------------
# Guard stops and refusals, where the recordings put them

# run -> [(call number, rule, decision, reason)] of every guard event, in order
GUARD = {
    run_of(TOWER2): [(1, "workspace_route", "refuse", "path_correction"),
                     (10, "recursive_delete", "refuse", "recursive_delete"),
                     (11, "recursive_delete", "refuse", "latch")],
    run_of(TOWER3): [],
    run_of(BFB): [(1, "workspace_route", "refuse", "write_first"), (3, "workspace_route", "refuse", "write_first"),
                  (4, "workspace_route", "refuse", "write_first"), (5, "workspace_route", "refuse", "write_first"),
                  (6, "budget", "stop", "consecutive_failures"),
                  (7, "budget", "refuse", "after_stop"), (8, "budget", "refuse", "after_stop")],
    run_of(TAIL): [(15, "coding_loop", "stop", "failed_verification_limit"),
                   (16, "coding_loop", "refuse", "after_stop"),
                   (17, "tool_policy", "refuse", "bare_test_command"),
                   (18, "coding_loop", "refuse", "repeated_command_limit")],
    "strixy-r107": [(11, "budget", "stop", "consecutive_failures"),
                    (12, "budget", "refuse", "after_stop"), (13, "budget", "refuse", "after_stop")],
    "mac-mini-r106": [(2, "tool_policy", "refuse", "invalid_preview_directory"),
                      (4, "tool_policy", "refuse", "preview_before_site_files"),
                      (12, "budget", "stop", "consecutive_failures"),
                      (13, "budget", "refuse", "after_stop"), (14, "budget", "refuse", "after_stop")],
    "windows-laptop-wsl-beta-r107": [(30, "tool_policy", "refuse", "private_network_fetch"),
                                     (40, "budget", "stop", "total_failures"),
                                     (41, "budget", "refuse", "after_stop"), (42, "budget", "refuse", "after_stop")],
}

# run -> (rule, reason, text, call number) of the run's one stop
STOPS = {
    run_of(TOWER2): ("recursive_delete", "recursive_delete", "refused recursive delete: rm -rf /workspace/test_manual", 10),
    run_of(TOWER3): None,
    run_of(BFB): ("budget", "consecutive_failures", "4 consecutive failures", 6),
    run_of(TAIL): ("coding_loop", "failed_verification_limit", "coding loop stopped after 6 failed test runs", 15),
    "strixy-r107": ("budget", "consecutive_failures", "4 consecutive failures", 11),
    "mac-mini-r106": ("budget", "consecutive_failures", "4 consecutive failures", 12),
    "windows-laptop-wsl-beta-r107": ("budget", "total_failures", "12 failures in total", 40),
}


@pytest.mark.parametrize("label", sorted(GUARD))
def test_recorded_refusals_and_stops_become_guard_and_stop_events(label: str, imported: dict[str, Path]) -> None:
    events = events_of(imported[label])
    guards = [(call_number(events, g.call_id), g.rule, g.decision, g.reason) for g in of(events, GuardDecision)]
    assert guards == GUARD[label]
    stops = of(events, StopEvent)
    expected = STOPS[label]
    if expected is None:
        assert stops == [] and of(events, RunEnd)[0].outcome == "completed"
        return
    (stop,) = stops
    assert (stop.rule, stop.reason, stop.text, call_number(events, stop.call_id)) == expected
    (end,) = of(events, RunEnd)
    assert (end.outcome, end.reason, end.exit_code) == ("stopped", stop.reason, None)


def test_the_tower2_deletion_refusal_names_its_fragment(imported: dict[str, Path]) -> None:
    refusal = of(events_of(imported[run_of(TOWER2)]), GuardDecision)[1]
    assert refusal.data == {"fragment": "rm -rf /workspace/test_manual"}
    assert refusal.text == load(TOWER2)["calls"][9]["result"]["text"]


@pytest.mark.parametrize("label", ["strixy-r107", "mac-mini-r106", "windows-laptop-wsl-beta-r107"])
def test_a_replayed_budget_stop_is_the_call_before_the_first_one_the_recording_marks_stopped(
        label: str, imported: dict[str, Path]) -> None:
    session = next(s for s in load(REPLAY)["sessions"] if s["label"] == label)
    first_stopped = next(c["n"] for c in session["calls"] if c.get("stopped"))
    stop = of(events_of(imported[label]), StopEvent)[0]
    assert call_number(events_of(imported[label]), stop.call_id) == first_stopped - 1


def replay(events: list[Event], policy: Any, until: int | None = None) -> RunProgressBudget:
    """Feed an imported transcript's results to the budget, as a replay of a changed guard would."""
    budget, last = RunProgressBudget(policy), None
    calls = {c.call_id: c for c in of(events, ToolCall)}
    for result in of(events, ToolResult)[:until]:
        if result.details.status == "blocked" and result.agent_details is None:
            break  # never ran: refused after the stop
        if result.round != last:
            last = result.round
            budget.on_round()
        view = {"isError": result.agent_is_error is True, "details": result.agent_details or {}}
        budget.on_result(result.call_id, result.name, calls[result.call_id].arguments, view)
    return budget


@pytest.mark.parametrize(("label", "stop_at", "reason"), [
    ("strixy-r107", 11, "consecutive_failures"),
    ("mac-mini-r106", 12, "consecutive_failures"),
    ("windows-laptop-wsl-beta-r107", 40, "total_failures"),
])
def test_an_imported_transcript_replays_to_the_recorded_stop(label: str, stop_at: int, reason: str,
                                                              imported: dict[str, Path]) -> None:
    """The transcript keeps what the budget reads (tests/harness/guard/test_budget.py replays the raw file)."""
    budget = replay(events_of(imported[label]), OFF)
    assert budget.stop is not None and (budget.stop.call_index, budget.stop.reason) == (stop_at, reason)


def test_with_seed_000_deferral_the_imported_runs_would_stop_later(imported: dict[str, Path]) -> None:
    """strixy's 11th and mac-mini's 12th results wait instead of stopping (they stop at 12 and 13 once
    their never-run next calls are supplied: tests/harness/guard/test_budget.py); the laptop still stops at 40."""
    strixy = replay(events_of(imported["strixy-r107"]), DEFAULT_POLICY)
    assert strixy.stop is None and strixy.snapshot()["waiting"] is not None
    mac = replay(events_of(imported["mac-mini-r106"]), DEFAULT_POLICY)
    assert mac.stop is None and mac.snapshot()["waiting"] is not None
    laptop = replay(events_of(imported["windows-laptop-wsl-beta-r107"]), DEFAULT_POLICY)
    assert laptop.stop is not None and laptop.stop.call_index == 40


# --------------------------------------------------------------------------------------------------
# What the owner got, and the grades


def test_what_the_owner_got_is_kept_only_where_it_was_recorded(imported: dict[str, Path]) -> None:
    tower2 = imported[run_of(TOWER2)]
    assert (tower2 / "answer.txt").read_text(encoding="utf-8") == load(TOWER2)["delivered"]["text"]
    receipt = json.loads((tower2 / "receipt.json").read_text(encoding="utf-8"))
    assert (receipt["status"], receipt["source"], receipt["test"]["verdict"]) == ("failed", "refusal_receipt", "passed")
    tower3 = events_of(imported[run_of(TOWER3)])
    assert of(tower3, ReceiptEvent)[0].receipt.source == "agent_guard"
    assert of(tower3, ModelResponse)[0].text == load(TOWER3)["finalAssistant"]["text"]
    tail = imported[run_of(TAIL)]
    assert (tail / "answer.txt").read_text(encoding="utf-8") == load(TAIL)["delivered"]
    assert not (tail / "receipt.json").exists(), "the tail records no product outcome"
    for label in (run_of(BFB), "strixy-r107", "mac-mini-r106", "windows-laptop-wsl-beta-r107"):
        folder = imported[label]
        assert not (folder / "answer.txt").exists() and not (folder / "receipt.json").exists()
        assert json.loads((folder / "meta.json").read_text(encoding="utf-8"))["answer_recorded"] is False


# run -> (grade, outcome, reasons that must be among the grade's)
GRADES = {
    # Seed 003: files written, the test passed, then the refused rm -rf; the owner got the refusal text,
    # product outcome failed. The recording says PARTIAL too.
    run_of(TOWER2): ("PARTIAL", "failed", ["stopped: refused recursive delete: rm -rf /workspace/test_manual",
                                           "the receipt failed"]),
    # Seed 003: 11 tests OK, but the guard misread the output and the owner got failed verification.
    run_of(TOWER3): ("PARTIAL", "failed", ["the receipt failed"]),
    # No file was written (both writes refused by the fuse): rule 3 of docs/grading.md, as the seeds'
    # nothing-written stops (tower1's output-limit cut, mac-mini's 4th failure). The recording's own
    # evidence line says "Graded PARTIAL"; the harness's rules say NOTHING.
    run_of(BFB): ("NOTHING", "none", ["stopped: 4 consecutive failures", "nothing usable was written to the workspace"]),
    # Seed 003: strixy had genuinely failing tests and hit the coding-loop limit; files were written.
    run_of(TAIL): ("PARTIAL", "none", ["stopped: coding loop stopped after 6 failed test runs"]),
    # Seed 000: files written and published, the preview inspection never passed, the budget stopped.
    "strixy-r107": ("PARTIAL", "none", ["stopped: 4 consecutive failures", "the owner's answer was not recorded"]),
    "mac-mini-r106": ("PARTIAL", "none", ["stopped: 4 consecutive failures"]),
    "windows-laptop-wsl-beta-r107": ("PARTIAL", "none", ["stopped: 12 failures in total"]),
}


@pytest.mark.parametrize("label", sorted(GRADES))
def test_each_imported_run_gets_the_grade_its_evidence_and_the_rules_give(label: str,
                                                                          imported: dict[str, Path]) -> None:
    g = grade_folder(imported[label])
    expected, outcome, reasons = GRADES[label]
    assert isinstance(g, Grade) and g.grader_version == GRADER_VERSION
    assert (g.grade, g.outcome) == (expected, outcome), g.reasons
    for reason in reasons:
        assert reason in g.reasons
    stop = STOPS[label]
    if stop is None:
        assert g.stop is None
    else:
        assert g.stop is not None and (g.stop.reason, g.stop.text, g.stop.at_call) == (stop[1], stop[2], stop[3])


def test_files_come_from_the_transcript_when_no_workspace_was_captured(imported: dict[str, Path]) -> None:
    from harness.grading import evidence_from_attempt

    tower2 = evidence_from_attempt(imported[run_of(TOWER2)], None)
    assert tower2.files_from == "transcript"
    assert tower2.files == ["Playground/photo-renamer/rename_photos.py", "Playground/photo-renamer/test_rename.py"]
    strixy = evidence_from_attempt(imported["strixy-r107"], None)
    assert len(strixy.files) == 4 and all("path not recorded" in f for f in strixy.files)
    assert evidence_from_attempt(imported[run_of(BFB)], None).files == []


def test_the_recorded_grades_beside_the_harness_grades(imported: dict[str, Path]) -> None:
    """Only tower2 records its team grade as a field: PARTIAL, the same as the harness's."""
    meta = json.loads((imported[run_of(TOWER2)] / "meta.json").read_text(encoding="utf-8"))
    assert meta["facts"]["recorded_grade"] == "PARTIAL" == grade_folder(imported[run_of(TOWER2)]).grade


# --------------------------------------------------------------------------------------------------
# Bad input: one error naming the file and the key, nothing written


def write(tmp_path: Path, data: Any, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def mutated(name: str, change: Any) -> dict[str, Any]:
    data = copy.deepcopy(load(name))
    change(data)
    return data


def expect_error(src: Path, tmp_path: Path, key: str, problem: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(TranscriptImportError) as info:
        import_to_folder("pixel-fleet", src, out)
    error = info.value
    assert isinstance(error, TranscriptError) and isinstance(error, InputError) and error.exit_code == 2
    assert (error.file, error.key) == (str(src), key)
    assert problem in error.problem
    assert str(error) == (f"{src}: {key}: {error.problem}" if key else f"{src}: {error.problem}")
    assert not out.exists(), "nothing is written when the file cannot be read"


def test_a_truncated_file_is_named_with_where_it_ends(tmp_path: Path) -> None:
    text = (FIXTURES / TOWER2).read_text(encoding="utf-8")
    src = tmp_path / "cut.json"
    src.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(TranscriptImportError) as info:
        read_runs(src)
    assert info.value.key.startswith("line ") and "not valid JSON" in info.value.problem
    assert "the file ends early" in info.value.problem
    expect_error(src, tmp_path, info.value.key, "not valid JSON")


@pytest.mark.parametrize(("data", "key", "problem"), [
    ({"evidence": "x"}, "calls", "missing"),
    ([{"calls": []}], "", "expected a JSON object at the top, got a list"),
    ({"calls": {}}, "calls", "expected a list, got an object"),
    ({"calls": [], "extra": 1}, "extra", "unknown key"),
    ({"evidence": "x", "sessions": [{"label": "a"}]}, "sessions[0].calls", "missing"),
    ({"sessions": [{"label": "../up", "calls": []}]}, "sessions[0].label", "cannot name a run's folder"),
    ({"sessions": [{"label": "a", "calls": []}, {"label": "a", "calls": []}]}, "sessions[1].label", "names two"),
])
def test_a_file_that_is_not_a_pixel_fleet_file_is_named(data: Any, key: str, problem: str, tmp_path: Path) -> None:
    expect_error(write(tmp_path, data), tmp_path, key, problem)


def _del(path: list[Any]) -> Any:
    def change(data: Any) -> None:
        for part in path[:-1]:
            data = data[part]
        del data[path[-1]]
    return change


def _set(path: list[Any], value: Any) -> Any:
    def change(data: Any) -> None:
        for part in path[:-1]:
            data = data[part]
        data[path[-1]] = value
    return change


@pytest.mark.parametrize(("name", "change", "key", "problem"), [
    (TOWER2, _del(["calls", 3, "tool"]), "calls[3].tool", "missing"),
    (TOWER2, _set(["calls", 3, "tool"], 7), "calls[3].tool", "expected a string, got an integer"),
    (TOWER2, _set(["calls", 3], "exec"), "calls[3]", "expected an object, got a string"),
    (TOWER2, _set(["calls", 3, "surprise"], True), "calls[3].surprise", "unknown key"),
    (TOWER2, _set(["calls", 3, "arguments"], "cd /x"), "calls[3].arguments", "expected an object, got a string"),
    (TOWER2, _del(["calls", 2, "result", "text"]), "calls[2].result.text", "missing"),
    (TOWER2, _set(["calls", 2, "result", "isError"], "no"), "calls[2].result.isError", "expected true or false"),
    (TOWER2, _set(["calls", 5, "id"], "stIdCn2Kf9R5tmvtjaQof9323K6MoQc9"), "calls[5].id", "also the id of calls[0]"),
    (TOWER2, _set(["calls", 5, "id"], ""), "calls[5].id", "empty"),
    (TOWER2, _set(["delivered", "productOutcome"], "great"), "delivered.productOutcome", "is not passed, failed"),
    (TOWER2, _set(["sessionId"], "a/b"), "sessionId", "cannot name a run's folder"),
    (BFB, _del(["calls", 4, "recorded", "resultHead"]), "calls[4].recorded.resultHead", "missing"),
    (BFB, _set(["calls", 4, "recorded", "state"], 3), "calls[4].recorded.state", "expected a string or null"),
    (TAIL, _del(["calls", 0, "name"]), "calls[0].name", "missing"),
    (TAIL, _set(["calls", 16, "result"], {"content": []}), "calls[16].result", "either a result or its refusal"),
    (TAIL, _set(["calls", 0, "result", "content", 0, "type"], "image"), "calls[0].result.content[0].type",
     "'image' blocks are not read"),
    (TAIL, _set(["calls", 1, "recorded"], {}), "calls[1]", "a trace call among tail calls"),
    (REPLAY, _del(["sessions", 1, "calls", 4, "result"]), "sessions[1].calls[4].result", "missing"),
    (REPLAY, _del(["sessions", 0, "calls", 2, "tool"]), "sessions[0].calls[2].tool", "missing"),
    (REPLAY, _set(["sessions", 0, "calls", 11, "result"], {}), "sessions[0].calls[11].result", "never ran"),
    (REPLAY, _del(["sessions", 0, "calls", 0, "argsSha256"]), "sessions[0].calls[0].args", "either its arguments"),
    (REPLAY, _set(["sessions", 2, "calls", 3, "round"], "5"), "sessions[2].calls[3].round", "expected an integer"),
])
def test_a_bad_entry_is_named_by_its_key(name: str, change: Any, key: str, problem: str, tmp_path: Path) -> None:
    expect_error(write(tmp_path, mutated(name, change)), tmp_path, key, problem)


def test_unreadable_files_are_named(tmp_path: Path) -> None:
    expect_error(tmp_path / "missing.json", tmp_path, "", "file not found")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b'{"calls": ["\xff"]}')
    expect_error(binary, tmp_path, "", "not UTF-8 text")


def test_a_refusal_with_no_known_text_is_kept_as_an_unrecognized_guard_event(tmp_path: Path) -> None:
    new = "Pixel refused this call for a reason this importer has never seen."

    def change(data: dict[str, Any]) -> None:
        data["calls"][0]["result"]["text"] = data["calls"][0]["result"]["details"]["reason"] = new
    folder = import_to_folder("pixel-fleet", write(tmp_path, mutated(TOWER2, change)), tmp_path / "out")[0]
    guard = of(events_of(folder), GuardDecision)[0]
    assert (guard.rule, guard.decision, guard.reason, guard.text) == ("unrecognized", "refuse",
                                                                      "unrecognized_refusal", new)


def test_importing_again_replaces_the_earlier_import_and_never_another_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (first,) = import_to_folder("pixel-fleet", FIXTURES / TOWER3, out)
    (first / "stray.txt").write_text("left by hand", encoding="utf-8")
    (again,) = import_to_folder("pixel-fleet", FIXTURES / TOWER3, out)
    assert again == first and not (again / "stray.txt").exists()
    other = tmp_path / "other"
    (other / run_of(TOWER3)).mkdir(parents=True)
    with pytest.raises(UsageError, match="not an imported run's folder"):
        import_to_folder("pixel-fleet", FIXTURES / TOWER3, other)


def test_the_registry_names_each_format_and_refuses_others() -> None:
    for name, module in IMPORTERS.items():
        found = importer(name)
        assert found.FORMAT == name and callable(found.import_to_folder) and module == found.__name__  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="unknown import format 'hermes-x': expected one of .*pixel-fleet"):
        importer("hermes-x")


# --------------------------------------------------------------------------------------------------
# The command


def test_fleet_import_writes_a_folder_per_run_and_prints_its_grade(tmp_path: Path) -> None:
    proc = run_fleet("import", "pixel-fleet", str(FIXTURES / REPLAY), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines == [
        f"{tmp_path / 'out' / 'strixy-r107'}: PARTIAL (outcome none; stop: 4 consecutive failures at call 11)",
        f"{tmp_path / 'out' / 'mac-mini-r106'}: PARTIAL (outcome none; stop: 4 consecutive failures at call 12)",
        f"{tmp_path / 'out' / 'windows-laptop-wsl-beta-r107'}: PARTIAL (outcome none; stop: 12 failures in total "
        "at call 40)",
    ]
    assert all((tmp_path / "out" / label / "meta.json").is_file() for label in RUNS[REPLAY])
    # The grade is kept beside the run, as for a sweep's attempt.
    grade = json.loads((tmp_path / "out" / "mac-mini-r106" / "grade.json").read_text())
    assert grade["grade"] == "PARTIAL" and grade["stop"]["at_call"] == 12
    assert len((tmp_path / "out" / "mac-mini-r106" / "grades.jsonl").read_text().splitlines()) == 1


def test_fleet_import_without_out_writes_under_imported_and_the_file_stem(tmp_path: Path) -> None:
    proc = run_fleet("import", "pixel-fleet", str(FIXTURES / TOWER2), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = Path("imported") / "photo-renamer-tower2-d4a61f33" / run_of(TOWER2)
    assert proc.stdout.strip() == (f"{folder}: PARTIAL (outcome failed; stop: refused recursive delete: "
                                   "rm -rf /workspace/test_manual at call 10)")
    assert (tmp_path / folder / "transcript.jsonl").is_file()


def test_fleet_import_of_a_bad_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = write(tmp_path, mutated(TOWER2, _del(["calls", 3, "tool"])), "a-rather-long-name-for-a-bad-session.json")
    assert_one_line_error(run_fleet("import", "pixel-fleet", str(bad), cwd=tmp_path), str(bad), "calls[3].tool: missing")
    assert not (tmp_path / "imported").exists()
    assert_one_line_error(run_fleet("import", "opencode-x", str(bad), cwd=tmp_path), "unknown import format")


def test_a_final_reply_cut_at_the_output_limit_is_the_runs_stop(tmp_path: Path) -> None:
    """Seed 002: a final reply that stopped at "length" ended the run there. The tower3 session with its final
    reply's stopReason changed from stop to length (the copy is edited, never the fixture)."""
    data = json.loads((FIXTURES / TOWER3).read_text(encoding="utf-8"))
    assert data["finalAssistant"]["stopReason"] == "stop"
    data["finalAssistant"]["stopReason"] = "length"
    cut = tmp_path / TOWER3
    cut.write_text(json.dumps(data, indent=2), encoding="utf-8")
    (folder,) = import_to_folder("pixel-fleet", cut, tmp_path / "out")
    events = read_transcript(folder / "transcript.jsonl")
    (stop,) = [e for e in events if isinstance(e, StopEvent)]
    assert (stop.rule, stop.reason, stop.text) == ("output_limit", "output_limit", "cut at output limit")
    assert [type(e).__name__ for e in events[-4:]] == ["ModelResponse", "StopEvent", "ReceiptEvent", "RunEnd"]
    assert (events[-1].outcome, events[-1].reason) == ("stopped", "output_limit")
    grade = grade_folder(folder)
    assert grade.stop is not None and grade.stop.reason == "output_limit"
    assert grade.reasons[0] == "stopped: cut at output limit"


def test_a_cut_final_reply_after_a_guard_stop_keeps_the_guard_stop(tmp_path: Path) -> None:
    # At most one stop: the strixy tail's recorded coding-loop stop came first and stays the run's stop.
    data = json.loads((FIXTURES / TAIL).read_text(encoding="utf-8"))
    data["finalStopReason"] = "length"
    cut = tmp_path / TAIL
    cut.write_text(json.dumps(data, indent=1), encoding="utf-8")
    (folder,) = import_to_folder("pixel-fleet", cut, tmp_path / "out")
    events = read_transcript(folder / "transcript.jsonl")
    assert [(e.rule, e.reason) for e in events if isinstance(e, StopEvent)] == [
        ("coding_loop", "failed_verification_limit")]
    assert (events[-1].outcome, events[-1].reason) == ("stopped", "failed_verification_limit")
