"""Host slots: at most ``slots`` runs at once on a host, however many workers and machines consume.

Two implementations of one small interface:
- ``RedisSlots``: leases in a Redis sorted set per host (member = lease id, score = expiry). A lease is
  renewed by a heartbeat while its run goes on, so a worker that dies frees its slot when the lease
  expires instead of holding it forever. Acquire is one Lua script, so two workers can never both take
  the last slot.
- ``FileSlots``: ``flock`` on one file per slot, for the embedded default where every worker is on this
  machine. ``flock`` locks belong to an open file, so threads of one process exclude each other too.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import uuid
import weakref
from abc import ABC, abstractmethod
from pathlib import Path

import redis

__all__ = ["Lease", "Slots", "RedisSlots", "FileSlots"]


class Lease(ABC):
    slot: str | None = None
    """Which slot this is, when the backend knows, named so that no other backend's slot has the name (file
    locks: the lock file; Redis leases on a one-slot host, where the slot is the host: the key and ``#0``). A
    new attempt on a slot ends what that slot's earlier holder left running on the host (workers/host/launcher/
    reap); with no name only leftovers nobody supervises are ended (and the launcher's heartbeat bound)."""

    @abstractmethod
    def release(self) -> None: ...


class Slots(ABC):
    @abstractmethod
    def try_acquire(self, host: str, slots: int) -> Lease | None:
        """Take a slot on ``host`` now, or return None."""

    def acquire(self, host: str, slots: int, timeout: float | None = None, poll: float = 0.25) -> Lease | None:
        """Wait for a slot; None if ``timeout`` passed first. It asks again after 5 ms, then twice as long each time up to
        ``poll``: a slot that is being released (the host's last attempt releases its lease when its agent ended,
        workers/tasks.py) is taken within milliseconds, not after a whole ``poll`` (``RedisSlots`` waits on the host's
        free list between its looks)."""
        end = None if timeout is None else time.monotonic() + timeout
        wait = min(0.005, poll)
        while True:
            lease = self.try_acquire(host, slots)
            if lease is not None:
                return lease
            now = time.monotonic()
            if end is not None and now >= end:
                return None
            self._wait_for_release(host, wait if end is None else min(wait, end - now))
            wait = min(wait * 2, poll)

    def _wait_for_release(self, host: str, seconds: float) -> None:
        """Between two looks: sleep ``seconds`` (a backend that can hear a release ends the wait at it)."""
        time.sleep(seconds)


# Redis's own clock, read in the script (workers on machines with skewed clocks agree on expiry): one round trip per
# acquire, where a TIME first was two (0.15 ms of every attempt's start). Redis 3.2 and 4 replicate a script that
# reads the clock and then writes only as its effects, which they must be asked for; later ones always do.
_CLOCK = """
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
"""

_ACQUIRE = _CLOCK + """
local key, ttl, slots, id = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if redis.call('ZCARD', key) < slots then
  redis.call('ZADD', key, now + ttl, id)
  redis.call('PEXPIRE', key, math.ceil(ttl * 1000) + 1000)
  return 1
end
return 0
"""

_RENEW = _CLOCK + """
local key, ttl, slots, id = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if redis.call('ZSCORE', key, id) then
  redis.call('ZADD', key, now + ttl, id)
  redis.call('PEXPIRE', key, math.ceil(ttl * 1000) + 1000)
  return 1
end
-- The lease is gone while its run goes on (a Redis that came back without its data): take it again if the slot
-- is still free, so no second run is let onto the host.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if redis.call('ZCARD', key) < slots then
  redis.call('ZADD', key, now + ttl, id)
  redis.call('PEXPIRE', key, math.ceil(ttl * 1000) + 1000)
  return 2
end
return 0
"""


# A lease given back says so on the host's free list, where a worker waiting for a slot blocks (BLPOP): the next attempt
# on the host takes the slot within a round trip of its release, not after its next look. A word nobody waited for
# stays on the list (at most one per slot, for a minute) and costs a waiter one look that finds no slot.
_RELEASE = """
local key, free, id, slots = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
if redis.call('ZREM', key, id) == 1 then
  redis.call('LPUSH', free, '1')
  redis.call('LTRIM', free, 0, slots - 1)
  redis.call('PEXPIRE', free, 60000)
end
return 1
"""


class _RedisLease(Lease):
    """A held slot, renewed by its backend's renewer (``_Renewer``) every TTL/3 until it is released."""

    def __init__(self, slots: "RedisSlots", key: str, lease_id: str, host_slots: int = 1) -> None:
        self._slots, self._key, self._id, self._host_slots = slots, key, lease_id, host_slots
        self._released = False
        slots._renewer.hold(self)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._slots._renewer.drop(self)
        try:
            self._slots.give_back(self)
        except BaseException as exc:
            # Redis is away, or a revoke's SIGTERM (SystemExit) came during the call: the renewer frees the slot once
            # it can (a second release() finds this one done, and the lease would otherwise hold the host a TTL).
            self._slots._renewer.free_later(self, time.monotonic() + self._slots.ttl)
            if not isinstance(exc, Exception):
                raise


class _Renewer:
    """One thread per backend (and process) renews every lease it holds every TTL/3; while Redis is unreachable it
    tries every second, so a lease is renewed as soon as Redis is back: an outage shorter than about two thirds of the
    TTL never lets a lease expire, and so never lets a second run onto the host while this one goes on. A lease
    released while Redis was away has its slot freed as soon as Redis is back, not only when it expires (a host would
    otherwise sit idle for up to the TTL after every outage).

    One thread, not one per lease: starting a thread was most of taking a slot (0.3 of its 0.5 ms), on the path of
    every attempt's start. It runs while the process holds a lease (or has one to free), and ends when it holds
    none. Redis is never called under the lock: a Redis that does not answer (5 s per call) must not hold up taking
    or giving back a slot. A process forked from one that holds leases holds none of them (``_forked``)."""

    def __init__(self, slots: "RedisSlots") -> None:
        self._slots = slots
        self._forked()
        _RENEWERS.add(self)

    def _forked(self) -> None:
        """Fresh state: at the start, and in a child of fork() (the parent's leases, its lock as the fork found it and
        its thread are the parent's)."""
        self._lock = threading.Lock()
        self._held: dict[str, _RedisLease] = {}
        self._unfreed: dict[str, tuple[_RedisLease, float]] = {}  # released while Redis was away: until when to try
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, lease: _RedisLease) -> None:
        with self._lock:
            self._held[lease._id] = lease
            self._start_locked()

    def drop(self, lease: _RedisLease) -> None:
        with self._lock:
            self._held.pop(lease._id, None)

    def free_later(self, lease: _RedisLease, until: float) -> None:
        with self._lock:
            self._unfreed[lease._id] = (lease, until)
            self._start_locked()
        self._wake.set()

    def _start_locked(self) -> None:
        """The thread, started if none runs (under the lock: the thread decides under it to end)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="slot-leases", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        ttl = self._slots.ttl
        wait = ttl / 3
        while True:
            # A lease is taken with a TTL: its first renewal is due a third of it later, not at once (a renewal on the
            # heels of every take was a second command on the path of an attempt's start). A lease given back while
            # Redis was away wakes the thread at once (free_later).
            self._wake.wait(wait)
            self._wake.clear()
            with self._lock:
                held, unfreed = list(self._held.values()), list(self._unfreed.items())
                if not held and not unfreed:
                    self._thread = None  # hold() starts another
                    return
            wait = ttl / 3
            for lease in held:
                try:
                    self._slots._renew(keys=[lease._key], args=[ttl, lease._host_slots, lease._id])
                except Exception:  # noqa: BLE001 - Redis is away: try again soon, the TTL is the backstop
                    wait = min(1.0, ttl / 3)
                    continue
                with self._lock:
                    dropped = lease._id not in self._held
                if dropped:
                    # Released while this renewal was under way: the renewal may have come after the release's ZREM
                    # and taken the slot again (the script takes back a lease Redis lost), which would keep the host
                    # idle for a TTL. Given back again.
                    self.free_later(lease, time.monotonic() + ttl)
            for lease_id, (lease, until) in unfreed:
                try:
                    self._slots.give_back(lease)
                except Exception:  # noqa: BLE001 - still away; the lease expires on its own at the end
                    if time.monotonic() < until:
                        wait = min(wait, 0.5, ttl / 3)
                        continue
                with self._lock:
                    if self._unfreed.get(lease_id, (None, 0.0))[1] == until:
                        del self._unfreed[lease_id]


_RENEWERS: "weakref.WeakSet[_Renewer]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for renewer in list(_RENEWERS):
        renewer._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class RedisSlots(Slots):
    def __init__(self, url: str, namespace: str = "", ttl: float = 30.0) -> None:
        self.client = redis.Redis.from_url(url)
        self.namespace = namespace
        self.ttl = ttl
        self._acquire = self.client.register_script(_ACQUIRE)
        self._renew = self.client.register_script(_RENEW)
        self._release = self.client.register_script(_RELEASE)
        self._blocking_wait = True
        self._renewer = _Renewer(self)

    def key(self, host: str) -> str:
        return f"fleet:{self.namespace}:slots:{host}" if self.namespace else f"fleet:slots:{host}"

    @staticmethod
    def free_key(key: str) -> str:
        """The host's free list: a word on it for each lease given back, for ``acquire`` to wait on."""
        return key + ":free"

    def give_back(self, lease: "_RedisLease") -> None:
        """Remove the lease, and if it was there, say so on the host's free list (one round trip)."""
        self._release(keys=[lease._key, self.free_key(lease._key)], args=[lease._id, lease._host_slots])

    def _wait_for_release(self, host: str, seconds: float) -> None:
        """Block on the host's free list (BLPOP) for ``seconds``: a release ends the wait at once. A lease that expired
        (its worker died) says nothing: the next look finds its slot free."""
        if self._blocking_wait:
            try:
                self.client.blpop([self.free_key(self.key(host))], timeout=max(seconds, 0.01))
                return
            except redis.exceptions.ResponseError as exc:
                if "timeout" in str(exc).lower():
                    self._blocking_wait = False  # a Redis before 6 takes whole seconds only: look at intervals
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                pass
        time.sleep(seconds)

    def try_acquire(self, host: str, slots: int) -> Lease | None:
        lease_id = uuid.uuid4().hex
        key = self.key(host)
        try:
            taken = self._acquire(keys=[key], args=[self.ttl, slots, lease_id]) == 1
        except Exception as exc:  # noqa: BLE001 - Redis is away: no slot now; acquire() asks again
            if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
                return None
            raise
        if not taken:
            return None
        lease = _RedisLease(self, key, lease_id, slots)
        lease.slot = f"redis:{key}#0" if slots == 1 else None
        return lease


class _FileLease(Lease):
    def __init__(self, fh, slot: str) -> None:
        self._fh = fh
        self.slot = slot

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


class FileSlots(Slots):
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def try_acquire(self, host: str, slots: int) -> Lease | None:
        for i in range(slots):
            fh = open(self.folder / f"{host}.{i}.lock", "a")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue
            os.utime(self.folder / f"{host}.{i}.lock")
            return _FileLease(fh, f"file:{(self.folder / f'{host}.{i}.lock').resolve()}")
        return None
