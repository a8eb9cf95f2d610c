"""Test verdicts: every runner's own summary, colored or not, and the recorded fleet outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.guard.verdict import (
    TestVerdict,
    delivery_verdict,
    is_test_command,
    recognize,
    runner_for_command,
    strip_ansi,
)
from tests.fixtures import PIXEL_FLEET

FIXTURES = PIXEL_FLEET
RULE = "-" * 70
SEP = "=" * 70


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def verdict(output: str, exit_code: int | None = 0, command: str | None = None) -> tuple:
    result = recognize(output, exit_code, command)
    return result.runner, result.verdict, result.passed, result.failed, result.skipped


# --------------------------------------------------------------------------------------------------
# unittest

UNITTEST_PASS = (
    f"test_a (test_m.T.test_a) ... ok\ntest_b (test_m.T.test_b) ... ok\n\n{RULE}\nRan 2 tests in 0.001s\n\nOK\n"
)
UNITTEST_FAIL = (
    "test_a (test_m.T.test_a) ... ok\ntest_b (test_m.T.test_b) ... FAIL\n\n"
    f"{SEP}\nFAIL: test_b (test_m.T.test_b)\n{RULE}\nTraceback (most recent call last):\n"
    '  File "/w/test_m.py", line 6, in test_b\n    self.assertEqual(1, 2)\nAssertionError: 1 != 2\n\n'
    f"{RULE}\nRan 2 tests in 0.001s\n\nFAILED (failures=1)\n"
)
# Captured from python3 -m unittest -v on 3.11 with a skip and an expected failure.
UNITTEST_MIXED = (
    "test_a (test_m.T.test_a) ... ok\ntest_s (test_m.T.test_s) ... skipped 'todo'\n"
    f"test_x (test_m.T.test_x) ... expected failure\n\n{RULE}\nRan 3 tests in 0.001s\n\n"
    "OK (skipped=1, expected failures=1)\n"
)


@pytest.mark.parametrize(
    ("output", "exit_code", "expected"),
    [
        (UNITTEST_PASS, 0, ("unittest", "passed", 2, 0, 0)),
        (UNITTEST_FAIL, 1, ("unittest", "failed", 1, 1, 0)),
        (UNITTEST_MIXED, 0, ("unittest", "passed", 1, 0, 2)),
        # Every test skipped: exit 0 and "OK", but nothing passed.
        (
            "test_a (t.T.test_a) ... skipped 'todo'\n\nRan 1 test in 0.000s\n\nOK (skipped=1)",
            0,
            ("unittest", "no_passing_test", 0, 0, 1),
        ),
        (f"{RULE}\nRan 1 test in 0.000s\n\nOK (expected failures=1)\n", 0, ("unittest", "no_passing_test", 0, 0, 1)),
        # Python 3.14 on a pty: colored, CRLF.
        (
            "test_a (test_rename.T.test_a) ... skipped 'todo'\r\n\r\n" + f"{RULE}\r\nRan 1 test in 0.000s\r\n\r\n"
            "\x1b[32mOK\x1b[0m (\x1b[33mskipped=1\x1b[0m)\r\n",
            0,
            ("unittest", "no_passing_test", 0, 0, 1),
        ),
        (
            f"{RULE}\r\nRan 3 tests in 0.000s\r\n\r\n\x1b[32mOK\x1b[0m (\x1b[33mskipped=1\x1b[0m)\r\n",
            0,
            ("unittest", "passed", 2, 0, 1),
        ),
        (
            f"{RULE}\nRan 2 tests in 0.010s\n\n\x1b[1;31mFAILED\x1b[0m (\x1b[31merrors=2\x1b[0m)\n",
            1,
            ("unittest", "failed", 0, 2, 0),
        ),
        # Python 3.12+: nothing collected exits 5. No test ran: not a failing test (the exit still gates delivery).
        (f"\n{RULE}\nRan 0 tests in 0.000s\n\nNO TESTS RAN\n", 5, ("unittest", "no_test_ran", 0, 0, 0)),
        (f"\n{RULE}\nRan 0 tests in 0.000s\n\nOK\n", 0, ("unittest", "no_test_ran", 0, 0, 0)),
        (
            f"{SEP}\nUNEXPECTED SUCCESS: test_x (t.T.test_x)\n{RULE}\nRan 2 tests in 0.001s\n\n"
            "FAILED (unexpected successes=1)\n",
            1,
            ("unittest", "failed", 1, 1, 0),
        ),
    ],
)
def test_unittest_summaries(output: str, exit_code: int, expected: tuple) -> None:
    assert verdict(output, exit_code, "python3 -m unittest -v") == expected


def test_unittest_failure_block_after_an_ok_still_fails() -> None:
    # Two runs in one command: the first said OK, unittest's own FAIL: block follows.
    output = UNITTEST_PASS + f"{SEP}\nFAIL: test_b (test_rename.T.test_b)\n\nFAILED (failures=1)"
    assert recognize(output, 0, "python3 -m unittest -v").verdict == "failed"
    # Even when the block's own verdict line is missing.
    assert recognize(UNITTEST_PASS + f"{SEP}\nERROR: setUpClass (t.T)\n", 0).verdict == "failed"


def test_a_passing_summary_with_a_nonzero_exit_code_is_failed() -> None:
    assert verdict(UNITTEST_PASS, 1, "python3 -m unittest") == ("unittest", "failed", 2, 0, 0)
    assert recognize("3 passed in 0.02s", 2, "pytest").verdict == "failed"


def test_tower3_program_error_line_after_the_unittest_verdict_is_not_a_failure() -> None:
    tower3 = load("photo-renamer-tower3-d4a61f33.json")
    first, passing = tower3["calls"][2], tower3["calls"][4]
    assert passing["arguments"]["command"] == (
        "cd /workspace/Playground/photo-renamer && python3 -m unittest test_photo_renamer -v"
    )
    output = passing["result"]["details"]["aggregated"]
    assert "\nRan 11 tests in " in output and "\nOK\n" in output
    assert output.endswith("Error: Folder '/nonexistent/folder/path' does not exist.")
    result = recognize(output, passing["result"]["details"]["exitCode"], passing["arguments"]["command"])
    assert result.to_json() == {"runner": "unittest", "verdict": "passed", "passed": 11, "failed": 0, "skipped": 0}
    # The run before the fix really failed one test.
    failing = recognize(
        first["result"]["details"]["aggregated"], first["result"]["details"]["exitCode"], first["arguments"]["command"]
    )
    assert failing.to_json() == {"runner": "unittest", "verdict": "failed", "passed": 10, "failed": 1, "skipped": 0}


def test_strixy_failing_runs_are_counted_from_the_summary_not_program_error_lines() -> None:
    strixy = load("unittest-verdict-strixy-tail-d4a61f33.json")
    runs = [call for call in strixy["calls"] if call["name"] == "exec" and "result" in call]
    assert [call["n"] for call in runs] == [2, 8, 14, 20, 28, 31]
    results = []
    for call in runs:
        output = "".join(block["text"] for block in call["result"]["content"])
        # The program under test printed "ERROR: cannot read folder ..." inside a passing test's line.
        assert "ERROR: cannot read folder" in output
        results.append(recognize(output, call["result"]["details"]["exitCode"], call["arguments"]["command"]))
    assert {r.verdict for r in results} == {"failed"}
    assert [(r.passed, r.failed) for r in results] == [(11, 8), (13, 6), (13, 6), (13, 6), (18, 1), (18, 1)]
    # The same output with a clean exit and a passing summary is a pass: the program's line is not a failure.
    output = "".join(block["text"] for block in runs[-1]["result"]["content"])
    head = output.split("\n\n" + SEP)[0]
    assert recognize(head + f"\n\n{RULE}\nRan 19 tests in 0.005s\n\nOK\n", 0).verdict == "passed"


# --------------------------------------------------------------------------------------------------
# pytest

PYTEST_COLORED = (  # captured from pytest 9 -q --color=yes
    "\x1b[31mF\x1b[0m\x1b[33ms\x1b[0m\x1b[33mx\x1b[0m\x1b[32m.\x1b[0m\n"
    "\x1b[36m\x1b[1m=========================== short test summary info ============================\x1b[0m\n"
    "\x1b[31mFAILED\x1b[0m test_p.py::\x1b[1mtest_bad\x1b[0m - assert 1 == 2\n"
    "\x1b[31m\x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m1 passed\x1b[0m, \x1b[33m1 skipped\x1b[0m, "
    "\x1b[33m1 xfailed\x1b[0m\x1b[31m in 1.62s\x1b[0m\x1b[0m\n"
)


@pytest.mark.parametrize(
    ("output", "exit_code", "expected"),
    [
        (
            "..                                                                       [100%]\n2 passed in 0.01s",
            0,
            ("pytest", "passed", 2, 0, 0),
        ),
        (
            "============================= test session starts ==============================\n"
            "collected 3 items\n\ntest_x.py ...                                                            [100%]\n\n"
            "============================== 3 passed, 1 warning in 0.04s ===============================",
            0,
            ("pytest", "passed", 3, 0, 0),
        ),
        (PYTEST_COLORED, 1, ("pytest", "failed", 1, 1, 2)),
        (
            "s                                                                        [100%]\n1 skipped in 0.01s",
            0,
            ("pytest", "no_passing_test", 0, 0, 1),
        ),
        (
            "s \x1b[32m[100%]\x1b[0m\n\x1b[33m1 skipped\x1b[0m\x1b[33m in 0.01s\x1b[0m",
            0,
            ("pytest", "no_passing_test", 0, 0, 1),
        ),
        ("xx [100%]\n2 xfailed in 0.02s", 0, ("pytest", "no_passing_test", 0, 0, 2)),
        (
            "\x1b[33m1 skipped\x1b[0m, \x1b[33m1 xfailed\x1b[0m, \x1b[33m1 xpassed\x1b[0m\x1b[33m in 0.03s\x1b[0m",
            0,
            ("pytest", "no_passing_test", 0, 0, 3),
        ),
        (
            "============================== 3 deselected in 0.02s ===============================",
            0,
            ("pytest", "no_test_ran", 0, 0, 0),
        ),
        (
            "======================= 1 skipped, 3 deselected in 0.99s =======================",
            0,
            ("pytest", "no_passing_test", 0, 0, 1),
        ),
        ("\x1b[32m1 passed\x1b[0m, \x1b[33m1 skipped\x1b[0m\x1b[32m in 0.02s\x1b[0m", 0, ("pytest", "passed", 1, 0, 1)),
        ("1 passed, 2 xfailed in 0.02s", 0, ("pytest", "passed", 1, 0, 2)),
        (
            "==================================== ERRORS ====================================\n"
            "_________________________ ERROR collecting test_x.py __________________________\n"
            "E   ModuleNotFoundError: No module named 'renamer'\n"
            "!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!\n"
            "=============================== 1 error in 0.08s ===============================",
            2,
            ("pytest", "failed", 0, 1, 0),
        ),
        (
            "============================ no tests ran in 0.01s =============================",
            5,
            ("pytest", "no_test_ran", 0, 0, 0),
        ),
        (
            "============================ no tests ran in 0.01s =============================",
            0,
            ("pytest", "no_test_ran", 0, 0, 0),
        ),
    ],
)
def test_pytest_summaries(output: str, exit_code: int, expected: tuple) -> None:
    assert verdict(output, exit_code, "pytest -q") == expected


# --------------------------------------------------------------------------------------------------
# Jest and Vitest

JEST_PASS = (
    " PASS  src/sum.test.js\n  ✓ adds 1 + 2 to equal 3 (2 ms)\n\n"
    "Test Suites: 1 passed, 1 total\nTests:       3 passed, 3 total\nSnapshots:   0 total\n"
    "Time:        0.512 s\nRan all test suites.\n"
)
JEST_FAIL = (
    " FAIL  src/sum.test.js\n  ✕ subtracts (3 ms)\n\n"
    "Test Suites: 1 failed, 1 passed, 2 total\nTests:       1 failed, 1 skipped, 2 todo, 4 passed, 8 total\n"
    "Snapshots:   0 total\nTime:        1.02 s\n"
)
JEST_COLORED = (
    "\x1b[1mTest Suites: \x1b[22m\x1b[1m\x1b[32m2 passed\x1b[39m\x1b[22m, 2 total\n"
    "\x1b[1mTests:       \x1b[22m\x1b[1m\x1b[32m5 passed\x1b[39m\x1b[22m, 5 total\n"
)
VITEST_PASS = (
    " ✓ src/sum.test.ts (3 tests) 2ms\n\n Test Files  1 passed (1)\n      Tests  3 passed (3)\n"
    "   Start at  10:12:01\n   Duration  412ms (transform 21ms, setup 0ms, collect 18ms, tests 2ms)\n"
)
VITEST_FAIL = (
    " ❯ src/sum.test.ts (4 tests | 1 failed) 5ms\n\n Test Files  1 failed | 1 passed (2)\n"
    "      Tests  1 failed | 5 passed | 1 skipped (7)\n   Start at  10:12:01\n   Duration  612ms\n"
)
VITEST_COLORED_SKIPPED = (
    "\x1b[2m Test Files \x1b[22m \x1b[1m\x1b[32m1 passed\x1b[39m\x1b[22m\x1b[90m (1)\x1b[39m\n"
    "\x1b[2m      Tests \x1b[22m \x1b[2m2 skipped\x1b[22m\x1b[2m | \x1b[22m\x1b[2m1 todo\x1b[22m\x1b[90m (3)\x1b[39m\n"
)


@pytest.mark.parametrize(
    ("output", "exit_code", "expected"),
    [
        (JEST_PASS, 0, ("jest", "passed", 3, 0, 0)),
        (JEST_FAIL, 1, ("jest", "failed", 4, 1, 3)),
        (JEST_COLORED, 0, ("jest", "passed", 5, 0, 0)),
        ("Tests:       2 todo, 2 total\nTime:        0.5 s", 0, ("jest", "no_passing_test", 0, 0, 2)),
        ("Test Suites: 1 failed, 1 total\nTests:       0 total\n", 1, ("jest", "failed", 0, 1, 0)),
        (VITEST_PASS, 0, ("vitest", "passed", 3, 0, 0)),
        (VITEST_FAIL, 1, ("vitest", "failed", 5, 1, 1)),
        (VITEST_COLORED_SKIPPED, 0, ("vitest", "no_passing_test", 0, 0, 3)),
    ],
)
def test_jest_and_vitest_summaries(output: str, exit_code: int, expected: tuple) -> None:
    assert verdict(output, exit_code, "npm test") == expected


# --------------------------------------------------------------------------------------------------
# node:test, cargo test, go test

NODE_SPEC_FAIL = (  # captured from node 20 --test (spec reporter, colors on)
    "\x1b[34mℹ tests 4\x1b[39m\n\x1b[34mℹ suites 0\x1b[39m\n\x1b[34mℹ pass 1\x1b[39m\n\x1b[34mℹ fail 1\x1b[39m\n"
    "\x1b[34mℹ cancelled 0\x1b[39m\n\x1b[34mℹ skipped 1\x1b[39m\n\x1b[34mℹ todo 1\x1b[39m\n"
    "\x1b[34mℹ duration_ms 228.460684\x1b[39m\n"
)
NODE_TAP_PASS = (
    "1..2\n# tests 2\n# suites 0\n# pass 2\n# fail 0\n# cancelled 0\n# skipped 0\n# todo 0\n# duration_ms 61.2\n"
)
CARGO_FAIL = (  # captured from cargo test
    "running 3 tests\ntest tests::slow ... ignored\ntest tests::it_works ... ok\ntest tests::it_fails ... FAILED\n\n"
    "failures:\n    tests::it_fails\n\n"
    "test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.19s\n\n"
    "error: test failed, to rerun pass `--lib`\n"
)
CARGO_PASS = (
    "running 2 tests\ntest tests::a ... ok\ntest tests::b ... ok\n\n"
    "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n"
    "   Doc-tests crate_t\n\nrunning 0 tests\n\n"
    "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n"
)
GO_VERBOSE_PASS = (
    "=== RUN   TestAdd\n--- PASS: TestAdd (0.00s)\n=== RUN   TestSub\n=== RUN   TestSub/neg\n"
    "--- PASS: TestSub (0.00s)\n    --- PASS: TestSub/neg (0.00s)\nPASS\nok  \texample.com/calc\t0.002s\n"
)
GO_FAIL = (
    "--- FAIL: TestSub (0.00s)\n    calc_test.go:12: got 1, want 2\nFAIL\nFAIL\texample.com/calc\t0.003s\n"
    "ok  \texample.com/util\t(cached)\n?   \texample.com/cmd\t[no test files]\nFAIL\n"
)


@pytest.mark.parametrize(
    ("output", "exit_code", "command", "expected"),
    [
        (NODE_SPEC_FAIL, 1, "node --test", ("node_test", "failed", 1, 1, 2)),
        (NODE_TAP_PASS, 0, "node --test --test-reporter=tap", ("node_test", "passed", 2, 0, 0)),
        ("ℹ tests 1\nℹ pass 0\nℹ fail 0\nℹ todo 1", 0, "npm test", ("node_test", "no_passing_test", 0, 0, 1)),
        (CARGO_FAIL, 101, "cargo test", ("cargo", "failed", 1, 1, 1)),
        (CARGO_PASS, 0, "cargo test", ("cargo", "passed", 2, 0, 0)),
        (
            "test result: ok. 0 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            0,
            "cargo test",
            ("cargo", "no_passing_test", 0, 0, 2),
        ),
        (GO_VERBOSE_PASS, 0, "go test -v ./...", ("go", "passed", 3, 0, 0)),
        (GO_FAIL, 1, "go test ./...", ("go", "failed", 0, 1, 0)),
        (
            "ok  \texample.com/calc\t0.002s\nok  \texample.com/util\t0.004s\tcoverage: 81.2% of statements\n",
            0,
            "go test ./...",
            ("go", "passed", 2, 0, 0),
        ),
        (
            "ok  \texample.com/calc\t0.002s [no tests to run]\n",
            0,
            "go test -run TestNothing ./...",
            ("go", "no_test_ran", 0, 0, 0),
        ),
    ],
)
def test_node_cargo_and_go_summaries(output: str, exit_code: int, command: str, expected: tuple) -> None:
    assert verdict(output, exit_code, command) == expected


# --------------------------------------------------------------------------------------------------
# No runner summary


def test_no_summary_from_a_runner() -> None:
    assert verdict("", 0, "python3 -m pytest") == ("pytest", "no_passing_test", 0, 0, 0)
    assert verdict("Traceback (most recent call last):\nImportError: x", 1, "python3 -m unittest") == (
        "unittest",
        "failed",
        0,
        0,
        0,
    )
    assert verdict("still going", None, "npm test") == (None, "unrecognized", 0, 0, 0)
    assert verdict("", 0) == (None, "no_passing_test", 0, 0, 0)


def test_an_adhoc_test_script_is_judged_by_its_exit_code_and_its_own_failure_lines() -> None:
    tower2 = load("photo-renamer-tower2-d4a61f33.json")
    runs = [
        call for call in tower2["calls"] if call["tool"] == "exec" and "test_rename.py" in call["arguments"]["command"]
    ]
    outcomes = [
        recognize(
            call["result"]["details"]["aggregated"], call["result"]["details"]["exitCode"], call["arguments"]["command"]
        ).verdict
        for call in runs
    ]
    assert outcomes == ["failed", "failed", "passed"]  # the recorded exits 1, 1, then "✓ All tests passed!"
    for output in [
        "Error: negative numbers were accepted",
        "fail: rename kept the old name\nDone",
        "FAIL: case 3\n",
        "✗ 2 tests failed",
        "Traceback (most recent call last):\n  File x",
    ]:
        assert recognize(output, 0, "python3 test_rename.py").verdict == "failed", output
    for output in ["ok", "All 4 checks passed\nErrors: 0\nFailed: 0", "0 tests failed"]:
        assert recognize(output, 0, "python3 test_rename.py").verdict == "passed", output
    # The same lines from a runner command with no summary prove nothing passed.
    assert recognize("ok", 0, "python3 -m pytest").verdict == "no_passing_test"


def test_to_json_has_exactly_the_documented_keys() -> None:
    result = recognize(UNITTEST_MIXED, 0, "python3 -m unittest")
    assert result.to_json() == {"runner": "unittest", "verdict": "passed", "passed": 1, "failed": 0, "skipped": 2}
    assert json.loads(json.dumps(result.to_json())) == result.to_json()
    assert TestVerdict(runner=None, verdict="unrecognized").to_json() == {
        "runner": None,
        "verdict": "unrecognized",
        "passed": 0,
        "failed": 0,
        "skipped": 0,
    }
    with pytest.raises(ValueError):
        TestVerdict(runner="mocha", verdict="passed")  # type: ignore[arg-type]


def test_strip_ansi_removes_colors_and_pty_line_ends() -> None:
    assert strip_ansi("\x1b[1;32mOK\x1b[0m\r\n\x1b]8;;http://x\x07link\x1b]8;;\x07\r\n") == "OK\nlink\n"


@pytest.mark.parametrize(
    "command",
    [
        "python3 -m unittest test_renamer -v 2>&1",
        "cd /workspace/Playground/photo-renamer && python3 test_rename.py",
        "python -m pytest -q tests/",
        "pytest",
        "PYTHONPATH=. .venv/bin/pytest tests/harness/guard -q",
        "npm test",
        "npm run test:unit",
        "yarn test",
        "npx jest --ci",
        "npx vitest run",
        "node --test",
        "node test/app.test.js",
        "cargo test --lib",
        "go test ./...",
        "timeout 60 python3 -m pytest",
        "uv run pytest",
        "./run_tests.sh",
        "python manage.py test",
    ],
)
def test_test_commands_are_recognized(command: str) -> None:
    assert is_test_command(command)


@pytest.mark.parametrize(
    "command",
    [
        "cd /workspace/Playground/photo-renamer && python3 --version && pip3 show Pillow 2>/dev/null | head -2",
        "python3 ../photo_renamer.py . --dry-run",
        "ls -la",
        "npm install",
        "node server.js",
        "cargo build",
        "go build ./...",
        "python3 -c 'print(1)'",
        "cat test_rename.py",
        "echo pytest",
    ],
)
def test_other_commands_are_not_test_commands(command: str) -> None:
    assert not is_test_command(command)


def test_runner_for_command() -> None:
    assert runner_for_command("cd x && python3 -m unittest -v") == "unittest"
    assert runner_for_command("python3 -m pytest") == "pytest"
    assert runner_for_command("npx vitest run") == "vitest"
    assert runner_for_command("node --test") == "node_test"
    assert runner_for_command("npm test") is None
    assert runner_for_command("python3 test_rename.py") is None


# --------------------------------------------------------------------------------------------------
# A run where no test ran: its own verdict, with the runner's words; deselected kept apart from skipped

RUNNER_OUTPUTS = json.loads((Path(__file__).parent / "data" / "runner-outputs.json").read_text(encoding="utf-8"))
"""Printed by the real pytest and unittest (tests/harness/guard/data/make_runner_outputs.py)."""


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("pytest-empty", ("no_test_ran", 0, 0, 0, 0, "no tests ran", "failed")),
        ("pytest-q-empty", ("no_test_ran", 0, 0, 0, 0, "no tests ran", "failed")),
        ("pytest-deselected-only", ("no_test_ran", 0, 0, 0, 3, "3 deselected", "failed")),
        ("pytest-q-deselected-only", ("no_test_ran", 0, 0, 0, 3, "3 deselected", "failed")),
        ("pytest-q-skipped-and-deselected", ("no_passing_test", 0, 0, 1, 2, None, "no_passing_test")),
        ("pytest-q-passed-and-deselected", ("passed", 1, 0, 0, 2, None, "passed")),
        ("pytest-q-failed-and-deselected", ("failed", 0, 1, 0, 2, None, "failed")),
        ("unittest-empty-py3.11", ("no_test_ran", 0, 0, 0, 0, "Ran 0 tests", "no_passing_test")),
        ("unittest-k-nomatch-py3.11", ("no_test_ran", 0, 0, 0, 0, "Ran 0 tests", "no_passing_test")),
        ("unittest-empty-py3.12", ("no_test_ran", 0, 0, 0, 0, "NO TESTS RAN", "failed")),
        ("unittest-k-nomatch-py3.12", ("no_test_ran", 0, 0, 0, 0, "NO TESTS RAN", "failed")),
        ("unittest-skipped-only-py3.11", ("no_passing_test", 0, 0, 1, 0, None, "no_passing_test")),
        # 3.12 exits 5 and says "NO TESTS RAN (skipped=1)": a skipped test, not a failing one; still not delivered.
        ("unittest-skipped-only-py3.12", ("no_passing_test", 0, 0, 1, 0, None, "failed")),
        ("unittest-failed-py3.11", ("failed", 1, 1, 1, 0, None, "failed")),
    ],
)
def test_real_pytest_and_unittest_runs_where_no_test_ran(case: str, expected: tuple) -> None:
    recorded = RUNNER_OUTPUTS[case]
    result = recognize(recorded["output"], recorded["exit_code"], recorded["command"])
    gate = delivery_verdict(result, recorded["exit_code"])
    assert (result.verdict, result.passed, result.failed, result.skipped, result.deselected, result.said, gate) \
        == expected, (case, recorded["exit_code"], recorded["output"][-200:])


def test_the_recorded_outputs_are_what_the_runners_really_exit_with() -> None:
    # Guards the data: pytest exits 5 when nothing was collected or everything was deselected, unittest 5 from 3.12.
    exits = {name: case["exit_code"] for name, case in RUNNER_OUTPUTS.items()}
    assert exits["pytest-empty"] == exits["pytest-q-deselected-only"] == exits["unittest-empty-py3.12"] == 5
    assert exits["unittest-empty-py3.11"] == exits["pytest-q-skipped-and-deselected"] == 0
    assert RUNNER_OUTPUTS["unittest-empty-py3.12"]["output"].rstrip().endswith("NO TESTS RAN")


# Jest, Vitest, cargo and go are not installed here: these are their real summaries for a run with no test,
# as Jest 29, Vitest 3, cargo 1.8x and go 1.2x print them (Jest and Vitest exit 1 unless --passWithNoTests).
JEST_NONE = (
    "No tests found, exiting with code 1\nRun with `--passWithNoTests` to exit with code 0\nIn /w/app\n"
    "  3 files checked.\n  testMatch: **/__tests__/**/*.[jt]s?(x), **/?(*.)+(spec|test).[tj]s?(x) - 0 matches\n"
    "  testPathIgnorePatterns: /node_modules/ - 3 matches\n  testRegex:  - 0 matches\nPattern:  - 0 matches\n"
)
VITEST_NONE = (
    "\n RUN  v3.2.4 /w/app\n\nNo test files found, exiting with code 1\n\n"
    "include: **/*.{test,spec}.?(c|m)[jt]s?(x)\nexclude:  **/node_modules/**, **/dist/**, **/cypress/**\n"
)
NODE_NONE = "ℹ tests 0\nℹ suites 0\nℹ pass 0\nℹ fail 0\nℹ cancelled 0\nℹ skipped 0\nℹ todo 0\nℹ duration_ms 4.1\n"
CARGO_NONE = (
    "    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.02s\n"
    "     Running unittests src/lib.rs (target/debug/deps/calc-3f1c)\n\nrunning 0 tests\n\n"
    "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 3 filtered out; finished in 0.00s\n\n"
)
GO_NO_FILES = "?   \texample.com/calc\t[no test files]\n?   \texample.com/cmd\t[no test files]\n"
GO_NO_TESTS = "testing: warning: no tests to run\nPASS\nok  \texample.com/calc\t0.002s [no tests to run]\n"


@pytest.mark.parametrize(
    ("output", "exit_code", "command", "expected"),
    [
        (JEST_NONE, 1, "npx jest", ("jest", "no_test_ran", 0, "No tests found", "failed")),
        (JEST_NONE.replace("code 1", "code 0", 1), 0, "npx jest --passWithNoTests",
         ("jest", "no_test_ran", 0, "No tests found", "no_passing_test")),
        (VITEST_NONE, 1, "npx vitest run", ("vitest", "no_test_ran", 0, "No test files found", "failed")),
        (NODE_NONE, 0, "node --test", ("node_test", "no_test_ran", 0, "tests 0", "no_passing_test")),
        (CARGO_NONE, 0, "cargo test nomatch",
         ("cargo", "no_test_ran", 3, "running 0 tests, 3 filtered out", "no_passing_test")),
        (GO_NO_FILES, 0, "go test ./...", ("go", "no_test_ran", 0, "no test files", "no_passing_test")),
        (GO_NO_TESTS, 0, "go test -run TestNothing ./...", ("go", "no_test_ran", 0, "no tests to run", "no_passing_test")),
    ],
)
def test_other_runners_runs_where_no_test_ran(output: str, exit_code: int, command: str, expected: tuple) -> None:
    result = recognize(output, exit_code, command)
    assert (result.runner, result.verdict, result.deselected, result.said, delivery_verdict(result, exit_code)) \
        == expected
    assert (result.passed, result.failed, result.skipped) == (0, 0, 0)


def test_a_run_with_skipped_tests_or_a_failure_is_not_a_run_where_no_test_ran() -> None:
    # Something ran: every test skipped is no_passing_test; a failure beside no-test words stays failed.
    assert recognize("test result: ok. 0 passed; 0 failed; 2 ignored; 0 measured; 1 filtered out; finished in 0.00s",
                     0, "cargo test").to_json() == {"runner": "cargo", "verdict": "no_passing_test", "passed": 0,
                                                     "failed": 0, "skipped": 2, "deselected": 1}
    assert recognize(GO_FAIL, 1, "go test ./...").verdict == "failed"
    assert recognize("Tests:       2 skipped, 2 total", 0, "npx jest -t nomatch").verdict == "no_passing_test"


def test_deselected_is_its_own_count_and_stored_only_when_set() -> None:
    result = recognize(RUNNER_OUTPUTS["pytest-q-passed-and-deselected"]["output"], 0, "pytest -q -k test_a")
    assert result.to_json() == {"runner": "pytest", "verdict": "passed", "passed": 1, "failed": 0, "skipped": 0,
                                "deselected": 2}
    assert TestVerdict.model_validate(result.to_json()) == result
    no_test = recognize(RUNNER_OUTPUTS["pytest-deselected-only"]["output"], 5, "pytest -k nomatch")
    assert json.loads(no_test.model_dump_json()) == {"runner": "pytest", "verdict": "no_test_ran", "passed": 0,
                                                     "failed": 0, "skipped": 0, "deselected": 3,
                                                     "said": "3 deselected"}


def test_delivery_gates_on_a_run_where_no_test_ran_as_before_it_had_a_name() -> None:
    # Seed 002: unittest's exit 5 with no tests run is a failed test run for the continuation; exit 0 is "no passing
    # test" (which the normal delivery path still lets pass, seed 003). Every other verdict gates as itself.
    for verdict_name in ("passed", "failed", "no_passing_test", "unrecognized"):
        assert delivery_verdict(TestVerdict(runner=None, verdict=verdict_name), 0) == verdict_name
    no_test = TestVerdict(runner="unittest", verdict="no_test_ran", said="NO TESTS RAN")
    assert [delivery_verdict(no_test, code) for code in (5, 1, 0, None)] == [
        "failed", "failed", "no_passing_test", "no_passing_test"]
