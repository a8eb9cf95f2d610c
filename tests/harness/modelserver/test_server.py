"""The scripted model server over real HTTP, as an agent's client sees it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.modelserver import CONVERSATION_HEADER, ScriptedModelServer, parse_script
from tests.support import REPO

ROOT = REPO
Start = Callable[..., ScriptedModelServer]


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """One client for the module: building an httpx client costs tens of milliseconds."""
    with httpx.Client(timeout=5) as client:
        yield client


@pytest.fixture
def start() -> Iterator[Start]:
    """Start servers from script data on free ports; stop them all afterwards."""
    servers: list[ScriptedModelServer] = []

    def run(data: dict[str, Any], **options: Any) -> ScriptedModelServer:
        server = ScriptedModelServer(parse_script({"schema_version": 1, **data}), **options)
        server.start()
        servers.append(server)
        return server

    yield run
    for server in servers:
        server.stop()


def chat(http: httpx.Client, server: ScriptedModelServer, prompt: str = "go", timeout: float = 5, **body: Any) -> httpx.Response:
    payload = {"model": "any", "messages": [{"role": "user", "content": prompt}], **body}
    return http.post(f"{server.url}/chat/completions", json=payload, timeout=timeout)


def stream(http: httpx.Client, server: ScriptedModelServer, prompt: str = "go", **body: Any) -> tuple[httpx.Response, list[Any]]:
    """A streamed chat request: the response and its SSE data items, in order (``[DONE]`` as a string)."""
    payload = {"messages": [{"role": "user", "content": prompt}], "stream": True, **body}
    events: list[Any] = []
    with http.stream("POST", f"{server.url}/chat/completions", json=payload, timeout=5) as response:
        for line in response.iter_lines():
            if line:
                assert line.startswith("data: ")
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
    return response, events


def reassemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Add up stream chunks the way an OpenAI client does."""
    content, calls, finish = "", {}, None
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for part in delta.get("tool_calls", []):
                call = calls.setdefault(part["index"], {"id": None, "name": "", "arguments": ""})
                call["id"] = part.get("id", call["id"])
                call["name"] += part.get("function", {}).get("name", "")
                call["arguments"] += part.get("function", {}).get("arguments", "")
            finish = choice["finish_reason"] or finish
    return {"content": content, "tool_calls": [calls[i] for i in sorted(calls)], "finish_reason": finish}


def test_models_and_health(http: httpx.Client, start: Start) -> None:
    server = start({}, model_id="qwen-test", context_size=4096)
    assert server.url == f"http://127.0.0.1:{server.port}/v1"
    models = http.get(f"{server.url}/models").json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["meta"]["n_ctx_train"]) for m in models["data"]] == [("qwen-test", "model", 4096)]
    assert http.get(f"{server.url.removesuffix('/v1')}/health").json() == {"status": "ok"}


def test_an_endpoint_behind_a_key_answers_only_requests_that_carry_it(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"text": "Hello there, agent."}]}, api_key="sk-test+key/=")
    assert chat(http, server).status_code == 401
    wrong = http.post(f"{server.url}/chat/completions", headers={"Authorization": "Bearer sk-other"},
                      json={"messages": [{"role": "user", "content": "go"}]})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    right = http.post(f"{server.url}/chat/completions", headers={"Authorization": "Bearer sk-test+key/="},
                      json={"messages": [{"role": "user", "content": "go"}]})
    assert right.status_code == 200 and right.json()["choices"][0]["message"]["content"] == "Hello there, agent."
    assert [r.status for r in server.requests] == [401, 401, 200]
    assert "sk-test" not in json.dumps([r.model_dump(mode="json") for r in server.requests])  # headers are not kept


def test_text_reply_not_streamed(http: httpx.Client, start: Start) -> None:
    server = start({"model_id": "from-script", "turns": [{"text": "Hello there, agent."}]})
    response = chat(http, server)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "from-script"
    assert body["id"].startswith("chatcmpl-")
    assert isinstance(body["created"], int)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello there, agent."}
    assert body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["completion_tokens"] == len("Hello there, agent.") // 4 + 1
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > usage["completion_tokens"]


def test_text_reply_streamed(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"text": "Streaming works fine."}, {"text": "Streaming works fine."}]})
    response, events = stream(http, server)
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["transfer-encoding"] == "chunked"
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(chunks) > 3  # the text came in several deltas
    assert reassemble(chunks) == {"content": "Streaming works fine.", "tool_calls": [], "finish_reason": "stop"}

    _, events = stream(http, server, stream_options={"include_usage": True})
    *chunks, usage_chunk, done = events
    assert done == "[DONE]"
    assert all(c["usage"] is None for c in chunks)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == len("Streaming works fine.") // 4 + 1


def test_streamed_tool_calls_reassemble_to_the_scripted_arguments(http: httpx.Client, start: Start) -> None:
    write = {"path": "photos/rename.py", "content": "import os\nprint('renaming')\n"}
    run = {"command": "python3 -m unittest -v", "timeout": 120}
    server = start({"turns": [{"text": "Writing it.", "tool_calls": [{"name": "write", "arguments": write}, {"name": "exec", "arguments": run}]}]})
    _, events = stream(http, server)
    chunks = events[:-1]
    message = reassemble(chunks)
    assert message["content"] == "Writing it."
    assert message["finish_reason"] == "tool_calls"
    assert [(c["id"], c["name"]) for c in message["tool_calls"]] == [("call_1_1", "write"), ("call_1_2", "exec")]
    assert [json.loads(c["arguments"]) for c in message["tool_calls"]] == [write, run]
    openings = [p for c in chunks for p in c["choices"][0]["delta"].get("tool_calls", []) if "id" in p]
    assert [(p["type"], p["function"]["arguments"]) for p in openings] == [("function", ""), ("function", "")]
    argument_deltas = [p for c in chunks for p in c["choices"][0]["delta"].get("tool_calls", []) if p["index"] == 0]
    assert len(argument_deltas) > 3

    record = server.requests[-1]
    assert record.stream is True
    assert record.response["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == json.dumps(write)


def test_tool_calls_not_streamed(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"tool_calls": [{"name": "read", "arguments": {"path": "a.txt"}}]}]})
    message = chat(http, server).json()["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    assert message["message"]["content"] is None
    assert message["message"]["tool_calls"] == [
        {"id": "call_1_1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.txt"}'}}
    ]


def test_reply_cut_at_the_output_limit(http: httpx.Client, start: Start) -> None:
    arguments = {"path": "big.py", "content": "x = 1\n" * 40}
    server = start(
        {
            "max_output_tokens": 1000,
            "turns": [
                {"text": "Here is", "tool_calls": [{"name": "write", "arguments": arguments}], "cut_at_output_limit": True},
                {"text": "a" * 400},
                {"text": "b" * 400},
            ],
        }
    )
    _, events = stream(http, server)
    message = reassemble(events[:-1])
    assert message["finish_reason"] == "length"
    assert message["tool_calls"][0]["arguments"] == json.dumps(arguments)[: len(json.dumps(arguments)) // 2]
    with pytest.raises(json.JSONDecodeError):
        json.loads(message["tool_calls"][0]["arguments"])

    # A reply longer than the request's max_tokens is cut like a real server cuts it.
    body = chat(http, server, max_tokens=10).json()
    assert (body["choices"][0]["message"]["content"], body["choices"][0]["finish_reason"]) == ("a" * 40, "length")
    assert body["usage"]["completion_tokens"] == 10
    # Below the limit nothing is cut.
    assert chat(http, server, max_tokens=500).json()["choices"][0]["finish_reason"] == "stop"


def test_delay_and_rate(http: httpx.Client, start: Start) -> None:
    text = "t" * 80  # 20 tokens
    server = start({"turns": [{"text": "late", "delay": 0.3}, {"text": text, "tokens_per_second": 100}, {"text": text, "tokens_per_second": 100}]})
    began = time.monotonic()
    assert chat(http, server).json()["choices"][0]["message"]["content"] == "late"
    assert 0.3 <= time.monotonic() - began < 3

    began = time.monotonic()
    assert chat(http, server).json()["choices"][0]["message"]["content"] == text
    assert 0.2 <= time.monotonic() - began < 3

    payload = {"messages": [{"role": "user", "content": "go"}], "stream": True}
    began = time.monotonic()
    with http.stream("POST", f"{server.url}/chat/completions", json=payload, timeout=5) as response:
        lines = response.iter_lines()
        next(lines)  # the role chunk comes at once, the tokens at the rate
        first = time.monotonic() - began
        rest = [line for line in lines if line]
    total = time.monotonic() - began
    assert rest[-1] == "data: [DONE]"
    assert first < 0.15 and 0.2 <= total < 3


def test_http_error(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"http_status": 500}, {"http_status": 503, "error_body": "upstream overloaded"}, {"text": "ok"}]})
    first = chat(http, server)
    assert first.status_code == 500
    assert first.json()["error"]["type"] == "server_error"
    second = chat(http, server, stream=True)
    assert (second.status_code, second.text) == (503, "upstream overloaded")
    assert second.headers["content-type"].startswith("text/plain")
    assert chat(http, server).json()["choices"][0]["message"]["content"] == "ok"  # a retry gets the next turn
    assert [r.status for r in server.requests] == [500, 503, 200]


def test_hang_until_the_client_gives_up(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"hang": True}, {"text": "back"}]})
    began = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        chat(http, server, timeout=0.3)
    assert time.monotonic() - began < 2
    assert server.requests[-1].status is None and server.requests[-1].source == "turns[0]"
    assert chat(http, server).json()["choices"][0]["message"]["content"] == "back"


def test_stop_ends_a_hanging_request(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"hang": True}]})
    errors: list[Exception] = []

    def client() -> None:
        try:
            chat(http, server, timeout=30)
        except httpx.HTTPError as exc:
            errors.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    while not server.requests:
        time.sleep(0.01)
    began = time.monotonic()
    server.stop()
    thread.join(5)
    assert time.monotonic() - began < 2
    assert not thread.is_alive() and len(errors) == 1


def test_matching_rules_over_http(http: httpx.Client, start: Start) -> None:
    server = start(
        {
            "rules": [{"match": {"tool_available": "browser"}, "text": "I will browse."}],
            "turns": [{"text": "plain"}],
        }
    )
    tools = [{"type": "function", "function": {"name": "browser", "parameters": {"type": "object"}}}]
    assert chat(http, server, tools=tools).json()["choices"][0]["message"]["content"] == "I will browse."
    assert chat(http, server).json()["choices"][0]["message"]["content"] == "plain"
    assert [r.source for r in server.requests] == ["rules[0]", "turns[0]"]


def test_two_conversations_interleaved_keep_their_own_turns(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"text": "one"}, {"text": "two"}, {"text": "three"}]})

    def say(prompt: str) -> str:
        return chat(http, server, prompt).json()["choices"][0]["message"]["content"]

    assert [say("photos"), say("csv"), say("photos"), say("csv"), say("csv")] == ["one", "one", "two", "two", "three"]
    conversations = [r.conversation for r in server.requests]
    assert len(set(conversations)) == 2 and conversations[0] == conversations[2]

    # The header tells apart conversations whose prompts are the same.
    url = f"{server.url}/chat/completions"
    body = {"messages": [{"role": "user", "content": "same"}]}

    def say_as(conversation: str) -> str:
        response = http.post(url, json=body, headers={CONVERSATION_HEADER: conversation})
        return response.json()["choices"][0]["message"]["content"]

    assert [say_as("cell-1"), say_as("cell-2"), say_as("cell-1")] == ["one", "one", "two"]
    assert server.requests[-1].conversation == "cell-1"


def test_concurrent_conversations(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"text": "one", "delay": 0.1}, {"text": "two"}]})
    results: dict[str, list[str]] = {}

    def agent(prompt: str) -> None:
        results[prompt] = [chat(http, server, prompt).json()["choices"][0]["message"]["content"] for _ in range(2)]

    threads = [threading.Thread(target=agent, args=(f"prompt {i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert results == {f"prompt {i}": ["one", "two"] for i in range(4)}


def test_bad_requests(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"text": "ok"}]}, context_size=50)
    url = server.url
    unknown = http.post(f"{url}/completions", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"] == "Invalid URL (POST /v1/completions)"
    assert http.get(f"{url}/chat/completions").status_code == 405
    malformed = http.post(f"{url}/chat/completions", content=b'{"messages": [', headers={"content-type": "application/json"})
    assert malformed.status_code == 400
    assert malformed.json()["error"]["type"] == "invalid_request_error"
    assert http.post(f"{url}/chat/completions", json={"messages": []}).status_code == 400
    too_long = chat(http, server, "word " * 100)
    assert too_long.status_code == 400
    assert too_long.json()["error"]["code"] == "context_length_exceeded"
    assert [r.status for r in server.requests] == [404, 405, 400, 400, 400]
    assert chat(http, server).json()["choices"][0]["message"]["content"] == "ok"  # no turn was consumed


def test_chunked_request_body(http: httpx.Client, start: Start) -> None:
    server = start({"turns": [{"text": "ok"}]})
    payload = json.dumps({"messages": [{"role": "user", "content": "go"}]}).encode()
    pieces = iter([payload[:10], payload[10:]])
    response = http.post(f"{server.url}/chat/completions", content=pieces)
    assert response.status_code == 200
    assert server.requests[-1].request["messages"][0]["content"] == "go"


def test_request_log_in_memory_and_jsonl(http: httpx.Client, start: Start, tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    server = start({"values": {"m": "FLEET-\\w+"}, "turns": [{"text": "{{values.m}}"}]}, log_path=log)
    body = {"messages": [{"role": "user", "content": "no marker"}], "temperature": 0.2}
    http.post(f"{server.url}/chat/completions", json=body, headers={"Authorization": "Bearer sk-secret"})
    http.get(f"{server.url}/models")
    first, second = server.requests
    assert (first.seq, first.method, first.path, first.status) == (1, "POST", "/v1/chat/completions", 200)
    assert first.request == body
    assert first.missing_values == ["m"]
    assert (second.path, second.response["data"][0]["id"]) == ("/v1/models", "scripted-model")
    lines = log.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [r.model_dump(mode="json") for r in server.requests]
    assert "sk-secret" not in log.read_text()


def test_official_openai_client(start: Start) -> None:
    openai = pytest.importorskip("openai")
    arguments = {"path": "a.py", "content": "print(1)\n"}
    server = start({"turns": [{"text": "hi"}, {"tool_calls": [{"name": "write", "arguments": arguments}]}]})
    client = openai.OpenAI(base_url=server.url, api_key="unused")
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
    assert reply.choices[0].message.content == "hi"
    streamed = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], stream=True)
    parts = [d.function.arguments for c in streamed for d in (c.choices[0].delta.tool_calls or []) if c.choices]
    assert json.loads("".join(p for p in parts if p)) == arguments


def test_module_runs_in_the_foreground_and_stops_on_sigterm(http: httpx.Client, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = ROOT / "prompts" / "scripts" / "example.toml"
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.modelserver", "--script", str(script), "--model-id", "cli-model"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:") and line.endswith("/v1")
        url = line.removeprefix("listening on ")
        assert http.get(f"{url}/models").json()["data"][0]["id"] == "cli-model"
        process.send_signal(signal.SIGTERM)
        assert process.wait(5) == 0
    finally:
        process.kill()
        process.wait()

    bad = tmp_path / "bad.toml"
    bad.write_text("schema_version = 1\n[[turns]]\ntxt = 'hi'\n")
    failed = subprocess.run(
        [sys.executable, "-m", "harness.modelserver", "--script", str(bad)], capture_output=True, text=True, env=env, timeout=10
    )
    assert failed.returncode == 2
    assert failed.stderr == f"error: {bad}: turns[0].txt: unknown key\n"


def test_module_serves_every_script_given_as_a_set(http: httpx.Client, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("a", "b"):
        (tmp_path / f"{name}.toml").write_text(
            f'schema_version = 1\n[select]\nfirst_user_contains = "item-{name}"\n[[turns]]\ntext = "script {name}"\n')
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.modelserver", "--script", str(tmp_path / "a.toml"), "--script",
         str(tmp_path / "b.toml")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = process.stdout.readline().strip().removeprefix("listening on ")
        for name in ("a", "b"):
            body = {"model": "m", "messages": [{"role": "user", "content": f"do item-{name}"}]}
            reply = http.post(f"{url}/chat/completions", json=body).json()
            assert reply["choices"][0]["message"]["content"] == f"script {name}"
    finally:
        process.kill()
        process.wait()
