"""Host queues that no worker consumes: said while it lasts, and given up on after ``--no-worker-timeout``.

On Redis an attempt waits on its host's queue (``fleet.<namespace>.host.<name>``) until a ``fleet worker``
takes it. With none consuming that queue (none started, one started with other ``--hosts``, another
namespace or another broker, one that died) the sweep would wait in silence for ever. The dispatcher hands
:class:`WorkerWatch` the hosts that have an attempt sent but not started, and the watch asks the workers
which queues they consume (Celery's control broadcast ``active_queues``, which takes its 1 s reply timeout)
only when one has waited ``GRACE_S`` without starting, then again at most every ``REPEAT_S`` while it lasts,
and once more when a host's timeout is due. A normal sweep, whose attempts start within a second, never
asks. A queue found without a worker gets a warning with the exact command that starts one, repeated every
``REPEAT_S``; with a timeout, a host whose queue stayed without a worker that long is handed back to the
dispatcher, which records its remaining cells as ``HARNESS_FAILURE(no_worker)``.

Only attempts not started are watched: a started attempt has a worker (or had one: a worker that died
mid-run is the launcher's heartbeat and Redis's redelivery's business, and a worker in warm shutdown
finishes its runs without consuming any more).
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

__all__ = ["GRACE_S", "REPEAT_S", "Waiting", "WorkerWatch", "consumed_queues", "start_command", "withdraw"]

GRACE_S = 5.0
"""How long an attempt may wait on its queue unstarted before the workers are asked: a worker takes one within
milliseconds, so only a queue without a free worker waits this long."""
REPEAT_S = 30.0
"""How often the warning is repeated (and the workers asked again) while a queue has no worker."""


@dataclass(frozen=True)
class Waiting:
    """A host's attempts sent to its queue and not started: since when the oldest waits, and how many."""

    since: float
    count: int


@dataclass
class WorkerWatch:
    ask: Callable[[], set[str] | None]
    """The queues the running workers consume, or None when they could not be asked (the broker is away)."""
    queue_for: Callable[[str], str]
    command_for: Callable[[str], str]
    """The command that starts a worker for a host, as the warning shows it."""
    on_warning: Callable[[str], None]
    timeout_s: float | None = None
    """``--no-worker-timeout``: give up on a host whose queue had no worker this long (None: wait for one)."""
    grace_s: float = GRACE_S
    repeat_s: float = REPEAT_S
    clock: Callable[[], float] = time.monotonic
    asked_at: float | None = field(default=None, init=False)
    _unserved_since: dict[str, float] = field(default_factory=dict, init=False)
    _warned_at: dict[str, float] = field(default_factory=dict, init=False)
    _answered: bool = field(default=False, init=False)
    _served: set[str] = field(default_factory=set, init=False)
    """Hosts the last answer found a worker for: asked about again only every ``repeat_s``."""

    def check(self, waiting: Mapping[str, Waiting]) -> list[str]:
        """Look at the hosts with attempts waiting; return those to give up on now (their timeout passed)."""
        now = self.clock()
        for host in list(self._unserved_since):
            if host not in waiting:  # nothing of it waits any more (started, recorded, given up)
                self._forget(host)
        due = {h: w for h, w in waiting.items() if now - w.since >= self.grace_s}
        if not due or not self._should_ask(now, due):
            return []
        served = self.ask()
        self.asked_at = self.clock()
        self._answered = served is not None
        if served is None:
            return []  # nothing learned: the broker is away, and the outage's own lines say so
        give_up = []
        for host, w in sorted(due.items()):
            queue = self.queue_for(host)
            if queue in served:
                if host in self._unserved_since:
                    self.on_warning(f"a worker consumes {queue} now: host {host}'s attempts go on")
                self._forget(host)
                self._served.add(host)
                continue
            self._served.discard(host)
            since = self._unserved_since.setdefault(host, self.asked_at)
            gone = self.asked_at - since
            if self.timeout_s is not None and gone >= self.timeout_s:
                give_up.append(host)
                continue
            last = self._warned_at.get(host)
            if last is None or self.asked_at - last >= self.repeat_s - 0.5:
                self._warned_at[host] = self.asked_at
                then = (f"its cells are given up as HARNESS_FAILURE(no_worker) in {self.timeout_s - gone:.0f} s "
                        f"(--no-worker-timeout {self.timeout_s:g})" if self.timeout_s is not None else
                        "the sweep waits for one (--no-worker-timeout S gives up after S seconds)")
                self.on_warning(f"no worker consumes {queue}: {w.count} attempt(s) of host {host} waiting for "
                                f"{now - w.since:.0f} s; start one with `{self.command_for(host)}`; {then}")
        return give_up

    def unserved_for(self, host: str) -> float:
        """How long the host's queue has been seen without a worker (0 when it was not)."""
        since = self._unserved_since.get(host)
        return 0.0 if since is None or self.asked_at is None else self.asked_at - since

    def _should_ask(self, now: float, due: Mapping[str, Waiting]) -> bool:
        if self.asked_at is None:
            return True
        since_ask = now - self.asked_at
        if since_ask >= self.repeat_s:
            return True
        # A host the last answer did not cover is asked about soon, not only at the next repeat (after a broadcast
        # that went unanswered, at the next repeat: the broker is likely away).
        if self._answered and since_ask >= self.grace_s and any(h not in self._served and h not in self._unserved_since for h in due):
            return True
        # A host's timeout is decided on a fresh answer, never on one from before it was due.
        if self.timeout_s is not None:
            for host in due:
                since = self._unserved_since.get(host)
                if since is not None and self.asked_at < since + self.timeout_s <= now:
                    return True
        return False

    def _forget(self, host: str) -> None:
        self._unserved_since.pop(host, None)
        self._warned_at.pop(host, None)


def consumed_queues(app, timeout_s: float = 1.0) -> set[str] | None:  # noqa: ANN001 - a Celery app
    """The queues the running workers consume, from their replies to one control broadcast; None when the
    broadcast itself failed."""
    try:
        with app.connection_for_write() as conn:
            # One try to connect: a broker that is away answers nothing, and the outage's own waits say so (the
            # broadcast's own retries would hold the dispatcher's loop for seconds).
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=2)
            replies = app.control.inspect(timeout=timeout_s, connection=conn).active_queues() or {}
    except Exception:  # noqa: BLE001 - kombu, redis and socket errors alike: nothing learned this time
        return None
    return {q["name"] for queues in replies.values() for q in (queues or []) if isinstance(q, dict) and "name" in q}


def start_command(host: str, inventory: str, namespace: str, broker_shown: str) -> str:
    """The command that starts a worker for ``host`` against this coordinator's broker and namespace (the
    broker's password, if any, shown as ``***``: put it back, or give it in FLEET_BROKER_URL)."""
    words = [f"FLEET_NAMESPACE={shlex.quote(namespace)}"] if namespace else []
    words += ["fleet", "worker", "--hosts", shlex.quote(host), "-i", shlex.quote(inventory),
              "--broker", shlex.quote(broker_shown)]
    return " ".join(words)


def withdraw(app, broker_url: str, queue: str, task_ids: set[str]) -> None:  # noqa: ANN001 - a Celery app
    """Take tasks given up on back: revoke them (a worker that started in the last second ends its run) and
    remove their messages from the host's Redis list, where a worker started tomorrow would find and run them
    (revokes live only in the memory of the workers running now)."""
    try:
        app.control.revoke(sorted(task_ids), terminate=True, signal="SIGTERM")
    except Exception:  # noqa: BLE001 - the broker may be away; the message removal below is the real withdrawal
        pass
    if not broker_url.startswith(("redis://", "rediss://", "unix://")):
        return
    import redis  # lazy: redis-py (about 100 ms), for a Redis broker only; `fleet status` loads this module

    client = redis.Redis.from_url(broker_url, socket_timeout=5, socket_connect_timeout=5, decode_responses=True)
    try:
        for entry in client.lrange(queue, 0, -1):
            raw = entry if isinstance(entry, str) else entry.decode("utf-8", "replace")
            try:
                task_id = json.loads(raw).get("headers", {}).get("id")
            except (ValueError, AttributeError):
                continue  # not a kombu message: not ours to touch
            if task_id in task_ids:
                client.lrem(queue, 1, raw)
    except redis.exceptions.RedisError:
        pass  # left queued: a later worker runs it, its result is never read and expires with the backend's
    finally:
        client.close()
