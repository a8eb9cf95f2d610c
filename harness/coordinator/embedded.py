"""The embedded default's worker: a real Celery ``WorkController`` on a thread of the coordinator.

It consumes the same queues through the same broker code as ``fleet worker`` does in a fleet; only
the broker (SQLite) and the pool (threads) differ, so a new user's first sweep exercises the real path.
"""

from __future__ import annotations

import fcntl
import logging
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import warnings

from celery import Celery
from celery._state import _set_task_join_will_block, task_join_will_block
from celery.signals import task_internal_error
from kombu import Queue
from celery.worker import WorkController
from celery.worker import state as worker_state

from harness.core.errors import DispatchError
from workers.attempt import abort_running
from workers.tasks import forget_leftovers

__all__ = ["embedded_worker", "internal_error"]

_internal_errors: dict[str, BaseException] = {}
_internal_lock = threading.Lock()


def internal_error(task_id: str) -> BaseException | None:
    """The error that kept the embedded worker from storing a task's result (a full disk under its SQLite
    backend), or None. Celery only warns of it, and the task would stay STARTED for ever: the coordinator,
    which shares this process, asks here instead."""
    with _internal_lock:
        return _internal_errors.get(task_id)


def _on_internal_error(sender: object = None, task_id: str | None = None, exception: BaseException | None = None,
                       **_: object) -> None:
    if task_id and exception is not None:
        with _internal_lock:
            _internal_errors[task_id] = exception


class _Controller(WorkController):
    def __init__(self, *args, **kwargs) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer) -> None:
        self.ready.set()


def _declare_queues(app: Celery, queues: list[str], lock_dir: Path) -> None:
    """Create the queues' rows in the SQLite broker one process at a time. Two coordinators starting at once on
    one results directory would otherwise both insert the same queue row, and the loser's worker dies on the
    UNIQUE constraint before it consumes anything."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / ".declare.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with app.connection_for_write() as conn:
                channel = conn.default_channel
                for name in queues:
                    Queue(name).bind(channel).declare()
        except Exception as exc:  # noqa: BLE001 - the broker's own errors, translated here
            raise DispatchError(f"cannot set up the embedded queue under {lock_dir}: {exc}") from exc
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def embedded_worker(app: Celery, queues: list[str], concurrency: int, lock_dir: Path | None = None) -> Iterator[WorkController]:
    """Run a worker on a thread while the block runs; stop it (finishing nothing new) afterwards."""
    if lock_dir is not None:
        _declare_queues(app, queues, lock_dir)
    logging.getLogger("celery").setLevel(logging.WARNING)
    # Celery reports an error outside a task's body (its result could not be stored) as a RuntimeWarning with
    # a traceback, on this terminal; the coordinator hears of it through task_internal_error and says it once.
    warnings.filterwarnings("ignore", message="Exception raised outside body", category=RuntimeWarning)
    task_internal_error.connect(_on_internal_error, weak=False)
    logging.getLogger("kombu").setLevel(logging.WARNING)
    # Making a worker marks the whole process as one (a task's join would block): Celery's thread pool says so for
    # every thread, the coordinator's own included. Given back when the worker stops, so a process that goes on
    # after its sweep (a script, a test, the next command) may wait on a result again.
    joins_blocked = task_join_will_block()
    worker = _Controller(
        app=app,
        hostname=f"embedded@{socket.gethostname()}",
        concurrency=max(1, concurrency),
        pool="threads",
        queues=queues,
        loglevel="WARNING",
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
    )
    errors: list[BaseException] = []

    def _run() -> None:
        try:
            worker.start()
        except BaseException as exc:  # noqa: BLE001 - reported to the coordinator below
            errors.append(exc)
            worker.ready.set()

    thread = threading.Thread(target=_run, name="fleet-embedded-worker", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    # The worker logs a failed start and returns instead of raising: watch the thread as well.
    while not worker.ready.wait(0.2) and thread.is_alive() and time.monotonic() < deadline:
        pass
    if not worker.ready.is_set() or errors:
        _set_task_join_will_block(joins_blocked)
        raise DispatchError(f"the embedded worker did not start: {errors[0] if errors else 'timed out'}")
    try:
        yield worker
    except BaseException:
        # Stopped (Ctrl-C, SIGTERM, a broken store): a revoke cannot stop a pool thread, so the attempts running
        # here are told to kill their agents and unwind, or the process would wait on them to the item's timeout.
        abort_running("the coordinator was stopped")
        raise
    finally:
        worker_state.should_terminate = 0
        thread.join(30)
        forget_leftovers()
        worker_state.should_terminate = None
        task_internal_error.disconnect(_on_internal_error)
        _set_task_join_will_block(joins_blocked)
