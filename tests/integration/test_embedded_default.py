"""The embedded default: `fleet sweep` with no options, no Redis and no remote host; then status, show, rerun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.fleetkit import REPO

pytestmark = pytest.mark.integration


def _fleet(args: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_first_command_runs_the_bundled_items_here(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    r = _fleet(["sweep"], tmp_path, home)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "results in runs/" in r.stdout
    runs = tmp_path / "runs"
    (sweep_id,) = [p.name for p in runs.iterdir() if (p / "sweep.json").exists()]
    sweep = json.loads((runs / sweep_id / "sweep.json").read_text())
    assert sweep["status"] == "finished"
    bundled = sorted(p.name for p in (REPO / "prompts" / "open").iterdir() if p.is_dir())
    assert sorted(sweep["items"]) == bundled
    assert all(a[-1]["status"] == "finished" for a in sweep["attempts"].values())
    # The embedded broker is SQLite under runs/.queue, not Redis; the host workspace lives under $HOME.
    assert (runs / ".queue" / "broker.sqlite").exists()
    assert (home / ".local" / "share" / "fleet-harness" / "hosts" / "local" / "runs" / sweep_id).is_dir()

    st = _fleet(["status", sweep_id, "--json"], tmp_path, home)
    assert st.returncode == 0 and json.loads(st.stdout)["sweep"] == sweep_id

    # The builtin agent ran against the scripted model the coordinator served, from the installed release.
    show = _fleet(["show", sweep_id, "local", "07"], tmp_path, home)
    assert show.returncode == 0, show.stderr
    assert "transcript.jsonl" in show.stdout and "workspace/Playground/photo-renamer/rename_photos.py" in show.stdout
    assert "I wrote Playground/photo-renamer/rename_photos.py" in show.stdout
    for item in ("07-photo-renamer", "09-sales-dashboard", "12-explain-only"):
        (cell,) = [c for c in sweep["cells"] if c["item"] == item]
        assert sweep["attempts"][cell["id"]][-1]["exit_code"] == 0
        end = json.loads((runs / sweep_id / cell["id"] / "attempt-1" / "transcript.jsonl").read_text().splitlines()[-1])
        assert end["event"] == "run_end" and end["outcome"] == "completed", (item, end)
        assert sweep["attempts"][cell["id"]][-1]["grade"] == "DELIVERED"
    # The acceptance checks ran on the host after the agent: pytest for the renamer, Chromium for the page.
    checks = {}
    for item in ("07-photo-renamer", "09-sales-dashboard"):
        (cell,) = [c for c in sweep["cells"] if c["item"] == item]
        grade = json.loads((runs / sweep_id / cell["id"] / "attempt-1" / "grade.json").read_text())
        checks.update({c["name"]: (c["kind"], c["status"]) for c in grade["checks"]})
    assert checks == {"test_photo_renamer": ("pytest", "passed"), "dashboard": ("web", "passed")}

    rep = _fleet(["report", sweep_id], tmp_path, home)
    assert rep.returncode == 0, rep.stderr
    report_md = (runs / sweep_id / "REPORT.md").read_text()
    assert "| local / builtin | DELIVERED | DELIVERED | DELIVERED |" in report_md
    assert "| local | 3/3 (100 %) | 3/3 (100 %) |" in report_md
    results = json.loads((runs / sweep_id / "results.json").read_text())
    assert {r["grade"] for r in results["cells"]} == {"DELIVERED"}
    import xml.etree.ElementTree as ET

    suite = ET.parse(runs / sweep_id / "junit.xml").getroot()
    assert suite.get("tests") == "3" and suite.get("failures") == "0" and suite.get("errors") == "0"

    rerun = _fleet(["rerun", "local", "07", "--sweep", sweep_id, "--json"], tmp_path, home)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    cells = {c["item"]: c for c in json.loads(rerun.stdout)["cells"]}
    assert cells["07-photo-renamer"]["attempts"] == 2
    assert all(c["attempts"] == 1 for k, c in cells.items() if k != "07-photo-renamer")
