"""The bundled open prompts (prompts/open/, listed in docs/prompts.md): the catalog loads them all, each has a
demo script (model.toml) that the embedded default can serve in one set with the others, and every check
file parses. Running the demo sweep end to end is the embedded-default integration test's job; this file is
the fast, static half."""

from __future__ import annotations

import json
import math
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from harness.catalog import BUNDLED_PROMPTS_DIR, draw_values, load_catalog, render
from harness.checks.spec import check_kind
from harness.checks.web import WebCheckSpec
from harness.inventory import load_inventory
from harness.modelserver import ScriptSet, load_script

OPEN = BUNDLED_PROMPTS_DIR / "open"
REQUIRED = {
    "04-snake-game", "07-photo-renamer", "09-sales-dashboard", "12-explain-only", "15-forest-page",
    "18-calculator-fix", "21-ttl-cache", "24-csv-chart", "27-log-stats", "30-roman-numerals",
}
CATALOG = load_catalog()
ITEMS = CATALOG.open_items
IDS = [i.id for i in ITEMS]


def first_request(prompt: str) -> dict:
    """A chat request as the builtin agent starts a run: a system message, then the owner's prompt."""
    return {"messages": [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": prompt}]}


def script_of(item_id: str):
    return load_script(OPEN / item_id / "model.toml")


def test_the_catalog_has_the_bundled_set() -> None:
    assert len(ITEMS) >= 10
    assert REQUIRED <= set(IDS), f"missing: {sorted(REQUIRED - set(IDS))}"
    assert len({i.number for i in ITEMS}) == len(ITEMS)
    for item in ITEMS:
        assert 300 <= item.timeout_s <= 900, (item.id, item.timeout_s)
        if item.deliverable == "workspace":
            assert item.checks, f"{item.id}: a workspace item needs an acceptance check"


@pytest.mark.parametrize("item_id", IDS)
def test_every_item_has_a_demo_script_with_a_select(item_id: str) -> None:
    script = script_of(item_id)
    assert script.select is not None, f"{item_id}/model.toml has no [select]"
    assert script.select.first_user_contains, f"{item_id}/model.toml: select by first_user_contains"


def test_each_prompt_is_played_by_its_own_script() -> None:
    """In one set, as the coordinator serves it when a sweep takes every open prompt and every round task, each
    item's prompt selects that item's own script, and no other script's select holds on it."""
    items = [*ITEMS, *(t for tasks in CATALOG.rounds.values() for t in tasks)]
    scripts = {i.id: load_script(Path(i.check_folder) / "model.toml") for i in items
               if i.check_folder and (Path(i.check_folder) / "model.toml").is_file()}
    assert set(IDS) <= set(scripts)
    selects = [(s.select.first_user_contains, s.select.first_user_regex) for s in scripts.values() if s.select]
    assert len(set(selects)) == len(selects), "two demo scripts share a select"
    players = ScriptSet(scripts)
    for item in items:
        if item.id not in scripts:
            continue
        prompt = render(item.prompt, draw_values(item.vars, 20261130))
        assert players.select(first_request(prompt)) == item.id
        others = [k for k, s in scripts.items() if k != item.id and _selects(s, prompt)]
        assert not others, f"the prompt of {item.id} is also selected by {others}"


def _selects(script, prompt: str) -> bool:
    """Whether ``script``'s own select holds on ``prompt`` (a script without one, a fallback, never does)."""
    return script.select is not None and ScriptSet({"one": script}).select(first_request(prompt)) == "one"


@pytest.mark.parametrize("item_id", IDS)
def test_demo_replies_fit_the_embedded_output_limit(item_id: str) -> None:
    """A reply longer than the embedded default's max_output is cut by the server: only a step that says it
    is cut (cut_at_output_limit) may be that long."""
    limit = load_inventory().hosts["local"].model.max_output
    for key, step in script_of(item_id).steps():
        if step.cut_at_output_limit:
            continue
        chars = len(step.text or "") + sum(
            len(c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments, ensure_ascii=False))
            for c in step.tool_calls)
        assert math.ceil(chars / 4) <= limit, f"{item_id}/model.toml {key}: {math.ceil(chars / 4)} tokens > {limit}"


@pytest.mark.parametrize("item_id", IDS)
def test_every_check_file_parses_and_is_used(item_id: str) -> None:
    item = next(i for i in ITEMS if i.id == item_id)
    folder = OPEN / item_id / "checks"
    present = sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
    assert sorted(item.checks) == present, f"{item_id}: item.toml checks {item.checks}, checks/ holds {present}"
    for name in item.checks:
        path = folder / name
        text = path.read_text(encoding="utf-8")
        if check_kind(name) == "web":
            spec = WebCheckSpec.model_validate(tomllib.loads(text))
            assert spec.viewport_width <= 400 and spec.no_console_errors, f"{name}: phone width, console clean"
        else:
            assert check_kind(name) == "pytest"
            compile(text, str(path), "exec")
            assert re.search(r"^def test_\w+\(.*workspace|^def \w+\(workspace", text, re.M), f"{name} uses no workspace"


def test_new_web_items_find_their_page_by_pattern() -> None:
    """The agent chooses where the page goes: the new web checks find it by a glob pattern."""
    for item_id in ("04-snake-game", "15-forest-page", "24-csv-chart"):
        (name,) = next(i for i in ITEMS if i.id == item_id).checks
        spec = WebCheckSpec.model_validate(tomllib.loads((OPEN / item_id / "checks" / name).read_text()))
        assert spec.page == "**/*.html", (item_id, spec.page)


# -- the demo scripts show what their grade needs (the demo sweep itself is the integration test's) ------


def test_code_in_chat_demo_writes_nothing_and_answers_with_a_page() -> None:
    steps = [step for _, step in script_of("24-csv-chart").steps()]
    assert not any(step.tool_calls for step in steps), "the CODE_IN_CHAT demo must call no tool"
    block = re.search(r"```html\n((?:.*\n){3,}?)```", steps[0].text or "")
    assert block, "the answer has no fenced html block of 3 lines or more"
    assert "<svg" in block.group(1) or "<canvas" in block.group(1)


def test_endpoint_down_demo_answers_every_request_with_a_5xx() -> None:
    script = script_of("30-roman-numerals")
    assert all(step.http_status is not None and step.http_status >= 500 for _, step in script.steps())


def test_guard_stop_demo_fails_four_commands_before_writing(tmp_path: Path) -> None:
    """27's demo runs four commands before any write; each really fails in an empty workspace, so the budget
    stops the run at the 4th (consecutive_failures) with nothing written."""
    turns = script_of("27-log-stats").turns
    first = [call for step in turns[:4] for call in step.tool_calls]
    assert [c.name for c in first] == ["exec"] * 4
    for call in first:
        proc = subprocess.run(["bash", "-c", call.arguments["command"]], cwd=tmp_path, capture_output=True, timeout=30)
        assert proc.returncode != 0, f"{call.arguments['command']!r} succeeded in an empty workspace"
    assert not list(tmp_path.iterdir())


def test_partial_demo_breaks_division_by_zero() -> None:
    """18's demo fixes the floor division but makes divide return 0 for a zero divisor; its hidden check catches it."""
    edits = [c.arguments for step in script_of("18-calculator-fix").turns for c in step.tool_calls if c.name == "edit"]
    assert len(edits) == 1 and "return a / b" in edits[0]["new_text"] and "return 0" in edits[0]["new_text"]
    assert "def test_divide_by_zero_still_raises" in (OPEN / "18-calculator-fix/checks/test_calculator.py").read_text()
