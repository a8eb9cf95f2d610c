"""Celery tasks. One task: run one attempt of one cell on its host and return the result.

The task is safe to deliver twice: the attempt folder on the host is made afresh, and the coordinator
records a (cell, attempt) once. The host's slot is held for the whole run.

The task's settings (slot leases, start timeout) are the worker's own, given by ``workers.app.configure``.
"""

from __future__ import annotations

import shlex
import signal
import threading

from celery import Task
from celery.signals import worker_process_init, worker_process_shutdown

from harness.inventory import Host
from harness.records import AttemptRequest
from harness.settings import Settings
from workers.adapters import adapter_for
from workers.app import TASK_RUN_ATTEMPT, app, current_settings
from workers.attempt import Timing, run_attempt
from workers.slots import FileSlots, RedisSlots, Slots
from workers.transport import Transport, connect_for

__all__ = ["forget_leftovers", "run_attempt_task", "slots_backend", "timing_for"]

_transports: dict[tuple, Transport] = {}
_transports_lock = threading.Lock()
_slots: tuple[tuple, Slots] | None = None
_slots_lock = threading.Lock()


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
    forget_leftovers()


@worker_process_init.connect
def _fresh_process(**_: object) -> None:
    # A forked pool child must not share its parent's SSH sockets; and SIGTERM (revoke with
    # terminate) must unwind through the attempt's cleanup, which kills the remote process group.
    _transports.clear()

    def _term(signum: int, frame: object) -> None:
        raise SystemExit(f"terminated by signal {signum}")

    signal.signal(signal.SIGTERM, _term)


@app.task(name=TASK_RUN_ATTEMPT, bind=True, acks_late=True)
def run_attempt_task(self: Task, request: dict) -> dict:
    # An agent kind this worker does not know fails here, in validation (harness.agents declares the kinds an
    # AgentConfig admits, and every declared kind has an adapter), so adapter_for() below cannot miss.
    req = AttemptRequest.model_validate(request)
    settings = current_settings()
    worker = self.request.hostname or ""
    lease = slots_backend(settings).acquire(req.host.name, req.host.slots)
    try:
        adapter = adapter_for(req.cell.agent, req.agent)
        transport = _transport(req.host)
        # run_attempt returns every harness failure of the lifecycle as a result, never raises one.
        slot = lease.slot if lease is not None else None
        result = run_attempt(transport, req, adapter, timing=timing_for(settings), worker=worker, slot=slot)
        # Large artifacts go beside the result on Redis as raw bytes, not base64 inside it (harness/blobs.py).
        from harness.blobs import blobs_for

        blobs = blobs_for(settings.celery_backend)
        if blobs is not None and req.task_id:
            result = blobs.offload(result, req.namespace, req.task_id)
        return result.model_dump(mode="json")
    finally:
        if lease is not None:
            lease.release()
