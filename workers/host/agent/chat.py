"""A small client for OpenAI-compatible ``/v1/chat/completions`` endpoints, on ``http.client`` only.

Why the standard library: the agent runs on fleet hosts whose Python has little installed, so it
needs nothing beyond pydantic (for the transcript). llama.cpp server, vLLM, Ollama, LM Studio and
Lemonade all speak the subset used here: ``messages`` and ``tools`` (function calling), ``max_tokens``,
and either one JSON reply or Server-Sent Events (``stream``). Their differences are absorbed here:
tool-call arguments sent as an object instead of a JSON string, missing call ids, ``finish_reason``
``stop`` with tool calls, ``reasoning_content`` beside the content, an error object inside a stream.

Why a retry policy: a local model server fails in ways that say nothing about the model (a restart,
CUDA out of memory, a reset connection, a request that never answers). Those are retried with an
exponential backoff; when the attempts are spent the failure is an ``EndpointError``, which the agent
reports as an infrastructure failure, never as the model's result. A 400 that says the prompt is
longer than the context is the run's own doing: ``ContextOverflow``, not retried. Other 4xx answers
(a wrong model id, a missing key) cannot get better by retrying and fail at once.

``timeout_s`` bounds each wait for bytes (connect, the first byte, every next chunk), not the whole
reply: a long streamed reply is fine as long as it keeps coming.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit

__all__ = [
    "RetryPolicy",
    "EndpointError",
    "ContextOverflow",
    "ReplyToolCall",
    "Reply",
    "ChatClient",
]

ErrorKind = Literal["http", "timeout", "connection", "protocol"]
RETRYABLE_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))
"""Request timeout, rate limit (a busy server), and server errors (a restart, out of memory)."""
_CONTEXT_WORDS = re.compile(r"context|too long|maximum.{0,40}tokens|n_ctx|exceeds", re.I)
ERROR_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` more attempts after the first, waiting ``backoff_s``, then twice that, and so on."""

    retries: int = 3
    backoff_s: float = 2.0
    max_backoff_s: float = 30.0

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt number ``attempt`` (from 1)."""
        return min(self.backoff_s * 2.0 ** (attempt - 1), self.max_backoff_s)


class EndpointError(Exception):
    """The endpoint did not give a usable reply: an HTTP error, a timeout, a dropped connection, or a
    body that is not a chat completion."""

    def __init__(self, kind: ErrorKind, message: str, *, status: int | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retryable = retryable
        self.attempts = 1
        """How many attempts the request got before this error was final (set by ``complete``)."""

    @property
    def reason(self) -> str:
        """A short, stable code for the run's end: model_http_500, model_timeout, ..."""
        return f"model_http_{self.status}" if self.kind == "http" else f"model_{self.kind}"


class ContextOverflow(EndpointError):
    """The endpoint refused the prompt as longer than its context: the run is full, not the fleet broken."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__("http", message, status=status, retryable=False)


@dataclass(frozen=True)
class ReplyToolCall:
    id: str
    name: str
    arguments: str
    """The raw JSON text the model produced (may be invalid, or cut at the output limit)."""


@dataclass(frozen=True)
class Reply:
    text: str
    reasoning: str | None
    tool_calls: list[ReplyToolCall]
    finish_reason: str | None
    usage: dict[str, int] | None
    model: str | None
    latency_s: float
    attempts: int = 1


def _error_message(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text[:300] or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            return str(error.get("message") or error)[:300]
        if error is not None:
            return str(error)[:300]
    return text[:300]


def _http_error(status: int, body: bytes) -> EndpointError:
    message = _error_message(body)
    if status in (400, 413) and (b"context_length_exceeded" in body or _CONTEXT_WORDS.search(message)):
        return ContextOverflow(f"HTTP {status}: {message}", status)
    return EndpointError("http", f"HTTP {status}: {message}", status=status, retryable=status in RETRYABLE_STATUSES)


def _arguments_text(arguments: object) -> str:
    """Tool-call arguments as JSON text: some servers send an object where OpenAI sends a string."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return json.dumps(arguments, ensure_ascii=False)


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _usage(value: object) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return {key: int(value[key]) for key in ("prompt_tokens", "completion_tokens", "total_tokens")
            if isinstance(value.get(key), (int, float)) and not isinstance(value.get(key), bool)}


@dataclass
class _StreamState:
    """A streamed reply being added up, chunk by chunk, as an OpenAI client does."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    model: str | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk:
            raise EndpointError("protocol", f"error inside the stream: {_error_message(json.dumps(chunk).encode())}")
        self.model = chunk.get("model") or self.model
        self.usage = _usage(chunk.get("usage")) or self.usage
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            self.text.append(_content_text(delta.get("content")))
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str):
                self.reasoning.append(reasoning)
            for part in delta.get("tool_calls") or []:
                index = part.get("index", len(self.calls))
                call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                call["id"] = part.get("id") or call["id"]
                function = part.get("function") or {}
                call["name"] += function.get("name") or ""
                call["arguments"] += _arguments_text(function.get("arguments"))
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def reply(self, latency_s: float) -> Reply:
        calls = [ReplyToolCall(c["id"], c["name"], c["arguments"]) for _, c in sorted(self.calls.items())]
        reasoning = "".join(self.reasoning)
        return Reply("".join(self.text), reasoning or None, calls, self.finish_reason, self.usage, self.model, latency_s)


def _whole_reply(data: object, latency_s: float) -> Reply:
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        raise EndpointError("protocol", "the reply is not a chat completion (no choices)")
    choice = data["choices"][0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise EndpointError("protocol", "the reply's first choice has no message")
    calls = []
    for raw in message.get("tool_calls") or []:
        function = raw.get("function") or {}
        calls.append(ReplyToolCall(str(raw.get("id") or ""), str(function.get("name") or ""),
                                   _arguments_text(function.get("arguments"))))
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return Reply(
        text=_content_text(message.get("content")),
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
        tool_calls=calls,
        finish_reason=choice.get("finish_reason"),
        usage=_usage(data.get("usage")),
        model=data.get("model") if isinstance(data.get("model"), str) else None,
        latency_s=latency_s,
    )


OnError = Callable[[int, EndpointError, float | None], None]
"""Told about every failed attempt: (attempt, error, seconds until the retry, or None when giving up)."""


class ChatClient:
    """Chat completions against one endpoint and model. ``conversation`` is sent as the
    ``X-Fleet-Conversation`` header, so a shared scripted model server keeps each run's turns apart."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        stream: bool = True,
        retry: RetryPolicy = RetryPolicy(),
        conversation: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        url = urlsplit(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base URL {base_url!r} must be http:// or https:// with a host")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.stream = stream
        self.timeout_s = timeout_s
        self.retry = retry
        self._url = url
        self._path = f"{url.path}/chat/completions"
        self._sleep = sleep
        self._headers = {"Content-Type": "application/json", "User-Agent": "fleet-builtin-agent"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        if conversation:
            self._headers["X-Fleet-Conversation"] = conversation

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_tokens: int,
                 on_error: OnError) -> Reply:
        """One reply, retried per the policy; raises the last ``EndpointError`` when attempts run out."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "stream": self.stream}
        if tools:
            body["tools"] = tools
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        attempt = 0
        while True:
            attempt += 1
            try:
                reply = self._once(payload)
            except EndpointError as exc:
                if not exc.retryable or attempt > self.retry.retries:
                    exc.attempts = attempt
                    on_error(attempt, exc, None)
                    raise
                delay = self.retry.delay(attempt)
                on_error(attempt, exc, delay)
                self._sleep(delay)
                continue
            return replace(reply, attempts=attempt)

    def _connection(self) -> http.client.HTTPConnection:
        port = self._url.port
        host = self._url.hostname or ""
        if self._url.scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout_s)
        return http.client.HTTPConnection(host, port, timeout=self.timeout_s)

    def _once(self, payload: bytes) -> Reply:
        started = time.monotonic()
        connection = self._connection()
        try:
            headers = {**self._headers, "Accept": "text/event-stream" if self.stream else "application/json"}
            connection.request("POST", self._path, body=payload, headers=headers)
            response = connection.getresponse()
            if response.status != 200:
                raise _http_error(response.status, response.read(ERROR_BODY_LIMIT))
            if self.stream and "text/event-stream" in (response.getheader("Content-Type") or ""):
                return self._read_stream(response, started)
            try:
                data = json.loads(response.read())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise EndpointError("protocol", f"the reply is not JSON: {exc}") from None
            return _whole_reply(data, round(time.monotonic() - started, 3))
        except (TimeoutError, socket.timeout):
            raise EndpointError("timeout", f"no answer within {self.timeout_s:g} s") from None
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            raise EndpointError("connection", f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        except (AttributeError, TypeError, KeyError, ValueError) as exc:  # a body of the wrong shape
            raise EndpointError("protocol", f"malformed reply: {type(exc).__name__}: {exc}") from None
        finally:
            connection.close()

    def _read_stream(self, response: http.client.HTTPResponse, started: float) -> Reply:
        state = _StreamState()
        while line := response.readline():
            text = line.decode("utf-8", "replace").strip()
            if not text.startswith("data:"):
                continue  # blank separators, comments (": ping"), "event:" lines
            data = text[5:].strip()
            if data == "[DONE]":
                return state.reply(round(time.monotonic() - started, 3))
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError as exc:
                raise EndpointError("protocol", f"a stream event is not JSON: {exc}") from None
            if isinstance(chunk, dict):
                state.add(chunk)
        if state.finish_reason is not None:
            return state.reply(round(time.monotonic() - started, 3))  # some servers end without [DONE]
        raise EndpointError("connection", "the stream ended before the reply finished")
