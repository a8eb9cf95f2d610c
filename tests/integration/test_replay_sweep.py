"""`fleet replay SWEEP` on a real demo sweep of the embedded default: the builtin agent's own transcripts, replayed
through the guard as shipped, give back exactly what each run did (its stop, its receipt, the delivered bytes),
and a changed policy shows what it would have changed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.core.transcript import ReceiptEvent, StopEvent, read_transcript
from tests.integration.fleetkit import run_embedded

pytestmark = pytest.mark.integration

# A passing test, a continuation at the output limit, a budget stop at the 4th consecutive failure, a written answer.
ITEMS = "07,15,27,12"
FAMILY = {"budget": "run_progress", "recursive_delete": "recursive_delete", "output_limit": "output_limit"}


def test_replaying_a_sweep_gives_back_what_each_run_did_and_a_tighter_budget_changes_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    swept = run_embedded(["sweep", "--items", ITEMS, "--json"], tmp_path, home)
    assert swept.returncode == 0, swept.stderr[-3000:]
    sweep = json.loads(swept.stdout)["sweep"]

    out = run_embedded(["replay", sweep, "--json"], tmp_path, home)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 4
    runs = tmp_path / "runs" / sweep
    for line in lines:
        folder = runs / line["session"]
        events = read_transcript(folder / "transcript.jsonl")
        stops = [e for e in events if isinstance(e, StopEvent)]
        receipt = next(e.receipt for e in events if isinstance(e, ReceiptEvent))
        assert line["sha256"] == hashlib.sha256((folder / "transcript.jsonl").read_bytes()).hexdigest()
        assert line["stopped"] == bool(stops), line
        if stops:
            assert (line["stop_reason"], line["stop_detail"]) == (FAMILY[stops[0].rule], stops[0].reason)
        assert line["receipt_status"] == receipt.status and line["receipt_source"] == receipt.source
        assert line["delivered"] == (folder / "answer.txt").read_text(encoding="utf-8")
    by_item = {line["session"].split("/")[1]: line for line in lines}
    assert by_item["27-log-stats"]["stop_detail"] == "consecutive_failures"
    assert by_item["07-photo-renamer"]["receipt_status"] == "passed" and not by_item["07-photo-renamer"]["stopped"]

    tight = tmp_path / "tight.toml"
    tight.write_text("name = \"tight\"\n[budget]\nconsecutive_failures = 2\n")
    text = run_embedded(["replay", sweep, "--policy", "default", "--policy", str(tight)], tmp_path, home)
    assert text.returncode == 0, text.stderr
    out_lines = text.stdout.splitlines()
    assert out_lines[0].startswith("input ") and "sha256 matches meta.json" in out_lines[0]
    summary = next(line for line in out_lines if line.startswith("default -> tight:"))
    # 27's failures come in a row: two of them now stop it; the others never fail twice in a row.
    assert summary == "default -> tight: 1 of 4 sessions differ, 3 byte-identical", text.stdout
    assert any(line.startswith("local/27-log-stats/") and "stopped elsewhere" in line for line in out_lines)
