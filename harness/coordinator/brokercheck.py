"""Is the broker there? One answer within a few seconds, before a sweep plans or stores anything.

kombu's ``ensure_connection(timeout=...)`` bounds the connect, not the first read: a broker address that
accepts TCP and never answers (a firewall's proxy, a hung Redis, the wrong service on the port) held a sweep
for as long as the peer kept the socket open. A Redis PING with socket timeouts on both the connect and the
reply, run under a deadline of its own, answers in at most ``timeout_s`` whatever the peer does.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

from kombu import Connection

from harness.core.errors import DispatchError
from harness.core.settings import redact

__all__ = ["BROKER_CHECK_S", "check_broker_url", "check_queue_urls"]

# The bound: "Redis unreachable gets one line naming the URL (password hidden) within 5 s".
BROKER_CHECK_S = 3.0

_REDIS_SCHEMES = {"redis", "rediss", "unix", "redis+socket"}


def check_queue_urls(broker_url: str, result_backend: str, timeout_s: float = BROKER_CHECK_S) -> None:
    """The broker, then the result backend when it is another URL (FLEET_RESULT_BACKEND): a wrong backend passed
    the check, planned and stored a sweep, then waited out a broker outage (300 s) naming the broker."""
    check_broker_url(broker_url, timeout_s)
    if result_backend and result_backend != broker_url:
        check_broker_url(result_backend, timeout_s, what="result backend")


def check_broker_url(url: str, timeout_s: float = BROKER_CHECK_S, what: str = "broker") -> None:
    """Raise DispatchError naming the URL (password hidden) unless the broker answers within ``timeout_s``."""
    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            _ping(url, timeout_s)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - carried to the caller's thread and translated there
            outcome.append(exc)

    # A daemon thread: a probe stuck in a resolver call that ignores socket timeouts cannot hold the command.
    thread = threading.Thread(target=probe, name="broker-check", daemon=True)
    thread.start()
    thread.join(timeout_s + 0.5)
    if not outcome:
        raise DispatchError(f"cannot reach the {what} at {redact(url)}: no answer within {timeout_s:g} s")
    exc = outcome[0]
    if exc is not None:
        raise DispatchError(f"cannot reach the {what} at {redact(url)}: {_reason(exc)}") from None


def _ping(url: str, timeout_s: float) -> None:
    scheme = urlsplit(url).scheme.lower()
    if scheme in _REDIS_SCHEMES:
        import redis  # lazy: redis-py (about 100 ms), for a Redis URL only

        client = redis.Redis.from_url(url.replace("redis+socket://", "unix://", 1), socket_connect_timeout=timeout_s,
                                      socket_timeout=timeout_s, retry_on_timeout=False)
        try:
            client.ping()
        finally:
            client.close()
        return
    # Another kombu transport (sentinel, amqp...): its own connect, still under this module's deadline.
    with Connection(url, connect_timeout=timeout_s) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=timeout_s)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if type(exc).__name__ in ("TimeoutError", "timeout") or "Timeout" in type(exc).__name__:
        return f"no answer within the timeout ({text})"
    return text
