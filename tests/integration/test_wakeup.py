"""The dispatcher is woken when a result is stored, not after its 0.2 s sleep: through the real Celery Redis
backend's publish, and through the embedded worker's task_postrun signal."""

from __future__ import annotations

import threading
import time

import pytest
from celery.signals import task_postrun

from harness.core.settings import Settings
from harness.coordinator.wakeup import RedisResults, TaskEnded, wakeup_for

pytestmark = pytest.mark.integration


def _later(seconds: float, do) -> threading.Thread:  # type: ignore[no-untyped-def]
    thread = threading.Thread(target=lambda: (time.sleep(seconds), do()), daemon=True)
    thread.start()
    return thread


def test_a_stored_result_wakes_the_wait_and_another_tasks_does_not(redis_server, namespace) -> None:
    from workers.app import app, configure

    configure(Settings.resolve({"broker_url": redis_server.url, "namespace": namespace}, {}))
    backend = app.backend
    wake = wakeup_for(False, redis_server.url, lambda t: backend.get_key_for_task(t).decode())
    assert isinstance(wake, RedisResults)
    mine, other = f"{namespace}-mine", f"{namespace}-other"
    try:
        # Another task's result (not ours) is no reason to look: the wait runs its whole timeout.
        _later(0.2, lambda: backend.store_result(other, {"n": 1}, "SUCCESS"))
        started = time.monotonic()
        wake.wait(1.5, [mine])
        assert time.monotonic() - started >= 1.4
        # Ours, stored the way a worker stores it: the wait ends long before its timeout.
        _later(0.3, lambda: backend.store_result(mine, {"n": 2}, "SUCCESS"))
        started = time.monotonic()
        wake.wait(20, [mine])
        assert time.monotonic() - started < 10
        assert app.AsyncResult(mine).state == "SUCCESS"
        # Nothing in flight: a plain sleep, no subscription left behind.
        started = time.monotonic()
        wake.wait(0.3, [])
        assert time.monotonic() - started >= 0.25
    finally:
        wake.close()


def test_the_embedded_workers_task_end_wakes_the_wait() -> None:
    wake = TaskEnded()
    wake.wait(0.01)  # whatever ended before is forgotten
    _later(0.3, lambda: task_postrun.send(sender=None, task_id="t", task=None))
    started = time.monotonic()
    wake.wait(20)
    assert time.monotonic() - started < 10


def test_the_result_that_woke_the_wait_is_taken_as_read(redis_server, namespace) -> None:
    """The message that wakes the dispatcher is the stored result: it is kept as read, and its state and result are not
    read from the backend again (a round trip between a host's two agents). Shown by a key gone before the read."""
    from harness.coordinator.dispatch import take_stored
    from workers.app import app, configure

    configure(Settings.resolve({"broker_url": redis_server.url, "namespace": namespace}, {}))
    backend = app.backend
    wake = wakeup_for(False, redis_server.url, lambda t: backend.get_key_for_task(t).decode())
    mine, other = f"{namespace}-taken", f"{namespace}-not-mine"
    try:
        wake.wait(0.05, [mine, other])  # subscribed
        backend.store_result(mine, {"STARTED": True}, "STARTED")
        backend.store_result(mine, {"n": 3}, "SUCCESS")
        backend.store_result(other, {"n": 4}, "STARTED")
        wake.wait(20, [mine, other])
        backend.client.delete(backend.get_key_for_task(mine))
        message = wake.stored(mine)
        assert message is not None and wake.stored(mine) is None  # handed over once
        result = app.AsyncResult(mine)
        take_stored(result, message)
        assert (result.state, result.result) == ("SUCCESS", {"n": 3})
        # A state that is not final is not kept: the next look reads the backend, as it would have.
        started = app.AsyncResult(other)
        take_stored(started, wake.stored(other) or b"")
        backend.store_result(other, {"n": 5}, "SUCCESS")
        assert (started.state, started.result) == ("SUCCESS", {"n": 5})
        # Nor is a message that does not decode, or that names another task.
        stray = app.AsyncResult(f"{namespace}-stray")
        take_stored(stray, b"\xff not json")
        take_stored(stray, message)
        assert stray.state == "PENDING"
    finally:
        wake.close()


def test_results_are_published_to_the_dispatchers_wait_alone(redis_server, namespace) -> None:
    """Celery's own result consumer subscribed to the channel of every task this process sent, on a connection nobody
    here reads: each result piled up in Redis's output buffer for it. Given the backend, the wait turns that off, and
    a result stored for a task sent here still wakes it."""
    import redis

    from workers.app import TASK_RUN_ATTEMPT, app, configure

    configure(Settings.resolve({"broker_url": redis_server.url, "namespace": namespace}, {}))
    backend = app.backend
    wake = wakeup_for(False, redis_server.url, lambda t: backend.get_key_for_task(t).decode(), backend)
    client = redis.Redis.from_url(redis_server.url)
    task_id = f"{namespace}-sent"
    channel = backend.get_key_for_task(task_id).decode()
    try:
        sent = app.send_task(TASK_RUN_ATTEMPT, args=[{"host": {"name": "nobody"}, "namespace": namespace}],
                             task_id=task_id, queue=f"{namespace}-nobody")
        assert client.execute_command("PUBSUB", "NUMSUB", channel)[1] == 0  # nobody listens but the wait, when it waits
        wake.wait(0.05, [task_id])
        assert client.execute_command("PUBSUB", "NUMSUB", channel)[1] == 1
        _later(0.2, lambda: backend.store_result(task_id, {"n": 6}, "SUCCESS"))
        started = time.monotonic()
        wake.wait(20, [task_id])
        assert time.monotonic() - started < 10
        assert wake.stored(task_id) is not None and sent.state == "SUCCESS"
    finally:
        wake.close()
        client.delete(f"{namespace}-nobody")
