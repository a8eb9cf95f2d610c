"""The embedded default: `fleet sweep` with no options, no Redis and no remote host; then status, show, rerun."""

from __future__ import annotations

import json

import pytest

from tests.integration.fleetkit import REPO, run_embedded

pytestmark = pytest.mark.integration


# What each bundled item's demo script is written to show (docs/prompts.md): every grade, each for its reason.
DEMO_GRADES = {
    "04-snake-game": "DELIVERED",
    "07-photo-renamer": "DELIVERED",
    "09-sales-dashboard": "DELIVERED",
    "12-explain-only": "DELIVERED",
    "15-forest-page": "DELIVERED",
    "18-calculator-fix": "PARTIAL",
    "21-ttl-cache": "DELIVERED",
    "24-csv-chart": "CODE_IN_CHAT",
    "27-log-stats": "NOTHING",
    "30-roman-numerals": "HARNESS_FAILURE",
}


def test_first_command_runs_the_bundled_items_here_and_shows_every_grade(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    r = run_embedded(["sweep"], tmp_path, home)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "results in runs/" in r.stdout
    # A row per item, always (one orientation), the attempts said in words.
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in r.stdout.splitlines() if line.startswith("│")]
    assert ["18-calculator-fix", "PARTIAL"] in rows and ["30-roman-numerals", "HARNESS_FAILURE(model_endpoint) (3 attempts)"] in rows, r.stdout
    runs = tmp_path / "runs"
    (sweep_id,) = [p.name for p in runs.iterdir() if (p / "sweep.json").exists()]
    sweep = json.loads((runs / sweep_id / "sweep.json").read_text())
    assert sweep["status"] == "finished"
    bundled = sorted(p.name for p in (REPO / "prompts" / "open").iterdir() if p.is_dir())
    assert sorted(sweep["items"]) == bundled == sorted(DEMO_GRADES)
    # The embedded broker is SQLite under runs/.queue, not Redis; the host workspace lives under $HOME.
    assert (runs / ".queue" / "broker.sqlite").exists()
    assert (home / ".local" / "share" / "fleet-harness" / "hosts" / "local" / "runs" / sweep_id).is_dir()

    cells = {c["item"]: c for c in sweep["cells"]}
    grades = {}
    for item, cell in cells.items():
        attempts = sweep["attempts"][cell["id"]]
        grades[item] = json.loads((runs / sweep_id / cell["id"] / f"attempt-{len(attempts)}" / "grade.json").read_text())
        assert attempts[-1]["grade"] == grades[item]["grade"]
    assert {item: g["grade"] for item, g in grades.items()} == DEMO_GRADES

    # Each grade for the reason its demo script intends.
    def checks(item: str) -> dict[str, tuple[str, str]]:
        return {c["name"]: (c["kind"], c["status"]) for c in grades[item]["checks"]}

    assert checks("07-photo-renamer") == {"test_photo_renamer": ("pytest", "passed")}
    assert checks("09-sales-dashboard") == {"dashboard": ("web", "passed")}
    assert {kind for kind, _ in checks("04-snake-game").values()} == {"web"}
    assert set(checks("18-calculator-fix").values()) == {("pytest", "failed")}
    assert grades["24-csv-chart"]["reasons"] == ["the answer carries code but no file was written"]
    assert "```" in (runs / sweep_id / cells["24-csv-chart"]["id"] / "attempt-1" / "answer.txt").read_text()
    assert grades["27-log-stats"]["stop"]["reason"] == "consecutive_failures"
    attempts_30 = sweep["attempts"][cells["30-roman-numerals"]["id"]]
    assert len(attempts_30) == 3 and {a["reason"] for a in attempts_30} == {"model_endpoint"}
    # The forest page was cut at the output limit once and continued (seed 002), then delivered.
    forest = [json.loads(line) for line in
              (runs / sweep_id / cells["15-forest-page"]["id"] / "attempt-1" / "transcript.jsonl").read_text().splitlines()]
    guards = [(e["rule"], e["decision"]) for e in forest if e["event"] == "guard" and e["rule"] != "budget"]
    assert guards == [("output_limit", "continue")]
    assert [e["finish_reason"] for e in forest if e["event"] == "model_response"][0] == "length"

    st = run_embedded(["status", sweep_id, "--json"], tmp_path, home)
    assert st.returncode == 0 and json.loads(st.stdout)["sweep"] == sweep_id

    # The builtin agent ran against the scripted model the coordinator served, from the installed release.
    show = run_embedded(["show", sweep_id, "local", "07"], tmp_path, home)
    assert show.returncode == 0, show.stderr
    assert "transcript.jsonl" in show.stdout and "workspace/Playground/photo-renamer/rename_photos.py" in show.stdout

    rep = run_embedded(["report", sweep_id], tmp_path, home)
    assert rep.returncode == 0, rep.stderr
    report_md = (runs / sweep_id / "REPORT.md").read_text()
    # 6 of 10 delivered; 6 of the 9 graded on the model once the harness failure is set aside.
    assert "| local | 6/10 (60 %) | 6/9 (67 %) |" in report_md, report_md
    assert "consecutive_failures" in report_md
    results = json.loads((runs / sweep_id / "results.json").read_text())
    assert sorted(r["grade"] for r in results["cells"]) == sorted(DEMO_GRADES.values())
    import xml.etree.ElementTree as ET

    suite = ET.parse(runs / sweep_id / "junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("10", "3", "1")

    rerun = run_embedded(["rerun", "local", "07", "--sweep", sweep_id, "--json"], tmp_path, home)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    after = {c["item"]: c for c in json.loads(rerun.stdout)["cells"]}
    assert after["07-photo-renamer"]["attempts"] == 2 and after["07-photo-renamer"]["grade"] == "DELIVERED"
    assert after["12-explain-only"]["attempts"] == 1
