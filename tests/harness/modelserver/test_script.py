"""The script format and its playback, without HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import harness.modelserver as modelserver
from harness.modelserver import SCHEMA_VERSION, ScriptError, ScriptPlayer, load_script, parse_script
from tests.support import REPO

EXAMPLE = REPO / "prompts" / "scripts" / "example.toml"


def user(text: str, *rest: dict[str, Any], tools: list[str] = ()) -> dict[str, Any]:
    """A chat request body: one user message, then ``rest``, offering ``tools``."""
    return {
        "messages": [{"role": "user", "content": text}, *rest],
        "tools": [{"type": "function", "function": {"name": n, "parameters": {}}} for n in tools],
    }


def tool_result(text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "call_1_1", "content": text}


def test_exports_are_importable() -> None:
    for name in modelserver.__all__:
        assert getattr(modelserver, name) is not None


def test_example_script_loads() -> None:
    script = load_script(EXAMPLE)
    assert script.schema_version == SCHEMA_VERSION
    assert script.values["marker"]
    assert len(script.turns) == 3


def test_toml_and_json_give_the_same_script(tmp_path: Path) -> None:
    data = {"schema_version": 1, "turns": [{"text": "hi"}, {"tool_calls": [{"name": "ls", "arguments": {"p": "."}}]}]}
    (tmp_path / "s.json").write_text(json.dumps(data))
    (tmp_path / "s.toml").write_text(
        'schema_version = 1\n[[turns]]\ntext = "hi"\n[[turns]]\ntool_calls = [{name = "ls", arguments = {p = "."}}]\n'
    )
    assert load_script(tmp_path / "s.json") == load_script(tmp_path / "s.toml")


@pytest.mark.parametrize(
    ("data", "key", "problem"),
    [
        ({}, "schema_version", "required key is missing"),
        ({"schema_version": 2}, "schema_version", "Input should be 1"),
        ({"schema_version": 1, "turns": [{"txt": "hi"}]}, "turns[0].txt", "unknown key"),
        ({"schema_version": 1, "turns": [{"text": "a", "hang": True}]}, "turns[0]", "give exactly one of"),
        ({"schema_version": 1, "turns": [{}]}, "turns[0]", "give exactly one of"),
        ({"schema_version": 1, "turns": [{"http_status": 200}]}, "turns[0].http_status", "greater than or equal"),
        ({"schema_version": 1, "turns": [{"text": "a", "error_body": "x"}]}, "turns[0]", "error_body needs"),
        (
            {"schema_version": 1, "turns": [{"text": "a", "cut_arguments_at": 3}]},
            "turns[0]",
            "cut_arguments_at needs",
        ),
        (
            {"schema_version": 1, "turns": [{"tool_calls": [{"name": "x", "arguments": 3}]}]},
            "turns[0].tool_calls[0].arguments",
            "must be a table or a JSON string",
        ),
        ({"schema_version": 1, "rules": [{"text": "a"}]}, "rules[0].match", "required key is missing"),
        ({"schema_version": 1, "rules": [{"match": {}, "text": "a"}]}, "rules[0].match", "at least one condition"),
        (
            {"schema_version": 1, "rules": [{"match": {"last_user_regex": "("}, "text": "a"}]},
            "rules[0].match.last_user_regex",
            "invalid regular expression",
        ),
        ({"schema_version": 1, "values": {"a-b": "x"}}, "values", "not an identifier"),
        (
            {"schema_version": 1, "turns": [{"tool_calls": [{"name": "w", "arguments": {"c": "{{values.nope}}"}}]}]},
            "turns[0].tool_calls[0].arguments.c",
            "{{values.nope}} is not declared under values",
        ),
        ({"schema_version": 1, "fallback": {"text": "{{values.x}}"}}, "fallback.text", "not declared"),
    ],
)
def test_bad_script_names_file_key_and_problem(data: dict[str, Any], key: str, problem: str) -> None:
    with pytest.raises(ScriptError) as caught:
        parse_script(data, "s.toml")
    assert caught.value.file == "s.toml"
    assert caught.value.key == key
    assert problem in caught.value.problem
    assert str(caught.value) == f"s.toml: {key}: {caught.value.problem}"
    assert "\n" not in str(caught.value)


def test_syntax_errors_and_wrong_extension(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("schema_version = \n")
    (tmp_path / "bad.json").write_text('{"schema_version": 1,')
    (tmp_path / "s.yaml").write_text("schema_version: 1\n")
    for name, key, problem in [
        ("bad.toml", "(syntax)", "line 1"),
        ("bad.json", "(syntax)", "line 1"),
        ("s.yaml", "", ".toml or .json"),
        ("missing.toml", "", "cannot read"),
    ]:
        with pytest.raises(ScriptError) as caught:
            load_script(tmp_path / name)
        assert caught.value.file == str(tmp_path / name)
        assert caught.value.key == key
        assert problem in caught.value.problem


def test_turns_are_consumed_per_conversation_then_fallback() -> None:
    player = ScriptPlayer(parse_script({"schema_version": 1, "turns": [{"text": "one"}, {"text": "two"}]}))
    request = user("go")
    assert [player.play("a", request).content for _ in range(2)] == ["one", "two"]
    assert player.play("b", request).content == "one"
    fallback = player.play("a", request)
    assert (fallback.source, fallback.finish_reason, fallback.turn) == ("fallback", "stop", 3)
    assert fallback.content == modelserver.script.DEFAULT_FALLBACK_TEXT
    player.reset()
    assert player.play("a", request).content == "one"


def test_rules_come_first_and_do_not_consume_turns() -> None:
    script = parse_script(
        {
            "schema_version": 1,
            "rules": [
                {"match": {"last_tool_contains": "Traceback"}, "times": 1, "text": "fixing"},
                {"match": {"last_user_regex": r"^deploy \w+$", "tool_available": "ssh"}, "text": "no"},
            ],
            "turns": [{"text": "one"}, {"text": "two"}],
        }
    )
    player = ScriptPlayer(script)
    failed = user("go", {"role": "assistant", "content": None}, tool_result("Traceback (most recent call last)"))
    assert player.play("a", failed).source == "rules[0]"
    assert player.play("a", failed).content == "one"  # times = 1: the rule is spent
    assert player.play("a", user("deploy web", tools=["ssh"])).source == "rules[1]"
    assert player.play("a", user("deploy web", tools=["scp"])).content == "two"


def test_last_tool_means_the_results_that_end_the_conversation() -> None:
    script = parse_script({"schema_version": 1, "rules": [{"match": {"last_tool_regex": "exit code [1-9]"}, "text": "x"}]})
    player = ScriptPlayer(script)
    old = user("go", tool_result("exit code 2"), {"role": "assistant", "content": "retrying"})
    assert player.play("a", old).source == "fallback"
    both = user("go", tool_result("exit code 0"), tool_result("exit code 3"))
    assert player.play("a", both).source == "rules[0]"


def test_tool_calls_get_deterministic_ids_and_json_arguments() -> None:
    script = parse_script(
        {
            "schema_version": 1,
            "turns": [
                {"text": "first"},
                {"tool_calls": [{"name": "a", "arguments": {"x": [1, "é"]}}, {"name": "b", "arguments": "{not json"}]},
            ],
        }
    )
    player = ScriptPlayer(script)
    player.play("c", user("go"))
    answer = player.play("c", user("go"))
    assert [(c.id, c.name) for c in answer.tool_calls] == [("call_2_1", "a"), ("call_2_2", "b")]
    assert json.loads(answer.tool_calls[0].arguments) == {"x": [1, "é"]}
    assert answer.tool_calls[1].arguments == "{not json"
    assert answer.finish_reason == "tool_calls"
    assert answer.content == ""


def test_cut_reply_truncates_the_last_tool_calls_arguments() -> None:
    arguments = {"path": "big.py", "content": "x" * 100}
    script = parse_script(
        {
            "schema_version": 1,
            "turns": [
                {"text": "partial", "cut_at_output_limit": True},
                {"tool_calls": [{"name": "w", "arguments": arguments}], "cut_at_output_limit": True},
                {"tool_calls": [{"name": "w", "arguments": arguments}], "cut_at_output_limit": True, "cut_arguments_at": 9},
            ],
        }
    )
    player = ScriptPlayer(script)
    text = player.play("c", user("go"))
    assert (text.content, text.finish_reason) == ("partial", "length")
    full = json.dumps(arguments)
    assert player.play("c", user("go")).tool_calls[0].arguments == full[: len(full) // 2]
    cut = player.play("c", user("go"))
    assert (cut.tool_calls[0].arguments, cut.finish_reason) == (full[:9], "length")


def test_values_are_filled_from_the_conversation() -> None:
    script = parse_script(
        {
            "schema_version": 1,
            "values": {"marker": "FLEET-[0-9a-f]{10}", "port": r"port (\d+)"},
            "turns": [
                {
                    "text": "marker {{values.marker}} on {{ values.port }}; $HOME and {{other}} stay",
                    "tool_calls": [{"name": "w", "arguments": {"lines": ["{{values.marker}}"]}}],
                }
            ],
        }
    )
    request = {
        "messages": [
            {"role": "system", "content": "listen on port 8080"},
            {"role": "user", "content": [{"type": "text", "text": "echo FLEET-0123abcdef"}]},
        ]
    }
    answer = ScriptPlayer(script).play("c", request)
    assert answer.content == "marker FLEET-0123abcdef on 8080; $HOME and {{other}} stay"
    assert json.loads(answer.tool_calls[0].arguments) == {"lines": ["FLEET-0123abcdef"]}
    assert answer.missing_values == ()


def test_a_value_not_found_stays_as_written_and_is_reported() -> None:
    script = parse_script({"schema_version": 1, "values": {"m": "FLEET-\\w+"}, "turns": [{"text": "got {{values.m}}"}]})
    answer = ScriptPlayer(script).play("c", user("no marker here"))
    assert answer.content == "got {{values.m}}"
    assert answer.missing_values == ("m",)


def test_the_documented_example_is_the_example_file() -> None:
    doc = (EXAMPLE.parents[2] / "docs" / "scripted-model.md").read_text()
    assert f"```toml\n{EXAMPLE.read_text()}```" in doc
