"""The demo sweep with the real OpenCode: every bundled open prompt on the embedded default's shape (local
transport, SQLite broker, the scripted model the coordinator serves), but with OpenCode (from `.ci/agents`)
instead of the builtin agent. The coordinator serves the items' models/opencode.toml (OpenCode's tools, chosen
by OpenCode's system prompt) before their model.toml, so each conversation is played by its item's OpenCode
script; one sweep shows every grade, each for its reason (docs/agents-opencode.md, "The demo sweep")."""

from __future__ import annotations

import json
import tomllib

import pytest

from tests.agents.conftest import DemoSweep, node_env
from tests.integration.fleetkit import REPO
from tests.integration.test_embedded_default import DEMO_GRADES

pytestmark = pytest.mark.integration

OPEN = REPO / "prompts" / "open"

# OpenCode gets the builtin agent's demo grade on every item. Where the reason differs, it is deliberate (each
# script's header says why), and asserted below:
# - 15: OpenCode has no guard to grant a continuation; it answers the cut call with its own `invalid` tool and
#   asks the model again, so the transcript has a `length` reply and a failed `invalid` call, not a guard event.
# - 18: OpenCode records no receipt: the grade's outcome is `none`, not `passed`.
# - 27: OpenCode has no run-progress guard: the model gives up by itself after its fourth failed command, so the
#   grade has no stop (the builtin agent's is consecutive_failures).
# - 30: the endpoint answers 404 (model not served), not 503: OpenCode retries a 503 itself for about a minute
#   per attempt but gives up on a 404 at once (model_http_404).
OPENCODE_GRADES = dict(DEMO_GRADES)


def _script(item: str) -> dict:
    return tomllib.loads((OPEN / item / "models" / "opencode.toml").read_text())


def test_opencode_demo_sweep_shows_every_grade(tmp_path, agents_cache):
    demo = DemoSweep(tmp_path, "opencode", f'kind = "opencode"\n{node_env(agents_cache)}')
    cells, grades, folder, elapsed, sweep = demo.cells, demo.grades, demo.folder, demo.elapsed, demo.record
    bundled = sorted(cells)
    assert bundled == sorted(OPENCODE_GRADES)
    assert {item: g["grade"] for item, g in grades.items()} == OPENCODE_GRADES, \
        {item: (g["grade"], g["reasons"]) for item, g in grades.items()}

    # Every finished run was played by its item's OpenCode script to its last turn: the answer is that turn's text
    # (the builtin agent's script would have called tools OpenCode does not have).
    for item in bundled:
        turns = _script(item).get("turns")
        if turns:
            assert (folder(item) / "answer.txt").read_text() == turns[-1]["text"] + "\n", item
            meta = json.loads((folder(item) / "meta.json").read_text())
            assert (meta["agent_version"], meta["exit_code"]) == ("1.18.33", 0), (item, meta)

    def checks(item: str) -> dict[str, str]:
        return {c["name"]: c["status"] for c in grades[item]["checks"]}

    for item in ("04-snake-game", "07-photo-renamer", "09-sales-dashboard", "15-forest-page", "21-ttl-cache"):
        assert checks(item) and set(checks(item).values()) == {"passed"}, (item, grades[item]["checks"])
        assert grades[item]["stop"] is None
    assert grades["12-explain-only"]["reasons"] == ["the owner got a written answer"]

    # 15: the whole page in one write, cut at the output limit; OpenCode answered the cut call with its `invalid`
    # tool and asked again: the continuation wrote the three files.
    forest = demo.events("15-forest-page")
    responses = [e for e in forest if e["event"] == "model_response"]
    assert [e["finish_reason"] for e in responses] == ["length"] + ["tool_calls"] * 4 + ["stop"]
    first = next(e for e in forest if e["event"] == "tool_result")
    assert first["name"] == "write" and first["is_error"] and "JSON parsing failed" in first["text"]
    assert not [e for e in forest if e["event"] == "guard" and e["rule"] != "budget"]
    assert forest[-1]["outcome"] == "completed"
    page = folder("15-forest-page") / "workspace" / "Playground" / "forest-page"
    assert sorted(p.name for p in page.iterdir()) == ["forest.js", "index.html", "styles.css"]

    # 18: the owner's tests fail, then pass after the edit; the hidden check fails on division by zero.
    assert checks("18-calculator-fix") == {"test_calculator": "failed"}
    (check,) = grades["18-calculator-fix"]["checks"]
    assert [d["name"] for d in check["details"] if d["status"] != "passed"] == [
        "test_calculator::test_divide_by_zero_still_raises", "test_calculator::test_percent_change_from_zero_raises"], check
    assert "check failed: test_calculator" in grades["18-calculator-fix"]["reasons"]
    assert grades["18-calculator-fix"]["outcome"] == "none"
    calc = demo.events("18-calculator-fix")
    runs_of_tests = [e["details"]["test"]["verdict"] for e in calc
                     if e["event"] == "tool_result" and e["name"] == "bash"]
    assert runs_of_tests == ["failed", "passed"]
    assert [e["name"] for e in calc if e["event"] == "tool_call"] == ["write", "write", "bash", "edit", "bash"]

    # 24: the page came back in the answer, in a fenced block; no file, no tool call.
    assert grades["24-csv-chart"]["reasons"] == ["the answer carries code but no file was written"]
    assert "```html\n<!doctype html>" in (folder("24-csv-chart") / "answer.txt").read_text()
    assert json.loads((folder("24-csv-chart") / "workspace.manifest.json").read_text()) == []
    assert not [e for e in demo.events("24-csv-chart") if e["event"] == "tool_call"]

    # 27: four failing commands, then the model gives up honestly; nothing written, no guard stop (OpenCode has none).
    assert grades["27-log-stats"]["stop"] is None
    assert grades["27-log-stats"]["reasons"] == ["nothing usable was written to the workspace"]
    logs = demo.events("27-log-stats")
    results = [e for e in logs if e["event"] == "tool_result"]
    assert [e["name"] for e in results] == ["bash"] * 4
    assert all(e["is_error"] and e["details"]["exit_code"] not in (0, None) for e in results), results
    assert json.loads((folder("27-log-stats") / "workspace.manifest.json").read_text()) == []
    assert "```" not in (folder("27-log-stats") / "answer.txt").read_text()

    # 30: the endpoint fails (404); OpenCode gives up at once, the dispatcher retries: three harness failures.
    attempts = sweep["attempts"][cells["30-roman-numerals"]["id"]]
    assert [(a["status"], a["reason"]) for a in attempts] == [("harness_failure", "model_endpoint")] * 3
    for k in (1, 2, 3):
        meta = json.loads((folder("30-roman-numerals", k) / "meta.json").read_text())
        assert "model_http_404" in meta["error"], meta
        assert meta["duration_s"] < 45, meta  # no minute of OpenCode's own retries
        end = demo.events("30-roman-numerals", k)[-1]
        assert (end["event"], end["outcome"], end["reason"]) == ("run_end", "infrastructure", "model_http_404")

    print(f"\nOpenCode demo sweep (10 items, 12 attempts): {elapsed:.1f} s; attempts: "
          + ", ".join(f"{a['task_id'].split('/')[1][:2]}/a{a['attempt']} {a['duration_s']:.1f} s"
                      for attempts in sweep["attempts"].values() for a in attempts))
