"""The qualification round's checks: each passes on the work its demo script writes, with this run's
values, and fails for the reason it exists (wrong marker, missing card, a CDN, a wrong sum, failing or
unsaved tests). The web check runs in real Chromium."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness.core.catalog import draw_values, load_catalog
from harness.core.checks.spec import load_checks
from tests.workers.checks.local import run_here

TASKS = {t.id.split(".")[1]: t for t in load_catalog().rounds["qualification"]}


def values_for(task: str, seed: int = 5) -> dict[str, str]:
    return draw_values(TASKS[task].vars, seed)


def demo_workspace(task: str, ws: Path, values: dict[str, str]) -> Path:
    """The files the task's demo script writes, its {{values.NAME}} filled with this run's values."""
    script = tomllib.loads((Path(TASKS[task].folder) / "model.toml").read_text(encoding="utf-8"))
    for turn in script["turns"]:
        for call in turn.get("tool_calls", []):
            if call["name"] == "write":
                args = {k: re.sub(r"\{\{values\.(\w+)\}\}", lambda m: values[m.group(1)], v)
                        for k, v in call["arguments"].items()}
                path = ws / args["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(args["content"], encoding="utf-8")
    return ws


def run_pytest_checks(task: str, ws: Path, values: dict[str, str]):
    """The task's pytest check, loaded as the catalog sends it and run as the attempt lifecycle runs it."""
    (check,) = [c for c in load_checks(Path(TASKS[task].folder), TASKS[task].checks, values) if c.kind == "pytest"]
    return run_here(check, ws, 120)


def failed(result) -> dict[str, str]:
    return {d.name.split("::")[-1]: d.message for d in result.details if d.status != "passed"}


# -- website ------------------------------------------------------------------------------------------------


def web_check(ws: Path, values: dict[str, str]):
    (check,) = [c for c in load_checks(Path(TASKS["website"].folder), TASKS["website"].checks, values) if c.kind == "web"]
    return run_here(check, ws, 60)


@pytest.mark.integration
def test_website_demo_passes_both_checks(tmp_path: Path) -> None:
    values = values_for("website")
    ws = demo_workspace("website", tmp_path / "ws", values)
    web = web_check(ws, values)
    assert web.status == "passed", web.summary
    assert [d.name for d in web.details][:4] == [
        "page", f"element: text=Night Garden {values['marker']}", "count: article.event-card", "interaction"]
    files = run_pytest_checks("website", ws, values)
    assert files.status == "passed", files


@pytest.mark.integration
def test_website_of_another_run_fails(tmp_path: Path) -> None:
    ws = demo_workspace("website", tmp_path / "ws", values_for("website", seed=5))
    other = values_for("website", seed=6)
    web = web_check(ws, other)
    assert web.status == "failed" and web.details[0].message == f"no file in the workspace matches **/{other['project']}/**/index.html"
    same_folder = {**other, "project": values_for("website", seed=5)["project"]}
    web = web_check(ws, same_folder)
    assert web.status == "failed" and "no element matches" in failed(web)[f"element: text=Night Garden {other['marker']}"]
    assert "no heading reads" in failed(run_pytest_checks("website", ws, same_folder))["test_heading_carries_this_runs_marker"]


@pytest.mark.integration
def test_website_with_a_visible_sold_out_card_two_cards_or_a_cdn_fails(tmp_path: Path) -> None:
    values = values_for("website")
    ws = demo_workspace("website", tmp_path / "ws", values)
    page = ws / "Playground" / values["project"] / "index.html"
    html = page.read_text()
    page.write_text(html.replace(' id="midnight" hidden>', ' id="midnight">'))
    assert "already visible" in failed(web_check(ws, values))["interaction"]
    page.write_text(html.replace('<article class="event-card">', '<article class="card">', 1))
    assert failed(web_check(ws, values))["count: article.event-card"] == "2 visible, at least 3 wanted"
    page.write_text(html.replace("</head>", '<script src="https://cdn.example.com/lib.js"></script></head>'))
    assert "cdn.example.com" in failed(run_pytest_checks("website", ws, values))["test_no_external_resources"]


# -- coding -------------------------------------------------------------------------------------------------


def save_results(ws: Path, values: dict[str, str]) -> Path:
    root = ws / "Playground" / values["project"]
    r = subprocess.run([sys.executable, "-m", "unittest", "-v", "test_durations"], cwd=root,
                       capture_output=True, text=True, timeout=60)
    (root / "test-results.txt").write_text(r.stdout + r.stderr)
    return root


def test_coding_demo_passes(tmp_path: Path) -> None:
    values = values_for("coding")
    save_results(demo_workspace("coding", tmp_path / "ws", values), values)
    result = run_pytest_checks("coding", tmp_path / "ws", values)
    assert result.status == "passed" and len(result.details) == 16, result


def test_coding_that_accepts_bad_input_or_did_not_save_results_fails(tmp_path: Path) -> None:
    values = values_for("coding")
    root = save_results(demo_workspace("coding", tmp_path / "ws", values), values)
    (root / "test-results.txt").unlink()
    assert "is not in the project folder" in failed(run_pytest_checks("coding", tmp_path / "ws", values))[
        "test_results_file_shows_a_passing_run"]
    lenient = (root / "durations.py").read_text().replace("_DURATION.fullmatch(stripped)", "_DURATION.search(stripped)")
    (root / "durations.py").write_text(lenient)
    (root / "test-results.txt").write_text("Ran 5 tests in 0.001s\n\nFAILED (failures=1)\n")
    bad = failed(run_pytest_checks("coding", tmp_path / "ws", values))
    assert "test_rejects[1m1h]" in bad and "test_results_file_shows_a_passing_run" in bad


# -- sum of squares -----------------------------------------------------------------------------------------


def squares_workspace(ws: Path, values: dict[str, str], **override) -> Path:
    root = ws / "Playground" / values["project"]
    root.mkdir(parents=True)
    (root / "sum_squares.py").write_text("print('x')\n")
    n = int(values["n"])
    data = {"marker": values["marker"], "sum_of_squares": n * (n + 1) * (2 * n + 1) // 6, **override}
    (root / "result.json").write_text(json.dumps(data))
    return ws


def test_sum_of_squares_right_and_wrong(tmp_path: Path) -> None:
    values = values_for("sum-of-squares")
    good = run_pytest_checks("sum-of-squares", squares_workspace(tmp_path / "a", values), values)
    assert good.status == "passed" and len(good.details) == 3, good
    bad = run_pytest_checks("sum-of-squares", squares_workspace(tmp_path / "b", values, sum_of_squares=1), values)
    assert set(failed(bad)) == {"test_sum_of_squares_is_right"}
    bad = run_pytest_checks("sum-of-squares", squares_workspace(tmp_path / "c", values, marker="FLEET-0000000000"), values)
    assert set(failed(bad)) == {"test_marker_is_this_runs"}
