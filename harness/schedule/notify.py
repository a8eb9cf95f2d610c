"""Send a scheduled sweep's summary: POST it as JSON to a webhook, and/or give it on stdin to a command.

A notification that fails (connection refused, a non-2xx answer, a command that exits non-zero or hangs) is
tried again after ``backoff_s``, doubled before each next try, ``retries`` times; every failure is logged, and
the last one too, but nothing here raises: a notification is never fatal to the sweep it tells of.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Callable
from urllib.parse import urlsplit

from harness.core.errors import one_line
from harness.schedule.config import Notify
from harness.schedule.summary import SweepSummary

__all__ = ["notify", "post_webhook", "run_command"]


MAX_ANSWER = 64 * 1024
"""The most of a webhook's answer read (its status is what counts; a receiver streaming without end is cut)."""


class _KeepSockets:
    """A urllib handler mixin recording each connection's socket, so a try that runs out of time can be cut off:
    urllib's own timeout is per socket operation, and a receiver trickling a byte at a time never trips it."""

    sockets: list

    def do_open(self, http_class, req, **kw):  # noqa: ANN001, ANN201 - urllib's own signature
        sockets = self.sockets

        class Recording(http_class):  # type: ignore[misc, valid-type]
            def connect(self) -> None:
                super().connect()
                sockets.append(self.sock)

        return super().do_open(Recording, req, **kw)  # type: ignore[misc]


def post_webhook(url: str, body: bytes, timeout_s: float) -> None:
    """POST ``body``; a non-2xx answer, or no whole answer within ``timeout_s`` in all, is an OSError."""
    sockets: list[socket.socket] = []

    class Http(_KeepSockets, urllib.request.HTTPHandler):
        pass

    class Https(_KeepSockets, urllib.request.HTTPSHandler):
        pass

    Http.sockets = Https.sockets = sockets
    opener = urllib.request.build_opener(Http, Https)
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "fleet-harness"})
    failed: list[BaseException] = []

    def send() -> None:
        try:
            with opener.open(req, timeout=timeout_s) as resp:  # noqa: S310 - the operator's own URL
                resp.read(MAX_ANSWER)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            failed.append(exc)

    t = threading.Thread(target=send, name="webhook", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        for sock in sockets:  # wakes the thread's read, which then ends
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        t.join(5)
        raise OSError(f"no whole answer in {timeout_s:g} s")
    if failed:
        exc = failed[0]
        if isinstance(exc, urllib.error.HTTPError):
            raise OSError(f"HTTP {exc.code} {exc.reason}") from None
        raise exc


def run_command(argv: list[str], body: bytes, timeout_s: float) -> None:
    """Run ``argv`` with ``body`` on stdin; non-zero, or not done within ``timeout_s``, is an OSError. It runs in
    a session of its own, so a command that hangs is ended with everything it started (a mail client's helper)."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        raise OSError(exc.strerror or str(exc)) from None
    try:
        _out, err = proc.communicate(body, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        raise OSError(f"did not finish in {timeout_s:g} s") from None
    if proc.returncode != 0:
        tail = err.decode("utf-8", errors="replace").strip().splitlines()[-1:] or [""]
        raise OSError(f"exited {proc.returncode}" + (f": {tail[0][:200]}" if tail[0] else ""))


def _redacted(url: str) -> str:
    u = urlsplit(url)
    # A webhook URL often carries its token in the path or query: log only where it goes.
    return f"{u.scheme}://{u.hostname}{f':{u.port}' if u.port else ''}/..."


def notify(config: Notify, summary: SweepSummary, log: Callable[[str], None],
           sleep: Callable[[float], None] = time.sleep) -> dict[str, bool]:
    """Send ``summary`` to each configured target; returns target -> delivered."""
    body = summary.model_dump_json().encode()
    targets: list[tuple[str, Callable[[], None]]] = []
    if config.webhook:
        targets.append((f"webhook {_redacted(config.webhook)}",
                        lambda: post_webhook(config.webhook, body, config.timeout_s)))
    if config.command:
        targets.append((f"command {config.command[0]}", lambda: run_command(config.command, body, config.timeout_s)))
    out = {}
    for what, send in targets:
        delay = config.backoff_s
        for attempt in range(1, config.retries + 2):
            try:
                send()
            except Exception as exc:  # noqa: BLE001 - any failure of one try is logged and tried again
                problem = one_line(str(exc) or type(exc).__name__)
                if attempt > config.retries:
                    log(f"schedule {summary.schedule}: notification to {what} failed {attempt} time(s), giving up: {problem}")
                    out[what] = False
                    break
                log(f"schedule {summary.schedule}: notification to {what} failed (try {attempt} of "
                    f"{config.retries + 1}): {problem}; trying again in {delay:g} s")
                sleep(delay)
                delay *= 2
            else:
                log(f"schedule {summary.schedule}: notified {what}" + (f" (try {attempt})" if attempt > 1 else ""))
                out[what] = True
                break
    return out
