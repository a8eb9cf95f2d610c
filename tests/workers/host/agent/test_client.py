"""The chat client against wire shapes the scripted model does not produce: other servers' dialects.

A small real HTTP server answers with recorded bodies (Ollama's object arguments and missing ids,
llama.cpp's context error, an error inside a stream, a stream cut short), so the client is exercised
over a real socket, as it is on a host.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from workers.host.agent.chat import ChatClient, ContextOverflow, EndpointError, RetryPolicy

Canned = tuple[int, str, bytes]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    answers: list[Canned]
    bodies: list[dict[str, Any]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
        length = int(self.headers["Content-Length"])
        self.server.bodies.append(json.loads(self.rfile.read(length)))
        status, content_type, body = self.server.answers.pop(0)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.answers, httpd.bodies = [], []
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _client(server: _Server, stream: bool, retries: int = 0) -> ChatClient:
    return ChatClient(f"http://127.0.0.1:{server.server_address[1]}/v1", "m", stream=stream, api_key="sk-x",
                      retry=RetryPolicy(retries=retries, backoff_s=0), conversation="run-1", timeout_s=5)


def _sse(*chunks: object) -> bytes:
    return b"".join(b"data: " + (c if isinstance(c, bytes) else json.dumps(c).encode()) + b"\n\n" for c in chunks)


def _complete(client: ChatClient) -> tuple[Any, list[tuple[int, str, float | None]]]:
    errors: list[tuple[int, str, float | None]] = []
    reply = client.complete([{"role": "user", "content": "hi"}], [], 100,
                            lambda attempt, exc, delay: errors.append((attempt, exc.kind, delay)))
    return reply, errors


def test_object_arguments_missing_ids_and_reasoning(server: _Server) -> None:
    body = {"model": "qwen3:8b", "choices": [{"finish_reason": "stop", "message": {
        "role": "assistant", "content": "", "reasoning_content": "think",
        "tool_calls": [{"function": {"name": "ls", "arguments": {"path": "."}}}]}}]}
    server.answers.append((200, "application/json", json.dumps(body).encode()))
    reply, _ = _complete(_client(server, stream=False))
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("", "ls", '{"path": "."}')]
    assert (reply.finish_reason, reply.reasoning, reply.model, reply.usage) == ("stop", "think", "qwen3:8b", None)
    sent = server.bodies[0]
    assert sent["max_tokens"] == 100 and sent["stream"] is False and "tools" not in sent


def test_a_stream_is_added_up_without_done(server: _Server) -> None:
    chunks = [
        {"choices": [{"delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]},
        {"choices": [{"delta": {"content": "lo", "tool_calls": [{"index": 0, "id": "a", "function": {
            "name": "exec", "arguments": '{"comm'}}]}, "finish_reason": None}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'and": "ls"}'}}]},
                      "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}},
    ]
    server.answers.append((200, "text/event-stream", b": ping\n\n" + _sse(*chunks)))
    reply, _ = _complete(_client(server, stream=True))
    assert reply.text == "Hello" and reply.finish_reason == "tool_calls"
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [("a", '{"command": "ls"}')]
    assert reply.usage == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
    assert server.bodies[0]["stream_options"] == {"include_usage": True}


def test_an_error_inside_a_stream_and_a_cut_stream_are_retried(server: _Server) -> None:
    server.answers += [
        (200, "text/event-stream", _sse({"error": {"message": "model crashed"}})),
        (200, "text/event-stream", _sse({"choices": [{"delta": {"content": "x"}, "finish_reason": None}]})),
        (200, "text/event-stream", _sse({"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]},
                                        b"[DONE]")),
    ]
    reply, errors = _complete(_client(server, stream=True, retries=2))
    assert reply.text == "ok" and reply.attempts == 3
    assert errors == [(1, "protocol", 0.0), (2, "connection", 0.0)]


@pytest.mark.parametrize(("status", "body", "kind", "retryable"), [
    (400, b'{"error": {"message": "the request exceeds the available context size", "type": '
          b'"exceed_context_size_error"}}', ContextOverflow, False),
    (400, b'{"object": "error", "message": "This model\'s maximum context length is 4096 tokens. However, you '
          b'requested 5000 tokens"}', ContextOverflow, False),
    (404, b'{"error": {"message": "model \'x\' not found"}}', EndpointError, False),
    (401, b"Unauthorized", EndpointError, False),
    (503, b'{"error": {"message": "Loading model"}}', EndpointError, True),
])
def test_http_errors(server: _Server, status: int, body: bytes, kind: type[EndpointError], retryable: bool) -> None:
    server.answers.append((status, "application/json", body))
    with pytest.raises(EndpointError) as caught:
        _complete(_client(server, stream=False))
    error = caught.value
    assert type(error) is kind and error.status == status and error.retryable is retryable
    assert error.reason == f"model_http_{status}" and str(error).startswith(f"HTTP {status}: ")


def test_a_body_that_is_not_a_completion(server: _Server) -> None:
    server.answers += [(200, "application/json", b"<html>proxy</html>"), (200, "application/json", b'{"choices": [1]}')]
    client = _client(server, stream=False, retries=1)
    with pytest.raises(EndpointError) as caught:
        _complete(client)
    assert caught.value.kind == "protocol" and caught.value.attempts == 2


def test_retry_delays_double_up_to_the_cap() -> None:
    policy = RetryPolicy(retries=5, backoff_s=2, max_backoff_s=10)
    assert [policy.delay(n) for n in range(1, 6)] == [2, 4, 8, 10, 10]
