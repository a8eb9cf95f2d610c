"""Notifications against a real http.server on loopback and a real command: a failing one is retried with back-off
and logged, and never raises."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from harness.schedule.notify import notify
from harness.schedule.config import Notify
from harness.schedule.summary import SweepSummary, summarize


class Receiver:
    """A webhook endpoint answering the statuses in ``answers`` in turn (then 200), keeping each body."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = list(answers)
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.bodies.append({"status": outer.answers[0] if outer.answers else 200,
                                     "type": self.headers["Content-Type"], "json": json.loads(body)})
                self.send_response(outer.answers.pop(0) if outer.answers else 200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/secret-token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver([500, 500])
    yield r
    r.close()


SUMMARY = summarize(SweepSummary(event="finished", schedule="nightly", label="nightly", fired_at="2026-12-03T02:00:00+00:00",
                                 sweep="20261203-020000-nightly", status="finished", report="/runs/x/REPORT.md"))


def test_a_webhook_answering_500_twice_then_200_is_retried_with_back_off(receiver: Receiver) -> None:
    lines: list[str] = []
    waits: list[float] = []
    done = notify(Notify(webhook=receiver.url, retries=3, backoff_s=0.5), SUMMARY, lines.append, sleep=waits.append)
    assert list(done.values()) == [True]
    assert [b["status"] for b in receiver.bodies] == [500, 500, 200]
    assert receiver.bodies[-1]["type"] == "application/json"
    assert receiver.bodies[-1]["json"]["schema_version"] == 1 and receiver.bodies[-1]["json"]["sweep"] == SUMMARY.sweep
    assert waits == [0.5, 1.0]
    assert "failed (try 1 of 4): HTTP 500" in lines[0] and "trying again in 0.5 s" in lines[0]
    assert "notified webhook http://127.0.0.1:" in lines[2] and "(try 3)" in lines[2]
    assert not any("secret-token" in line for line in lines), lines  # the URL's token stays out of the log


def test_a_notification_that_keeps_failing_gives_up_without_raising(tmp_path: Path) -> None:
    lines: list[str] = []
    out = tmp_path / "got.json"
    script = "import sys; open(sys.argv[1], 'wb').write(sys.stdin.buffer.read())"
    done = notify(Notify(webhook="http://127.0.0.1:9/hook", command=[sys.executable, "-c", script, str(out)],
                         retries=1, backoff_s=0.01), SUMMARY, lines.append)
    assert list(done.values()) == [False, True]
    assert "giving up" in lines[1] and "failed 2 time(s)" in lines[1]
    got = json.loads(out.read_bytes())
    assert got["report"] == "/runs/x/REPORT.md" and got["text"].startswith("schedule nightly: sweep ")
    bad = notify(Notify(command=[sys.executable, "-c", "import sys; sys.exit('no mail server')"], retries=0),
                 SUMMARY, lines.append)
    assert list(bad.values()) == [False] and "exited 1: no mail server" in lines[-1]


class Trickler:
    """A webhook receiver that answers a header line every 0.2 s, for ever: each read is quick, so urllib's
    timeout (per socket operation) never trips."""

    def __init__(self) -> None:
        import socket
        import time

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.stop = threading.Event()

        def one(conn: socket.socket) -> None:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                while not self.stop.is_set():
                    conn.sendall(b"X-Slow: yes\r\n")
                    time.sleep(0.2)
            except OSError:
                pass
            finally:
                conn.close()

        def serve() -> None:
            while not self.stop.is_set():
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    return
                threading.Thread(target=one, args=(conn,), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def test_a_webhook_that_trickles_its_answer_is_cut_at_the_timeout() -> None:
    """A receiver that never finishes its answer hung the notification (and so the schedule's sweep thread, whose
    state stayed `running`, so every later fire was skipped)."""
    import time

    trickler = Trickler()
    try:
        lines: list[str] = []
        t0 = time.monotonic()
        done = notify(Notify(webhook=trickler.url, retries=1, backoff_s=0.01, timeout_s=1), SUMMARY, lines.append)
        took = time.monotonic() - t0
    finally:
        trickler.close()
    assert list(done.values()) == [False] and took < 10, (took, lines)
    assert "no whole answer in 1 s" in lines[0] and "giving up" in lines[-1], lines


def test_a_command_that_hangs_is_ended_with_what_it_started(tmp_path: Path) -> None:
    import os
    import time

    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    lines: list[str] = []
    done = notify(Notify(command=["sh", "-c", script], retries=0, timeout_s=1), SUMMARY, lines.append)
    assert list(done.values()) == [False] and "did not finish in 1 s" in lines[-1], lines
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        raise AssertionError("the command's own child was left running")
