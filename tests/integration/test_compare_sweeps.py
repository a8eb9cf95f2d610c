"""`fleet compare` and `fleet sweeps` on two real demo sweeps of the embedded default that differ for real: the
second runs with a prompts folder whose item 12 demo script answers nothing, so that item regresses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.fleetkit import REPO, run_embedded

pytestmark = pytest.mark.integration

ITEMS = "12,07"  # a written answer and a pytest-checked script: each finishes in seconds (30 retries on purpose)


def _silent_item_12(prompts: Path) -> None:
    """The demo script of 12-explain-only with one empty reply: the agent delivers no answer, graded NOTHING."""
    script = prompts / "open" / "12-explain-only" / "model.toml"
    text = script.read_text(encoding="utf-8")
    script.write_text(text[: text.index("[[turns]]")] + '[[turns]]\ntext = ""\n', encoding="utf-8")


def _sweep_id(stdout: str) -> str:
    return json.loads(stdout)["sweep"]


def test_compare_shows_the_item_a_changed_demo_script_made_regress(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    changed = tmp_path / "prompts-b"
    shutil.copytree(REPO / "prompts", changed)
    _silent_item_12(changed)

    first = run_embedded(["sweep", "--items", ITEMS, "--label", "demo", "--json"], tmp_path, home)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_embedded(["sweep", "--items", ITEMS, "--label", "demo", "--prompts", str(changed), "--json"],
                          tmp_path, home)
    assert second.returncode == 0, second.stderr[-3000:]
    a, b = _sweep_id(first.stdout), _sweep_id(second.stdout)
    grades = {c["item"]: c["grade"] for c in json.loads(second.stdout)["cells"]}
    assert grades == {"12-explain-only": "NOTHING", "07-photo-renamer": "DELIVERED"}

    cmp = run_embedded(["compare", a, b, "--json"], tmp_path, home)
    assert cmp.returncode == 0, cmp.stderr
    data = json.loads(cmp.stdout)
    assert (data["baseline"]["id"], data["candidate"]["id"]) == (a, b)
    assert [(r["item"], r["change"], r["baseline"]["reps"][0]["grade"], r["candidate"]["reps"][0]["grade"])
            for r in data["rows"]] == [("12-explain-only", "regressed", "DELIVERED", "NOTHING"),
                                       ("07-photo-renamer", "unchanged", "DELIVERED", "DELIVERED")]
    assert data["counts"]["regressed"] == 1 and data["counts"]["unchanged"] == 1
    assert data["test"] == {"b": 1, "c": 0, "p": 1.0, "p_exact": "1"}
    assert (data["baseline"]["rate"]["delivered"], data["candidate"]["rate"]["delivered"]) == (2, 1)

    gate = run_embedded(["compare", "previous", b, "--fail-on-regressions", "0"], tmp_path, home)
    assert gate.returncode == 4, gate.stderr
    assert gate.stderr.splitlines() == ["fleet: error: --fail-on-regressions 0: 1 regressed: local/12-explain-only/builtin"]
    assert f"baseline  {a} " in gate.stdout and "  regressed   local/12-explain-only/builtin  DELIVERED -> NOTHING" in gate.stdout
    assert run_embedded(["compare", "previous", b, "--fail-on-regressions", "1"], tmp_path, home).returncode == 0

    listing = run_embedded(["sweeps", "--json"], tmp_path, home)
    assert listing.returncode == 0, listing.stderr
    sweeps = json.loads(listing.stdout)["sweeps"]
    assert [(s["id"], s["label"], s["status"], s["items"], s["hosts"]) for s in sweeps] == [
        (b, "demo", "finished", 2, ["local"]), (a, "demo", "finished", 2, ["local"])]
    assert [s["rate"] for s in sweeps] == [
        {"delivered": 1, "graded": 2, "measured": 2, "rate": 0.5, "rate_without_failures": 0.5},
        {"delivered": 2, "graded": 2, "measured": 2, "rate": 1.0, "rate_without_failures": 1.0}]
