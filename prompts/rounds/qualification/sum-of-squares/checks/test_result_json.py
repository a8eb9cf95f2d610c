"""The write-execute-read task: result.json in the run's project folder, with this run's marker and the
right sum, written by a program that is there too."""
import json
from pathlib import Path

import pytest


def project(workspace: Path, values: dict) -> Path:
    found = sorted(p for p in workspace.glob(f"**/{values['project']}") if p.is_dir())
    if not found:
        pytest.fail(f"no project folder {values['project']} in the workspace")
    return found[0]


def result(workspace: Path, values: dict) -> dict:
    path = project(workspace, values) / "result.json"
    if not path.is_file():
        pytest.fail("result.json is not in the project folder")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        pytest.fail(f"result.json is not JSON: {exc}")


def test_marker_is_this_runs(workspace, values):
    assert result(workspace, values).get("marker") == values["marker"]


def test_sum_of_squares_is_right(workspace, values):
    n = int(values["n"])
    want = n * (n + 1) * (2 * n + 1) // 6
    assert result(workspace, values).get("sum_of_squares") == want


def test_a_program_wrote_it(workspace, values):
    programs = [p.name for p in project(workspace, values).glob("*.py")]
    assert programs, "no Python program in the project folder"
