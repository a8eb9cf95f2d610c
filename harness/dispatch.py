"""The coordinator's loop: send attempts to host queues, gather results, retry harness failures.

- At most ``slots`` attempts of this sweep are in flight per host, so every host's queue stays short
  and each host gets work as soon as it frees (the workers' slot leases enforce the limit across
  sweeps, processes and machines; this only keeps the fleet busy without piling up).
- A ``harness_failure`` is retried as a new attempt after a backoff, up to ``max_attempts`` attempts
  per cell; every attempt is kept. Any other result is final: a model result is never retried away.
- Results are recorded by this process alone (the single writer), once per (cell, attempt).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Callable

from celery.exceptions import WorkerLostError
from celery.result import AsyncResult

from pathlib import Path

from harness.catalog import render
from harness.checks.spec import load_checks
from harness.errors import DispatchError
from harness.inventory import Inventory
from harness.records import AttemptRequest, AttemptResult, AttemptSummary, Cell, SweepRecord, utc_now
from harness.store import SweepWriter
from harness.version import harness_commit

__all__ = ["Dispatcher", "Event", "RetryPolicy", "task_id_for"]


@dataclass(frozen=True)
class RetryPolicy:
    """How harness failures are retried: ``max_attempts`` in all, waiting ``backoff_s[k]`` before retry k+1."""

    max_attempts: int = 3
    backoff_s: tuple[float, ...] = (5.0, 30.0, 120.0)

    def delay(self, failed_attempt: int) -> float:
        return self.backoff_s[min(failed_attempt - 1, len(self.backoff_s) - 1)]


@dataclass
class Event:
    """Something the progress display wants to know."""

    kind: str  # dispatched | started | recorded | retry_scheduled
    cell: Cell
    attempt: int
    result: AttemptResult | None = None
    delay_s: float = 0.0
    final: bool = False
    """For ``recorded``: no retry follows, the cell is settled in this run."""


def task_id_for(sweep_id: str, cell_id: str, attempt: int) -> str:
    """Stable task id: a delivered-twice task and its result are recognised as the same attempt."""
    return f"{sweep_id}:{cell_id}:a{attempt}"


@dataclass
class _InFlight:
    cell: Cell
    attempt: int
    async_result: AsyncResult
    started: bool = False


@dataclass
class Dispatcher:
    app: object
    writer: SweepWriter
    sweep: SweepRecord
    inventory: Inventory
    namespace: str = ""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_event: Callable[[Event], None] = lambda e: None
    poll_s: float = 0.2

    def __post_init__(self) -> None:
        self._waiting: dict[str, deque[tuple[Cell, int]]] = defaultdict(deque)
        self._retries: list[tuple[float, int, Cell, int]] = []
        self._seq = itertools.count()
        self._in_flight: dict[str, _InFlight] = {}
        self._per_host: dict[str, int] = defaultdict(int)
        # Last attempt number each cell may reach in this run: a rerun or resume gets its own retries.
        self._limit: dict[str, int] = {}

    # -- public --------------------------------------------------------------------------------------
    def run(self, cells: list[tuple[Cell, int]]) -> None:
        """Run ``(cell, attempt number)`` pairs to completion, retrying harness failures."""
        for cell, attempt in cells:
            self._limit.setdefault(cell.id, attempt + self.retry.max_attempts - 1)
        for cell, attempt in cells:
            self._waiting[cell.host].append((cell, attempt))
        self.sweep.status = "running"
        self.writer.save_sweep(self.sweep)
        try:
            while self._waiting_any() or self._in_flight or self._retries:
                self._release_due_retries()
                self._dispatch_free_slots()
                if not self._poll():
                    time.sleep(self.poll_s)
        except BaseException:
            self.sweep.status = "interrupted"
            self.writer.save_sweep(self.sweep)
            raise
        self.sweep.status = "finished"
        self.sweep.finished_at = utc_now()
        self.writer.save_sweep(self.sweep)

    def revoke_in_flight(self) -> list[str]:
        """Stop what is running (the worker kills the remote process group); returns the task ids."""
        ids = list(self._in_flight)
        for tid in ids:
            self.app.control.revoke(tid, terminate=True, signal="SIGTERM")  # type: ignore[attr-defined]
        return ids

    # -- internals -------------------------------------------------------------------------------------
    def _waiting_any(self) -> bool:
        return any(self._waiting.values())

    def _release_due_retries(self) -> None:
        now = time.monotonic()
        while self._retries and self._retries[0][0] <= now:
            _, _, cell, attempt = heapq.heappop(self._retries)
            self._waiting[cell.host].appendleft((cell, attempt))

    def _dispatch_free_slots(self) -> None:
        for host, queue in self._waiting.items():
            slots = self.inventory.hosts[host].slots
            while queue and self._per_host[host] < slots:
                cell, attempt = queue.popleft()
                self._send(cell, attempt)

    def _request(self, cell: Cell, attempt: int, task_id: str) -> AttemptRequest:
        host = self.inventory.hosts[cell.host]
        item = self.sweep.items[cell.item]
        return AttemptRequest(
            sweep_id=self.sweep.id,
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
        task_id = task_id_for(self.sweep.id, cell.id, attempt)
        req = self._request(cell, attempt, task_id)
        item = self.sweep.items[cell.item]
        # Record the dispatch before sending: if we die in between, resume sees an attempt to settle.
        runs = self.sweep.attempts.setdefault(cell.id, [])
        runs.append(AttemptSummary(attempt=attempt, task_id=task_id, status="dispatched", dispatched_at=utc_now()))
        self.writer.save_sweep(self.sweep)
        try:
            ar = self.app.send_task(  # type: ignore[attr-defined]
                "fleet.run_attempt",
                args=[req.model_dump(mode="json")],
                task_id=task_id,
                # The lifecycle enforces the item's timeout itself; these limits catch a stuck worker.
                soft_time_limit=item.timeout_s + 600,
                time_limit=item.timeout_s + 900,
            )
        except Exception as exc:  # kombu/redis errors: the queue itself failed
            raise DispatchError(f"cannot send {cell.id} attempt {attempt} to the queue: {exc}") from exc
        self._in_flight[task_id] = _InFlight(cell, attempt, ar)
        self._per_host[cell.host] += 1
        self.on_event(Event("dispatched", cell, attempt))

    def _poll(self) -> bool:
        """Look at every attempt in flight once; True if anything finished."""
        progressed = False
        for task_id, f in list(self._in_flight.items()):
            try:
                state = f.async_result.state
            except Exception as exc:
                raise DispatchError(f"cannot read results from the result backend: {exc}") from exc
            if state == "STARTED" and not f.started:
                f.started = True
                self.on_event(Event("started", f.cell, f.attempt))
            if state not in ("SUCCESS", "FAILURE", "REVOKED"):
                continue
            result = self._result_of(f, state)
            f.async_result.forget()
            del self._in_flight[task_id]
            self._per_host[f.cell.host] -= 1
            self._record(f.cell, result)
            progressed = True
        return progressed

    def _result_of(self, f: _InFlight, state: str) -> AttemptResult:
        if state == "SUCCESS":
            return AttemptResult.model_validate(f.async_result.result)
        exc = f.async_result.result
        if isinstance(exc, WorkerLostError) or "WorkerLostError" in type(exc).__name__:
            reason, error = "worker_lost", f"the worker running the attempt died: {exc}"
        elif state == "REVOKED":
            reason, error = "revoked", "the attempt was revoked before it finished"
        else:
            reason, error = "worker_error", f"the worker failed: {type(exc).__name__}: {exc}"
        return harness_failure(self.sweep.id, f.cell, f.attempt, reason, error)

    def _record(self, cell: Cell, result: AttemptResult) -> None:
        if not self.writer.record_attempt(self.sweep, result):
            return
        grade_attempt(self.writer, self.sweep, cell, result.attempt)
        retry = (
            result.status == "harness_failure"
            and result.reason not in NOT_RETRIED
            and result.attempt < self._limit.get(cell.id, self.retry.max_attempts)
        )
        self.on_event(Event("recorded", cell, result.attempt, result=result, final=not retry))
        if retry:
            delay = self.retry.delay(result.attempt)
            heapq.heappush(self._retries, (time.monotonic() + delay, next(self._seq), cell, result.attempt + 1))
            self.on_event(Event("retry_scheduled", cell, result.attempt + 1, delay_s=delay))


def grade_attempt(writer: SweepWriter, sweep: SweepRecord, cell: Cell, attempt: int) -> str:
    """Grade a stored attempt from its folder and record the grade; returns the grade's name."""
    from harness.grading import evidence_from_attempt, grade

    folder = writer.store.attempt_dir(sweep.id, cell.id, attempt)
    g = grade(evidence_from_attempt(folder, sweep.items[cell.item]))
    writer.record_grade(sweep, cell.id, attempt, g)
    return g.grade


NOT_RETRIED = frozenset({"revoked", "agent_missing", "agent_unsuited"})
"""Harness failures a retry cannot mend: a revoked attempt (the user stopped it), a missing agent program, an
agent that cannot work with the host's setup."""


def harness_failure(sweep_id: str, cell: Cell, attempt: int, reason: str, error: str) -> AttemptResult:
    """A result for an attempt that never reported one itself (worker lost, abandoned, revoked)."""
    now = utc_now()
    return AttemptResult(
        sweep_id=sweep_id, cell_id=cell.id, attempt=attempt, status="harness_failure", reason=reason, error=error,
        host=cell.host, agent=cell.agent, item=cell.item, values=cell.values, seed=cell.seed,
        started_at=now, ended_at=now,
    )
