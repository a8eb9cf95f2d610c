"""The embedded default's broker: kombu's SQLAlchemy transport on SQLite, polled every 0.1 s, each wait at most 0.2 s.

kombu polls a virtual transport's queues once a second by default, and every attempt waits on it at least once
(its task sent, its result's wake-up): on the embedded default that was most of the harness's 1 s per attempt.
kombu reads ``polling_interval`` from the transport options, but its SQLAlchemy transport hands every option to
``create_engine()``, which refuses unknown ones; so the interval is this transport's own, registered under a
scheme of its own (``fleet-sqla+sqlite:///...``). A poll is one indexed SELECT per queue on a local file.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport.sqlalchemy import Transport as _SQLAlchemyTransport

__all__ = ["SCHEME", "POLLING_INTERVAL_S", "Transport", "register"]

SCHEME = "fleet-sqla"
POLLING_INTERVAL_S = 0.1


DRAIN_MAX_S = 0.2
"""The longest one wait for a message lasts before the worker's loop looks again whether it must stop."""


class Transport(_SQLAlchemyTransport):
    polling_interval = POLLING_INTERVAL_S

    def drain_events(self, connection: Any, timeout: Any = None) -> Any:  # type: ignore[override]
        # Celery's loop for a polled transport waits up to 2 s for a message and only then sees that the worker is
        # to stop: every embedded sweep's end waited out the rest of that wait. A shorter wait, looked at again
        # and again, changes nothing else: no message means socket.timeout either way, and the loop goes round.
        if timeout is not None:
            timeout = min(timeout, DRAIN_MAX_S)
        return super().drain_events(connection, timeout=timeout)


def register() -> None:
    """Make ``fleet-sqla+sqlite:///...`` name this transport (kombu looks aliases up when it connects)."""
    TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")
