"""The grade rules, one case per rule, including the seeds' recorded fleet cases."""

from __future__ import annotations

import pytest

from harness.core.checks.result import CheckResult
from harness.grading import Evidence, StopRecord, grade
from harness.grading.model import GRADER_VERSION


def _web(status: str) -> CheckResult:
    return CheckResult(name="web", kind="web", status=status)  # type: ignore[arg-type]


def ev(**kw) -> Evidence:  # type: ignore[no-untyped-def]
    base = {"status": "finished", "exit_code": 0, "answer": "done", "files": ["Playground/p/app.py"]}
    base.update(kw)
    return Evidence(**base)


@pytest.mark.parametrize(
    ("evidence", "expected"),
    [
        (ev(status="harness_failure", reason="host_unreachable"), "HARNESS_FAILURE"),
        (ev(run_outcome="infrastructure", exit_code=75), "HARNESS_FAILURE"),
        (ev(expects_transcript=True, transcript_present=False), "HARNESS_FAILURE"),
        (ev(shell_trace_failure="Wsl/Service/0x8007274c"), "HARNESS_FAILURE"),
        (ev(receipt="passed"), "DELIVERED"),
        (ev(checks=[_web("passed")]), "DELIVERED"),
        (ev(checks=[_web("failed")]), "PARTIAL"),
        (ev(checks=[_web("untested")]), "PARTIAL"),
        (ev(receipt="failed"), "PARTIAL"),
        (ev(answer=""), "PARTIAL"),
        (ev(files=[], answer="Here it is:\n```python\nimport os\nprint(1)\nprint(2)\n```\n"), "CODE_IN_CHAT"),
        (ev(files=[], answer="I could not do it."), "NOTHING"),
        (ev(deliverable="answer", files=[], answer="Because it cannot be undone."), "DELIVERED"),
        (ev(deliverable="answer", files=[], answer="  "), "NOTHING"),
        (ev(status="timeout", exit_code=None), "PARTIAL"),
        (ev(status="timeout", exit_code=None, files=[], answer=""), "NOTHING"),
    ],
)
def test_each_rule(evidence: Evidence, expected: str) -> None:
    assert grade(evidence).grade == expected


def test_tower2_photo_renamer_after_a_refused_rm_rf_is_partial() -> None:
    # Seed 003 / fixture photo-renamer-tower2: tests passed, then `rm -rf` was refused and the run
    # aborted; the owner got only the refusal text, product outcome failed.
    g = grade(ev(files=["Playground/photo-renamer/rename_photos.py", "Playground/photo-renamer/test_rename.py"],
                 receipt="failed", answer="I refused a recursive delete ...",
                 stop=StopRecord(reason="recursive_delete", text="refused rm -rf", at_call=10)))
    assert g.grade == "PARTIAL" and g.outcome == "failed" and g.stop and g.stop.reason == "recursive_delete"
    assert "the receipt failed" in g.reasons


def test_mac_mini_after_the_fourth_failure_is_nothing() -> None:
    g = grade(ev(files=[], answer="The run was stopped.", receipt="failed",
                 stop=StopRecord(reason="consecutive_failures", text="4 consecutive failures", at_call=4)))
    assert g.grade == "NOTHING" and g.reasons[0] == "stopped: 4 consecutive failures"


def test_tower1_dashboard_cut_at_the_output_limit_is_nothing() -> None:
    g = grade(ev(files=[], answer="The reply was cut at the output limit ...", receipt="failed",
                 stop=StopRecord(reason="output_limit", text="cut at output limit")))
    assert g.grade == "NOTHING"


def test_a_harness_failure_is_never_graded_as_the_models_even_with_files() -> None:
    g = grade(ev(status="harness_failure", reason="host_lost", error="charlie: lost", receipt="passed"))
    assert g.grade == "HARNESS_FAILURE" and "host_lost" in g.reasons[0]


def test_an_imported_run_says_where_its_files_came_from_and_that_its_answer_was_not_recorded() -> None:
    # Grader version 2: a folder without a captured workspace (an imported session) takes its files from
    # the transcript's successful writes and edits; an answer its source did not record is said so.
    g = grade(ev(files=["Playground/p/app.py", "(write call c2: path not recorded)"], files_from="transcript",
                 answer="", answer_recorded=False,
                 stop=StopRecord(reason="consecutive_failures", text="4 consecutive failures", at_call=11)))
    assert g.grade == "PARTIAL" and g.grader_version == GRADER_VERSION
    assert g.reasons == ["stopped: 4 consecutive failures",
                         "2 file(s) written or changed by recorded tool calls (no workspace was captured)",
                         "the owner's answer was not recorded"]
    assert grade(ev(files=[], files_from="transcript", answer="")).grade == "NOTHING"


def test_a_real_agent_attempt_without_its_transcript_is_a_harness_failure(tmp_path) -> None:
    """meta.json's agent_kind says the harness turns this agent's session into a transcript; none -> the
    session could not be read or the agent never ran: not the model's answer."""
    import json

    from harness.grading import evidence_from_attempt

    from harness.core.records import AttemptResult

    def meta(kind: str, command: list[str]) -> str:
        return json.dumps(AttemptResult(sweep_id="s", cell_id="h/i/a/r1", attempt=1, status="finished", exit_code=0,
                                        host="h", agent="a", item="i", agent_kind=kind, agent_command=command).meta())

    (tmp_path / "meta.json").write_text(meta("openclaw", ["openclaw", "agent", "exec"]))
    (tmp_path / "workspace.manifest.json").write_text(json.dumps([{"path": "a.py", "size": 3, "sha256": "0" * 64,
                                                                   "packed": True, "why": ""}]))
    (tmp_path / "answer.txt").write_text("done")
    g = grade(evidence_from_attempt(tmp_path, None))
    assert g.grade == "HARNESS_FAILURE", g.reasons
    (tmp_path / "meta.json").write_text(meta("command", ["my-agent"]))
    assert grade(evidence_from_attempt(tmp_path, None)).grade != "HARNESS_FAILURE"
