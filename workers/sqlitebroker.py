"""The embedded default's broker: kombu's SQLAlchemy transport on SQLite, polled every 0.1 s, each wait at most 0.2 s,
and woken at once by a message sent in this process.

kombu polls a virtual transport's queues once a second by default, and every attempt waits on it at least once
(its task sent, its result's wake-up): on the embedded default that was most of the harness's 1 s per attempt.
kombu reads ``polling_interval`` from the transport options, but its SQLAlchemy transport hands every option to
``create_engine()``, which refuses unknown ones; so the interval is this transport's own, registered under a
scheme of its own (``fleet-sqla+sqlite:///...``). A poll is one indexed SELECT per queue on a local file.

The embedded default's coordinator and worker are one process: a message put on a queue here wakes the worker's wait
at once (a host's next attempt no longer waits up to a poll interval to be taken); the interval still finds what
another process put in the file.
"""

from __future__ import annotations

import logging
import socket
import threading
from queue import Empty
from time import monotonic
from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import virtual
from kombu.transport.sqlalchemy import Channel as _SQLAlchemyChannel
from kombu.transport.sqlalchemy import Transport as _SQLAlchemyTransport

__all__ = ["SCHEME", "POLLING_INTERVAL_S", "Channel", "QoS", "Transport", "register"]

_log = logging.getLogger("fleet")

SCHEME = "fleet-sqla"
POLLING_INTERVAL_S = 0.1


DRAIN_MAX_S = 0.2
"""The longest one wait for a message lasts before the worker's loop looks again whether it must stop."""


_sent = threading.Condition()
_sends = [0]
"""How many messages this process put on a queue: a wait that saw the count unchanged sleeps until it changes."""


class QoS(virtual.QoS):
    def restore_unacked(self) -> list[Any]:
        """Put the messages this worker took and had not finished back on their queues, and report none that could
        not be: on a full disk (the queue's SQLite file is under the results directory) kombu would pickle them into
        a file under /tmp and say so on stderr, after the coordinator's one line about the disk. Nothing is lost
        without them: every attempt sent is in its sweep's journal as dispatched, and `fleet resume` sends it
        again. The failures go to the fleet log."""
        for exc, message in super().restore_unacked():
            _log.info("the embedded queue could not take back task %s: %s",
                      (message.headers or {}).get("id", message.delivery_tag), exc)
        return []


class Channel(_SQLAlchemyChannel):
    QoS = QoS

    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super()._put(queue, payload, **kwargs)
        with _sent:
            _sends[0] += 1
            _sent.notify_all()


class Transport(_SQLAlchemyTransport):
    Channel = Channel
    polling_interval = POLLING_INTERVAL_S

    def drain_events(self, connection: Any, timeout: Any = None) -> Any:  # type: ignore[override]
        # Celery's loop for a polled transport waits up to 2 s for a message and only then sees that the worker is
        # to stop: every embedded sweep's end waited out the rest of that wait. A shorter wait, looked at again
        # and again, changes nothing else: no message means socket.timeout either way, and the loop goes round.
        if timeout is not None:
            timeout = min(timeout, DRAIN_MAX_S)
        # kombu's own loop (virtual.Transport.drain_events), but its sleep between two looks ends as soon as a message
        # is put in this process: the count is read before the look, so one put meanwhile is never slept through.
        start = monotonic()
        while True:
            with _sent:
                seen = _sends[0]
            try:
                self.cycle.get(self._deliver, timeout=timeout)  # type: ignore[union-attr]  # made when it connects
                return None
            except Empty:
                if timeout is not None and monotonic() - start >= timeout:
                    raise socket.timeout()
            interval = self.polling_interval if not timeout else min(self.polling_interval, timeout)
            with _sent:
                if _sends[0] == seen:
                    _sent.wait(interval)


def register() -> None:
    """Make ``fleet-sqla+sqlite:///...`` name this transport (kombu looks aliases up when it connects)."""
    TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")
