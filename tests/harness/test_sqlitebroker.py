"""The embedded broker's transport: polled every 0.1 s, and no single wait for a message longer than 0.2 s."""

from __future__ import annotations

import pytest
from kombu.transport.sqlalchemy import Transport as SQLAlchemyTransport

from harness import sqlitebroker


def test_a_wait_for_a_message_is_cut_to_the_loops_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Celery's loop for a polled transport asks for 2 s and only then sees that the worker is to stop: every embedded
    sweep's end waited out the rest of it (a one-cell sweep took 5.1 s, 1.5 s with the bound)."""
    asked: list[float | None] = []
    monkeypatch.setattr(SQLAlchemyTransport, "drain_events",
                        lambda self, connection, timeout=None: asked.append(timeout))
    transport = sqlitebroker.Transport.__new__(sqlitebroker.Transport)
    transport.drain_events(object(), timeout=2.0)
    transport.drain_events(object(), timeout=0.05)
    transport.drain_events(object())
    assert asked == [sqlitebroker.DRAIN_MAX_S, 0.05, None] and sqlitebroker.DRAIN_MAX_S <= 0.2
    assert sqlitebroker.Transport.polling_interval == sqlitebroker.POLLING_INTERVAL_S == 0.1
