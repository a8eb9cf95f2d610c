"""The qualification coding task: durations.parse_duration in the run's project folder, its own tests,
and their saved output. The hidden cases below are the owner's, not the agent's."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest


def project(workspace: Path, values: dict) -> Path:
    found = sorted(p for p in workspace.glob(f"**/{values['project']}") if p.is_dir())
    if not found:
        pytest.fail(f"no project folder {values['project']} in the workspace")
    return found[0]


def load(workspace: Path, values: dict):
    path = project(workspace, values) / "durations.py"
    if not path.is_file():
        pytest.fail("durations.py is not in the project folder")
    spec = importlib.util.spec_from_file_location("durations_under_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("text, seconds", [
    ("1h30m", 5400), ("45s", 45), ("2h 5m 10s", 7510), ("90m", 5400), ("0s", 0), ("1h", 3600), ("10m5s", 605),
])
def test_parses(workspace, values, text, seconds):
    got = load(workspace, values).parse_duration(text)
    assert got == seconds and isinstance(got, int), f"parse_duration({text!r}) = {got!r}, want {seconds}"


@pytest.mark.parametrize("text", ["", "5x", "1m1h", "-3s", "h", "1h1h", "abc"])
def test_rejects(workspace, values, text):
    with pytest.raises(ValueError):
        load(workspace, values).parse_duration(text)


def test_own_tests_exist_and_pass(workspace, values):
    root = project(workspace, values)
    assert (root / "test_durations.py").is_file(), "test_durations.py is not in the project folder"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_durations.py"],
                       cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"the agent's tests do not pass: {r.stdout[-800:]}"


def test_results_file_shows_a_passing_run(workspace, values):
    path = project(workspace, values) / "test-results.txt"
    assert path.is_file(), "test-results.txt is not in the project folder"
    text = path.read_text(encoding="utf-8", errors="replace")
    unittest_ok = re.search(r"^Ran ([1-9]\d*) tests? in .*\n+OK\b", text, re.M)
    pytest_ok = re.search(r"\b([1-9]\d*) passed\b", text) and not re.search(r"\b\d+ (failed|error)", text)
    assert unittest_ok or pytest_ok, f"test-results.txt does not show a passing run: {text[-400:]!r}"
