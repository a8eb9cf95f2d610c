"""The receipt after a refused recursive deletion: text, bound, test state and when it keeps passed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from harness.guard.delete import DeleteGuard
from harness.guard.receipt import (
    MAX_FILE_LINES,
    RECEIPT_BOUND,
    CommandRun,
    Event,
    FileChange,
    Receipt,
    RunFacts,
    asks_for_change,
    asks_for_research,
    asks_for_written_answer,
    build_refusal_receipt,
    latest_test,
    verification_status,
)
from tests.fixtures import PIXEL_FLEET

FIXTURES = PIXEL_FLEET
TOWER2 = json.loads((FIXTURES / "photo-renamer-tower2-d4a61f33.json").read_text(encoding="utf-8"))
TOWER3 = json.loads((FIXTURES / "photo-renamer-tower3-d4a61f33.json").read_text(encoding="utf-8"))
PROMPT = TOWER2["prompt"]
PROJECT = "Playground/photo-renamer"
ELLIPSIS = "\u2026"

# Seed 003's delivered receipt for the recorded tower2 run, line by line.
LEAD = (
    "Pixel stopped using tools because a command included a recursive deletion that you did not ask for. "
    "That command was refused and did not run.\nResults recorded by Pixel's tools before that:\n"
)
FILES = (
    "- File written: `/workspace/Playground/photo-renamer/rename_photos.py`.\n"
    "- File written: `/workspace/Playground/photo-renamer/test_rename.py`.\n"
)
NO_FILES = "- No file was written or changed with Pixel's file tools.\n"
TEST = "The latest recognized test command, `python3 test_rename.py` in `/workspace/Playground/photo-renamer`,"
UNITTEST = "The latest recognized test command, `python3 -m unittest -v` in `/workspace/Playground/photo-renamer`,"
CURRENT = " passed, and no tool call that could change the workspace ran after it.\n"
STALE = " passed, but a later tool call or command could have changed the workspace, so that result is not current.\n"
OVERLAPPED = " passed, but another tool call or command ran at the same time, so that result is not current.\n"
NO_PASS = " exited successfully, but no test it reported passed: each was skipped, not run or an expected failure.\n"
COMPLETE = "This does not establish complete test coverage or completion of every requested step."
INCOMPLETE = "This request is not complete. Ask Pixel to continue, or say explicitly if you want a folder deleted."
SEED_RECEIPT = LEAD + FILES + f"- {TEST}{CURRENT}" + COMPLETE
ASK = "Write a python script that renames all photos in a folder by date taken"
EXIF = "which EXIF tag stores the date a photo was taken"
UNITTEST_OK = "test_a (test_rename.T.test_a) ... ok\n\n" + "-" * 70 + "\nRan 1 test in 0.001s\n\nOK"


def recorded_events(calls: list[dict], request: str) -> list[FileChange | CommandRun]:
    """Replay recorded calls through the deletion guard; refused calls ran nothing and are not events."""
    guard = DeleteGuard(request)
    events: list[FileChange | CommandRun] = []
    for clock, call in enumerate(calls, start=1):
        result = call["result"]
        if not guard.check(call["tool"], call["arguments"]).allowed:
            continue
        if result.get("details", {}).get("status") == "blocked":
            continue  # refused by another guard in the recording
        if call["tool"] in ("write", "edit") and not result.get("isError"):
            change = "written" if call["tool"] == "write" else "changed"
            events.append(FileChange(path=call["arguments"]["path"], time=clock, change=change))
        elif call["tool"] == "exec":
            details = result["details"]
            events.append(
                CommandRun(
                    command=call["arguments"]["command"],
                    cwd=call["arguments"].get("workdir"),
                    start=clock,
                    end=clock + 0.5,
                    output=details.get("aggregated", ""),
                    exit_code=details["exitCode"],
                )
            )
    return events


class Run:
    """A small builder for probe runs: one clock, one event per call."""

    def __init__(self, prompt: str = PROMPT) -> None:
        self.prompt = prompt
        self.events: list[FileChange | CommandRun] = []
        self.clock = 0.0

    def tick(self) -> float:
        self.clock += 1
        return self.clock

    def write(self, path: str, change: str = "written", response: str | None = None) -> Run:
        self.events.append(FileChange(path=path, time=self.tick(), change=change, response_id=response))
        return self

    def project(self, directory: str = PROJECT) -> Run:
        return self.write(f"{directory}/rename_photos.py").write(f"{directory}/test_rename.py")

    def run(
        self,
        command: str,
        output: str = "",
        exit_code: int | None = 0,
        cwd: str | None = f"/workspace/{PROJECT}",
        finished: bool = True,
        response: str | None = None,
        changes_workspace: bool = True,
    ) -> CommandRun:
        start = self.tick()
        event = CommandRun(
            command=command,
            cwd=cwd,
            start=start,
            end=start + 0.5 if finished else None,
            output=output,
            exit_code=exit_code if finished else None,
            response_id=response,
            changes_workspace=changes_workspace,
        )
        self.events.append(event)
        return event

    def finish(self, event: CommandRun, output: str, exit_code: int = 0) -> None:
        """A background command observed to end now (by a read-only poll)."""
        index = self.events.index(event)
        self.events[index] = event.model_copy(update={"end": self.tick(), "output": output, "exit_code": exit_code})

    def receipt(self, **facts: object) -> Receipt:
        return build_refusal_receipt(self.events, RunFacts(request_text=self.prompt, **facts))


# --------------------------------------------------------------------------------------------------
# The recorded tower2 run


def test_tower2_replay_gives_the_seed_receipt_with_status_passed() -> None:
    events = recorded_events(TOWER2["calls"], TOWER2["submittedUserText"])
    receipt = build_refusal_receipt(events, RunFacts(request_text=TOWER2["submittedUserText"]))
    assert receipt.status == "passed"
    assert receipt.text == SEED_RECEIPT
    assert receipt.test_state == "passed_current" and receipt.reasons == ()
    assert "Do not retry" not in receipt.text and "nothing was deleted" not in receipt.text


def test_tower2_counterfactual_a_later_write_makes_the_pass_stale() -> None:
    calls = TOWER2["calls"]
    readme = {
        "id": "extra",
        "tool": "write",
        "arguments": {"path": f"{PROJECT}/README.md", "content": "# x\n"},
        "result": {"isError": False, "text": "ok"},
    }
    events = recorded_events([*calls[:9], readme, calls[9]], PROMPT)
    receipt = build_refusal_receipt(events, RunFacts(request_text=PROMPT))
    assert receipt.status == "failed"
    assert receipt.text == (
        LEAD
        + "- File written: `/workspace/Playground/photo-renamer/README.md`.\n"
        + FILES
        + f"- {TEST}{STALE}"
        + INCOMPLETE
    )


def test_tower2_counterfactual_refusal_right_after_the_failing_test() -> None:
    events = recorded_events([*TOWER2["calls"][:5], TOWER2["calls"][9]], PROMPT)
    receipt = build_refusal_receipt(events, RunFacts(request_text=PROMPT))
    assert (receipt.status, receipt.text) == ("failed", LEAD + FILES + f"- {TEST} failed.\n" + INCOMPLETE)


def test_tower2_counterfactual_refusal_before_any_test() -> None:
    events = recorded_events([*TOWER2["calls"][:4], TOWER2["calls"][9]], PROMPT)
    receipt = build_refusal_receipt(events, RunFacts(request_text=PROMPT))
    assert (receipt.status, receipt.text) == (
        "failed",
        LEAD + FILES + "- No recognized test command ran.\n" + INCOMPLETE,
    )
    assert receipt.test_state == "none_ran"


# --------------------------------------------------------------------------------------------------
# Currency: background commands and sibling calls


def test_a_still_running_test_is_not_finished() -> None:
    run = Run().project()
    run.run("python3 -m unittest -v", finished=False)
    receipt = run.receipt()
    assert receipt.status == "failed" and receipt.test_state == "not_finished"
    assert receipt.text == (
        LEAD + FILES + f"- {UNITTEST} had not finished, so its result is unknown.\n"
        "- A command started earlier was still running when tool use stopped.\n" + INCOMPLETE
    )
    assert verification_status(run.events) == "pending"


def test_a_background_test_is_dated_from_its_start() -> None:
    # Control: nothing ran while it ran; a read-only poll completed it.
    clean = Run().project()
    clean.finish(clean.run("python3 -m unittest -v", finished=False), UNITTEST_OK)
    assert clean.receipt().text == LEAD + FILES + f"- {UNITTEST}{CURRENT}" + COMPLETE
    # Probe A: the module is rewritten while the test still runs.
    rewritten = Run().project()
    test = rewritten.run("python3 -m unittest -v", finished=False)
    rewritten.write(f"{PROJECT}/rename_photos.py")
    rewritten.finish(test, UNITTEST_OK)
    assert verification_status(rewritten.events) == "passed"
    assert rewritten.receipt().text == LEAD + FILES + f"- {UNITTEST}{STALE}" + INCOMPLETE


def test_a_background_command_ending_after_the_pass_makes_it_stale() -> None:
    # Probe B: a generator started before a foreground test ends after it.
    run = Run().project()
    generator = run.run("python3 make_fixture_photos.py", finished=False)
    run.run("python3 -m unittest -v", UNITTEST_OK)
    run.finish(generator, "wrote 40 fixtures")
    assert run.receipt().text == LEAD + FILES + f"- {UNITTEST}{STALE}" + INCOMPLETE
    # A background command still running when tool use stopped.
    running = Run().project()
    running.run("python3 make_fixture_photos.py", finished=False)
    running.run("python3 -m unittest -v", UNITTEST_OK)
    text = running.receipt().text
    assert f"- {UNITTEST}{STALE}" in text and "still running when tool use stopped" in text


def test_a_background_command_that_ran_while_the_test_ran_overlaps_it() -> None:
    # N01: started before a background test and ended while it ran.
    run = Run().project()
    generator = run.run("python3 make_fixture_photos.py", finished=False)
    test = run.run("python3 -m unittest -v", finished=False)
    run.finish(generator, "overwrote rename_photos.py")
    run.finish(test, UNITTEST_OK)
    receipt = run.receipt()
    assert (receipt.status, receipt.test_state) == ("failed", "overlapped")
    assert receipt.text == LEAD + FILES + f"- {UNITTEST}{OVERLAPPED}" + INCOMPLETE
    # Control: it ended before the test started.
    before = Run().project()
    before.finish(before.run("python3 make_fixture_photos.py", finished=False), "wrote 40 fixtures")
    before.run("python3 -m unittest -v", UNITTEST_OK)
    assert before.receipt().text == LEAD + FILES + f"- {UNITTEST}{CURRENT}" + COMPLETE


def test_sibling_calls_of_one_response_overlap_in_either_order() -> None:
    for order in ("write first", "test first"):
        run = Run().project()
        if order == "write first":
            run.write(f"{PROJECT}/rename_photos.py", response="r1")
            run.run("python3 -m unittest -v", UNITTEST_OK, response="r1")
        else:
            run.run("python3 -m unittest -v", UNITTEST_OK, response="r1")
            run.write(f"{PROJECT}/rename_photos.py", response="r1")
        receipt = run.receipt()
        assert receipt.text == LEAD + FILES + f"- {UNITTEST}{OVERLAPPED}" + INCOMPLETE, order
    # Control: a read-only sibling changes nothing.
    control = Run().project()
    control.run("cat rename_photos.py", "def rename(p): ...", response="r1", changes_workspace=False)
    control.run("python3 -m unittest -v", UNITTEST_OK, response="r1")
    assert control.receipt().status == "passed"


# --------------------------------------------------------------------------------------------------
# No passing test


@pytest.mark.parametrize(
    ("command", "output"),
    [
        (
            "python3 -m unittest -v",
            "test_a (test_rename.T.test_a) ... skipped 'todo'\n\nRan 1 test in 0.000s\n\nOK (skipped=1)",
        ),
        (
            "pytest -q",
            "s                                                                        [100%]\n1 skipped in 0.01s",
        ),
        ("pytest", "============================== 2 skipped, 1 warning in 0.02s ==============================="),
        (
            "python3 -m unittest -v",
            "test_a (test_rename.T.test_a) ... skipped 'todo'\r\n\r\n"
            + "-" * 70
            + "\r\nRan 1 test in 0.000s\r\n\r\n\x1b[32mOK\x1b[0m (\x1b[33mskipped=1\x1b[0m)\r\n",
        ),
        ("pytest -q", "xx [100%]\n2 xfailed in 0.02s"),
        ("pytest", "======================= 1 skipped, 3 deselected in 0.99s ======================="),
        ("npm test", "Tests:       2 todo, 2 total\nTime:        0.5 s"),
        ("npm test", "ℹ tests 1\nℹ pass 0\nℹ fail 0\nℹ todo 1"),
    ],
)
def test_a_run_where_no_test_passed_keeps_the_refusal_failed(command: str, output: str) -> None:
    run = Run().project()
    run.run(command, output)
    assert verification_status(run.events) == "passed"  # the normal path, as recorded in seed 003
    receipt = run.receipt()
    assert receipt.test_state == "no_passing_test" and receipt.status == "failed"
    assert receipt.text == (
        LEAD + FILES + f"- The latest recognized test command, `{command}` in "
        f"`/workspace/{PROJECT}`,{NO_PASS}" + INCOMPLETE
    )
    assert verification_status(run.events, skipped_only_passes=False) == "failed"


RUNNER_OUTPUTS = json.loads((Path(__file__).parent / "data" / "runner-outputs.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("case", "said", "normal_path"),
    [
        # Real pytest and unittest output (tests/harness/guard/data/make_runner_outputs.py). Exit 5 stays failed on the
        # normal path, exit 0 passes there as before (seed 003); only the refusal receipt names the difference.
        ("pytest-q-deselected-only", "3 deselected", "failed"),
        ("pytest-empty", "no tests ran", "failed"),
        ("unittest-empty-py3.12", "NO TESTS RAN", "failed"),
        ("unittest-empty-py3.11", "Ran 0 tests", "passed"),
    ],
)
def test_a_run_where_no_test_ran_is_named_in_the_receipt_with_what_the_runner_said(
    case: str, said: str, normal_path: str
) -> None:
    recorded = RUNNER_OUTPUTS[case]
    run = Run().project()
    run.run(recorded["command"], recorded["output"], exit_code=recorded["exit_code"])
    assert verification_status(run.events) == normal_path
    receipt = run.receipt()
    assert (receipt.test_state, receipt.status, receipt.reasons) == ("no_test_ran", "failed", ("test_no_test_ran",))
    assert receipt.test_verdict is not None and receipt.test_verdict.verdict == "no_test_ran"
    assert receipt.text == (
        LEAD + FILES + f"- The latest recognized test command, `{recorded['command']}` in `/workspace/{PROJECT}`, "
        f'ran no test, so no test passed: the runner reported "{said}".\n' + INCOMPLETE
    )


def test_a_failing_test_and_a_run_where_no_test_ran_get_different_receipts() -> None:
    failing, empty = Run().project(), Run().project()
    failing.run("python3 -m unittest -v", RUNNER_OUTPUTS["unittest-failed-py3.12"]["output"], exit_code=1)
    empty.run("python3 -m unittest -v", RUNNER_OUTPUTS["unittest-empty-py3.12"]["output"], exit_code=5)
    assert (failing.receipt().test_state, empty.receipt().test_state) == ("failed", "no_test_ran")
    assert failing.receipt().text.endswith(f"- {UNITTEST} failed.\n" + INCOMPLETE)
    assert "ran no test" in empty.receipt().text and "failed." not in empty.receipt().text


@pytest.mark.parametrize(
    ("command", "output"),
    [
        ("python3 -m unittest -v", "Ran 2 tests in 0.001s\n\nOK (skipped=1)"),
        ("pytest -q", "\x1b[32m1 passed\x1b[0m, \x1b[33m1 skipped\x1b[0m\x1b[32m in 0.02s\x1b[0m"),
        ("pytest -q", "1 passed, 2 xfailed in 0.02s"),
    ],
)
def test_a_run_where_something_passed_keeps_passed(command: str, output: str) -> None:
    run = Run().project()
    run.run(command, output)
    assert run.receipt().status == "passed"


def test_tower3_unittest_pass_with_a_program_error_line_is_a_pass() -> None:
    # Recorded: the owner got the failed-verification text, because the program's "Error:" line
    # printed after unittest's "OK" was counted as a failure.
    assert TOWER3["delivered"]["productOutcome"] == "failed"
    assert "latest verification check failed" in TOWER3["delivered"]["text"]
    events = recorded_events(TOWER3["calls"], TOWER3["submittedUserText"])
    test = latest_test(events)
    assert test is not None and test.command.endswith("python3 -m unittest test_photo_renamer -v")
    assert test.output.endswith("Error: Folder '/nonexistent/folder/path' does not exist.")
    # The later demo commands are not test commands; the latest test passed.
    assert verification_status(events) == "passed"
    # Control: the failing first run, alone, is failed.
    first = [event for event in events if not isinstance(event, CommandRun) or event.start < test.start]
    assert verification_status(first) == "failed"


def test_verification_status_of_the_recorded_strixy_runs_is_failed() -> None:
    strixy = json.loads((FIXTURES / "unittest-verdict-strixy-tail-d4a61f33.json").read_text(encoding="utf-8"))
    events = [
        CommandRun(
            command=call["arguments"]["command"],
            start=call["n"],
            end=call["n"] + 0.5,
            output="".join(block["text"] for block in call["result"]["content"]),
            exit_code=call["result"]["details"]["exitCode"],
        )
        for call in strixy["calls"]
        if call["name"] == "exec" and "result" in call
    ]
    assert verification_status(events) == "failed"
    assert verification_status([]) == "none"


# --------------------------------------------------------------------------------------------------
# The owner's words


@pytest.mark.parametrize(
    "prompt",
    [
        f"{ASK}, test it, and provide a brief explanation of how it works.",
        f"{ASK} and test it. Give me a short summary of what it does.",
        f"{ASK}, test it, and report which photos it renamed.",
        f"{ASK}, test it, and let me know the results.",
        f"{ASK}, test it, and include usage instructions in your reply.",
        f"{ASK}, test it, and give an overview of the design.",
        f"{ASK}, test it, and tell me how to run it.",
        "Build a photo renamer that sorts by date taken. Test it and describe the edge cases you handled.",
        *(
            f"{ASK} and test it {tail}."
            for tail in (
                "then explain the approach",
                "with an explanation",
                "and a summary",
                "then summarize it",
                "then summarise it",
                "and give an overview",
                "then describe it",
                "with a report",
                "and share the results",
                "and let me know",
                "and tell me when done",
                "and include the output",
                "with usage notes",
                "with instructions",
                "and say how it works",
                "and say how to run it",
                "then document it",
                "with a walkthrough",
                "with a walk-through",
                "and walk me through it",
                "and show me the output",
                "and answer in two lines",
                "and reply with the file list",
            )
        ),
    ],
)
def test_a_request_that_asks_for_anything_in_the_reply_keeps_failed(prompt: str) -> None:
    assert asks_for_written_answer(prompt)
    run = Run(prompt).project()
    run.run("python3 -m unittest -v", UNITTEST_OK)
    receipt = run.receipt()
    assert receipt.status == "failed" and "written_answer_requested" in receipt.reasons
    assert receipt.text == LEAD + FILES + f"- {UNITTEST}{CURRENT}" + INCOMPLETE


@pytest.mark.parametrize(
    "prompt",
    [
        PROMPT,
        TOWER2["submittedUserText"],  # the ODS delivery requirement suffix says "Answer": it is not the owner's
        f"{ASK} and test it.",
        "Please write a python script that renames photos by date taken, then test it.",
        "Can you write a python script that renames all photos in a folder by date taken and test it?",
    ],
)
def test_a_plain_change_request_keeps_passed(prompt: str) -> None:
    assert not asks_for_written_answer(prompt) and asks_for_change(prompt)
    run = Run(prompt).project()
    run.run("python3 -m unittest -v", UNITTEST_OK)
    assert run.receipt().status == "passed"


def test_questions_and_runs_without_a_change_stay_failed() -> None:
    # A fix request that ran the tests but changed nothing.
    baseline = Run(f"Fix the bug in {PROJECT}/rename_photos.py so PNG files keep their EXIF date, then run the tests.")
    baseline.run(f"cd /workspace/{PROJECT} && python3 -m unittest -v", UNITTEST_OK, cwd=None)
    receipt = baseline.receipt()
    assert receipt.text == LEAD + NO_FILES + f"- {UNITTEST}{CURRENT}" + INCOMPLETE
    assert "no_file_change" in receipt.reasons
    for prompt in [
        "What does Playground/photo-renamer/rename_photos.py do? Explain it briefly.",
        "Write a test for Playground/photo-renamer/rename_photos.py and tell me what it covers.",
    ]:
        question = Run(prompt).write(f"{PROJECT}/test_probe.py")
        question.run("python3 -m unittest -v", UNITTEST_OK)
        assert question.receipt().status == "failed", prompt
    assert not asks_for_change("What does rename_photos.py do?")


def test_research_requests_and_web_results_stay_failed() -> None:
    for prompt, web in [
        (
            f"Search the web for {EXIF} and write a python script that prints it for a file, with a test.",
            False,
        ),
        (PROMPT, True),
        (
            f"Research {EXIF}, cite your sources, and write a python script that prints it for a file, with a test.",
            False,
        ),
    ]:
        run = Run(prompt).project()
        run.run("python3 -m unittest -v", UNITTEST_OK)
        receipt = run.receipt(web_results_used=web)
        assert receipt.status == "failed" and "research" in receipt.reasons, prompt
    assert asks_for_research("look up the EXIF spec online") and not asks_for_research(PROMPT)


def test_receipt_work_and_other_failed_checks_stay_failed() -> None:
    for facts in ({"excluded_work": True}, {"other_checks_passed": False}):
        run = Run().project()
        run.run("python3 -m unittest -v", UNITTEST_OK)
        receipt = run.receipt(**facts)
        assert receipt.status == "failed" and receipt.text.endswith(INCOMPLETE), facts


# --------------------------------------------------------------------------------------------------
# Coverage: the test must run where this run's changes are


@pytest.mark.parametrize(
    "command",
    [
        "python3 -m unittest discover -s ../old-project",
        "python3 -m unittest discover --start-directory=../old-project",
        "python3 -m unittest discover -s /workspace/Playground/old-project",
        "python3 -m unittest discover -s ~/tests",
        "python3 -m unittest discover -s tests -t ..",
    ],
)
def test_a_test_naming_another_directory_covers_nothing(command: str) -> None:
    run = Run().project()
    run.run(command, "Ran 4 tests in 0.01s\n\nOK")
    receipt = run.receipt()
    assert receipt.status == "failed" and receipt.reasons == ("test_not_covering_changes",)


def test_coverage_inside_the_project_root_and_playground() -> None:
    ok = "Ran 4 tests in 0.01s\n\nOK"
    for command in [
        "python3 -m unittest discover -s tests",
        f"python3 -m unittest discover -s /workspace/{PROJECT}/tests",
        "python3 -m unittest discover -s tests 2>/dev/null",
    ]:
        run = Run().project()
        run.run(command, ok)
        assert run.receipt().status == "passed", command
    # The workspace root covers only its own top-level files.
    top = Run("Fix the bug in rename_photos.py and run the tests.").write("rename_photos.py", change="changed")
    top.run("python3 -m unittest -v", ok, cwd="/workspace")
    assert top.receipt().status == "passed"
    nested = Run("Fix the bug in Playground/photo-renamer/rename_photos.py and run the tests.")
    nested.write(f"{PROJECT}/rename_photos.py", change="changed").run("python3 -m unittest -v", ok, cwd="/workspace")
    assert nested.receipt().status == "failed"
    # So does the Playground folder, which holds the other projects.
    for command in [
        "cd /workspace/Playground && python3 -m pytest old-project",
        "cd /workspace/Playground && python3 -m pytest photo-renamer",
    ]:
        run = Run().project()
        run.run(command, "4 passed in 0.01s", cwd=None)
        assert run.receipt().status == "failed", command
    # A directory with none of this run's changes.
    elsewhere = Run().project()
    elsewhere.run("cd /workspace/Playground/old-project && python3 -m unittest", ok, cwd=None)
    assert elsewhere.receipt().text == (
        LEAD + FILES + "- The latest recognized test command, `python3 -m unittest` in "
        "`/workspace/Playground/old-project`," + CURRENT + INCOMPLETE
    )


def test_a_leading_cd_wins_over_the_workdir() -> None:
    run = Run().project()
    run.run(f"cd /workspace/{PROJECT} && python3 -m unittest -v", UNITTEST_OK, cwd="/workspace/Playground/other")
    assert run.receipt().text == LEAD + FILES + f"- {UNITTEST}{CURRENT}" + COMPLETE


def test_edited_and_patched_files_are_listed_as_changed() -> None:
    run = Run("Fix the bug in Playground/photo-renamer/rename_photos.py and run the tests.")
    run.write(f"{PROJECT}/rename_photos.py", change="changed")
    run.run("python3 -m unittest -v", UNITTEST_OK)
    assert run.receipt().text == (
        LEAD
        + "- File changed: `/workspace/Playground/photo-renamer/rename_photos.py`.\n"
        + f"- {UNITTEST}{CURRENT}"
        + COMPLETE
    )


# --------------------------------------------------------------------------------------------------
# Bounds


def test_the_receipt_stays_bounded_for_many_deep_files() -> None:
    deep = "/".join(f"d{index}".ljust(120, "x") for index in range(30))
    run = Run().project()
    for index in range(23):
        run.write(f"{PROJECT}/{deep}/f{index:02d}.py")
    run.run("python3 -m unittest -v", UNITTEST_OK)
    receipt = run.receipt()
    assert receipt.status == "passed"
    lines = [line for line in receipt.text.split("\n") if line.startswith("- File written: ")]
    assert len(lines) == MAX_FILE_LINES
    assert "\n- 5 additional files were written.\n" in receipt.text
    for line in lines:
        assert len(line) <= 220, line
        assert line.startswith(f"- File written: `/workspace/{PROJECT}/d0") and ELLIPSIS in line
        assert line.endswith(".py`.") and "xxx/f" in line
    assert len(receipt.text) < RECEIPT_BOUND


def test_a_hostile_directory_is_bounded_inline_code() -> None:
    run = Run().project()
    long = f'cd "/workspace/{PROJECT}/a`b {"d" * 300}" && python3 test_rename.py'
    run.run(long, "ok", cwd=None)
    receipt = run.receipt()
    assert receipt.status == "failed"  # that directory holds none of this run's changes
    line = next(line for line in receipt.text.split("\n") if line.startswith("- The latest recognized test command"))
    directory = line.split("` in `", 1)[1].split("`,", 1)[0]
    assert directory.startswith(f"/workspace/{PROJECT}/a b ddd")
    assert len(directory) <= 160 and directory.endswith(ELLIPSIS)
    assert not any(ord(char) < 32 and char != "\n" for char in receipt.text)
    command = Run().project()
    command.run("python3 test_rename.py " + "`x`\x07" * 100, "ok")
    text = command.receipt().text
    shown = text.split("command, `", 1)[1].split("` in `", 1)[0]
    assert len(shown) <= 160 and "`" not in shown and "\x07" not in shown


def test_events_parse_from_json_by_kind() -> None:
    events = TypeAdapter(list[Event]).validate_json(
        json.dumps(
            [
                {"kind": "file_change", "path": f"{PROJECT}/rename_photos.py", "time": 1},
                {"kind": "file_change", "path": f"{PROJECT}/test_rename.py", "time": 2},
                {
                    "kind": "command",
                    "command": "python3 test_rename.py",
                    "cwd": f"/workspace/{PROJECT}",
                    "start": 3,
                    "end": 3.2,
                    "output": "\u2713 All tests passed!",
                    "exit_code": 0,
                },
            ]
        )
    )
    assert [type(event).__name__ for event in events] == ["FileChange", "FileChange", "CommandRun"]
    assert build_refusal_receipt(events, RunFacts(request_text=PROMPT)).text == SEED_RECEIPT
    with pytest.raises(ValueError):
        TypeAdapter(list[Event]).validate_python([{"kind": "read", "path": "x"}])
