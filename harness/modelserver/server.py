"""The scripted model server: a real HTTP server speaking the OpenAI-compatible chat API.

It stands in for a host's local model (llama.cpp server, vLLM, Ollama) where no GPU exists, so it
speaks the wire format faithfully: JSON bodies, Server-Sent Events over chunked transfer encoding,
keep-alive connections, OpenAI-style error objects. What it answers comes from a script
(``script.py``); how fast, and whether at all, too. It may serve a set of scripts, choosing one per
conversation by the script's ``select`` (``ScriptSet``).

Conversations are told apart by the ``X-Fleet-Conversation`` request header when the client sends one,
otherwise by a hash of the first system and first user message, so two agents running different
prompts at once do not consume each other's turns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import itertools
import json
import math
import os
import select
import signal
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from harness.core.nesting import loads_json
from .script import Answer, Script, ScriptError, ScriptSet, load_script, message_text, script_paths

__all__ = [
    "CONVERSATION_HEADER",
    "DEFAULT_MODEL_ID",
    "DEFAULT_CONTEXT_SIZE",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "NO_SCRIPT_SELECTS",
    "RequestRecord",
    "ScriptSource",
    "Scripts",
    "ScriptedModelServer",
    "conversation_key",
    "count_tokens",
    "serve",
]

CONVERSATION_HEADER = "X-Fleet-Conversation"
DEFAULT_MODEL_ID = "scripted-model"
DEFAULT_CONTEXT_SIZE = 32768
DEFAULT_MAX_OUTPUT_TOKENS = 8192
CHARS_PER_TOKEN = 4
"""Approximate tokenizer: one token per four characters, used for usage, limits and streamed chunks."""
_POLL = 0.05
"""How often a waiting handler looks whether the client went away or the server is stopping."""


ScriptSource = Script | str | os.PathLike[str]
"""One script, or a path: a script file, a directory of scripts, or a glob pattern (see ``script_paths``)."""
Scripts = ScriptSource | Sequence[ScriptSource] | Mapping[str, Script]
"""What a server plays: one source, several in order, or name -> script (as ``load_scripts`` returns)."""
NO_SCRIPT_SELECTS = "no script selects this conversation"


def count_tokens(text: str) -> int:
    """Approximate token count of ``text``; the same rule everywhere keeps usage and limits consistent."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def conversation_key(messages: list[Any]) -> str:
    """The conversation of a request without the header: hash of its first system and first user text."""

    def first(role: str) -> str:
        return next((message_text(m) for m in messages if isinstance(m, dict) and m.get("role") == role), "")

    digest = hashlib.sha256(json.dumps([first("system"), first("user")]).encode()).hexdigest()
    return f"prompt-{digest[:16]}"


class RequestRecord(BaseModel):
    """One request the server received and what it answered, for tests to assert what an agent sent.

    Request headers are not kept: they may carry an API key.
    """

    seq: int
    """Order of arrival, from 1."""
    received_at: str
    """ISO-8601 UTC time of arrival."""
    method: str
    path: str
    status: int | None
    """HTTP status answered; ``None`` when the script made the request hang."""
    request: Any = None
    """The JSON body, or the raw text when it is not JSON, or ``None`` when empty."""
    response: Any = None
    """The JSON answered; for a stream, the ``chat.completion`` object its chunks add up to."""
    stream: bool = False
    conversation: str | None = None
    turn: int | None = None
    """The request's number within its conversation, from 1."""
    source: str | None = None
    """The script step that answered: ``rules[0]``, ``turns[2]`` or ``fallback``."""
    script: str | None = None
    """The script that answered: its file path, or ``scripts[N]`` for a script object given unnamed."""
    missing_values: list[str] = Field(default_factory=list)
    """``{{values.NAME}}`` placeholders that found nothing in the conversation."""


def _error(message: str, kind: str, code: str | int | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _decode_body(body: bytes) -> Any:
    if not body:
        return None
    text = body.decode("utf-8", errors="replace")
    try:
        return loads_json(text)
    except ValueError:
        return text


def _output_limit(request: dict[str, Any], server_limit: int) -> int:
    """The server's per-reply limit, lowered by the request's ``max_tokens`` / ``max_completion_tokens``."""
    asked = [request.get(k) for k in ("max_completion_tokens", "max_tokens")]
    return min([server_limit] + [a for a in asked if isinstance(a, int) and not isinstance(a, bool) and a > 0])


def _completion_chars(answer: Answer) -> int:
    return len(answer.content) + sum(len(c.arguments) for c in answer.tool_calls)


def _cut_to_limit(answer: Answer, limit: int) -> Answer:
    """Cut a reply longer than the output limit the way a real server does: mid-text, ``length``."""
    budget = limit * CHARS_PER_TOKEN
    if _completion_chars(answer) <= budget:
        return answer
    content = answer.content[:budget]
    budget -= len(content)
    calls = []
    for call in answer.tool_calls:
        if budget <= 0:
            break
        calls.append(dataclasses.replace(call, arguments=call.arguments[:budget]))
        budget -= len(calls[-1].arguments)
    return dataclasses.replace(answer, content=content, tool_calls=tuple(calls), finish_reason="length")


def _pieces(text: str) -> list[str]:
    return [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


class _Completion:
    """One reply rendered in the two shapes the API has: a whole object, or a stream of chunks."""

    def __init__(self, answer: Answer, ident: str, model: str, prompt_tokens: int) -> None:
        self.answer = answer
        self._ident, self._created, self._model = ident, int(time.time()), model
        completion_tokens = math.ceil(_completion_chars(answer) / CHARS_PER_TOKEN)
        self.usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    def whole(self) -> dict[str, Any]:
        answer = self.answer
        content = answer.content if answer.content or not answer.tool_calls else None  # null beside tool calls
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if answer.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in answer.tool_calls
            ]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}
        return {**self._head("chat.completion"), "choices": [choice], "usage": self.usage}

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self._ident, "object": kind, "created": self._created, "model": self._model}

    def chunks(self, include_usage: bool) -> Iterator[tuple[dict[str, Any], bool]]:
        """Chunks in order, each with whether it carries a generated token (and so is paced by the rate)."""

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            extra = {"usage": None} if include_usage else {}
            return {**self._head("chat.completion.chunk"), "choices": [choice], **extra}

        yield chunk({"role": "assistant", "content": ""}), False
        for piece in _pieces(self.answer.content):
            yield chunk({"content": piece}), True
        for i, call in enumerate(self.answer.tool_calls):
            opening = {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            yield chunk({"tool_calls": [opening]}), False
            for piece in _pieces(call.arguments):
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}), True
        yield chunk({}, self.answer.finish_reason), False
        if include_usage:
            yield {**self._head("chat.completion.chunk"), "choices": [], "usage": self.usage}, False


def _peer_closed(sock: socket.socket) -> bool:
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and not sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as clients expect of a model server
    disable_nagle_algorithm = True  # each SSE chunk leaves at once; headers and body do not wait for an ACK
    server: _HTTPServer

    _ROUTES = {
        "/v1/models": ("GET", "_models"),
        "/health": ("GET", "_health"),
        "/v1/chat/completions": ("POST", "_chat"),
    }

    def setup(self) -> None:
        super().setup()
        self.server.owner._connections.add(self.connection)

    def finish(self) -> None:
        self.server.owner._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the client went away; nothing left to flush to

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log (``RequestRecord``) is the record of what happened."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        owner = self.server.owner
        path = urlsplit(self.path).path
        try:
            body = self._read_body()
        except ValueError:
            self.close_connection = True
            body = b""
        record: dict[str, Any] = {
            "seq": owner._next_seq(),
            "received_at": datetime.now(UTC).isoformat(),
            "method": method,
            "path": path,
            "request": _decode_body(body),
        }
        route = self._ROUTES.get(path)
        if owner.api_key is not None and not hmac.compare_digest(
                self.headers.get("Authorization", "").encode(), f"Bearer {owner.api_key}".encode()):
            # As an endpoint behind a key answers a client that lacks it; the header itself is never kept.
            self._json(record, 401, _error("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
        elif route is None:
            self._json(record, 404, _error(f"Invalid URL ({method} {path})", "invalid_request_error"))
        elif route[0] != method:
            self._json(record, 405, _error(f"Method {method} not allowed on {path}", "invalid_request_error"))
        else:
            getattr(self, route[1])(record)

    def _read_body(self) -> bytes:
        """The request body, by Content-Length or chunked transfer encoding (``ValueError`` if garbled)."""
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0:
                raise ValueError("negative Content-Length")
            return self.rfile.read(length)
        parts = []
        while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
            parts.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline().strip():
            pass  # trailers
        return b"".join(parts)

    def _json(self, record: dict[str, Any], status: int, payload: Any) -> None:
        self.server.owner._log(RequestRecord(**record, status=status, response=payload))
        self._send(status, "application/json", json.dumps(payload).encode())

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _models(self, record: dict[str, Any]) -> None:
        owner = self.server.owner
        model = {
            "id": owner.model_id,
            "object": "model",
            "created": owner._started,
            "owned_by": "fleet-harness",
            "max_model_len": owner.context_size,  # as vLLM reports it
            "meta": {"n_ctx_train": owner.context_size},  # as llama.cpp reports it
        }
        self._json(record, 200, {"object": "list", "data": [model]})

    def _health(self, record: dict[str, Any]) -> None:
        self._json(record, 200, {"status": "ok"})

    def _chat(self, record: dict[str, Any]) -> None:
        """Check the request as a real server would, then answer it from the script."""
        owner = self.server.owner
        request = record["request"]
        if not isinstance(request, dict):
            self._json(record, 400, _error("could not parse the JSON body as an object", "invalid_request_error"))
            return
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            problem = "'messages' must be a non-empty list"
            self._json(record, 400, _error(problem, "invalid_request_error", param="messages"))
            return
        prompt_tokens = count_tokens(json.dumps([messages, request.get("tools")], ensure_ascii=False))
        if prompt_tokens > owner.context_size:
            problem = f"This model's maximum context length is {owner.context_size} tokens; the messages have {prompt_tokens}."
            self._json(record, 400, _error(problem, "invalid_request_error", "context_length_exceeded", "messages"))
            return
        conversation = (self.headers.get(CONVERSATION_HEADER) or "").strip() or conversation_key(messages)
        record["conversation"] = conversation
        answer = owner._player.play(conversation, request)
        if answer is None:
            error = _error(NO_SCRIPT_SELECTS, "invalid_request_error", "no_script_selected", "messages")
            self._json(record, 400, error)
            return
        answer = _cut_to_limit(answer, _output_limit(request, owner.max_output_tokens))
        record |= {"turn": answer.turn, "source": answer.source, "script": answer.script}
        record["missing_values"] = list(answer.missing_values)
        self._play(record, request, answer, prompt_tokens)

    def _play(self, record: dict[str, Any], request: dict[str, Any], answer: Answer, prompt_tokens: int) -> None:
        """Hang, fail or reply as the step says. Logged as soon as decided, so a client that gives up
        during a delay or a hang still leaves a record."""
        owner, step = self.server.owner, answer.step
        if step.hang:
            owner._log(RequestRecord(**record, status=None))
            self._pause(math.inf)
        elif step.http_status is not None:
            body = step.error_body
            if body is None:
                body = json.dumps(_error("scripted server error", "server_error", step.http_status))
            response = _decode_body(body.encode())
            owner._log(RequestRecord(**record, status=step.http_status, response=response))
            content_type = "text/plain" if isinstance(response, str) else "application/json"
            if self._pause(step.delay):
                self._send(step.http_status, f"{content_type}; charset=utf-8", body.encode())
        else:
            completion = _Completion(answer, f"chatcmpl-scripted-{record['seq']}", owner.model_id, prompt_tokens)
            stream = request.get("stream") is True
            owner._log(RequestRecord(**record, status=200, stream=stream, response=completion.whole()))
            if not self._pause(step.delay):
                return
            if stream:
                options = request.get("stream_options")
                self._stream(completion, isinstance(options, dict) and options.get("include_usage") is True)
            else:
                self._reply(completion)

    def _reply(self, completion: _Completion) -> None:
        rate = completion.answer.step.tokens_per_second
        if rate and not self._pause(completion.usage["completion_tokens"] / rate):
            return
        self._send(200, "application/json", json.dumps(completion.whole()).encode())

    def _stream(self, completion: _Completion, include_usage: bool) -> None:
        rate = completion.answer.step.tokens_per_second
        self.close_connection = True  # unless the stream ends cleanly below
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            started, paced = time.monotonic(), 0
            for chunk, is_token in completion.chunks(include_usage):
                if is_token and rate:
                    paced += 1
                    if not self._pause(started + paced / rate - time.monotonic()):
                        return
                self._write_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self._write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = False
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up mid-stream, as a real one may

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _pause(self, seconds: float) -> bool:
        """Wait up to ``seconds``; False as soon as the client went away or the server is stopping."""
        stopping = self.server.owner._stopping
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if stopping.wait(min(left, _POLL)) or _peer_closed(self.connection):
                self.close_connection = True
                return False
        return not stopping.is_set()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], owner: ScriptedModelServer) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.owner = owner
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can stall for seconds on a bad resolver.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _named_scripts(source: Scripts) -> dict[str, Script]:
    """Name -> script for every script ``source`` gives, in order; paths are expanded and loaded."""
    if isinstance(source, Mapping):
        named = dict(source)
        for name, script in named.items():
            if not isinstance(script, Script):
                raise TypeError(f"script {name!r} is a {type(script).__name__}, not a Script")
        return named
    items = [source] if isinstance(source, (Script, str, os.PathLike)) else list(source)
    named, seen = {}, set()
    for i, item in enumerate(items):
        if isinstance(item, Script):
            named[f"scripts[{i}]"] = item
            continue
        for path in script_paths(item):
            if path.resolve() not in seen:
                seen.add(path.resolve())
                named[str(path)] = load_script(path)
    return named


class ScriptedModelServer:
    """An OpenAI-compatible model server that answers from a script, or a set of scripts, on a background
    thread.

    ``script`` (or, keyword-only, ``scripts``: give one of the two) is one ``Script``, a path (a script
    file, a directory of scripts, a glob pattern), a sequence of these, or name -> ``Script`` (as
    ``load_scripts`` returns). Each new conversation is played by the first script whose ``select`` holds
    for it, else by the first script without ``select``; when there is none it is answered 400. A single
    script without ``select`` answers every conversation, as a lone script always did.

    ``api_key`` (keyword-only) makes it an endpoint behind a key: a request without it is answered 401.
    ``model_id``, ``context_size`` and ``max_output_tokens`` default to the first script's, then to
    ``DEFAULT_*``. Every request is kept in ``requests`` and, with ``log_path``, appended there as JSONL.
    """

    def __init__(
        self,
        script: Scripts | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        model_id: str | None = None,
        context_size: int | None = None,
        max_output_tokens: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        *,
        scripts: Scripts | None = None,
        api_key: str | None = None,
    ) -> None:
        if (script is None) == (scripts is None):
            raise TypeError("give either script or scripts")
        named = _named_scripts(script if script is not None else scripts)  # type: ignore[arg-type]
        if not named:
            raise ValueError("no script given")
        self.scripts: dict[str, Script] = named
        """Name -> script, in the order they are tried for a new conversation."""
        self.script = next(iter(named.values()))
        """The first script, whose model id and limits the server takes unless given its own."""
        self.host = host
        self.model_id = model_id or self.script.model_id or DEFAULT_MODEL_ID
        self.context_size = context_size or self.script.context_size or DEFAULT_CONTEXT_SIZE
        self.max_output_tokens = max_output_tokens or self.script.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS
        self.log_path = Path(log_path) if log_path is not None else None
        self.api_key = api_key
        """When given, every request must carry ``Authorization: Bearer <api_key>``, else it is answered 401."""
        self._port = port
        self._player = ScriptSet(named)
        self._records: list[RequestRecord] = []
        self._log_lock = threading.Lock()
        self._seq = itertools.count(1)
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._started = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind, serve on a background thread, and return the bound port."""
        if self._httpd is not None:
            raise RuntimeError("the scripted model server is already started")
        self._httpd = _HTTPServer((self.host, self._port), self)
        self._port = int(self._httpd.server_address[1])
        self._started = int(time.time())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": _POLL}, name="scripted-model", daemon=True
        )
        self._thread.start()
        return self._port

    def stop(self) -> None:
        """Stop serving and drop open connections, hanging ones included. Safe to call twice."""
        if self._httpd is None or self._stopping.is_set():
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        for connection in list(self._connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the client
        assert self._thread is not None
        self._thread.join()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the scripted model server is not started")
        return self._port

    @property
    def url(self) -> str:
        """Base URL of the API, ending in ``/v1``, as an OpenAI client's ``base_url``."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/v1"

    @property
    def requests(self) -> list[RequestRecord]:
        """A copy of the request log, in order of answer."""
        with self._log_lock:
            return list(self._records)

    def reset(self) -> None:
        """Start every conversation over (e.g. between repetitions of the same prompt); each chooses
        its script again."""
        self._player.reset()

    def __enter__(self) -> ScriptedModelServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_seq(self) -> int:
        return next(self._seq)

    def _log(self, record: RequestRecord) -> None:
        with self._log_lock:
            self._records.append(record)
            if self.log_path is not None:
                with self.log_path.open("a", encoding="utf-8") as log:
                    log.write(record.model_dump_json() + "\n")


def serve(
    script_path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    host: str = "127.0.0.1",
    port: int = 0,
    model_id: str | None = None,
    log_path: str | None = None,
) -> None:
    """Serve in the foreground until SIGTERM or SIGINT; call from the main thread.

    ``script_path`` is one path or several, each a script file, a directory of scripts or a glob
    pattern (expanded by ``script_paths``); several scripts are served as a set (see
    ``ScriptedModelServer``). Prints one flushed line ``listening on URL`` first, from which a parent
    process reads the port. Raises ``ScriptError`` for a bad script, a directory or pattern without
    scripts, or no path at all, and ``OSError`` when the address cannot be bound.
    """
    paths = [script_path] if isinstance(script_path, (str, os.PathLike)) else list(script_path)
    if not paths:
        raise ScriptError("(no script)", "", "give at least one script file or directory")
    server = ScriptedModelServer(paths, host, port, model_id, log_path=log_path)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with server:
            print(f"listening on {server.url}", flush=True)
            while not stop.wait(_POLL):
                pass  # a timed wait lets the signal handler run on every platform
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
