"""How the coordinator waits between looks at the attempts in flight: woken as soon as a result is stored.

The dispatcher reads every in-flight attempt's state, then waits before it reads again. A fixed 0.2 s sleep
there was, on average, 0.1 s added to every attempt and to every gap between two agents on a host. Each wait
below still ends after its timeout (the dispatcher also retries, watches workers and dispatches on that
beat), but ends early when a result was stored:

- the embedded default: its worker runs in this process, and Celery's ``task_postrun`` signal (sent after the
  result is stored) sets an event;
- a Redis result backend: Celery publishes each stored result on the channel named by its key
  (``celery-task-meta-ID``); the dispatcher subscribes to the channels of its own attempts in flight (not to a
  pattern: a message carries the whole result, and another fleet's would be read for nothing). A connection
  error falls back to sleeping: the dispatcher's own reads notice an outage and say so (harness/coordinator/outage.py).
  The message is the stored result itself: ``stored`` hands it to the dispatcher, which takes it as read
  (``harness.coordinator.dispatch.take_stored``) instead of reading the key again, a round trip on the path between a
  host's two agents.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, Protocol

from celery.signals import task_postrun

from harness.core.settings import is_redis_url

__all__ = ["Wakeup", "Sleep", "TaskEnded", "RedisResults", "wakeup_for"]


class Wakeup(Protocol):
    def wait(self, timeout: float, task_ids: Iterable[str] = ()) -> None:
        """Wait up to ``timeout`` seconds, less if one of ``task_ids`` (the attempts in flight) got its result."""

    def stored(self, task_id: str) -> bytes | None:
        """The last message the backend published for ``task_id`` while this waited (the result as it was stored),
        once; None when there is none."""

    def close(self) -> None: ...


class Sleep:
    """No way to hear of a result: sleep the whole timeout."""

    def wait(self, timeout: float, task_ids: Iterable[str] = ()) -> None:
        time.sleep(timeout)

    def stored(self, task_id: str) -> bytes | None:
        return None

    def close(self) -> None:
        pass


_ended = threading.Event()


def _on_task_postrun(**_: object) -> None:
    _ended.set()


task_postrun.connect(_on_task_postrun, weak=False)


class TaskEnded:
    """The embedded worker shares this process: wake when any of its tasks ended (its result already stored)."""

    def wait(self, timeout: float, task_ids: Iterable[str] = ()) -> None:
        if _ended.wait(timeout):
            _ended.clear()

    def stored(self, task_id: str) -> bytes | None:
        return None

    def close(self) -> None:
        pass


class RedisResults:
    """Subscriptions to the result channels of the attempts in flight, on the Redis result backend."""

    def __init__(self, url: str, channel_for: Callable[[str], str]) -> None:
        import redis  # lazy: redis-py (about 100 ms), for a Redis backend only; `fleet status` loads this module

        self._client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
        self._channel_for = channel_for
        self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        self._subscribed: set[str] = set()
        self._messages: dict[str, bytes] = {}

    def wait(self, timeout: float, task_ids: Iterable[str] = ()) -> None:
        end = time.monotonic() + timeout
        try:
            wanted = {self._channel_for(t) for t in task_ids}
            if wanted - self._subscribed:
                self._pubsub.subscribe(*(wanted - self._subscribed))
            if self._subscribed - wanted:
                self._pubsub.unsubscribe(*(self._subscribed - wanted))
                for channel in self._subscribed - wanted:
                    self._messages.pop(channel, None)
            self._subscribed = wanted
            if not wanted:
                time.sleep(timeout)
                return
            while (left := end - time.monotonic()) > 0:
                # None after the timeout, or at once for a (un)subscription's own confirmation: then wait on.
                if self._keep(self._pubsub.get_message(timeout=left)):
                    while self._keep(self._pubsub.get_message(timeout=0)):
                        pass  # several results at once: one look at them all
                    return
        except Exception:  # noqa: BLE001 - Redis away or the subscription broken: wait as before, try again later
            self._reset()
            left = end - time.monotonic()
            if left > 0:
                time.sleep(left)

    def _keep(self, message: dict | None) -> bool:
        if message is None:
            return False
        channel, data = message.get("channel"), message.get("data")
        if isinstance(channel, bytes):
            channel = channel.decode("utf-8", "replace")
        if isinstance(channel, str) and channel in self._subscribed and isinstance(data, bytes):
            self._messages[channel] = data  # a later state of the same task replaces an earlier one (STARTED)
        return True

    def stored(self, task_id: str) -> bytes | None:
        return self._messages.pop(self._channel_for(task_id), None)

    def _reset(self) -> None:
        self._subscribed = set()
        self._messages = {}
        try:
            self._pubsub.close()
        except Exception:  # noqa: BLE001 - already broken
            pass
        self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)

    def close(self) -> None:
        try:
            self._pubsub.close()
            self._client.close()
        except Exception:  # noqa: BLE001 - closing a connection that is gone
            pass


def _subscribe_nothing(producer: object, task_id: str) -> None:
    return None


def wakeup_for(embedded: bool, backend_url: str, channel_for: Callable[[str], str], backend: object = None) -> Wakeup:
    """``channel_for``: a task id's result key, where Celery publishes its result (``backend.get_key_for_task``).

    ``backend``: the app's result backend, when this process sends the tasks it waits for. On Redis, Celery's own
    result consumer subscribes to each sent task's channel (for ``AsyncResult.get()``), on a connection nobody here
    reads: every result was published to it as well and piled up in Redis's output buffer for that connection, in
    Redis's memory, until Redis dropped the connection at its limit, and each send and forget cost a SUBSCRIBE and an
    UNSUBSCRIBE more. RedisResults waits for the results instead, so the backend is told not to subscribe on send."""
    if embedded:
        return TaskEnded()
    if is_redis_url(backend_url):
        if backend is not None:
            backend.on_task_call = _subscribe_nothing  # type: ignore[attr-defined]  # Celery's hook, called on every send
        return RedisResults(backend_url, channel_for)
    return Sleep()
