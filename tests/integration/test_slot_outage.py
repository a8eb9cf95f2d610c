"""Slot leases across a Redis outage (real redis-server killed and started again on its port, default TTL 30 s):
a lease held through the outage keeps its slot, even when Redis came back without its data, and a lease
released while Redis was away frees its slot as soon as Redis is back, not a TTL later."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.integration.fleetkit import RedisServer
from workers.slots import RedisSlots

pytestmark = pytest.mark.integration


def _outage(server: RedisServer, seconds: float) -> None:
    server.kill()
    try:
        time.sleep(seconds)
    finally:
        server.start()


def _acquire_within(slots: RedisSlots, host: str, seconds: float):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        lease = slots.try_acquire(host, 1)
        if lease is not None:
            return lease
        time.sleep(0.1)
    return None


@pytest.mark.parametrize("persistent", [True, False], ids=["aof", "came-back-empty"])
def test_a_lease_held_through_a_10_s_outage_keeps_its_slot(tmp_path: Path, persistent: bool) -> None:
    server = RedisServer(tmp_path / "redis", persistent=persistent)
    server.start()
    host = f"h{uuid.uuid4().hex[:8]}"
    first, second = RedisSlots(server.url), RedisSlots(server.url)  # two workers, default TTL
    try:
        lease = first.try_acquire(host, 1)
        assert lease is not None
        _outage(server, 10)
        time.sleep(1.5)  # the holder's heartbeat tries every second while Redis is away
        # The first run still goes on: a second worker asking for a while must not get the host's one slot.
        intruder = _acquire_within(second, host, 3)
        assert intruder is None, "a second worker took the slot while its holder still ran"
        lease.release()
        assert _acquire_within(second, host, 3) is not None
    finally:
        server.stop()


def test_a_lease_released_during_an_outage_frees_its_slot_when_redis_is_back(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", persistent=True)
    server.start()
    host = f"h{uuid.uuid4().hex[:8]}"
    first, second = RedisSlots(server.url), RedisSlots(server.url)
    try:
        lease = first.try_acquire(host, 1)
        assert lease is not None
        server.kill()
        try:
            lease.release()  # the run ended while Redis was away
            time.sleep(3)
        finally:
            server.start()
        # Not 30 s later, when the lease would expire by itself.
        assert _acquire_within(second, host, 5) is not None, "the released slot stayed taken after Redis came back"
    finally:
        server.stop()


def test_taking_and_renewing_a_lease_is_one_command_each_on_redis_s_own_clock(redis_server: RedisServer,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # On the path of every attempt's start: the lease's expiry reads Redis's clock inside the script, not with a
    # TIME of its own first.
    slots = RedisSlots(redis_server.url, namespace=uuid.uuid4().hex[:8], ttl=30.0)
    warm = slots.try_acquire("warm", 1)  # the first call of a script in a process loads it (SCRIPT LOAD), once
    assert warm is not None
    assert slots._renew(keys=[slots.key("warm")], args=[30.0, 1, warm._id]) == 1  # type: ignore[attr-defined]
    warm.release()
    sent: list[str] = []
    real = slots.client.execute_command

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(str(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(slots.client, "execute_command", counted)
    before = time.time()
    lease = slots.try_acquire("tower1", 1)
    assert lease is not None
    assert sent == ["EVALSHA"], sent
    ((_, expiry),) = slots.client.zrange(slots.key("tower1"), 0, -1, withscores=True)
    assert before + 29 < expiry < time.time() + 31  # Redis's clock (the same machine's here) plus the TTL
    sent.clear()
    assert slots._renew(keys=[slots.key("tower1")], args=[30.0, 1, lease._id]) == 1  # type: ignore[attr-defined]
    assert sent == ["EVALSHA"], sent
    assert slots.try_acquire("tower1", 1) is None  # the one slot is held
    lease.release()
    assert slots.try_acquire("tower1", 1) is not None


def test_leases_are_renewed_by_one_thread_and_a_released_one_is_never_taken_back(redis_server: RedisServer) -> None:
    """Taking a slot starts no thread of its own (one was most of taking a slot, on every attempt's start): one
    renewer keeps every lease of the backend alive, gives back none it should not, and ends once none is held."""
    import threading

    def renewers() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "slot-leases")

    slots = RedisSlots(redis_server.url, namespace=uuid.uuid4().hex[:8], ttl=3.0)
    other = RedisSlots(redis_server.url, namespace=slots.namespace, ttl=3.0)
    before = renewers()
    leases = [slots.try_acquire(f"h{i}", 1) for i in range(5)]
    taken: list = []
    try:
        assert all(lease is not None for lease in leases)
        assert renewers() == before + 1  # one renewer for the five, not a thread each
        time.sleep(7.0)  # more than two TTLs: each lease lives on only if it was renewed
        assert [other.try_acquire(f"h{i}", 1) for i in range(5)] == [None] * 5
        for lease in leases:
            assert lease is not None
            lease.release()
        time.sleep(1.5)  # past the renewer's next round (TTL/3): nothing renewed the released leases
        taken = [other.try_acquire(f"h{i}", 1) for i in range(5)]
        assert all(lease is not None for lease in taken), "a released slot was renewed and taken back"
        end = time.monotonic() + 10
        while slots._renewer._thread is not None and time.monotonic() < end:
            time.sleep(0.1)
        assert slots._renewer._thread is None  # it ended after the last lease, at its next round
    finally:
        for lease in leases + taken:
            if lease is not None:
                lease.release()


def test_a_forked_process_renews_none_of_its_parents_leases(redis_server: RedisServer) -> None:
    """A child of fork() (a pool process of a worker) holds none of the parent's leases: renewing them would keep the
    parent's slots taken after the parent gave them back."""
    import os

    slots = RedisSlots(redis_server.url, namespace=uuid.uuid4().hex[:8], ttl=30.0)
    lease = slots.try_acquire("h", 1)
    assert lease is not None
    try:
        pid = os.fork()
        if pid == 0:  # the child: nothing held, no renewer of its own running
            renewer = slots._renewer
            os._exit(0 if not renewer._held and renewer._thread is None and not renewer._lock.locked() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        lease.release()


def test_a_worker_waiting_for_a_slot_takes_it_as_soon_as_it_is_given_back(redis_server: RedisServer) -> None:
    """A waiter blocks on the host's free list between its looks: a release wakes it at once, where its looks, twice as
    far apart each time, would have found the slot free a second or more after it was given back (the host idle)."""
    import threading

    host = f"h{uuid.uuid4().hex[:8]}"
    holder, waiter = RedisSlots(redis_server.url), RedisSlots(redis_server.url)
    lease = holder.try_acquire(host, 1)
    assert lease is not None
    got: list[float] = []
    thread = threading.Thread(target=lambda: got.append(time.monotonic()) if waiter.acquire(host, 1, poll=5.0) else None)
    thread.start()
    time.sleep(1.5)  # the waiter's looks are 1.3 s apart by now
    assert not got
    released = time.monotonic()
    lease.release()
    thread.join(10)
    assert got and got[0] - released < 0.2, got and got[0] - released
    # A release nobody waited for leaves one word per slot, and a waiter that takes it only looks once more.
    assert holder.client.llen(holder.free_key(holder.key(host))) == 0
    for _ in range(3):
        extra = holder.try_acquire(f"{host}-2", 1)
        assert extra is not None
        extra.release()
    assert holder.client.llen(holder.free_key(holder.key(f"{host}-2"))) == 1
    assert 0 < holder.client.pttl(holder.free_key(holder.key(f"{host}-2"))) <= 60000


def test_a_release_cut_short_by_a_revoke_still_frees_the_slot_at_once(redis_server: RedisServer,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A revoke's SIGTERM raises SystemExit in the task, maybe during the release's own call to Redis: the release
    leaves the lease to the renewer, which gives it back at once, and a second release (the task's finally) is a no-op.
    Before, the lease was marked released and held the host until it expired (30 s)."""
    host = f"h{uuid.uuid4().hex[:8]}"
    slots = RedisSlots(redis_server.url)
    lease = slots.try_acquire(host, 1)
    assert lease is not None
    real = slots.give_back
    calls = []

    def cut(lease_):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            raise SystemExit("terminated by signal 15")
        return real(lease_)

    monkeypatch.setattr(slots, "give_back", cut)
    with pytest.raises(SystemExit):
        lease.release()
    lease.release()
    other = RedisSlots(redis_server.url)
    assert _acquire_within(other, host, 3) is not None, "the slot stayed taken after a release cut short"
