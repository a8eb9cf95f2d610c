"""The coordinator's loop: send attempts to host queues, gather results, retry harness failures.

- At most ``slots`` attempts of this sweep are in flight per host, plus ``ahead`` (1 on Redis), so every host's
  queue stays short and each host gets work as soon as it frees (the workers' slot leases enforce the limit across
  sweeps, processes and machines; this only keeps the fleet busy without piling up). The one sent ahead waits in a
  worker for a slot, which the host's earlier attempt gives back as soon as its agent ended and its workspace is packed
  (and checked): the next agent starts while the earlier attempt is collected and recorded.
- An attempt that ``harness.core.failures.classify`` calls a retried harness failure (its own status, or its
  grade: a real agent that left no transcript, a dead shell) is tried again as a new attempt after a
  backoff, up to the cell's last allowed attempt; every attempt is kept. Any other result is final: a
  model result is never retried away.
- One bad delivery never stops the sweep: a result the store refuses (corrupt or refused artifacts, a
  write error) becomes that attempt's harness failure, and every other host goes on.
- Results are recorded by this process alone (the single writer), once per (cell, attempt), and a
  result is forgotten in the backend only after its record is durable.
- An outage of the queue (Redis restarting, a network blip) is ridden out (``harness.coordinator.outage``): every read
  and send waits with back-off and is made again, the progress says so; past ``FLEET_BROKER_OUTAGE_S`` the
  attempts in flight stay ``dispatched`` (their results, stored by the workers later, are taken by
  ``fleet resume``), the sweep is ``interrupted`` and ``BrokerOutage`` says how to resume.
- Stopped by Ctrl-C, SIGTERM or SIGHUP, the loop revokes what is in flight, records each such attempt
  (its result if it already came, else ``revoked``) and leaves the sweep ``interrupted``: no cell stays
  ``running``.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Callable

from celery import Celery
from celery.exceptions import WorkerLostError
from celery.result import AsyncResult

from pathlib import Path

from harness.core.timebudget import AttemptBudget
from harness.core.catalog import render
from harness.core.checks.spec import load_checks
from harness.core.diskfull import is_disk_full
from harness.core.errors import BrokerOutage, DispatchError, FleetError, InfrastructureError, StoreError
from harness.core.failures import is_retried
from harness.core.inventory import Inventory
from harness.grading import Grade, evidence_from_attempt, grade
from harness.coordinator.noworker import Waiting, WorkerWatch
from harness.coordinator.outage import Outage
from harness.core.records import AttemptResult, AttemptSummary, Cell, utc_now
from harness.core.sweep import AttemptRequest, SweepRecord
from harness.store import SweepWriter
from harness.core.version import harness_commit
from harness.coordinator.wakeup import Sleep, Wakeup
from workers.app import TASK_RUN_ATTEMPT, WAITING, queue_for
from workers.blobs import BlobStore, MissingBlob, blobs_for

__all__ = ["Dispatcher", "Event", "Planned", "RetryPolicy", "task_id_for", "grade_attempt", "harness_failure", "record_result",
           "result_from_backend", "forget_result", "settle_attempt", "take_stored"]


@dataclass(frozen=True)
class RetryPolicy:
    """How harness failures are retried: ``max_attempts`` in all, waiting ``backoff_s[k]`` before retry k+1."""

    max_attempts: int = 3
    backoff_s: tuple[float, ...] = (5.0, 30.0, 120.0)

    def delay(self, failed_attempt: int) -> float:
        return self.backoff_s[min(failed_attempt - 1, len(self.backoff_s) - 1)]


@dataclass(frozen=True)
class Planned:
    """One attempt to run, and the last attempt number its cell may reach by retries in this run."""

    cell: Cell
    attempt: int
    last_attempt: int


@dataclass
class Event:
    """Something the progress display wants to know."""

    kind: str  # dispatched | started | recorded | retry_scheduled | warning
    cell: Cell
    attempt: int
    result: AttemptResult | None = None
    delay_s: float = 0.0
    final: bool = False
    """For ``recorded``: no retry follows, the cell is settled in this run."""
    text: str = ""
    """For ``warning``: what went wrong, in one line."""
    grade: str = ""
    """For ``recorded``: the attempt's grade, when it could be graded."""


def task_id_for(sweep_id: str, cell_id: str, attempt: int, uid: str = "") -> str:
    """Stable task id: a delivered-twice task and its result are recognised as the same attempt. The sweep's uid
    keeps two sweeps of one id (two results directories, one broker, the same second) apart."""
    return f"{sweep_id}.{uid}:{cell_id}:a{attempt}" if uid else f"{sweep_id}:{cell_id}:a{attempt}"


@dataclass
class _InFlight:
    cell: Cell
    attempt: int
    async_result: AsyncResult
    started: bool = False
    taken: bool = False
    """A worker took it and waits for the host's slot (the task's WAITING state, workers/tasks.py)."""
    sent_at: float = field(default_factory=time.monotonic)


@dataclass
class Dispatcher:
    app: Celery
    writer: SweepWriter
    sweep: SweepRecord
    inventory: Inventory
    namespace: str = ""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_event: Callable[[Event], None] = lambda e: None
    poll_s: float = 0.2
    outage: Outage = field(default_factory=lambda: Outage(limit_s=0))
    """How an unreachable queue is waited out (none by default: an error at once)."""
    internal_error: Callable[[str], BaseException | None] = lambda task_id: None
    """The embedded worker's errors outside a task's body, by task id (``harness.coordinator.embedded.internal_error``)."""
    watch: WorkerWatch | None = None
    """Says which host queues no worker consumes, and when to give up on them (``harness.coordinator.noworker``; Redis only)."""
    withdraw: Callable[[str, set[str]], None] = lambda queue, task_ids: None
    """Takes tasks given up on back from a host's queue (``harness.coordinator.noworker.withdraw``)."""
    blobs: "BlobStore | None" = None
    """Where large artifacts of results are kept beside them (workers/blobs.py; Redis backends only)."""
    ahead: int = 0
    """Attempts sent to a host beyond its slots, each waiting in a worker for the slot the host's earlier attempt
    gives back when its agent ends."""
    wakeup: Wakeup = field(default_factory=Sleep)
    """How the loop waits ``poll_s`` between looks: woken early when a result is stored (``harness.coordinator.wakeup``)."""

    def __post_init__(self) -> None:
        self._waiting: dict[str, deque[tuple[Cell, int]]] = defaultdict(deque)
        self._retries: list[tuple[float, int, Cell, int]] = []
        self._seq = itertools.count()
        self._in_flight: dict[str, _InFlight] = {}
        self._per_host: dict[str, int] = defaultdict(int)
        # Last attempt number each cell may reach in this run (the coordinator decides: resume keeps budgets).
        self._limit: dict[str, int] = {}

    # -- public --------------------------------------------------------------------------------------
    def run(self, planned: list[Planned]) -> None:
        """Run the planned attempts to completion, retrying harness failures within each cell's limit."""
        for p in planned:
            self._limit[p.cell.id] = p.last_attempt
            self._waiting[p.cell.host].append((p.cell, p.attempt))
        # What recording an attempt imports (grading, 40 ms and more) is loaded before the first attempt goes out, not
        # while the first record runs beside a host's next start. This module's top imports it; here it is made sure of.
        from harness.core.failures import classify  # noqa: F401  # lazy: no, a preload, before the first send
        from harness.grading import grade  # noqa: F401  # lazy: no, a preload, before the first send
        from harness.grading.scale import shown_grade  # noqa: F401  # lazy: no, a preload, before the first send

        self.writer.set_status(self.sweep, "running")
        try:
            while self._waiting_any() or self._in_flight or self._retries:
                self._release_due_retries()
                self._dispatch_free_slots()
                # What was dispatched without a flush (a burst to every host at the start) goes to disk in one fsync.
                self.writer.sync_journal()
                progressed = self._poll()
                if self.watch is not None:
                    self._watch_workers()
                if not progressed:
                    # What was dispatched without a flush goes to disk now, while nothing waits on this process.
                    self.writer.sync_journal()
                    self.wakeup.wait(self.poll_s, self._in_flight.keys())
        except BrokerOutage as exc:
            # Nothing is settled: a worker may still finish and store its result once the queue is back, and
            # `fleet resume` takes it then (a revoke or a `revoked` record now would throw it away).
            self.writer.set_status(self.sweep, "interrupted")
            n = len(self._in_flight)
            for f in self._in_flight.values():
                drop_quietly(f.async_result)
            raise BrokerOutage(f"{exc}; sweep {self.sweep.id} interrupted with {n} attempt(s) in flight, whose "
                               f"results `fleet resume {self.sweep.id}` takes when the queue is back") from exc
        except Exception as exc:
            if not is_disk_full(exc):
                self._settle_in_flight(exc)
                self.writer.set_status(self.sweep, "interrupted")
                raise
            # A full disk: settling would only fail to write, or record `revoked` over results that came. The
            # attempts in flight stay `dispatched` with their results in the backend, for `fleet resume`.
            for f in self._in_flight.values():
                drop_quietly(f.async_result)
            try:
                self.writer.set_status(self.sweep, "interrupted")
            except StoreError:
                pass  # readers call a sweep nobody writes any more interrupted anyway
            raise
        except BaseException as exc:
            self._settle_in_flight(exc)
            self.writer.set_status(self.sweep, "interrupted")
            raise
        self.writer.set_status(self.sweep, "finished")

    # -- internals -------------------------------------------------------------------------------------
    def _waiting_any(self) -> bool:
        return any(self._waiting.values())

    def _release_due_retries(self) -> None:
        now = time.monotonic()
        while self._retries and self._retries[0][0] <= now:
            _, _, cell, attempt = heapq.heappop(self._retries)
            self._waiting[cell.host].appendleft((cell, attempt))

    def _dispatch_free_slots(self) -> None:
        for host in self._waiting:
            self._dispatch_host(host)

    def _dispatch_host(self, host: str) -> None:
        queue = self._waiting.get(host)
        slots = self.inventory.hosts[host].slots
        while queue and self._per_host[host] < slots + self.ahead:
            cell, attempt = queue.popleft()
            self._send(cell, attempt)

    def _watch_workers(self) -> None:
        """Hand the watch the hosts whose attempts wait on their queue unstarted; give up on those it returns."""
        assert self.watch is not None
        waiting: dict[str, Waiting] = {}
        # One a worker took that waits for its host's slot (WAITING: sent ahead of the slots) has a worker.
        for f in self._in_flight.values():
            if not f.started and not f.taken:
                w = waiting.get(f.cell.host)
                waiting[f.cell.host] = Waiting(min(w.since, f.sent_at), w.count + 1) if w else Waiting(f.sent_at, 1)
        for host in self.watch.check(waiting):
            self._give_up(host)

    def _give_up(self, host: str) -> None:
        """No worker consumed the host's queue for --no-worker-timeout: record every cell of the host still to run
        in this run as ``no_worker`` (its attempts waiting on the queue are withdrawn first), so the sweep ends."""
        assert self.watch is not None
        queue = queue_for(host, self.namespace)
        error = (f"no worker consumed {queue} for {self.watch.unserved_for(host):.0f} s (--no-worker-timeout "
                 f"{self.watch.timeout_s:g}); nothing ran on the host")
        waiting = {tid: f for tid, f in self._in_flight.items() if f.cell.host == host and not f.started}
        if waiting:
            self.withdraw(queue, set(waiting))
        todo = [(f.cell, f.attempt) for f in waiting.values()]
        for tid, f in waiting.items():
            del self._in_flight[tid]
            self._per_host[host] -= 1
            drop_quietly(f.async_result)
        todo += list(self._waiting.pop(host, deque()))
        kept = [r for r in self._retries if r[2].host != host]
        todo += [(cell, attempt) for _, _, cell, attempt in self._retries if cell.host == host]
        self._retries[:] = kept
        heapq.heapify(self._retries)
        for cell, attempt in todo:
            self._limit[cell.id] = attempt  # given up: no retry follows in this run
            self._record(cell, harness_failure(self.sweep.id, cell, attempt, "no_worker", error))
        if todo:
            self.watch.on_warning(f"{error}: {len(todo)} cell(s) of host {host} recorded as HARNESS_FAILURE(no_worker)")

    def _request(self, cell: Cell, attempt: int, task_id: str) -> AttemptRequest:
        host = self.inventory.hosts[cell.host]
        item = self.sweep.items[cell.item]
        return AttemptRequest(
            sweep_id=self.sweep.id,
            sweep_uid=self.sweep.uid,
            cell=cell,
            attempt=attempt,
            host=host,
            agent=host.agents[cell.agent],
            item=item,
            prompt=render(item.prompt, cell.values),
            harness_commit=harness_commit(),
            checks=load_checks(Path(item.check_folder), item.checks, cell.values) if item.checks and item.check_folder else [],
            namespace=self.namespace,
            task_id=task_id,
        )

    def _send(self, cell: Cell, attempt: int) -> None:
        task_id = task_id_for(self.sweep.id, cell.id, attempt, self.sweep.uid)
        req = self._request(cell, attempt, task_id)
        item = self.sweep.items[cell.item]
        # Sent ahead (every slot of the host taken): it waits in its worker for a slot as long as the host's attempts in
        # flight may hold theirs (the longest one's hard time limit), before its own time starts.
        behind = (max(AttemptBudget.for_item(self.sweep.items[f.cell.item]).hard_limit_s
                      for f in self._in_flight.values() if f.cell.host == cell.host)
                  if self._per_host[cell.host] >= self.inventory.hosts[cell.host].slots else 0)
        soft, hard = AttemptBudget.for_item(item).task_limits(behind)
        # Record the dispatch before sending: if we die in between, resume sees an attempt to settle. Written, not
        # flushed: the last attempt's record flushes it right after (or sync_journal before the loop waits), and the
        # host does not wait for a disk flush between two agents (store.SweepWriter.dispatched).
        self.writer.dispatched(
            self.sweep, cell.id, AttemptSummary(attempt=attempt, task_id=task_id, status="dispatched", dispatched_at=utc_now()),
            durable=False)
        args = [req.model_dump(mode="json")]
        try:
            # Sent again after an outage with the same task id: a task that did get out is recorded once anyway.
            ar = self.outage.call(f"sending {cell.id} attempt {attempt}", lambda: self.app.send_task(
                TASK_RUN_ATTEMPT,
                args=args,
                task_id=task_id,
                # The lifecycle enforces the item's timeout itself; these limits (harness/core/timebudget.py) catch a
                # stuck worker.
                soft_time_limit=soft,
                time_limit=hard,
                # What logs, `celery inspect` and monitors show of the task: its cell and attempt. Celery's own is a
                # repr of the whole request (the agent's env, the prompt), made on the path of every send (0.2 ms
                # and more of each host's wait between two agents).
                argsrepr=f"({cell.id!r}, attempt {attempt})",
                kwargsrepr="{}",
            ))
        except BrokerOutage:
            raise
        except Exception as exc:  # kombu/redis errors: the queue itself failed
            raise DispatchError(f"cannot send {cell.id} attempt {attempt} to the queue: {exc}") from exc
        self._in_flight[task_id] = _InFlight(cell, attempt, ar)
        self._per_host[cell.host] += 1
        self.on_event(Event("dispatched", cell, attempt))

    def _poll(self) -> bool:
        """Look at every attempt in flight once; True if anything finished."""
        progressed = False
        for task_id, f in list(self._in_flight.items()):
            message = self.wakeup.stored(task_id)
            if message is not None:
                take_stored(f.async_result, message)
            try:
                state = self.outage.call("reading results", lambda: f.async_result.state)
            except BrokerOutage:
                raise
            except Exception as exc:
                raise DispatchError(f"cannot read results from the result backend: {exc}") from exc
            if state not in ("SUCCESS", "FAILURE", "REVOKED") and (lost := self.internal_error(task_id)) is not None:
                if is_disk_full(lost):
                    raise StoreError(f"the embedded worker cannot store the result of {f.cell.id} attempt {f.attempt}: "
                                     f"{str(lost).splitlines()[0] if str(lost) else type(lost).__name__}") from lost
                self._record(f.cell, harness_failure(self.sweep.id, f.cell, f.attempt, "worker_error",
                                                     f"the worker could not store the attempt's result: {lost}"))
                del self._in_flight[task_id]
                self._per_host[f.cell.host] -= 1
                progressed = True
                continue
            if state == WAITING:
                f.taken = True
            if state == "STARTED" and not f.started:
                f.started = True
                self.on_event(Event("started", f.cell, f.attempt))
            if state not in ("SUCCESS", "FAILURE", "REVOKED"):
                continue
            # The host is free: its next attempt goes out first, and runs while this one is read and recorded (the
            # result checked, its files written and synced, the grade), so the host does not wait on this process
            # between two agents.
            self._per_host[f.cell.host] -= 1
            self._dispatch_host(f.cell.host)
            try:
                result = self.outage.call("reading results", lambda: self._result_of(f, state))
            except BrokerOutage:
                raise
            except Exception as exc:
                raise DispatchError(f"cannot read results from the result backend: {exc}") from exc
            self._record(f.cell, result)
            # Only now that the record is durable may the backend drop the result.
            del self._in_flight[task_id]
            forget_result(f.async_result, self.blobs, self.namespace)
            progressed = True
        return progressed

    def _result_of(self, f: _InFlight, state: str) -> AttemptResult:
        if state == "SUCCESS":
            return result_from_backend(f.async_result.result, self.sweep.id, f.cell, f.attempt, self.blobs,
                                       self.namespace, f.async_result.id)
        failure = f.async_result.result
        if isinstance(failure, WorkerLostError) or "WorkerLostError" in type(failure).__name__:
            reason, error = "worker_lost", f"the worker running the attempt died: {failure}"
        elif state == "REVOKED":
            reason, error = "revoked", "the attempt was revoked before it finished"
        else:
            reason, error = "worker_error", f"the worker failed: {type(failure).__name__}: {failure}"
        return harness_failure(self.sweep.id, f.cell, f.attempt, reason, error)

    def _record(self, cell: Cell, result: AttemptResult) -> None:
        recorded = record_result(self.writer, self.sweep, cell, result, self.on_event)
        if recorded is None:
            return
        result, grade = recorded
        # The summary's failure code is classify()'s answer, kept current by record_attempt and record_grade.
        summary = next(a for a in self.sweep.attempts[cell.id] if a.attempt == result.attempt)
        retry = (bool(summary.failure) and is_retried(summary.failure)
                 and result.attempt < self._limit.get(cell.id, self.retry.max_attempts))
        self.on_event(Event("recorded", cell, result.attempt, result=result, final=not retry, grade=grade))
        if retry:
            delay = self.retry.delay(result.attempt)
            heapq.heappush(self._retries, (time.monotonic() + delay, next(self._seq), cell, result.attempt + 1))
            self.on_event(Event("retry_scheduled", cell, result.attempt + 1, delay_s=delay))

    def _settle_in_flight(self, why: BaseException) -> None:
        """Stopping: revoke what runs (the worker kills the remote agent's group) and record every attempt in
        flight, so none stays ``running``: its result if it already arrived, else ``revoked``."""
        name = type(why).__name__
        for task_id, f in list(self._in_flight.items()):
            try:
                state: str | None = f.async_result.state
            except Exception:  # noqa: BLE001 - the backend may be the reason we stop
                state = None
            try:
                settle_attempt(self.app, self.writer, self.sweep, f.cell, f.attempt, f.async_result, state, "revoked",
                               f"the sweep was stopped ({name}) before this attempt's result came; the attempt was "
                               "revoked and a late result is discarded", self.on_event, namespace=self.namespace)
            except FleetError:
                pass  # the store itself failed: resume settles this attempt from the journal's `dispatched` entry
            drop_quietly(f.async_result)
            del self._in_flight[task_id]


def settle_attempt(app: Celery, writer: SweepWriter, sweep: SweepRecord, cell: Cell, attempt: int,
                   async_result: AsyncResult, state: str | None, reason: str, error: str,
                   on_event: Callable[[Event], None] = lambda e: None, namespace: str = "") -> None:
    """An attempt nobody will wait for any more (its sweep is stopping, or its coordinator went away): record its
    result if it already came (``state`` SUCCESS), else revoke it (the worker kills the agent's group) and record
    it as the harness failure ``reason``. Either way the backend forgets the task afterwards."""
    blobs = blobs_for(str(app.conf.result_backend or ""))
    if state == "SUCCESS":
        result = result_from_backend(async_result.result, sweep.id, cell, attempt, blobs, namespace, async_result.id)
    else:
        try:
            app.control.revoke(async_result.id, terminate=True, signal="SIGTERM")
        except Exception:  # noqa: BLE001 - the broker may be gone; the launcher's deadline is the backstop
            pass
        result = harness_failure(sweep.id, cell, attempt, reason, error)
    record_result(writer, sweep, cell, result, on_event)
    forget_result(async_result, blobs, namespace)

def result_from_backend(data: object, sweep_id: str, cell: Cell, attempt: int, blobs: "BlobStore | None" = None,
                        namespace: str = "", task_id: str = "") -> AttemptResult:
    """A worker's result, checked: it must parse, and be the attempt that was sent (its sweep, cell and attempt
    number decide where its files go), and the artifacts it keeps beside it on Redis (workers/blobs.py) must be
    there, this task's, and what it says they are. Anything else is that attempt's ``worker_error`` (or
    ``artifact_corrupt``), never a record of it."""
    try:
        result = AttemptResult.model_validate(data)
    except ValueError as exc:  # pydantic's ValidationError: a worker of another version, or a hostile one
        return harness_failure(sweep_id, cell, attempt, "worker_error",
                               f"the worker's result is not a valid attempt result: {str(exc).splitlines()[0]}")
    if (result.sweep_id, result.cell_id, result.attempt) != (sweep_id, cell.id, attempt):
        return harness_failure(sweep_id, cell, attempt, "worker_error",
                               f"the worker answered for sweep {result.sweep_id!r}, cell {result.cell_id!r}, attempt "
                               f"{result.attempt}: not the attempt it was sent")
    if any(a.blob is not None for a in result.artifacts):
        if blobs is None:
            return harness_failure(sweep_id, cell, attempt, "worker_error", "the worker's result keeps artifacts in "
                                   "Redis blobs, and this coordinator's result backend is not Redis")
        try:
            blobs.resolve(result, namespace, task_id)
        except MissingBlob as exc:
            return harness_failure(sweep_id, cell, attempt, "artifact_corrupt", f"an artifact of the result: {exc}")
    return result


def take_stored(async_result: AsyncResult, message: bytes) -> None:
    """A result the backend published as it stored it (``harness.coordinator.wakeup``), kept by ``async_result`` as if it had read
    it: its state and result are not read from the backend again (a round trip on the path between a host's two
    agents). A state that is not final (STARTED) is not kept, as a read would not keep it; a message that does not
    decode, or names another task, is left to the read."""
    try:
        meta = async_result.backend.decode_result(message)
        if isinstance(meta, dict) and meta.get("task_id") == async_result.id:
            async_result._maybe_set_cache(meta)  # what Celery's own result consumer does with such a message
    except Exception:  # noqa: BLE001 - the read below takes it from the backend, and says what is wrong with it
        pass


def drop_quietly(async_result: AsyncResult) -> None:
    """Let go of a result the coordinator no longer waits for without a word: Celery's ``AsyncResult.__del__``
    unsubscribes from the backend, and with Redis away that prints an ignored exception's traceback on the
    terminal (at exit, or whenever it is collected)."""
    try:
        if async_result.backend is not None:
            async_result.backend.remove_pending_result(async_result)
    except Exception:  # noqa: BLE001 - the backend is away: there is nothing to unsubscribe from any more
        pass
    async_result.backend = None


def forget_result(async_result: AsyncResult, blobs: "BlobStore | None" = None, namespace: str = "") -> None:
    """Drop a recorded attempt's result from the backend, and its blobs (workers/blobs.py). A backend that cannot
    (full disk, gone) keeps them: a later ``resume`` finds that attempt already recorded and changes nothing."""
    if blobs is not None:
        try:
            data = async_result.result if async_result.state == "SUCCESS" else None
            count = len(data.get("artifacts") or []) if isinstance(data, dict) else 0
        except Exception:  # noqa: BLE001 - the backend is away: the blobs expire with the result
            count = 0
        blobs.forget(namespace, async_result.id, count)
    try:
        async_result.forget()
    except Exception:  # noqa: BLE001 - the record is already durable; nothing is lost
        pass


def record_result(writer: SweepWriter, sweep: SweepRecord, cell: Cell, result: AttemptResult,
                  on_event: Callable[[Event], None] = lambda e: None) -> tuple[AttemptResult, str] | None:
    """Record one attempt's result and grade it; returns the result as recorded and its grade's name ("" when it
    could not be graded), or None when that attempt was already recorded (a second delivery). A delivery the store refuses (corrupt or
    refused artifacts, a write error) is recorded as the attempt's harness failure instead, so one bad
    delivery never stops the sweep. Raises only when even that record cannot be written."""
    grader = _grader(sweep, cell)
    try:
        graded = writer.record_graded(sweep, result, grader)
        if graded is None:
            return None
    except Exception as exc:  # noqa: BLE001 - whatever one delivery does, it is that attempt's failure
        if is_disk_full(exc):
            # Not this delivery's fault, and the next would fail the same: stop (its result stays in the backend
            # and the attempt `dispatched`, so `fleet resume` records it once there is room).
            raise
        if isinstance(exc, InfrastructureError):
            reason = exc.reason
        else:
            reason = "store_error"
            if not isinstance(exc, StoreError):
                exc = StoreError(f"cannot store the delivery: {type(exc).__name__}: {exc}")
        on_event(Event("warning", cell, result.attempt, text=f"{cell.id} attempt {result.attempt}: {exc}"))
        failed = harness_failure(sweep.id, cell, result.attempt, reason, str(exc))
        # What is known of the run stays on record; only the delivery's files are refused.
        failed = failed.model_copy(update={
            k: getattr(result, k) for k in ("model", "agent_command", "agent_version", "agent_kind", "harness_commit",
                                            "worker", "workspace", "host_facts", "started_at", "agent_started_at",
                                            "ended_at", "duration_s", "exit_code")})
        graded = writer.record_graded(sweep, failed, grader)
        if graded is None:
            return None
        result = failed
    if graded.fault is not None:
        raise graded.fault  # the grader's own fault, not this delivery's: the sweep stops, the attempt is kept
    if graded.grade is not None:
        return result, graded.grade.grade
    assert graded.error is not None
    if is_disk_full(graded.error):
        raise graded.error  # resume grades an attempt recorded but not graded
    on_event(Event("warning", cell, result.attempt,
                   text=f"{cell.id} attempt {result.attempt}: cannot grade: {graded.error}"))
    return result, ""


def _grader(sweep: SweepRecord, cell: Cell) -> "Callable[[Path], Grade]":
    """How an attempt of ``cell`` is graded: from its stored folder, by its item's rules."""
    item = sweep.items[cell.item]
    return lambda folder: grade(evidence_from_attempt(folder, item))


def grade_attempt(writer: SweepWriter, sweep: SweepRecord, cell: Cell, attempt: int) -> "Grade":
    """Grade a stored attempt from its folder and record the grade."""
    g = _grader(sweep, cell)(writer.store.attempt_dir(sweep.id, cell.id, attempt))
    writer.record_grade(sweep, cell.id, attempt, g)
    return g


def harness_failure(sweep_id: str, cell: Cell, attempt: int, reason: str, error: str) -> AttemptResult:
    """A result for an attempt that never reported one itself (worker lost, abandoned, revoked, refused)."""
    now = utc_now()
    return AttemptResult(
        sweep_id=sweep_id, cell_id=cell.id, attempt=attempt, status="harness_failure", reason=reason, error=error,
        host=cell.host, agent=cell.agent, item=cell.item, values=cell.values, seed=cell.seed,
        started_at=now, ended_at=now,
    )
