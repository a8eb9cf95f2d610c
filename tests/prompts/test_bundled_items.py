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

from harness.core.catalog import BUNDLED_PROMPTS_DIR, draw_values, load_catalog, render
from harness.core.checks.spec import check_kind
from workers.host.webcheck import WebCheckSpec
from harness.core.inventory import load_inventory
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


# -- the other agents' demo scripts (models/<kind>.toml; docs/agents-<kind>.md) --------------------------------
# Each agent's tools as a real run offers them (the request logs of real runs), with the arguments each takes:
# (required, allowed); None: not checked.

HERMES_SYSTEM = ("You are Hermes Agent, an intelligent AI assistant created by Nous Research. You are helpful, "
                 "knowledgeable, and direct.")
HERMES_TOOLS = {n: (set(), None) for n in
                ["write_file", "patch", "read_file", "search_files", "terminal", "process", "todo", "memory"]}
OPENCLAW_SYSTEM = "You are a personal assistant running inside OpenClaw."
OPENCLAW_TOOLS = {
    "write": ({"path", "content"}, {"path", "content"}),
    "edit": ({"path", "edits"}, {"path", "edits"}),
    "read": ({"path"}, {"path", "offset", "limit", "cursor", "optional"}),
    "exec": ({"command"}, {"command", "workdir", "title", "env", "yieldMs", "background", "timeoutSeconds", "pty"}),
    "ls": (set(), {"path", "limit", "after"}),
    "apply_patch": (set(), None), "process": (set(), None), "sessions_yield": (set(), None),
    "tool_call": (set(), None), "tool_describe": (set(), None), "tool_search": (set(), None),
}
OPENCODE_SYSTEM = "You are opencode, an interactive CLI tool"
OPENCODE_TOOLS = {
    "write": ({"filePath", "content"}, {"filePath", "content"}),
    "edit": ({"filePath", "oldString", "newString"}, {"filePath", "oldString", "newString", "replaceAll"}),
    "read": ({"filePath"}, {"filePath", "offset", "limit"}),
    "bash": ({"command"}, {"command", "timeout", "workdir"}),
    "glob": ({"pattern"}, {"pattern", "path"}),
    "grep": ({"pattern"}, {"pattern", "path", "include"}),
    "skill": ({"name"}, {"name"}),
    "task": (set(), None), "todowrite": (set(), None), "webfetch": (set(), None),
}


def _request(system: str, user: str, tools: dict) -> dict:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "tools": [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in sorted(tools)]}


def hermes_request(prompt: str) -> dict:
    """Hermes starts a run with its system prompt (naming its folder) and tools, then the owner's prompt."""
    return _request(f"{HERMES_SYSTEM}\n\nCurrent working directory: /w/workspace", prompt, HERMES_TOOLS)


def openclaw_request(prompt: str) -> dict:
    """OpenClaw: its system prompt and tools, then the owner's prompt between a timestamp and its runtime line."""
    system = f"<!-- openclaw:attempt:STABLE -->\n{OPENCLAW_SYSTEM}\n## Tooling\nTools policy-filtered."
    user = f"[Mon 2026-11-30 06:31 UTC] {prompt}\n\n\nRuntime: agent=main | session=agent:main:explicit:x | shell=bash"
    return _request(system, user, OPENCLAW_TOOLS)


def opencode_request(prompt: str) -> dict:
    """`opencode run`: its system prompt (naming the attempt's folder) and tools, then the owner's prompt."""
    system = (f"{OPENCODE_SYSTEM} that helps users with software engineering tasks. Use the instructions below "
              "and the tools available to you to assist the user.\n<env>\n  Working directory: /w/workspace\n</env>")
    return _request(system, prompt, OPENCODE_TOOLS)


# kind -> (system text its scripts select on, a first request, its tools, the HTTP status 30's endpoint gives:
# one the agent gives up on at once; OpenClaw and OpenCode retry a 5xx for a minute or more, Hermes for seconds)
AGENTS = {
    "hermes": (HERMES_SYSTEM.split(" created by")[0], hermes_request, HERMES_TOOLS, 503),
    "openclaw": (OPENCLAW_SYSTEM, openclaw_request, OPENCLAW_TOOLS, 404),
    "opencode": (OPENCODE_SYSTEM, opencode_request, OPENCODE_TOOLS, 404),
}


@pytest.mark.parametrize("kind", sorted(AGENTS))
def test_every_open_item_has_a_script_for_each_agents_own_conversations(kind: str) -> None:
    """Every bundled open prompt has models/<kind>.toml. It loads; in the set the coordinator serves (each item's
    models/*.toml, then the items' model.toml) that agent's conversation of the item is played by it, and it plays
    no other: not the builtin agent's of that item, not that agent's of another item. It selects by the same
    prompt text as the item's model.toml, calls only the agent's tools with the arguments they take, and its
    replies fit the embedded default's output limit, except a step meant to be cut there (15's)."""
    system, request, tools, endpoint_status = AGENTS[kind]
    missing = [i for i in IDS if not (OPEN / i / "models" / f"{kind}.toml").is_file()]
    assert not missing, f"no models/{kind}.toml: {missing}"
    scripts = {i: load_script(OPEN / i / "models" / f"{kind}.toml") for i in IDS}
    served = {str(p): load_script(p) for i in IDS for p in sorted((OPEN / i / "models").glob("*.toml"))}
    served |= {str(OPEN / i / "model.toml"): script_of(i) for i in IDS}
    players = ScriptSet(served)
    inventory = load_inventory().hosts["local"]
    limit = inventory.model.max_output
    prompts = {item.id: render(item.prompt, draw_values(item.vars, 20261130)) for item in ITEMS}
    for item_id, script in scripts.items():
        name = f"{item_id}/models/{kind}.toml"
        assert script.select is not None and script.select.system_contains == system, name
        assert script.select.first_user_contains == script_of(item_id).select.first_user_contains, \
            f"{name}: select by the same prompt text as {item_id}/model.toml"
        assert players.select(request(prompts[item_id])) == str(OPEN / item_id / "models" / f"{kind}.toml")
        assert players.select(first_request(prompts[item_id])) == str(OPEN / item_id / "model.toml"), \
            f"the builtin agent's conversation of {item_id} is not played by its model.toml"
        one = ScriptSet({"one": script})
        assert one.select(first_request(prompts[item_id])) is None, f"{name} selects the builtin agent"
        others = [i for i, p in prompts.items() if i != item_id and one.select(request(p)) == "one"]
        assert not others, f"{name} also selects {kind}'s conversation of {others}"
        for key, step in script.steps():
            for call in step.tool_calls:
                assert call.name in tools, f"{name} {key}: {kind} has no tool {call.name!r}"
                required, allowed = tools[call.name]
                args = call.arguments if isinstance(call.arguments, dict) else json.loads(call.arguments)
                assert required <= set(args) and (allowed is None or set(args) <= allowed), \
                    f"{name} {key}: {call.name} {sorted(args)} ({kind}'s takes {sorted(allowed or required)})"
                if kind == "openclaw" and call.name == "edit":
                    assert all(set(e) == {"oldText", "newText"} for e in args["edits"]), f"{name} {key}: edits"
            if step.cut_at_output_limit:
                continue
            chars = len(step.text or "") + sum(
                len(c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments, ensure_ascii=False))
                for c in step.tool_calls)
            assert math.ceil(chars / 4) <= limit, f"{name} {key}: {math.ceil(chars / 4)} tokens > {limit}"
    assert [i for i, s in scripts.items() if any(st.cut_at_output_limit for _, st in s.steps())] == ["15-forest-page"]
    assert all(st.http_status == endpoint_status for _, st in scripts["30-roman-numerals"].steps()), \
        f"30's endpoint fails with an error {kind} gives up on quickly"
    if kind == "hermes":
        assert inventory.model.context >= 64_000, "Hermes refuses a model context under 64K"
