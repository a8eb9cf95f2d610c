"""Riding out an outage of the queue: a Redis broker or result backend that went away for a while.

A Redis that restarts, fails over or loses its network for a few seconds must not end a sweep of hours.
The coordinator's calls to the queue (reading a result, sending a task) go through :class:`Outage`: on a
connection error it waits with back-off (0.5 s doubling to 5 s) and calls again, says so in one line per
wait ("broker unreachable since 12 s, retrying in 2 s") and once more when the queue answers again. Past
its bound (``FLEET_BROKER_OUTAGE_S``) it raises :class:`~harness.core.errors.BrokerOutage`; the dispatcher then
leaves the attempts in flight ``dispatched`` for ``fleet resume`` (a result a worker stores later is taken
then) and the sweep ``interrupted``.

Only connection errors are waited out: a backend that answers wrongly, or a full disk under the embedded
SQLite queue, is an error at once (nothing comes back by waiting on it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import kombu.exceptions

from harness.core.errors import BrokerOutage

__all__ = ["Outage", "is_outage"]

T = TypeVar("T")


def _outage_types() -> tuple[type[BaseException], ...]:
    import redis.exceptions  # lazy: redis-py (about 100 ms), once an error is seen; `fleet status` loads this module

    # redis-py's ConnectionError covers BusyLoadingError (a restarted Redis still reading its AOF); kombu's
    # OperationalError is what send_task raises once its own publish retries gave up.
    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, kombu.exceptions.OperationalError,
            ConnectionError, TimeoutError)


def is_outage(exc: BaseException) -> bool:
    """True for an error that says the queue cannot be reached now, not that it answered wrongly."""
    if isinstance(exc, _outage_types()):
        return True
    # Celery wraps a backend error it gave up retrying; look at what it wraps.
    cause = exc.__cause__ or exc.__context__
    return cause is not None and cause is not exc and isinstance(cause, _outage_types())


@dataclass
class Outage:
    """The coordinator's side of an outage: one per dispatcher (all its calls go to the same queue)."""

    limit_s: float = 300.0
    """How long the queue may stay unreachable; 0 turns waiting off (the embedded SQLite queue)."""
    where: str = "the broker"
    """What is unreachable, for the lines: "the broker at redis://host:6379/0"."""
    on_notice: Callable[[str], None] = lambda text: None
    first_s: float = 0.5
    max_s: float = 5.0
    sleep: Callable[[float], None] = time.sleep
    down_since: float | None = field(default=None, init=False)
    """When the current outage began (monotonic), or None while the queue answers."""
    longest_s: float = field(default=0.0, init=False)
    """The longest outage ridden out so far, in seconds."""

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, called again with back-off while it fails for an outage, up to the bound."""
        delay = self.first_s
        while True:
            try:
                value = fn()
            except Exception as exc:
                if self.limit_s <= 0 or not is_outage(exc):
                    raise
                now = time.monotonic()
                if self.down_since is None:
                    self.down_since = now
                down = now - self.down_since
                if down >= self.limit_s:
                    raise BrokerOutage(
                        f"{self.where} was unreachable for {down:.0f} s, longer than FLEET_BROKER_OUTAGE_S="
                        f"{self.limit_s:g} s (last error while {what}: {_short(exc)})") from exc
                wait = round(min(delay, self.max_s, max(0.1, self.limit_s - down)), 1)
                self.on_notice(f"{self.where} unreachable since {down:.0f} s ({what}: {_short(exc)}), "
                               f"retrying in {wait:g} s")
                self.sleep(wait)
                delay = min(delay * 2, self.max_s)
                continue
            if self.down_since is not None:
                down = time.monotonic() - self.down_since
                self.longest_s = max(self.longest_s, down)
                self.down_since = None
                self.on_notice(f"{self.where} reachable again after {down:.0f} s")
            return value


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
