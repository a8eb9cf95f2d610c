"""Test verdicts: judge a test command by the runner's own summary (seed 003, "Unittest verdict").

Why this exists: the guard used to scan a test run's output for failure-looking lines. On tower3
(photo-renamer, session 047d3145) ``python3 -m unittest`` reported "Ran 11 tests ... OK" with exit 0,
and then the program under a negative test printed ``Error: Folder '/nonexistent/folder/path' does
not exist.``; that line was counted as a failure and a delivered run was graded PARTIAL. So a run is
judged by the summary its runner prints (unittest, pytest, Jest, Vitest, node:test, cargo test,
go test), with ANSI colors stripped (a pty exec colors the summary), and only an ad-hoc test script
that prints no runner summary is judged by its exit code and its own ``Error:``/``fail:`` lines.

Rules, in order:

* A runner summary that reports a failure or error is ``failed``, whatever the exit code.
* A summary that says no test ran (nothing was collected or selected: unittest's "Ran 0 tests" /
  "NO TESTS RAN", pytest's "no tests ran" or a deselected-only run, Jest's "No tests found", Vitest's
  "No test files found", node:test's "tests 0", cargo's "running 0 tests", go's "no test files" /
  "no tests to run") is ``no_test_ran``, whatever the exit code (pytest and unittest exit 5, Jest and
  Vitest 1); ``said`` keeps the runner's own words. It is neither a failing test nor a run whose tests
  were skipped, so it has a name of its own.
* A passing summary with a non-zero exit code is ``failed`` (the exit code is the process's verdict),
  unless the runner's own verdict word says no test ran (unittest 3.12+ "NO TESTS RAN (skipped=1)",
  exit 5): that exit reports that nothing ran, so the next rule applies.
* A passing summary in which no test passed (every test skipped, an expected failure, xpassed or todo)
  is ``no_passing_test``: it proves nothing.
* Otherwise a summary is ``passed``.
* No summary and a non-zero exit: ``failed``. No summary and no exit code: ``unrecognized``.
* No summary and exit 0: ``no_passing_test`` -- except for an *ad-hoc test script* (a test command
  whose test-ness comes from a script's file name, such as ``python3 test_rename.py``), which is its
  own runner: it is ``passed`` unless it printed a failure line (``Error: ...``, ``fail: ...``,
  ``Traceback``, "tests failed"). Seed 003's tower2 receipt counts exactly such a run as passed.

Delivery and continuation gate on ``delivery_verdict``, not on the verdict itself: there a run in which
no test passed (``no_test_ran``, ``no_passing_test``) is ``failed`` unless it exited 0 (seed 002 counts
unittest's exit 5 as a failed test run), exactly as before ``no_test_ran`` had a name.

Counts: ``skipped`` holds every test that ran without passing or failing: skipped, expected failures
(xfailed), xpassed, todo and ignored. ``deselected`` holds the tests a selection left out (pytest's
"deselected", cargo's "filtered out"): they never ran, so they are not skipped. ``failed`` holds
failures, errors, unexpected successes and cancelled tests. An ad-hoc script reports no counts.
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

# The verdict is transcript data (a recognized test command's ``exec`` result carries it), so its record lives
# with the transcript's; the rules that reach it are here.
from harness.core.transcript import Runner, TestVerdict, VerdictName

__all__ = [
    "Runner",
    "VerdictName",
    "TestVerdict",
    "strip_ansi",
    "recognize",
    "delivery_verdict",
    "is_test_command",
    "runner_for_command",
]

# --------------------------------------------------------------------------------------------------
# Output normalization

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colors, cursor movement
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # two-byte escapes
)


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences and normalize line ends (a pty writes ``\\r\\n``)."""
    text = _ANSI.sub("", text)
    return text.replace("\r\n", "\n").replace("\r", "\n")


class _Summary(BaseModel):
    model_config = ConfigDict(frozen=True)

    runner: Runner
    passed: int
    failed: int
    skipped: int
    ok: bool  # the runner's own overall verdict line says success
    deselected: int = 0
    said: str | None = None  # the runner's words when it reports that no test ran
    none_ran: bool = False
    """The runner's own verdict word is "no test ran" (unittest 3.12+ "NO TESTS RAN (skipped=1)", exit 5): its
    non-zero exit then reports that nothing ran, not that a test failed."""


# --------------------------------------------------------------------------------------------------
# unittest: "Ran N tests in Xs" then "OK (skipped=1)" / "FAILED (failures=1, errors=2)" / "NO TESTS RAN"

_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in \d+(?:\.\d+)?s\s*$")
_UNITTEST_RESULT = re.compile(r"^(OK|FAILED|NO TESTS RAN)\b(?:\s*\(([^)]*)\))?")
_UNITTEST_BLOCK = re.compile(r"^={70}\n(?:FAIL|ERROR|UNEXPECTED SUCCESS): ", re.M)
_UNITTEST_INFO = re.compile(r"(failures|errors|skipped|expected failures|unexpected successes)=(\d+)")


def _unittest(text: str) -> _Summary | None:
    passed = failed = skipped = ran_total = 0
    ok, found, no_tests_ran = True, False, False
    lines = text.split("\n")
    for index, line in enumerate(lines):
        ran = _UNITTEST_RAN.match(line)
        if not ran:
            continue
        # The verdict line follows a blank line; program output may be interleaved, so look a little.
        result = None
        for follower in lines[index + 1 : index + 6]:
            result = _UNITTEST_RESULT.match(follower.strip())
            if result:
                break
        if result is None:
            continue
        found = True
        ran_total += int(ran.group(1))
        no_tests_ran = no_tests_ran or result.group(1) == "NO TESTS RAN"
        info = {key: int(value) for key, value in _UNITTEST_INFO.findall(result.group(2) or "")}
        failures = info.get("failures", 0) + info.get("errors", 0) + info.get("unexpected successes", 0)
        not_run = info.get("skipped", 0) + info.get("expected failures", 0)
        failed += failures
        skipped += not_run
        passed += max(int(ran.group(1)) - failures - not_run, 0)
        if result.group(1) == "FAILED":
            ok = False
    if not found:
        return None
    # unittest's own failure block (after a separator of 70 "=") fails the run even after an OK,
    # e.g. two runs chained in one command; a program's "Error:" line never has that shape.
    blocks = len(_UNITTEST_BLOCK.findall(text))
    if blocks and failed == 0:
        failed = blocks
        ok = False
    # Python 3.12+ says "NO TESTS RAN" (and exits 5); 3.11 says "Ran 0 tests" ... "OK" (and exits 0).
    # From 3.12 "Ran N" leaves skipped tests out, and a run of skipped tests only is "NO TESTS RAN (skipped=1)".
    said = None if ran_total or failed else ("NO TESTS RAN" if no_tests_ran else "Ran 0 tests")
    return _Summary(runner="unittest", passed=passed, failed=failed, skipped=skipped, ok=ok, said=said,
                    none_ran=no_tests_ran)


# --------------------------------------------------------------------------------------------------
# pytest: "==== 1 failed, 2 passed, 1 skipped, 2 warnings in 0.12s ====" (or the -q form without "=")

_PYTEST_LINE = re.compile(r"^(.+?) in \d+(?:\.\d+)?s(?: \([^)]*\))?$")
_PYTEST_PART = re.compile(r"^(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|warnings?|deselected|rerun)$")


def _pytest(text: str) -> _Summary | None:
    counts: dict[str, int] = {}
    bodies: list[str] = []
    for raw in text.split("\n"):
        line = raw.strip().strip("=").strip()
        match = _PYTEST_LINE.match(line)
        if not match:
            continue
        body = match.group(1)
        # "no tests ran" stands where the counts would be, alone or before warnings ("no tests ran, 1 warning").
        parts = [part for part in body.split(", ") if part != "no tests ran"]
        parsed = [_PYTEST_PART.match(part) for part in parts]
        if not all(parsed):
            continue
        bodies.append(body)
        for part in parsed:
            assert part is not None
            word = part.group(2)
            word = "error" if word.startswith("error") else word
            counts[word] = counts.get(word, 0) + int(part.group(1))
    if not bodies:
        return None
    failed = counts.get("failed", 0) + counts.get("error", 0)
    passed = counts.get("passed", 0)
    skipped = sum(counts.get(word, 0) for word in ("skipped", "xfailed", "xpassed"))
    said = bodies[-1] if passed + failed + skipped == 0 else None
    return _Summary(runner="pytest", passed=passed, failed=failed, skipped=skipped, ok=failed == 0,
                    deselected=counts.get("deselected", 0), said=said)


# --------------------------------------------------------------------------------------------------
# Jest: "Test Suites: 1 failed, 1 passed, 2 total" and "Tests:       1 failed, 1 todo, 3 passed, 5 total"

_JEST_TESTS = re.compile(r"^\s*Tests:\s+(.*\d+ total)\s*$", re.M)
_JEST_SUITES = re.compile(r"^\s*Test Suites:\s+(.*\d+ total)\s*$", re.M)
_COUNT_WORD = re.compile(r"(\d+) (passed|failed|skipped|todo|pending|total)")


def _words(body: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for number, word in _COUNT_WORD.findall(body):
        counts[word] = counts.get(word, 0) + int(number)
    return counts


_JEST_NONE = re.compile(r"^No tests found, exiting with code \d+", re.M)


def _jest(text: str) -> _Summary | None:
    tests = _JEST_TESTS.findall(text)
    suites = _JEST_SUITES.findall(text)
    if not tests and not suites:
        # Jest prints no summary when no test file matched; exit 1, or 0 with --passWithNoTests.
        if _JEST_NONE.search(text):
            return _Summary(runner="jest", passed=0, failed=0, skipped=0, ok=True, said="No tests found")
        return None
    counts = _words(tests[-1]) if tests else {}
    suite_counts = _words(suites[-1]) if suites else {}
    failed = counts.get("failed", 0)
    skipped = counts.get("skipped", 0) + counts.get("todo", 0) + counts.get("pending", 0)
    ok = failed == 0 and suite_counts.get("failed", 0) == 0
    if failed == 0 and not ok:
        failed = suite_counts.get("failed", 0)  # a suite that failed to run reports no test
    said = f"Tests: {tests[-1].strip()}" if tests and failed == 0 and not counts.get("passed") and not skipped else None
    return _Summary(runner="jest", passed=counts.get("passed", 0), failed=failed, skipped=skipped, ok=ok, said=said)


# --------------------------------------------------------------------------------------------------
# Vitest: " Test Files  1 failed | 2 passed (3)" and "      Tests  1 failed | 5 passed | 1 skipped (7)"

_VITEST_TESTS = re.compile(r"^\s*Tests\s{2,}(.+?)\s+\((\d+)\)\s*$", re.M)
_VITEST_FILES = re.compile(r"^\s*Test Files\s{2,}(.+?)\s+\((\d+)\)\s*$", re.M)
_VITEST_PART = re.compile(r"^(\d+) (passed|failed|skipped|todo)$")


def _vitest_counts(body: str) -> dict[str, int] | None:
    counts: dict[str, int] = {}
    for part in body.split("|"):
        match = _VITEST_PART.match(part.strip())
        if not match:
            return None
        counts[match.group(2)] = counts.get(match.group(2), 0) + int(match.group(1))
    return counts


_VITEST_NONE = re.compile(r"^No test files found, exiting with code \d+", re.M)


def _vitest(text: str) -> _Summary | None:
    tests = [c for c in (_vitest_counts(m.group(1)) for m in _VITEST_TESTS.finditer(text)) if c is not None]
    files = [c for c in (_vitest_counts(m.group(1)) for m in _VITEST_FILES.finditer(text)) if c is not None]
    if not tests and not files:
        # Vitest prints no summary when no test file matched; exit 1, or 0 with --passWithNoTests.
        if _VITEST_NONE.search(text):
            return _Summary(runner="vitest", passed=0, failed=0, skipped=0, ok=True, said="No test files found")
        return None
    counts = tests[-1] if tests else {}
    file_counts = files[-1] if files else {}
    failed = counts.get("failed", 0)
    ok = failed == 0 and file_counts.get("failed", 0) == 0
    if failed == 0 and not ok:
        failed = file_counts.get("failed", 0)
    skipped = counts.get("skipped", 0) + counts.get("todo", 0)
    return _Summary(runner="vitest", passed=counts.get("passed", 0), failed=failed, skipped=skipped, ok=ok)


# --------------------------------------------------------------------------------------------------
# node:test (spec reporter "ℹ tests 3", TAP reporter "# tests 3")

_NODE_LINE = re.compile(r"^\s*(?:ℹ|#)\s*(tests|suites|pass|fail|cancelled|skipped|todo)\s+(\d+)\s*$", re.M)


def _node_test(text: str) -> _Summary | None:
    counts: dict[str, int] = {}
    for word, number in _NODE_LINE.findall(text):
        counts[word] = int(number)  # the reporter prints one block at the end; keep the last
    if not {"tests", "pass", "fail"} <= counts.keys():
        return None
    failed = counts["fail"] + counts.get("cancelled", 0)
    skipped = counts.get("skipped", 0) + counts.get("todo", 0)
    said = "tests 0" if counts["tests"] == 0 and failed == 0 else None
    return _Summary(runner="node_test", passed=counts["pass"], failed=failed, skipped=skipped, ok=failed == 0,
                    said=said)


# --------------------------------------------------------------------------------------------------
# cargo test: one "test result:" line per test binary (unit tests, integration tests, doc-tests)

_CARGO_RESULT = re.compile(
    r"^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured; (\d+) filtered out",
    re.M,
)


def _cargo(text: str) -> _Summary | None:
    results = _CARGO_RESULT.findall(text)
    if not results:
        return None
    passed = sum(int(r[1]) for r in results)
    failed = sum(int(r[2]) for r in results)
    skipped = sum(int(r[3]) for r in results)
    filtered = sum(int(r[5]) for r in results)  # left out by a name filter: deselected, never run
    ok = all(r[0] == "ok" for r in results) and failed == 0
    said = None
    if passed + failed + skipped == 0:
        said = "running 0 tests" + (f", {filtered} filtered out" if filtered else "")
    return _Summary(runner="cargo", passed=passed, failed=failed, skipped=skipped, ok=ok, deselected=filtered,
                    said=said)


# --------------------------------------------------------------------------------------------------
# go test: "ok  	example.com/pkg	0.003s", "FAIL	example.com/pkg	0.010s", "--- PASS: TestX (0.00s)"

_GO_OK = re.compile(r"^ok\s+\S+\s+(?:\d+(?:\.\d+)?s|\(cached\))(.*)$", re.M)
_GO_FAIL_PACKAGE = re.compile(r"^FAIL\s+\S+\s+(?:\d+(?:\.\d+)?s|\[(?:build|setup) failed\])", re.M)
_GO_CASE = re.compile(r"^\s*--- (PASS|FAIL|SKIP): \S+", re.M)


_GO_NO_FILES = re.compile(r"^\?\s+\S+\s+\[no test files\]", re.M)
_GO_NO_TESTS = re.compile(r"^testing: warning: no tests to run$|\[no tests to run\]", re.M)


def _go(text: str) -> _Summary | None:
    oks = _GO_OK.findall(text)
    failed_packages = len(_GO_FAIL_PACKAGE.findall(text))
    cases = _GO_CASE.findall(text)
    no_files = bool(_GO_NO_FILES.search(text))
    if not oks and not failed_packages and not cases and not no_files:
        return None
    if cases:  # -v: every test and subtest reports itself
        passed, failed, skipped = cases.count("PASS"), cases.count("FAIL"), cases.count("SKIP")
    else:
        # Without -v go reports per package: a package is one passing unit unless nothing ran in it.
        passed = sum(1 for rest in oks if "[no tests to run]" not in rest)
        failed, skipped = 0, 0
    failed = max(failed, failed_packages)
    said = None
    if passed + failed + skipped == 0:
        words = (["no test files"] if no_files else []) + (["no tests to run"] if _GO_NO_TESTS.search(text) else [])
        said = "; ".join(words) or None
    return _Summary(runner="go", passed=passed, failed=failed, skipped=skipped, ok=failed == 0, said=said)


_PARSERS: dict[Runner, Callable[[str], _Summary | None]] = {
    "cargo": _cargo,
    "go": _go,
    "vitest": _vitest,
    "jest": _jest,
    "node_test": _node_test,
    "pytest": _pytest,
    "unittest": _unittest,
}
"""Most specific first: a summary shape that cannot occur in another runner's output wins."""


# --------------------------------------------------------------------------------------------------
# Test commands

_SEGMENT_SPLIT = re.compile(r"&&|\|\||[;|\n&]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS = frozenset({"sudo", "env", "time", "nice", "nohup", "command", "exec", "builtin", "stdbuf", "xvfb-run"})
_PYTHON = re.compile(r"^(?:python(?:\d+(?:\.\d+)?)?|py|pypy3?)(?:\.exe)?$")
_NODE = re.compile(r"^(?:node|nodejs)(?:\.exe)?$")
_TEST_FILE = re.compile(r"(?:^|[._-])tests?(?:[._-]|$)|^spec[._-]|[._-]spec\.", re.I)
_SCRIPT_SUFFIX = re.compile(r"\.(?:py|js|mjs|cjs|ts|sh|bash)$")
_PACKAGE_MANAGERS = frozenset({"npm", "pnpm", "yarn", "bun"})
_JS_RUNNERS: dict[str, Runner | None] = {"jest": "jest", "vitest": "vitest", "mocha": None, "ava": None, "tap": None}


def _words_of(segment: str) -> list[str]:
    """The words of one simple command, without assignments and wrappers (sudo, env, timeout ...)."""
    try:
        words = shlex.split(segment, posix=True)
    except ValueError:
        words = segment.split()
    while words:
        head = posixpath.basename(words[0])
        if _ASSIGNMENT.match(words[0]):
            words = words[1:]
        elif head in _WRAPPERS or head == "timeout":
            words = words[1:]
            while words and (words[0].startswith("-") or _ASSIGNMENT.match(words[0])):
                words = words[1:]
            if head == "timeout":
                words = words[1:]  # the duration
        elif head in {"uv", "poetry", "pipenv", "pdm", "hatch"} and words[1:2] == ["run"]:
            words = words[2:]
        elif head in {"npx", "pnpx", "bunx"}:
            words = [word for word in words[1:] if not word.startswith("-")]
        else:
            break
    return words


def _classify(words: list[str]) -> tuple[bool, Runner | None, bool]:
    """(is a test command, the runner it names, is an ad-hoc script)."""
    if not words:
        return False, None, False
    head = posixpath.basename(words[0]).lower()
    rest = words[1:]
    if _PYTHON.match(head):
        if "-m" in rest:
            module = rest[rest.index("-m") + 1] if rest.index("-m") + 1 < len(rest) else ""
            if module == "unittest":
                return True, "unittest", False
            if module in {"pytest", "py.test"}:
                return True, "pytest", False
            return module in {"nose2", "green", "trial", "tox"}, None, False
        if "-c" in rest:
            return False, None, False
        script = next((w for w in rest if not w.startswith("-")), "")
        name = posixpath.basename(script)
        if name == "manage.py" and "test" in rest:
            return True, "unittest", False
        if name.endswith(".py") and _TEST_FILE.search(name[:-3]):
            return True, None, True
        return False, None, False
    if head in {"pytest", "py.test"}:
        return True, "pytest", False
    if head in _JS_RUNNERS:
        return True, _JS_RUNNERS[head], False
    if _NODE.match(head):
        if "--test" in rest or any(w.startswith("--test=") for w in rest):
            return True, "node_test", False
        script = next((w for w in rest if not w.startswith("-")), "")
        name = posixpath.basename(script)
        if _SCRIPT_SUFFIX.search(name) and _TEST_FILE.search(_SCRIPT_SUFFIX.sub("", name)):
            return True, None, True
        return False, None, False
    if head in _PACKAGE_MANAGERS and rest:
        if rest[0] in {"test", "t"} or (
            rest[0] in {"run", "run-script"} and len(rest) > 1 and rest[1].startswith("test")
        ):
            return True, None, False
        if rest[0] == "exec" and len(rest) > 1:
            return _classify(rest[1:])
        if head == "yarn" and rest[0] in _JS_RUNNERS:
            return True, _JS_RUNNERS[rest[0]], False
        return False, None, False
    if head == "cargo" and rest and rest[0] in {"test", "nextest"}:
        return True, "cargo", False
    if head == "go" and rest and rest[0] == "test":
        return True, "go", False
    if head == "deno" and rest and rest[0] == "test":
        return True, None, False
    if head == "make" and any(w in {"test", "tests", "check"} for w in rest):
        return True, None, False
    if head in {"tox", "nox", "ctest"}:
        return True, None, False
    if head in {"bash", "sh", "zsh"} and rest and not rest[0].startswith("-"):
        return _classify(rest)
    if _SCRIPT_SUFFIX.search(head) and _TEST_FILE.search(_SCRIPT_SUFFIX.sub("", head)):
        return True, None, True  # ./run_tests.sh, ./test.sh
    return False, None, False


def _segments(command: str) -> list[list[str]]:
    return [words for words in (_words_of(part) for part in _SEGMENT_SPLIT.split(command)) if words]


@functools.lru_cache(maxsize=4096)
def is_test_command(command: str) -> bool:
    """Whether a shell command runs tests (any segment of a chain or pipeline). Cached: a pure function of the text,
    asked again for every command of a run each time a receipt is built."""
    return any(_classify(words)[0] for words in _segments(command))


def runner_for_command(command: str) -> Runner | None:
    """The runner a command names (``python -m unittest`` -> unittest), or None (``npm test``)."""
    for words in _segments(command):
        is_test, runner, _ = _classify(words)
        if is_test and runner:
            return runner
    return None


def _adhoc_script(command: str) -> bool:
    """A test command whose only test-ness is a script's name: the script is its own runner."""
    found = False
    for words in _segments(command):
        is_test, runner, adhoc = _classify(words)
        if is_test and not adhoc:
            return False
        found = found or adhoc
    return found


# --------------------------------------------------------------------------------------------------
# Ad-hoc scripts: their own failure lines

_FAILURE_LINE = re.compile(
    r"^[\s✗✘×❌!*>-]*(?:(?:error|fail(?:ed|ure|ures)?|assertionerror)\b|traceback \(most recent call last\))", re.I
)
_ZERO_COUNT = re.compile(r"\b(?:errors?|fail(?:ed|ures?)?)\s*[:=]\s*0\b", re.I)
_TESTS_FAILED = re.compile(r"(?<!\b0 )(?<!\bno )\btests?\s+failed\b", re.I)


def _adhoc_failure(text: str) -> bool:
    for line in text.split("\n"):
        if _ZERO_COUNT.search(line):
            continue
        if _FAILURE_LINE.match(line) or _TESTS_FAILED.search(line):
            return True
    return False


# --------------------------------------------------------------------------------------------------


def _summary(text: str, hint: Runner | None) -> _Summary | None:
    if hint is not None:
        summary = _PARSERS[hint](text)
        if summary is not None:
            return summary
    for runner, parser in _PARSERS.items():
        if runner == hint:
            continue
        summary = parser(text)
        if summary is not None:
            return summary
    return None


def recognize(output: str, exit_code: int | None = None, command: str | None = None) -> TestVerdict:
    """Judge one finished test command from its output, exit code and (optionally) the command.

    ``exit_code`` None means the exit code is unknown (not that the command is still running: a
    running command has no verdict yet). ``command`` lets the recognizer prefer the runner the
    command names and tell an ad-hoc test script from a runner that printed no summary.
    """
    text = strip_ansi(output or "")
    hint = runner_for_command(command) if command else None
    summary = _summary(text, hint)
    if summary is not None:
        counts = {"passed": summary.passed, "failed": summary.failed, "skipped": summary.skipped,
                  "deselected": summary.deselected}
        said = None
        if summary.failed > 0 or not summary.ok:
            verdict: VerdictName = "failed"
        elif summary.passed + summary.skipped == 0:
            verdict, said = "no_test_ran", summary.said or "no test ran"
        elif exit_code not in (None, 0) and not summary.none_ran:
            verdict = "failed"
        elif summary.passed == 0:
            verdict = "no_passing_test"
        else:
            verdict = "passed"
        return TestVerdict(runner=summary.runner, verdict=verdict, said=said, **counts)
    if exit_code is None:
        return TestVerdict(runner=hint, verdict="unrecognized")
    if exit_code != 0:
        return TestVerdict(runner=hint, verdict="failed")
    if command and _adhoc_script(command):
        return TestVerdict(runner=None, verdict="failed" if _adhoc_failure(text) else "passed")
    return TestVerdict(runner=hint, verdict="no_passing_test")


def delivery_verdict(verdict: TestVerdict, exit_code: int | None) -> VerdictName:
    """The verdict as delivery and continuation gate on it. A run in which no test passed is ``failed``
    after a non-zero exit (seed 002: unittest's exit 5 with no tests run is a failed test run) and
    ``no_passing_test`` after a clean one: what the recognizer said before a run with no test had a name of
    its own, so no gate moves. Every other verdict gates as itself."""
    if verdict.verdict not in ("no_test_ran", "no_passing_test"):
        return verdict.verdict
    return "failed" if exit_code not in (None, 0) else "no_passing_test"
