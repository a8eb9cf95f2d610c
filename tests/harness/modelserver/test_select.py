"""One scripted model server playing several scripts, each conversation by the script that selects it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.modelserver import (
    CONVERSATION_HEADER,
    NO_SCRIPT_SELECTS,
    ScriptedModelServer,
    ScriptError,
    ScriptSet,
    load_script,
    load_scripts,
    parse_script,
    script_paths,
)
from tests.support import REPO

ROOT = REPO
Start = Callable[..., ScriptedModelServer]

ALPHA = """schema_version = 1
model_id = "alpha-model"
context_size = 4096
[select]
first_user_contains = "ALPHA"
[[turns]]
text = "alpha one"
[[turns]]
text = "alpha two"
[fallback]
text = "alpha done"
"""

BETA = """schema_version = 1
model_id = "beta-model"
[select]
first_user_regex = "item-b[0-9]+"
[[turns]]
text = "beta one"
[[turns]]
text = "beta two"
"""

FALLBACK = """schema_version = 1
[[turns]]
text = "fallback one"
"""


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


@pytest.fixture
def start() -> Iterator[Start]:
    """Start servers on free ports; stop them all afterwards."""
    servers: list[ScriptedModelServer] = []

    def run(*args: Any, **options: Any) -> ScriptedModelServer:
        server = ScriptedModelServer(*args, **options)
        server.start()
        servers.append(server)
        return server

    yield run
    for server in servers:
        server.stop()


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    """A directory of three scripts; sorted by name, the fallback script comes between the two selecting ones."""
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "a-alpha.toml").write_text(ALPHA)
    (folder / "b-fallback.toml").write_text(FALLBACK)
    (folder / "c-beta.toml").write_text(BETA)
    (folder / "notes.md").write_text("not a script\n")
    return folder


def chat(
    http: httpx.Client, server: ScriptedModelServer, *users: str, conversation: str | None = None
) -> httpx.Response:
    """A chat request whose user messages are ``users`` (with assistant messages between them)."""
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are a test agent."}]
    for i, text in enumerate(users):
        if i:
            messages.append({"role": "assistant", "content": "ok"})
        messages.append({"role": "user", "content": text})
    headers = {CONVERSATION_HEADER: conversation} if conversation else {}
    return http.post(f"{server.url}/chat/completions", json={"model": "m", "messages": messages}, headers=headers)


def text(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def test_first_user_message_selects_the_script_else_the_fallback_script(
    http: httpx.Client, start: Start, scripts: Path
) -> None:
    server = start(scripts=load_scripts(scripts))
    names = [str(scripts / n) for n in ("a-alpha.toml", "b-fallback.toml", "c-beta.toml")]
    assert list(server.scripts) == names
    assert text(chat(http, server, "Please do ALPHA now")) == "alpha one"
    assert text(chat(http, server, "work on item-b12")) == "beta one"  # after the fallback script in order
    assert text(chat(http, server, "something else")) == "fallback one"
    # The first user message selects, not the last one.
    assert text(chat(http, server, "item-b7 first", "then ALPHA")) == "beta one"
    records = server.requests
    assert [r.script for r in records] == [names[0], names[2], names[1], names[2]]
    assert [(r.source, r.turn) for r in records] == [("turns[0]", 1)] * 4
    # Model id and limits come from the first script.
    model = http.get(f"{server.url}/models").json()["data"][0]
    assert (model["id"], model["max_model_len"]) == ("alpha-model", 4096)
    assert chat(http, server, "ALPHA again").json()["model"] == "alpha-model"


def test_no_selecting_script_and_no_fallback_is_a_400(http: httpx.Client, start: Start, tmp_path: Path) -> None:
    (tmp_path / "alpha.toml").write_text(ALPHA)
    (tmp_path / "beta.toml").write_text(BETA)
    log = tmp_path / "requests.jsonl"
    server = start([tmp_path / "alpha.toml", tmp_path / "beta.toml"], log_path=log, model_id="served")
    response = chat(http, server, "nobody wants this", conversation="cell-9")
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["message"] == NO_SCRIPT_SELECTS == "no script selects this conversation"
    assert error["type"] == "invalid_request_error"
    record = server.requests[-1]
    assert (record.status, record.conversation, record.script, record.turn) == (400, "cell-9", None, None)
    assert record.response == response.json()
    assert json.loads(log.read_text().splitlines()[-1])["status"] == 400
    # Nothing was chosen, so the same conversation is not stuck: a matching start still gets a script.
    assert text(chat(http, server, "ALPHA", conversation="cell-9")) == "alpha one"
    assert http.get(f"{server.url}/models").json()["data"][0]["id"] == "served"  # the server's argument wins


def test_the_choice_sticks_to_the_conversation(http: httpx.Client, start: Start, scripts: Path) -> None:
    server = start(scripts=load_scripts(scripts))
    assert text(chat(http, server, "ALPHA task", conversation="cell-1")) == "alpha one"
    # Later requests of the conversation stay on its script, whatever their user messages say.
    assert text(chat(http, server, "item-b1 now", "and more", conversation="cell-1")) == "alpha two"
    assert text(chat(http, server, "plain", conversation="cell-1")) == "alpha done"
    assert {r.script for r in server.requests} == {str(scripts / "a-alpha.toml")}
    assert [r.turn for r in server.requests] == [1, 2, 3]
    # Without the header the conversation is keyed by the prompt, and sticks the same way.
    assert text(chat(http, server, "item-b5")) == "beta one"
    assert text(chat(http, server, "item-b5", "go on")) == "beta two"
    # reset() forgets the choices too.
    server.reset()
    assert text(chat(http, server, "plain", conversation="cell-1")) == "fallback one"


def test_two_interleaved_conversations_on_different_scripts(http: httpx.Client, start: Start, scripts: Path) -> None:
    server = start(scripts=load_scripts(scripts))
    replies = [
        text(chat(http, server, "ALPHA run", conversation="x")),
        text(chat(http, server, "item-b2 run", conversation="y")),
        text(chat(http, server, "ALPHA run", "next", conversation="x")),
        text(chat(http, server, "item-b2 run", "next", conversation="y")),
        text(chat(http, server, "ALPHA run", "next", "again", conversation="x")),
    ]
    assert replies == ["alpha one", "beta one", "alpha two", "beta two", "alpha done"]
    alpha, beta = str(scripts / "a-alpha.toml"), str(scripts / "c-beta.toml")
    assert [(r.conversation, r.script, r.turn) for r in server.requests] == [
        ("x", alpha, 1), ("y", beta, 1), ("x", alpha, 2), ("y", beta, 2), ("x", alpha, 3)
    ]


def test_a_single_script_serves_as_before(http: httpx.Client, start: Start, tmp_path: Path) -> None:
    script = parse_script({"schema_version": 1, "turns": [{"text": "one"}]})
    server = start(script)
    assert server.script is script
    assert text(chat(http, server, "anything")) == "one"
    assert server.requests[-1].script == "scripts[0]"
    (tmp_path / "only.toml").write_text(FALLBACK)
    server = start(str(tmp_path / "only.toml"))
    assert text(chat(http, server, "anything")) == "fallback one"
    assert server.requests[-1].script == str(tmp_path / "only.toml")


def test_script_objects_and_paths_mix(http: httpx.Client, start: Start, tmp_path: Path) -> None:
    (tmp_path / "beta.toml").write_text(BETA)
    alpha = parse_script({"schema_version": 1, "select": {"first_user_contains": "ALPHA"}, "turns": [{"text": "a"}]})
    server = start(scripts=[alpha, tmp_path / "beta.toml", parse_script({"schema_version": 1})])
    assert list(server.scripts) == ["scripts[0]", str(tmp_path / "beta.toml"), "scripts[2]"]
    assert text(chat(http, server, "ALPHA")) == "a"
    assert text(chat(http, server, "item-b3")) == "beta one"
    assert chat(http, server, "other").json()["choices"][0]["message"]["content"].startswith("(scripted model")
    assert server.model_id == "scripted-model"  # the first script has none: the default
    with pytest.raises(TypeError):
        ScriptedModelServer(alpha, scripts=[alpha])
    with pytest.raises(TypeError):
        ScriptedModelServer()
    with pytest.raises(ValueError, match="no script"):
        ScriptedModelServer(scripts=[])


@pytest.mark.parametrize(
    ("select", "key", "problem"),
    [
        ({"last_user_contains": "x"}, "select.last_user_contains", "unknown key"),
        ({}, "select", "at least one condition"),
        ({"first_user_regex": "("}, "select.first_user_regex", "invalid regular expression"),
        ({"first_user_contains": 3}, "select.first_user_contains", "valid string"),
    ],
)
def test_bad_select_names_file_and_key(tmp_path: Path, select: dict[str, Any], key: str, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"schema_version": 1, "select": select}))
    with pytest.raises(ScriptError) as caught:
        load_script(path)
    assert (caught.value.file, caught.value.key) == (str(path), key)
    assert problem in caught.value.problem
    assert str(caught.value) == f"{path}: {key}: {caught.value.problem}"
    assert "\n" not in str(caught.value)


def test_bad_select_in_a_set_names_its_file(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(ALPHA)
    (tmp_path / "b.toml").write_text('schema_version = 1\n[select]\nfirst_user = "x"\n')
    with pytest.raises(ScriptError) as caught:
        load_scripts(tmp_path)
    assert str(caught.value) == f"{tmp_path / 'b.toml'}: select.first_user: unknown key"
    with pytest.raises(ScriptError) as caught:
        ScriptedModelServer(scripts=[tmp_path])
    assert caught.value.key == "select.first_user"


def test_script_paths_expand_directories_and_patterns(tmp_path: Path, scripts: Path) -> None:
    alpha, fallback, beta = (scripts / n for n in ("a-alpha.toml", "b-fallback.toml", "c-beta.toml"))
    assert script_paths(scripts) == [alpha, fallback, beta]
    assert script_paths(str(scripts / "c-*")) == [beta]
    assert script_paths([beta, scripts, str(scripts / "*")]) == [beta, alpha, fallback]  # each file once
    assert list(load_scripts([beta, alpha])) == [str(beta), str(alpha)]
    assert script_paths(tmp_path / "missing.toml") == [tmp_path / "missing.toml"]  # left to load_script
    (tmp_path / "empty").mkdir()
    for spec, problem in [(tmp_path / "empty", "no .toml or .json script in this directory"),
                          (str(tmp_path / "*.yaml"), "no .toml or .json script matches this pattern")]:
        with pytest.raises(ScriptError) as caught:
            script_paths(spec)
        assert (caught.value.file, caught.value.problem) == (str(spec), problem)


def test_script_set_without_http() -> None:
    alpha = parse_script({"schema_version": 1, "select": {"first_user_regex": "^A"}, "turns": [{"text": "a"}]})
    rest = parse_script({"schema_version": 1, "turns": [{"text": "r"}]})
    players = ScriptSet({"alpha": alpha, "rest": rest})
    request = {"messages": [{"role": "user", "content": [{"type": "text", "text": "A task"}]}]}
    assert players.select(request) == "alpha"
    answer = players.play("c1", request)
    assert answer is not None and (answer.script, answer.content) == ("alpha", "a")
    assert players.chosen("c1") == "alpha" and players.chosen("c2") is None
    assert ScriptSet([alpha]).play("c", {"messages": [{"role": "system", "content": "A"}]}) is None
    with pytest.raises(ValueError):
        ScriptSet([])


def test_serve_takes_several_paths(http: httpx.Client, tmp_path: Path, scripts: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys; from harness.modelserver import serve; serve(sys.argv[1:])"
    args = [str(scripts / "c-beta.toml"), str(scripts)]
    process = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, env=env)
    try:
        url = process.stdout.readline().strip().removeprefix("listening on ")
        assert http.get(f"{url}/models").json()["data"][0]["id"] == "beta-model"  # beta.toml came first
        for prompt, reply in [("item-b1", "beta one"), ("ALPHA", "alpha one"), ("hello", "fallback one")]:
            body = {"messages": [{"role": "user", "content": prompt}]}
            assert http.post(f"{url}/chat/completions", json=body).json()["choices"][0]["message"]["content"] == reply
    finally:
        process.terminate()
        assert process.wait(5) == 0


def test_system_prompt_and_tools_tell_agents_apart(http: httpx.Client, start: Start, tmp_path: Path) -> None:
    per_agent = tmp_path / "a.toml"
    per_agent.write_text('schema_version = 1\n[select]\nfirst_user_contains = "ITEM"\nsystem_contains = "You are OpenClaw"\n'
                         '[[turns]]\ntext = "openclaw script"\n')
    by_tool = tmp_path / "b.toml"
    by_tool.write_text('schema_version = 1\n[select]\nfirst_user_contains = "ITEM"\ntool_available = "bash"\n'
                       '[[turns]]\ntext = "bash-tool script"\n')
    generic = tmp_path / "c.toml"
    generic.write_text('schema_version = 1\n[select]\nfirst_user_contains = "ITEM"\n[[turns]]\ntext = "generic script"\n')
    server = start(scripts=[per_agent, by_tool, generic])

    def ask(system: str, tools: list[str]) -> str:
        body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "do ITEM"}],
                "tools": [{"type": "function", "function": {"name": n, "parameters": {}}} for n in tools]}
        # Each agent run is a conversation of its own.
        return text(http.post(f"{server.url}/chat/completions", json=body, headers={CONVERSATION_HEADER: system + ",".join(tools)}))

    assert ask("You are OpenClaw, a personal agent.", ["write"]) == "openclaw script"
    assert ask("You are a coding agent.", ["bash", "write"]) == "bash-tool script"
    assert ask("You are a coding agent.", ["exec", "write"]) == "generic script"
    assert parse_script({"schema_version": 1, "select": {"system_contains": "x"}, "turns": [{"text": "t"}]}).select
