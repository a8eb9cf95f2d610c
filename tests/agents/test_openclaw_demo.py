"""The demo sweep with the real OpenClaw: every bundled open prompt on the embedded default's shape (local
transport, SQLite broker, the scripted model the coordinator serves), but with OpenClaw (from `.ci/agents`)
instead of the builtin agent. The coordinator serves the items' models/openclaw.toml (OpenClaw's tools, chosen by
OpenClaw's system prompt) before their model.toml, so each conversation is played by its item's OpenClaw script;
one sweep shows every grade, each for its reason (docs/agents-openclaw.md, "The demo sweep")."""

from __future__ import annotations

import json
import tomllib

import pytest

from tests.agents.conftest import DemoSweep, node_env
from tests.integration.fleetkit import REPO
from tests.integration.test_embedded_default import DEMO_GRADES

pytestmark = pytest.mark.integration

OPEN = REPO / "prompts" / "open"
TRUNCATED = ("⚠️ Reply truncated at the model's output token limit. The text above is partial — ask to continue "
             "it.")

# OpenClaw gets the builtin agent's demo grade on every item but one. The differences are deliberate (each
# script's header says why), and asserted below:
# - 15: NOTHING, not DELIVERED. The same model (the whole page in one write, cut at the output limit), but
#   OpenClaw never runs a tool call of a reply cut at the output limit and never continues one by itself: the
#   cut reply ends its one-turn run with the partial text and its own truncation notice, nothing written.
# - 18: OpenClaw records no receipt: the grade's outcome is `none`, not `passed`.
# - 27: OpenClaw has no run-progress guard: the model gives up by itself after its fourth failed command, so the
#   grade has no stop (the builtin agent's is consecutive_failures).
# - 30: the endpoint answers 404 (model not served), not 503: OpenClaw retries a 5xx for up to about 90 s per
#   attempt but gives up on a 404 at once (model_http_404).
OPENCLAW_GRADES = {**DEMO_GRADES, "15-forest-page": "NOTHING"}


def _script(item: str) -> dict:
    return tomllib.loads((OPEN / item / "models" / "openclaw.toml").read_text())


def test_openclaw_demo_sweep_shows_every_grade(tmp_path, agents_cache):
    demo = DemoSweep(tmp_path, "openclaw", f'kind = "openclaw"\n{node_env(agents_cache)}', slots=2)
    cells, grades, folder, elapsed, sweep = demo.cells, demo.grades, demo.folder, demo.elapsed, demo.record
    bundled = sorted(cells)
    assert bundled == sorted(OPENCLAW_GRADES)
    assert {item: g["grade"] for item, g in grades.items()} == OPENCLAW_GRADES, \
        {item: (g["grade"], g["reasons"]) for item, g in grades.items()}

    # Every run that got a model was played by its item's OpenClaw script: OpenClaw's answer (its envelope's
    # `final`) is the script's last turn (the builtin agent's script would have called `exec` with a `cwd`, and
    # `edit` with old_text/new_text, which OpenClaw's tools do not take). 15 ends at its first turn (below).
    for item in bundled:
        if item == "30-roman-numerals":
            continue
        meta = json.loads((folder(item) / "meta.json").read_text())
        assert meta["agent_version"].startswith("OpenClaw 2026.9.6") and meta["exit_code"] == 0, (item, meta)
        if item != "15-forest-page":
            turns = _script(item)["turns"]
            assert (folder(item) / "answer.txt").read_text() == turns[-1]["text"], item

    def checks(item: str) -> dict[str, str]:
        return {c["name"]: c["status"] for c in grades[item]["checks"]}

    for item in ("04-snake-game", "07-photo-renamer", "09-sales-dashboard", "21-ttl-cache"):
        assert checks(item) and set(checks(item).values()) == {"passed"}, (item, grades[item]["checks"])
        assert grades[item]["stop"] is None
    assert grades["12-explain-only"]["reasons"] == ["the owner got a written answer"]

    # 15: the whole page in one write, cut at the output limit (finish_reason length). OpenClaw dropped the cut
    # call and ended the run with the reply's text and its truncation notice: one round, nothing written.
    forest = demo.events("15-forest-page")
    assert [(e["finish_reason"], e["tool_calls"]) for e in forest if e["event"] == "model_response"] == [("length", [])]
    assert not [e for e in forest if e["event"] in ("tool_call", "guard")]
    # The cut final reply is the run's stop, as for the builtin agent (seed 002: NOTHING with stop cut-at-output-limit).
    stop = forest[-2]
    assert (stop["event"], stop["rule"], stop["reason"], stop["text"]) == (
        "stop", "output_limit", "output_limit", "cut at output limit")
    assert (forest[-1]["event"], forest[-1]["outcome"], forest[-1]["reason"]) == ("run_end", "stopped", "output_limit")
    first_text = _script("15-forest-page")["turns"][0]["text"]
    assert (folder("15-forest-page") / "answer.txt").read_text() == f"{first_text}\n{TRUNCATED}"
    assert json.loads((folder("15-forest-page") / "workspace.manifest.json").read_text()) == []
    assert grades["15-forest-page"]["reasons"] == ["stopped: cut at output limit",
                                                   "nothing usable was written to the workspace"]
    assert grades["15-forest-page"]["grade"] == "NOTHING" and grades["15-forest-page"]["stop"]["reason"] == "output_limit"

    # 18: the owner's tests fail, then pass after the edit; the hidden check fails on division by zero.
    assert checks("18-calculator-fix") == {"test_calculator": "failed"}
    (check,) = grades["18-calculator-fix"]["checks"]
    assert [d["name"] for d in check["details"] if d["status"] != "passed"] == [
        "test_calculator::test_divide_by_zero_still_raises", "test_calculator::test_percent_change_from_zero_raises"], check
    assert "check failed: test_calculator" in grades["18-calculator-fix"]["reasons"]
    assert grades["18-calculator-fix"]["outcome"] == "none"
    calc = demo.events("18-calculator-fix")
    assert [e["name"] for e in calc if e["event"] == "tool_call"] == ["write", "write", "exec", "edit", "exec"]
    assert [e["details"]["test"]["verdict"] for e in calc if e["event"] == "tool_result" and e["name"] == "exec"] \
        == ["failed", "passed"]
    edit = next(e for e in calc if e["event"] == "tool_result" and e["name"] == "edit")
    assert not edit["is_error"] and edit["details"]["replacements"] == 1, edit

    # 24: the page came back in the answer, in a fenced block; no file, no tool call.
    assert grades["24-csv-chart"]["reasons"] == ["the answer carries code but no file was written"]
    assert "```html\n<!doctype html>" in (folder("24-csv-chart") / "answer.txt").read_text()
    assert json.loads((folder("24-csv-chart") / "workspace.manifest.json").read_text()) == []
    assert not [e for e in demo.events("24-csv-chart") if e["event"] == "tool_call"]

    # 27: four failing commands, then the model gives up honestly; nothing written, no guard stop (OpenClaw has none).
    assert grades["27-log-stats"]["stop"] is None
    assert grades["27-log-stats"]["reasons"] == ["nothing usable was written to the workspace"]
    results = [e for e in demo.events("27-log-stats") if e["event"] == "tool_result"]
    assert [e["name"] for e in results] == ["exec"] * 4
    assert all(e["is_error"] and e["details"]["exit_code"] not in (0, None) for e in results), results
    assert json.loads((folder("27-log-stats") / "workspace.manifest.json").read_text()) == []
    assert "```" not in (folder("27-log-stats") / "answer.txt").read_text()

    # 30: the endpoint fails (404); OpenClaw gives up at once, the dispatcher retries: three harness failures.
    attempts = sweep["attempts"][cells["30-roman-numerals"]["id"]]
    assert [(a["status"], a["reason"]) for a in attempts] == [("harness_failure", "model_endpoint")] * 3
    for k in (1, 2, 3):
        meta = json.loads((folder("30-roman-numerals", k) / "meta.json").read_text())
        assert "model_http_404" in meta["error"] and "not found" in meta["error"], meta
        # OpenClaw's start-up only (it took 66 s once on a loaded 2-core machine), none of its 90 s of
        # retrying a 5xx: a run that retried takes at least those 90 s on top of its start-up.
        assert meta["duration_s"] < 90, meta
        end = demo.events("30-roman-numerals", k)[-1]
        assert (end["event"], end["outcome"], end["reason"]) == ("run_end", "infrastructure", "model_http_404")
        assert (folder("30-roman-numerals", k) / "answer.txt").read_text() == ""

    print(f"\nOpenClaw demo sweep (10 items, 12 attempts): {elapsed:.1f} s; attempts: "
          + ", ".join(f"{a['task_id'].split('/')[1][:2]}/a{a['attempt']} {a['duration_s']:.1f} s"
                      for attempts in sweep["attempts"].values() for a in attempts))
