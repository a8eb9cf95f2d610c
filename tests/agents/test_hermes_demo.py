"""The demo sweep with the real Hermes Agent: every bundled open prompt on the embedded default (local transport,
the coordinator serving the items' scripts on the scripted model), with Hermes (from `.ci/agents`) instead of the
builtin agent. Each item's models/hermes.toml plays the builtin demo's story with Hermes' own tools, so Hermes gets
each item's demo grade (tests/integration/test_embedded_default.py DEMO_GRADES) for the same reason; where Hermes
gets there differently (it has no guard, it continues a cut reply its own way), the test says so."""

from __future__ import annotations

import json
import tomllib

import pytest

from harness.core.transcript import ModelResponse, RunEnd, ToolCall, ToolResult, read_transcript
from tests.agents.conftest import DemoSweep
from tests.integration.fleetkit import REPO
from tests.integration.test_embedded_default import DEMO_GRADES

pytestmark = pytest.mark.integration

OPEN = REPO / "prompts" / "open"

# The same grade as the builtin agent for every item: no deliberate difference. Two reasons differ, by design of
# the agent, not of the script: 27 is NOTHING without a guard stop (Hermes has no run-progress budget; the model
# gives up after its 4th failed command and says it wrote nothing), and 15's cut reply is continued by Hermes
# itself (it drops the cut tool call and sends the same request again) rather than by a guard's continuation.
HERMES_GRADES = dict(DEMO_GRADES)


def _last_text(item: str) -> str:
    return tomllib.loads((OPEN / item / "models" / "hermes.toml").read_text())["turns"][-1]["text"]


def test_hermes_demo_sweep_shows_every_grade_for_its_reason(tmp_path, agents_cache):
    # Hermes refuses a model context under 64K.
    demo = DemoSweep(tmp_path, "hermes", f'kind = "hermes"\nprogram = "{agents_cache / "hermes" / "bin" / "hermes"}"',
                     context=65536)
    cells, folder, elapsed, sweep = demo.cells, demo.folder, demo.elapsed, demo.record
    assert sorted(cells) == sorted(HERMES_GRADES)

    grades = {}
    for item, cell in cells.items():
        attempts = sweep["attempts"][cell["id"]]
        grades[item] = json.loads((folder(item, len(attempts)) / "grade.json").read_text())
        assert attempts[-1]["grade"] == grades[item]["grade"]
        assert json.loads((folder(item) / "meta.json").read_text())["agent_kind"] == "hermes"
    assert {item: g["grade"] for item, g in grades.items()} == HERMES_GRADES

    def checks(item: str) -> dict[str, tuple[str, str]]:
        return {c["name"]: (c["kind"], c["status"]) for c in grades[item]["checks"]}

    def events(item: str) -> list:
        return read_transcript(folder(item) / "transcript.jsonl")

    def results(item: str) -> list[ToolResult]:
        return [e for e in events(item) if isinstance(e, ToolResult)]

    # DELIVERED: working files, the checks pass, the owner got the script's answer, no stop.
    for item in ("04-snake-game", "07-photo-renamer", "09-sales-dashboard", "15-forest-page", "21-ttl-cache"):
        assert all(status == "passed" for _, status in checks(item).values()) and checks(item), (item, checks(item))
        assert grades[item]["stop"] is None
        assert (folder(item) / "answer.txt").read_text() == _last_text(item) + "\n"
        assert not any(res.is_error for res in results(item)), item
    assert {kind for kind, _ in checks("04-snake-game").values()} == {"web"}
    assert checks("07-photo-renamer") == {"test_photo_renamer": ("pytest", "passed")}
    assert checks("21-ttl-cache") == {"test_cache": ("pytest", "passed")}
    assert [res.details.test.verdict for res in results("21-ttl-cache") if res.name == "terminal"] == ["passed"]
    assert not [e for e in events("12-explain-only") if isinstance(e, ToolCall)]

    # 15: the first reply (the whole page in one write_file) was cut at the output limit; Hermes ran no part of
    # it, stored none of it, and asked again: the first reply in its session is the script's second turn.
    forest = [e for e in events("15-forest-page") if isinstance(e, ModelResponse)]
    assert forest[0].text.startswith("That file was too long for one reply"), forest[0].text
    assert [res.details.path for res in results("15-forest-page") if res.name == "write_file"] == [
        "Playground/forest-page/index.html", "Playground/forest-page/styles.css", "Playground/forest-page/forest.js"]

    # 18 PARTIAL: the owner's tests fail, the patch applies, the owner's tests pass, the hidden check fails.
    assert set(checks("18-calculator-fix").values()) == {("pytest", "failed")}
    failing = [d["name"] for c in grades["18-calculator-fix"]["checks"] for d in c["details"] if d["status"] != "passed"]
    assert "test_calculator::test_divide_by_zero_still_raises" in failing
    calc = results("18-calculator-fix")
    assert [res.name for res in calc] == ["write_file", "write_file", "terminal", "patch", "terminal"]
    assert calc[3].agent_is_error is False and calc[3].details.path == "Playground/calculator/calc.py"
    assert [res.details.test.verdict for res in calc if res.name == "terminal"] == ["failed", "passed"]

    # 24 CODE_IN_CHAT: no tool call, the page in a fenced html block in what `hermes -z` printed.
    assert grades["24-csv-chart"]["reasons"] == ["the answer carries code but no file was written"]
    assert "```html\n<!doctype html>" in (folder("24-csv-chart") / "answer.txt").read_text()
    assert not [e for e in events("24-csv-chart") if isinstance(e, ToolCall)]

    # 27 NOTHING: four failing commands in a row, then an honest answer and nothing written; no guard stops Hermes.
    # Each result is the terminal's JSON; from the 3rd failure on Hermes appends its "[Tool loop warning: ...]" to
    # it, so the exit code is read from the JSON at the start of the text the model saw.
    logs = results("27-log-stats")
    assert [res.name for res in logs] == ["terminal"] * 4
    assert all(json.JSONDecoder().raw_decode(res.text)[0]["exit_code"] != 0 for res in logs), [r.text for r in logs]
    assert grades["27-log-stats"]["stop"] is None
    assert grades["27-log-stats"]["reasons"] == ["nothing usable was written to the workspace"]
    assert "I have not written logstats.py" in (folder("27-log-stats") / "answer.txt").read_text()

    # 30 HARNESS_FAILURE x3: the endpoint answers 503; Hermes gives up after its own 3 tries and exits 0; the
    # adapter reads its final output, and the dispatcher retries the cell. Each attempt is quick.
    attempts_30 = sweep["attempts"][cells["30-roman-numerals"]["id"]]
    assert len(attempts_30) == 3 and {a["reason"] for a in attempts_30} == {"model_endpoint"}
    for k in (1, 2, 3):
        meta = json.loads((folder("30-roman-numerals", k) / "meta.json").read_text())
        assert meta["exit_code"] == 0 and meta["duration_s"] < 60, meta["duration_s"]
        assert meta["error"] == ("the model endpoint failed: model_http_503: "
                                 "API call failed after 3 retries: HTTP 503: Loading model")
        end = read_transcript(folder("30-roman-numerals", k) / "transcript.jsonl")[-1]
        assert isinstance(end, RunEnd) and (end.outcome, end.reason) == ("infrastructure", "model_http_503")

    durations = {item: json.loads((folder(item) / "meta.json").read_text())["duration_s"] for item in cells}
    print(f"\nHermes demo sweep: {elapsed:.1f} s; first attempts: "
          + ", ".join(f"{item[:2]} {d:.1f} s" for item, d in durations.items()))
