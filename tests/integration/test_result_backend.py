"""The Redis result backend (workers/resultbackend.py) on a real redis-server: each state of a task is stored in one
command (Celery's own: a GET, then a SETEX and a PUBLISH), a SUCCESS stored is never overwritten, the expiries are
Celery's, and the coordinator's wake-up still hears each state on the task's channel."""

from __future__ import annotations

import uuid

import pytest
import redis
from celery import Celery
from celery.app.backends import by_url

from workers.app import app as fleet_app
from workers.resultbackend import RedisBackend

pytestmark = pytest.mark.integration


def _backend(url: str, **conf: object) -> RedisBackend:
    app = Celery("result-backend-test", set_as_current=False)
    settings: dict[str, object] = {"result_serializer": "json", "accept_content": ["json"],
                                   "result_accept_content": ["json"], "result_expires": 3600,
                                   "result_failure_expires": 60}
    app.conf.update({**settings, **conf})
    return RedisBackend(app=app, url=url)


def _round_trips(backend: RedisBackend, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of what the backend's client sends to Redis: one send per round trip (a pipeline is one too)."""
    sent = [0]
    connection_class = backend.client.connection_pool.connection_class
    real = connection_class.send_packed_command

    def counted(self, command, check_health=True):  # type: ignore[no-untyped-def]
        sent[0] += 1
        return real(self, command, check_health)

    monkeypatch.setattr(connection_class, "send_packed_command", counted)
    return sent


def test_the_fleet_app_stores_results_with_this_backend() -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://127.0.0.1:6380/0"):
        assert by_url(url, fleet_app.loader)[0] is RedisBackend


def test_a_state_is_one_round_trip_and_a_success_is_never_overwritten(redis_server,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend(redis_server.url)
    client = redis.Redis.from_url(redis_server.url)
    task = f"t-{uuid.uuid4().hex}"
    key = backend.get_key_for_task(task)
    backend.store_result(f"warm-{task}", None, "STARTED")  # the connection made and the script loaded once
    sent = _round_trips(backend, monkeypatch)
    backend.store_result(task, {"pid": 1, "hostname": "w"}, "STARTED")
    backend.store_result(task, {"answer": 42}, "SUCCESS")
    assert sent[0] == 2  # one each; Celery's own: a GET, then a SETEX and a PUBLISH pipelined
    assert 3500 < client.ttl(key) <= 3600
    for late in ("STARTED", "FAILURE", "RETRY"):
        backend.store_result(task, {"late": late}, late)  # a redelivered copy of the task, on another worker
        stored = backend.decode_result(client.get(key))
        assert (stored["status"], stored["result"]) == ("SUCCESS", {"answer": 42})
    failed = f"f-{uuid.uuid4().hex}"
    backend.store_result(failed, {"exc_type": "ValueError", "exc_message": ["no"], "exc_module": "builtins"}, "FAILURE")
    assert 0 < client.ttl(backend.get_key_for_task(failed)) <= 60  # result_failure_expires


def test_a_progress_state_never_replaces_a_final_one(redis_server) -> None:
    """The attempt task stores STARTED beside its work (workers/tasks.py): one on its way when the task was revoked or
    failed must not make it look running again, or the coordinator would wait for a result that never comes."""
    backend = _backend(redis_server.url)
    client = redis.Redis.from_url(redis_server.url)
    for final in ("REVOKED", "FAILURE"):
        task = f"t-{uuid.uuid4().hex}"
        error = {"exc_type": "TaskRevokedError", "exc_message": ["revoked"], "exc_module": "celery.exceptions"}
        backend.store_result(task, error, final)
        for late in ("STARTED", "RETRY"):
            backend.store_result(task, {"pid": 1, "hostname": "w"}, late)
            assert backend.decode_result(client.get(backend.get_key_for_task(task)))["status"] == final, (final, late)
    # A final state still replaces a progress state, and another final state (Celery's own rule: only SUCCESS stays).
    task = f"t-{uuid.uuid4().hex}"
    backend.store_result(task, {"pid": 1, "hostname": "w"}, "STARTED")
    backend.store_result(task, {"exc_type": "ValueError", "exc_message": ["no"], "exc_module": "builtins"}, "FAILURE")
    backend.store_result(task, {"answer": 1}, "SUCCESS")
    assert backend.decode_result(client.get(backend.get_key_for_task(task)))["status"] == "SUCCESS"


def test_no_expiry_is_kept_for_ever(redis_server) -> None:
    backend = _backend(redis_server.url, result_expires=None)
    client = redis.Redis.from_url(redis_server.url)
    task = f"t-{uuid.uuid4().hex}"
    backend.store_result(task, 7, "SUCCESS")
    assert backend.decode_result(client.get(backend.get_key_for_task(task)))["result"] == 7
    assert client.ttl(backend.get_key_for_task(task)) == -1


def test_a_stored_state_the_script_does_not_read_is_left_to_celerys_own_path(redis_server,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A SUCCESS stored compressed (a worker with result_compression), or one too large to decode inside Redis, is not
    overwritten by a late state: the script writes nothing and Celery's own check decides. What neither can read
    fails as Celery's own path always did."""
    from kombu.exceptions import DecodeError

    from workers.resultbackend import READ_AT_MOST

    client = redis.Redis.from_url(redis_server.url)
    compressing = _backend(redis_server.url, result_compression="zlib")
    backend = _backend(redis_server.url)
    packed = f"t-{uuid.uuid4().hex}"
    compressing.store_result(packed, {"answer": 42}, "SUCCESS")
    backend.store_result(packed, None, "STARTED")
    assert backend.get_task_meta(packed)["status"] == "SUCCESS"
    large = f"t-{uuid.uuid4().hex}"
    backend.store_result(large, "x" * (READ_AT_MOST + 1), "SUCCESS")
    sent = _round_trips(backend, monkeypatch)
    backend.store_result(large, None, "STARTED")
    assert sent[0] == 2  # the script, which read and wrote nothing, then Celery's GET, which finds the SUCCESS
    stored = backend.decode_result(client.get(backend.get_key_for_task(large)))
    assert stored["status"] == "SUCCESS" and len(stored["result"]) == READ_AT_MOST + 1
    for junk in (b"\x80 not json", b"[1, 2]", b'{"result": 1}'):
        task = f"t-{uuid.uuid4().hex}"
        client.set(backend.get_key_for_task(task), junk)
        with pytest.raises((DecodeError, TypeError, KeyError)):
            backend.store_result(task, 7, "SUCCESS")
        assert client.get(backend.get_key_for_task(task)) == junk


def test_each_state_is_published_on_the_tasks_channel(redis_server) -> None:
    """The coordinator learns of a result by the message on the task's key (harness/coordinator/wakeup.py)."""
    backend = _backend(redis_server.url)
    client = redis.Redis.from_url(redis_server.url)
    task = f"t-{uuid.uuid4().hex}"
    key = backend.get_key_for_task(task)
    sub = client.pubsub(ignore_subscribe_messages=True)
    sub.subscribe(key)
    sub.get_message(timeout=1)
    backend.store_result(task, None, "STARTED")
    backend.store_result(task, {"answer": 42}, "SUCCESS")
    backend.store_result(task, None, "STARTED")  # not stored: not published either
    heard = []
    while (message := sub.get_message(timeout=1)) is not None:
        heard.append(backend.decode_result(message["data"])["status"])
    assert heard == ["STARTED", "SUCCESS"]
    sub.close()


def test_another_serializer_takes_celerys_own_path(redis_server, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend(redis_server.url, result_serializer="pickle", accept_content=["pickle", "json"],
                       result_accept_content=["pickle", "json"])
    task = f"t-{uuid.uuid4().hex}"
    backend.store_result(f"warm-{task}", None, "STARTED")
    sent = _round_trips(backend, monkeypatch)
    backend.store_result(task, {1, 2}, "SUCCESS")
    assert sent[0] == 2  # Celery's GET, then its pipeline
    assert backend.get_task_meta(task)["result"] == {1, 2}


def test_a_restarted_redis_that_lost_the_script_still_stores(tmp_path) -> None:
    """Redis restarted (its script cache empty, its data back from the append-only file): the next store sends the
    script again instead of failing on NOSCRIPT, and a SUCCESS stored before the restart is still never
    overwritten."""
    from tests.integration.fleetkit import RedisServer

    server = RedisServer(tmp_path / "redis", persistent=True)
    server.start()
    try:
        backend = _backend(server.url)
        done, task = f"d-{uuid.uuid4().hex}", f"t-{uuid.uuid4().hex}"
        backend.store_result(done, {"answer": 42}, "SUCCESS")
        server.kill()
        server.start()
        client = redis.Redis.from_url(server.url)
        assert client.script_exists(backend._store_script.sha) == [False]
        backend.store_result(task, None, "STARTED")
        backend.store_result(done, None, "STARTED")
        assert backend.decode_result(client.get(backend.get_key_for_task(task)))["status"] == "STARTED"
        assert backend.decode_result(client.get(backend.get_key_for_task(done)))["status"] == "SUCCESS"
    finally:
        server.stop()


def test_sending_a_task_subscribes_nobody_to_its_result(redis_server) -> None:
    """Celery's backend subscribed the sender to each sent task's result channel (for AsyncResult.get, which the
    coordinator never calls): a SUBSCRIBE per attempt sent, and Redis pushed every result onto a connection nobody
    read. The coordinator hears results on its own subscription (harness.coordinator.wakeup) and reads them with GET."""
    import threading
    import time

    app = Celery("send-test", set_as_current=False)
    app.loader.override_backends = {**app.loader.override_backends, "redis": "workers.resultbackend:RedisBackend"}
    app.conf.update(broker_url=redis_server.url, result_backend=redis_server.url, task_serializer="json",
                    accept_content=["json"], result_accept_content=["json"])
    assert isinstance(app.backend, RedisBackend)
    client = redis.Redis.from_url(redis_server.url)
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    try:
        sent = [app.send_task("fleet.nothing", args=[i], queue=queue) for i in range(3)]
        time.sleep(0.3)  # a SUBSCRIBE goes out without waiting for Redis's answer: give it time to land
        channels = [app.backend.get_key_for_task(r.id) for r in sent]
        assert client.pubsub_numsub(*channels) == [(c, 0) for c in channels]
        assert client.llen(queue) == 3  # the tasks did go out
        # Whoever does wait on a result (AsyncResult.get) is subscribed then, and still gets it: one stored before the
        # wait (read at once), and one stored while it waits (heard on the channel).
        app.backend.store_result(sent[0].id, {"n": 0}, "SUCCESS")
        assert sent[0].get(timeout=5) == {"n": 0}
        later = threading.Timer(0.5, lambda: app.backend.store_result(sent[1].id, {"n": 1}, "SUCCESS"))
        later.start()
        assert sent[1].get(timeout=5) == {"n": 1}
    finally:
        client.delete(queue)
        app.close()
