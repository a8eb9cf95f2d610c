"""Celery tasks. One task: run one attempt of one cell on its host and return the result.

The task is safe to deliver twice: the attempt folder on the host is made afresh, and the coordinator
records a (cell, attempt) once. The host's slot is held from before the agent starts until it ended and its workspace
is packed (and checked): the host's next attempt, sent ahead to another pool process, takes it while this one is
collected and its result stored.

The task's settings (slot leases, start timeout) are the worker's own, given by ``workers.app.configure``.

On a Redis result backend two of the task's round trips to Redis are made beside the attempt, by one thread of the
process (``_beside``), not before or after it: storing STARTED (once the slot is held; Celery's ``track_started``
stores it before the task runs) overlaps the launcher's start, and the lease's release overlaps the result's store. Each
was a third of a millisecond of every gap between a host's two agents. STARTED is stored before the task returns
(and one the task raised before is never stored, or cannot replace its final state); the release is left to the
thread only when the attempt ended normally (a task that raises releases at once).
"""

from __future__ import annotations

import os
import shlex
import signal
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from celery import Task, states
from celery.signals import worker_process_init, worker_process_shutdown

from harness.core.inventory import Host
from harness.core.sweep import AttemptRequest
from harness.core.settings import Settings
from workers.adapters import adapter_for
from workers.app import TASK_RUN_ATTEMPT, WAITING, app, current_settings
from workers.attempt import Timing, run_attempt
from workers.blobs import blobs_for
from workers.slots import FileSlots, RedisSlots, Slots
from workers.resultbackend import RedisBackend
from workers.transport import Transport, connect_for

__all__ = ["forget_leftovers", "run_attempt_task", "slots_backend", "timing_for"]

_transports: dict[tuple, Transport] = {}
_transports_lock = threading.Lock()
_slots: tuple[tuple, Slots] | None = None
_slots_lock = threading.Lock()
_aside: tuple[int, ThreadPoolExecutor] | None = None
_aside_lock = threading.Lock()


def _beside() -> ThreadPoolExecutor:
    """This process's one thread for the round trips that need not hold up an attempt (STARTED, a lease's release).
    Made in the process that uses it: a pool process forked from the worker has none of its parent's threads."""
    global _aside
    with _aside_lock:
        if _aside is None or _aside[0] != os.getpid():
            _aside = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleet-beside"))
        return _aside[1]


def _finish_beside(timeout: float = 10.0) -> None:
    """Run what was left to the thread beside the attempts (a lease's release) before the process ends: a release
    lost there would keep the host's slot taken until its lease expires."""
    global _aside
    with _aside_lock:
        aside, _aside = _aside, None
    if aside is not None and aside[0] == os.getpid():
        done = threading.Event()
        aside[1].submit(done.set)
        done.wait(timeout)
        aside[1].shutdown(wait=False)


def slots_backend(settings: Settings) -> Slots:
    """Redis leases when the settings name a Redis (the slots URL, else the broker), else file locks beside the
    embedded broker. One backend per process and configuration: its Redis connection pool is shared."""
    global _slots
    key = (settings.slots_redis, settings.namespace, settings.slot_ttl_s, settings.slots_dir)
    with _slots_lock:
        if _slots is None or _slots[0] != key:
            if settings.slots_redis:
                backend: Slots = RedisSlots(settings.slots_redis, namespace=settings.namespace, ttl=settings.slot_ttl_s)
            else:
                backend = FileSlots(settings.slots_dir)
            _slots = (key, backend)
        return _slots[1]


def timing_for(settings: Settings) -> Timing:
    """The lifecycle's waits: the start timeout and the launcher's heartbeat bound are settings (tests and
    impatient users shorten them), the rest keep their defaults."""
    return Timing(start_timeout_s=settings.start_timeout_s, heartbeat_s=settings.heartbeat_timeout_s)


def _transport(host: Host) -> Transport:
    """Connections are reused per worker process, keyed by everything that identifies the host and the limits the
    connection was made with (an inventory that changes them gets a connection that keeps the new ones)."""
    key = (host.name, host.transport, host.address, host.port, host.user, host.host_key, host.identity_file,
           host.connect_timeout, host.keepalive_interval, host.keepalive_count, host.stall_timeout)
    with _transports_lock:
        t = _transports.get(key)
        if t is None or not t.alive:
            leftovers = []
            if t is not None:
                leftovers = t.leftovers
                t.close()
            t = _transports[key] = connect_for(host)
            t.leftovers = leftovers
        return t


def forget_leftovers(timeout: float = 10.0) -> None:
    """Remove, on each host, the delivery folders this process's attempts left for the next launcher call to remove
    (workers/attempt.py): the worker is stopping, and there will be none. Best effort: what is left (a host gone, a
    worker killed) is swept by a later start's reap within a week (docs/launcher.md)."""
    with _transports_lock:
        transports = list(_transports.values())
    for t in transports:
        if not t.leftovers:
            continue
        paths, t.leftovers = t.leftovers, []
        try:
            t.shell("rm -rf " + " ".join(shlex.quote(p) for p in paths), timeout=timeout)
        except Exception:  # noqa: BLE001 - the host may be gone
            pass


@worker_process_shutdown.connect
def _stopping(**_: object) -> None:
    _finish_beside()
    forget_leftovers()


@worker_process_init.connect
def _fresh_process(**_: object) -> None:
    # A forked pool child must not share its parent's SSH sockets; and SIGTERM (revoke with
    # terminate) must unwind through the attempt's cleanup, which kills the remote process group.
    _transports.clear()

    def _term(signum: int, frame: object) -> None:
        raise SystemExit(f"terminated by signal {signum}")

    signal.signal(signal.SIGTERM, _term)


@app.task(name=TASK_RUN_ATTEMPT, bind=True, acks_late=True, track_started=False)
def run_attempt_task(self: Task, request: dict) -> dict:
    worker = self.request.hostname or ""
    started: Future | None = None
    waiting: Future | None = None
    lease = None
    settled = False
    try:
        # An agent kind this worker does not know fails here, in validation (harness.core.agents declares the kinds an
        # AgentConfig admits, and every declared kind has an adapter), so adapter_for() below cannot miss.
        req = AttemptRequest.model_validate(request)
        settings = current_settings()
        slots = slots_backend(settings)
        lease = slots.try_acquire(req.host.name, req.host.slots)
        if lease is None:
            # Sent ahead of its host's slots (or another sweep holds them): WAITING says a worker took it (the
            # coordinator's no-worker watch asks no more about its queue), then the slot is waited for.
            waiting = _store_progress(self, worker, WAITING)
            lease = slots.acquire(req.host.name, req.host.slots)
        # STARTED once the slot is held: an attempt waiting for it is not running (the coordinator's progress counts
        # STARTED attempts as running).
        started = _store_progress(self, worker, states.STARTED)
        adapter = adapter_for(req.cell.agent, req.agent)
        transport = _transport(req.host)
        # run_attempt returns every harness failure of the lifecycle as a result, never raises one.
        slot = lease.slot if lease is not None else None
        # The agent's tree is gone and its workspace packed (and checked): the host's slot goes to the next attempt
        # then (on_host_free), while this one reads its delivery and stores its result, which no host waits for. The
        # release below finds it released.
        result = run_attempt(transport, req, adapter, timing=timing_for(settings), worker=worker, slot=slot,
                             on_host_free=lease.release if lease is not None else None)
        # Large artifacts go beside the result on Redis as raw bytes, not base64 inside it (workers/blobs.py).
        blobs = blobs_for(settings.celery_backend)
        if blobs is not None and req.task_id:
            result = blobs.offload(result, req.namespace, req.task_id)
        answer = result.model_dump(mode="json")
        if started is not None:
            _settled(started)
        settled = True
    finally:
        if not settled:
            # The task raises (a SIGTERM of a revoke may come while it waits for STARTED): a STARTED (or WAITING) that
            # has not gone out yet never does; one already on its way cannot replace the final state
            # (workers/resultbackend.py).
            for pending in (waiting, started):
                if pending is not None:
                    pending.cancel()
        if lease is not None:
            if settled and started is not None:
                _beside().submit(lease.release)  # beside the result's store, which follows this return
            else:
                lease.release()
    return answer


def _store_progress(task: Task, worker: str, state: str) -> Future | None:
    """Store the task's progress ``state`` (STARTED, what Celery's ``track_started`` stores, or WAITING): beside the
    attempt on a Redis result backend (the Future to wait for before the task ends; the one thread keeps their order),
    else here and now (None)."""
    meta = {"pid": os.getpid(), "hostname": worker}
    if isinstance(task.backend, RedisBackend):
        return _beside().submit(task.backend.store_result, task.request.id, meta, state, request=task.request)
    task.backend.store_result(task.request.id, meta, state, request=task.request)
    return None


def _settled(started: Future) -> None:
    """Wait for STARTED to be stored (or to fail: it is only progress), so that it never lands after the final state."""
    try:
        started.result()
    except Exception:  # noqa: BLE001 - the result's own store says what is wrong with the backend
        pass
