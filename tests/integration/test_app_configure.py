"""The worker app configured again in one process with another broker (a test after another, a service that runs
sweeps with other settings) sends to the new one: it kept the first broker's connection and producer pools, so
an embedded sweep after a Redis one sent its attempts to Redis, where nobody consumed them, and waited for ever."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.settings import Settings
from workers.app import TASK_RUN_ATTEMPT, app, configure, queue_for

pytestmark = pytest.mark.integration


def _waiting(queue: str) -> int:
    with app.connection_for_write() as conn:
        return int(conn.default_channel.queue_declare(queue, passive=True).message_count)


def _send(namespace: str, n: int) -> None:
    app.send_task(TASK_RUN_ATTEMPT, args=[{"host": {"name": "h"}, "namespace": namespace}],
                  task_id=f"{namespace}-{n}")


def test_configured_again_with_another_broker_the_app_sends_there(redis_server, namespace: str,
                                                                  tmp_path: Path) -> None:
    queue = queue_for("h", namespace)
    configure(Settings.resolve({"broker_url": redis_server.url, "namespace": namespace}, {}))
    _send(namespace, 1)
    assert _waiting(queue) == 1
    configure(Settings.resolve({"runs": str(tmp_path / "runs"), "namespace": namespace}, {}))  # embedded
    _send(namespace, 2)
    assert app.conf.broker_url.startswith("fleet-sqla+sqlite:///")
    assert _waiting(queue) == 1  # the SQLite queue's own
    configure(Settings.resolve({"broker_url": redis_server.url, "namespace": namespace}, {}))
    assert _waiting(queue) == 1  # nothing more reached Redis
    _send(namespace, 3)
    assert _waiting(queue) == 2
