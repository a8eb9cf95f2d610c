"""A check that breaks (no report, a browser driver that dropped its connection) runs once more before it
counts, and its result keeps both runs' words; a check that breaks twice is `error`, never `passed`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.fleetkit import free_port, run_embedded

pytestmark = pytest.mark.integration

INVENTORY = """schema_version = 1
[hosts.local]
transport = "local"
workdir = "{workdir}"
[hosts.local.model]
base_url = "http://127.0.0.1:{port}/v1"
id = "m"
context = 32768
max_output = 2048
[hosts.local.agents.writer]
kind = "command"
command = ["sh", "-c", "echo print 1 > hello.py; echo wrote hello.py > \\"$1\\"", "sh", "{{answer_file}}"]
"""

# Dies in the middle of collection on its first run only (a marker file in the staged folder's parent says
# it ran before), leaving no JUnit XML; passes on the second.
FLAKY = """import os
from pathlib import Path
marker = Path(__file__).resolve().parents[1] / "flaky-ran-once"
if not marker.exists():
    marker.write_text("x")
    os._exit(3)

def test_hello(workspace):
    assert (workspace / "hello.py").read_text() == "print 1\\n"
"""
BROKEN = "import os\nos._exit(3)\n"


def test_a_check_that_breaks_once_is_run_again_and_one_that_breaks_twice_is_an_error(tmp_path: Path) -> None:
    for number, (name, text) in enumerate((("flaky", FLAKY), ("broken", BROKEN)), start=1):
        item = tmp_path / "prompts" / "open" / f"0{number}-{name}"
        (item / "checks").mkdir(parents=True)
        (item / "prompt.md").write_text("write hello.py\n")
        (item / "item.toml").write_text(f'schema_version = 1\ntitle = "{name}"\ntimeout_s = 60\nchecks = ["test_{name}.py"]\n')
        (item / "checks" / f"test_{name}.py").write_text(text)
    inv = tmp_path / "inv.toml"
    inv.write_text(INVENTORY.format(workdir=tmp_path / "host", port=free_port()))
    r = run_embedded(["sweep", "-i", str(inv), "--prompts", str(tmp_path / "prompts"), "--json"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    checks = {}
    for cell in summary["cells"]:
        grade = json.loads((tmp_path / "runs" / summary["sweep"] / cell["id"] / "attempt-1" / "grade.json").read_text())
        (checks[cell["item"]],) = grade["checks"]
        checks[cell["item"]]["grade"] = grade["grade"]
    flaky, broken = checks["01-flaky"], checks["02-broken"]
    assert (flaky["status"], flaky["grade"]) == ("passed", "DELIVERED"), flaky
    assert flaky["summary"].endswith("(run twice; the first run: no JUnit XML (pytest did not write a report))")
    assert (broken["status"], broken["grade"]) == ("error", "PARTIAL"), broken
    assert broken["summary"].startswith("no JUnit XML") and "run twice" in broken["summary"]
