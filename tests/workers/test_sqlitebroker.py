"""The embedded broker's transport: polled every 0.1 s, no single wait for a message longer than 0.2 s, and woken at
once by a message put on a queue in the same process. A real kombu connection on a SQLite file."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Queue

from workers import sqlitebroker


def _connection(tmp_path: Path) -> Connection:
    sqlitebroker.register()
    return Connection(f"{sqlitebroker.SCHEME}+sqlite:///{tmp_path / 'queue.sqlite'}")


def test_a_wait_for_a_message_is_cut_to_the_loops_bound(tmp_path: Path) -> None:
    """Celery's loop for a polled transport asks for 2 s and only then sees that the worker is to stop: every embedded
    sweep's end waited out the rest of it (a one-cell sweep took 5.1 s, 1.5 s with the bound)."""
    assert sqlitebroker.Transport.polling_interval == sqlitebroker.POLLING_INTERVAL_S == 0.1
    assert sqlitebroker.DRAIN_MAX_S <= 0.2
    queue = Queue("q", Exchange("q"), "q")
    with _connection(tmp_path) as conn:
        with conn.Consumer(queue, callbacks=[lambda body, message: message.ack()]):
            t0 = time.monotonic()
            with pytest.raises(socket.timeout):
                conn.drain_events(timeout=2.0)
            took = time.monotonic() - t0
    assert took < 1.0, f"a wait asked for 2 s lasted {took:.2f} s, past the loop's bound"


def test_a_message_put_in_this_process_wakes_the_wait_at_once(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded default's coordinator and worker share a process: a host's next attempt, sent there, is taken at
    once instead of after the rest of a poll interval (here made 30 s, so only the wake can deliver it in time)."""
    monkeypatch.setattr(sqlitebroker.Transport, "polling_interval", 30.0)
    monkeypatch.setattr(sqlitebroker, "DRAIN_MAX_S", 60.0)
    queue = Queue("q", Exchange("q"), "q")
    got: list[object] = []
    with _connection(tmp_path) as conn, _connection(tmp_path) as sender:
        sender.Producer().publish({"n": 1}, exchange=queue.exchange, routing_key="q", declare=[queue])
        with conn.Consumer(queue, callbacks=[lambda body, message: (got.append(body), message.ack())]):
            conn.drain_events(timeout=5)  # the first message is there already
            waiting = threading.Thread(target=lambda: conn.drain_events(timeout=50), daemon=True)
            t0 = time.monotonic()
            waiting.start()
            time.sleep(0.3)  # the consumer has looked, found nothing, and sleeps
            sender.Producer().publish({"n": 2}, exchange=queue.exchange, routing_key="q")
            waiting.join(20)
            took = time.monotonic() - t0
    assert got == [{"n": 1}, {"n": 2}] and not waiting.is_alive()
    assert took < 10, f"the message put in this process was taken after {took:.1f} s: the wait slept its interval out"


def test_a_message_the_full_disk_cannot_take_back_is_not_dumped_on_stderr(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A worker stopping with a message it took and had not finished puts it back on the queue; when the queue's disk
    is full that fails, and kombu pickled the message into a file under /tmp with an 'EMERGENCY DUMP STATE' error
    on stderr, after the coordinator's one line about the disk. The sweep's journal holds the attempt as dispatched
    (resume sends it again), so the failure goes to the fleet log only. A real full tmpfs under the queue file."""
    from tests.integration.fleetkit import tmpfs

    queue = Queue("q", Exchange("q"), "q")
    with tmpfs(tmp_path / "disk", "1m") as disk:
        sqlitebroker.register()
        with Connection(f"{sqlitebroker.SCHEME}+sqlite:///{disk / 'queue.sqlite'}") as conn:
            conn.Producer().publish({"n": 1}, exchange=queue.exchange, routing_key="q", declare=[queue],
                                    headers={"id": "task-1"})
            channel = conn.channel()
            taken = queue.bind(channel).get(no_ack=False)  # taken, never acked
            assert taken is not None and taken.payload == {"n": 1}
            with open(disk / "filler", "wb") as filler:
                with pytest.raises(OSError):
                    while True:
                        filler.write(b"\0" * 65536)
                        filler.flush()
            caplog.set_level(logging.INFO)
            fleet_log = logging.getLogger("fleet")
            fleet_log.addHandler(caplog.handler)  # heard even where a CLI test in this process stopped propagation
            try:
                channel.close()  # the worker's stop: kombu restores what it took
            finally:
                fleet_log.removeHandler(caplog.handler)
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not errors, [r.getMessage() for r in errors]
    (said,) = {r.getMessage() for r in caplog.records if r.name == "fleet"}
    assert said.startswith("the embedded queue could not take back task task-1: "), said
