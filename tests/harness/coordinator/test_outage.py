"""harness.coordinator.outage: the back-off, the lines the progress shows, the bound. The clock is real; only the sleeps are
recorded instead of slept (the integration tests kill a real redis-server)."""

from __future__ import annotations

import errno
import sqlite3

import pytest
import redis.exceptions

from harness.core.diskfull import is_disk_full
from harness.core.errors import BrokerOutage, StoreError
from harness.coordinator.outage import Outage


def _failing(times: int, exc: Exception):
    calls = {"n": 0}

    def fn() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise exc
        return "ok"

    return fn, calls


def test_an_outage_is_waited_out_with_doubling_waits_and_said_when_it_ends() -> None:
    notices: list[str] = []
    slept: list[float] = []
    o = Outage(limit_s=300, where="the broker at redis://h:6379/0", on_notice=notices.append, sleep=slept.append)
    fn, calls = _failing(6, redis.exceptions.ConnectionError("Error 111 connecting"))
    assert o.call("reading results", fn) == "ok"
    assert calls["n"] == 7
    assert slept == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert all(n.startswith("the broker at redis://h:6379/0 unreachable since ") for n in notices[:-1])
    assert "retrying in 0.5 s" in notices[0] and "reading results: ConnectionError: Error 111" in notices[0]
    assert notices[-1].startswith("the broker at redis://h:6379/0 reachable again after ")
    assert o.down_since is None


def test_past_the_bound_it_is_a_broker_outage_naming_the_setting() -> None:
    o = Outage(limit_s=0.2, sleep=lambda s: None)
    fn, _ = _failing(10**9, redis.exceptions.ConnectionError("gone"))
    with pytest.raises(BrokerOutage, match=r"longer than FLEET_BROKER_OUTAGE_S=0.2 s"):
        o.call("sending", fn)


@pytest.mark.parametrize("exc", [ValueError("bad json"), redis.exceptions.ResponseError("WRONGTYPE")])
def test_an_error_that_is_no_outage_is_raised_at_once(exc: Exception) -> None:
    o = Outage(limit_s=300, sleep=lambda s: pytest.fail("waited on an error that is no outage"))
    fn, calls = _failing(1, exc)
    with pytest.raises(type(exc)):
        o.call("reading results", fn)
    assert calls["n"] == 1


def test_waiting_off_raises_the_first_connection_error() -> None:
    fn, _ = _failing(1, redis.exceptions.ConnectionError("gone"))
    with pytest.raises(redis.exceptions.ConnectionError):
        Outage(limit_s=0).call("x", fn)


def test_a_full_disk_is_recognised_through_translations() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise StoreError("cannot write x") from exc
    except StoreError as wrapped:
        assert is_disk_full(wrapped)
    assert is_disk_full(sqlite3.OperationalError("database or disk is full"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(StoreError("cannot write x: Permission denied"))
