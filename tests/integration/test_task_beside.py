"""The attempt task's two Redis round trips that need not hold up a host (workers/tasks.py), on a real redis-server:
STARTED is stored once the slot is held, beside the attempt's start (Celery's track_started stored it before the task
began), yet always before the task ends; the lease is released when the agent ended (``on_host_free``), else beside
the result's store when the attempt ended normally, at once when the task raised; and a worker waiting for that slot
takes it within milliseconds."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
import redis

import workers.app
import workers.tasks
from harness.core.records import AttemptResult, utc_now
from harness.core.settings import Settings
from workers.slots import RedisSlots
from tests.workers.test_worker_settings import _request

pytestmark = pytest.mark.integration


@pytest.fixture
def configured(redis_server, tmp_path: Path):  # type: ignore[no-untyped-def]
    """This process's app and tasks pointed at the test's Redis, under a namespace of its own; put back after."""
    conf = {k: workers.app.app.conf.get(k) for k in ("broker_url", "result_backend", "broker_transport_options",
                                                     "result_backend_transport_options", "broker_connection_max_retries",
                                                     "result_backend_always_retry", "result_backend_max_retries")}
    before = workers.app._settings
    namespace = f"t{uuid.uuid4().hex[:10]}"
    settings = Settings.resolve({"runs": tmp_path / "runs", "broker_url": redis_server.url}, {"FLEET_NAMESPACE": namespace})
    workers.app.configure(settings, worker=True)
    yield settings
    workers.app.app.conf.update(conf)
    workers.app._settings = before
    workers.app.app._backend_cache = None
    vars(workers.app.app._local).pop("backend", None)


def _finished(transport, req, adapter, *, timing, worker, slot, on_host_free=None):  # type: ignore[no-untyped-def]
    now = utc_now()
    return AttemptResult(sweep_id=req.sweep_id, cell_id=req.cell.id, attempt=1, status="finished", host="one",
                         agent="echo", item="01-a", started_at=now, ended_at=now)


def _state(settings: Settings, task_id: str) -> str:
    meta = workers.app.app.backend.get_task_meta(task_id)
    return str(meta["status"])


def test_started_is_stored_beside_the_slots_lease_and_before_the_task_ends(
        configured: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = workers.app.app.backend
    leased = threading.Event()
    seen: dict[str, bool] = {}
    real_store, real_acquire = type(backend).store_result, RedisSlots.try_acquire

    def store(self, task_id, result, state, *args, **kwargs):  # type: ignore[no-untyped-def]
        if state == "STARTED":
            # Stored before the task began, this would wait out its 5 s: the lease is taken after it.
            seen["leased while storing STARTED"] = leased.wait(5)
        return real_store(self, task_id, result, state, *args, **kwargs)

    def acquire(self, host, slots):  # type: ignore[no-untyped-def]
        lease = real_acquire(self, host, slots)
        leased.set()
        return lease

    monkeypatch.setattr(type(backend), "store_result", store)
    monkeypatch.setattr(RedisSlots, "try_acquire", acquire)
    monkeypatch.setattr(workers.tasks, "run_attempt", _finished)
    monkeypatch.setattr(workers.tasks, "_transport", lambda host: None)
    task_id = f"beside-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    out = workers.tasks.run_attempt_task.apply(args=[_request(tmp_path)], task_id=task_id).get()
    assert out["status"] == "finished"
    assert seen == {"leased while storing STARTED": True}
    assert time.monotonic() - start < 4
    # Stored before the task returned: never after its final state, which its return is followed by.
    assert _state(configured, task_id) == "STARTED"


def test_the_lease_goes_beside_the_result_after_a_normal_end_and_at_once_when_the_task_raises(
        configured: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slots = workers.tasks.slots_backend(configured)
    assert isinstance(slots, RedisSlots)
    client = redis.Redis.from_url(configured.slots_redis)
    key = slots.key("one")
    monkeypatch.setattr(workers.tasks, "_transport", lambda host: None)
    monkeypatch.setattr(workers.tasks, "run_attempt", _finished)
    workers.tasks.run_attempt_task.apply(args=[_request(tmp_path)], task_id=f"ok-{uuid.uuid4().hex[:8]}").get()
    end = time.monotonic() + 5
    while client.zcard(key) and time.monotonic() < end:
        time.sleep(0.01)
    assert client.zcard(key) == 0  # released by the thread beside the result's store

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        assert client.zcard(key) == 1  # the slot is held while the attempt runs
        raise RuntimeError("the lifecycle broke")

    monkeypatch.setattr(workers.tasks, "run_attempt", broken)
    # The thread beside is kept busy, so a release left to it would still be pending when the task has raised.
    busy = threading.Event()
    workers.tasks._beside().submit(busy.wait, 5)
    try:
        with pytest.raises(RuntimeError, match="lifecycle broke"):
            workers.tasks.run_attempt_task.apply(args=[_request(tmp_path)], task_id=f"bad-{uuid.uuid4().hex[:8]}",
                                                 throw=True)
        assert client.zcard(key) == 0  # released before the task raised, not by the busy thread
    finally:
        busy.set()


def test_a_slot_released_while_a_worker_waits_for_it_is_taken_within_milliseconds(configured: Settings) -> None:
    slots = workers.tasks.slots_backend(configured)
    held = slots.try_acquire("one", 1)
    assert held is not None
    threading.Timer(0.05, held.release).start()
    start = time.monotonic()
    lease = slots.acquire("one", 1, timeout=10, poll=2.0)
    took = time.monotonic() - start
    assert lease is not None
    lease.release()
    # Asked again after 5 ms, then twice as long each time: not a whole poll (2 s here) after the release.
    assert took < 1.0, took


def test_a_task_stopped_while_it_waits_for_started_releases_its_slot_and_never_stores_started(
        configured: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A revoke's SIGTERM (SystemExit in the task, workers/tasks.py) may come while the task waits for its STARTED
    store: the slot is given back at once, and a STARTED still waiting for the thread is never stored."""
    slots = workers.tasks.slots_backend(configured)
    client = redis.Redis.from_url(configured.slots_redis)
    key = slots.key("one")  # type: ignore[attr-defined]
    monkeypatch.setattr(workers.tasks, "_transport", lambda host: None)
    monkeypatch.setattr(workers.tasks, "run_attempt", _finished)

    def terminated(started):  # type: ignore[no-untyped-def]
        raise SystemExit("terminated by signal 15")

    monkeypatch.setattr(workers.tasks, "_settled", terminated)
    busy = threading.Event()
    workers.tasks._beside().submit(busy.wait, 5)  # STARTED waits behind this: not on its way yet
    task_id = f"term-{uuid.uuid4().hex[:8]}"
    try:
        with pytest.raises(SystemExit):
            workers.tasks.run_attempt_task.apply(args=[_request(tmp_path)], task_id=task_id, throw=True)
        assert client.zcard(key) == 0  # given back at once, not left to the thread nor to the lease's expiry
    finally:
        busy.set()
    workers.tasks._beside().submit(lambda: None).result(5)  # the thread has done all it was given
    assert _state(configured, task_id) == "PENDING"  # no STARTED was stored for the stopped task


def test_the_slot_is_given_back_when_the_agent_ended_before_the_result_is_collected(
        configured: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_attempt calls ``on_host_free`` once the agent ended and its workspace is packed: the task's lease is given
    back then, at once, while the attempt is still collected; the release after the task finds nothing to do."""
    slots = workers.tasks.slots_backend(configured)
    client = redis.Redis.from_url(configured.slots_redis)
    key = slots.key("one")  # type: ignore[attr-defined]
    monkeypatch.setattr(workers.tasks, "_transport", lambda host: None)
    held: list[int] = []

    def run(transport, req, adapter, *, timing, worker, slot, on_host_free=None):  # type: ignore[no-untyped-def]
        held.append(client.zcard(key))
        on_host_free()
        held.append(client.zcard(key))  # the result is still to be collected here
        return _finished(transport, req, adapter, timing=timing, worker=worker, slot=slot)

    monkeypatch.setattr(workers.tasks, "run_attempt", run)
    out = workers.tasks.run_attempt_task.apply(args=[_request(tmp_path)], task_id=f"free-{uuid.uuid4().hex[:8]}").get()
    assert out["status"] == "finished"
    assert held == [1, 0], held
    assert client.llen(slots.free_key(key)) == 1  # type: ignore[attr-defined]  # one word for a waiter
