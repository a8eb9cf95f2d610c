"""A qualification round through the embedded default: every task drawn per run, its demo script played by
the scripted model, its checks run with the run's values, the values and seed recorded for reproduction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.core.catalog import draw_values, load_catalog, render
from tests.integration.fleetkit import REPO, free_port, run_embedded

pytestmark = pytest.mark.integration


def test_qualification_round_runs_checks_against_this_runs_values(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # The embedded inventory on a port of its own, so it can run beside other tests.
    inventory = tmp_path / "local.toml"
    inventory.write_text((REPO / "inventory" / "local.toml").read_text().replace("127.0.0.1:8765", f"127.0.0.1:{free_port()}"))
    r = run_embedded(["sweep", "-i", str(inventory), "--round", "qualification", "--repeat", "2", "--json"], tmp_path, home)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    runs = tmp_path / "runs"
    sweep = json.loads((runs / summary["sweep"] / "sweep.json").read_text())
    tasks = {t.id: t for t in load_catalog().rounds["qualification"]}
    assert sorted({c["item"] for c in sweep["cells"]}) == sorted(tasks) and len(sweep["cells"]) == 6

    projects = set()
    for cell in sweep["cells"]:
        task = tasks[cell["item"]]
        # The seed reproduces the values; the prompt the agent got carries them.
        assert draw_values(task.vars, cell["seed"]) == cell["values"]
        folder = runs / summary["sweep"] / cell["id"] / "attempt-1"
        assert (folder / "prompt.md").read_text() == render(task.prompt, cell["values"])
        projects.add(cell["values"]["project"])
        grade = json.loads((folder / "grade.json").read_text())
        assert grade["grade"] == "DELIVERED", (cell["id"], grade["reasons"], grade["checks"])
        assert grade["checks"] and all(c["status"] == "passed" for c in grade["checks"])
        assert any(p.name == cell["values"]["project"] for p in (folder / "workspace" / "Playground").iterdir())
        if task.id == "qualification.website":
            web = next(c for c in grade["checks"] if c["kind"] == "web")
            names = [d["name"] for d in web["details"]]
            assert f"element: text=Night Garden {cell['values']['marker']}" in names
            assert "interaction" in names and "overflow@375px" in names
        if task.id == "qualification.sum-of-squares":
            n = int(cell["values"]["n"])
            answer = (folder / "answer.txt").read_text()
            assert str(n * (n + 1) * (2 * n + 1) // 6) in answer
    assert len(projects) == 6  # every run drew its own project folder

    # Regrading the stored attempts needs no rerun and gives the same grades.
    g = run_embedded(["grade", summary["sweep"], "--json"], tmp_path, home)
    assert g.returncode == 0, g.stderr[-2000:]
    regraded = json.loads(g.stdout)
    assert {c["grade"] for c in regraded["cells"]} == {"DELIVERED"}
    history = (runs / summary["sweep"] / sweep["cells"][0]["id"] / "attempt-1" / "grades.jsonl").read_text().splitlines()
    assert len(history) == 2
