"""``fleet schedule service``: the coordinator service. It consumes the control queue beat fills and runs each
fired schedule's sweep with the Coordinator, then its report, comparison and notification.

- One sweep per schedule at a time, across every service of the namespace: the thread running a schedule's sweep
  holds ``<runs>/.schedules/<namespace>/<name>.lock`` (an flock the kernel releases if the service dies), and
  every read-change-write of a state file is done holding ``.state.lock`` there. A fire that comes while that
  schedule's sweep runs (in this service or another) is skipped, or queued to run when it ends (``on_late``;
  several queued fires are one), and the log and the notification say so.
- Each schedule's state is a file, ``<runs>/.schedules/<namespace>/<name>.json``, written before a fire's message
  is acknowledged: a service killed mid-sweep finds the sweep there when it starts again and resumes it
  (``Coordinator.resume``); one killed before it planned anything runs the sweep afresh.
- Schedules run side by side, each sweep in a thread of its own; the queue's own waits for a Redis outage are the
  coordinator's (FLEET_BROKER_OUTAGE_S). Stopping the service (SIGTERM) leaves its sweeps to be resumed so.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import sys
import threading
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from kombu import Exchange, Queue
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.core.catalog import load_catalog
from harness.coordinator.dispatch import RetryPolicy
from harness.coordinator.verbs import Coordinator, summary_failure
from harness.core.errors import FleetError, one_line
from harness.core.inventory import load_inventory
from harness.schedule.config import Schedule
from harness.schedule.notify import notify
from harness.schedule.summary import HarnessFailure, Regression, SweepSummary, summarize
from harness.core.settings import Settings, redact
from harness.store import Store, write_file
from harness.views.comparison import compare_sweeps, sweep_rate
from harness.views.report import write_report
from harness.views.sweeplist import previous_sweep, shown_status
from workers.app import TASK_FIRE_SCHEDULE, configure, control_queue

__all__ = ["STATE_SCHEMA_VERSION", "ScheduleState", "Service", "state_dir"]

STATE_SCHEMA_VERSION = 1
log = logging.getLogger("fleet.schedule")


class ScheduleState(BaseModel):
    """What the service knows of one schedule, kept across its restarts."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = STATE_SCHEMA_VERSION
    schedule: Schedule = Field(description="The definition the running (or last) sweep was fired with.")
    status: Literal["idle", "running"] = "idle"
    fired_at: str = Field("", description="The fire the running (or last) sweep answers.")
    sweep: str = Field("", description="The running (or last) sweep's id; '' before it is planned.")
    queued: str = Field("", description="A late fire waiting for the running sweep to end (on_late = queue).")
    queued_schedule: Schedule | None = Field(None, description="The queued fire's definition.")
    note: str = Field("", description="What the running sweep's notification says of a late fire.")


def state_dir(settings: Settings) -> Path:
    return settings.runs / ".schedules" / (settings.namespace or "default")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Service:
    settings: Settings
    say: Callable[[str], None] = lambda text: log.info(text)
    store: Store = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _threads: dict[str, threading.Thread] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.store = Store(self.settings.runs)
        state_dir(self.settings).mkdir(parents=True, exist_ok=True)

    # -- state files -----------------------------------------------------------------------------------
    def _path(self, name: str) -> Path:
        return state_dir(self.settings) / f"{name}.json"

    def load_state(self, name: str) -> ScheduleState | None:
        path = self._path(name)
        try:
            return ScheduleState.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            self.say(f"schedule {name}: cannot read {path}, starting from nothing: {one_line(str(exc))[:300]}")
            return None

    def save_state(self, state: ScheduleState) -> None:
        write_file(self._path(state.schedule.name), state.model_dump_json(indent=2).encode())

    # -- locks: one sweep per schedule, across services ----------------------------------------------------
    @contextlib.contextmanager
    def _state_lock(self) -> Iterator[None]:
        """This service's threads and every other service of the namespace take turns at the state files."""
        with self._lock:
            fd = os.open(state_dir(self.settings) / ".state.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _take(self, name: str) -> int | None:
        """The schedule's run lock (held while its sweep runs), or None when a thread of this or another service
        holds it. flock is per open file, so a second thread of this process is refused like another process."""
        fd = os.open(state_dir(self.settings) / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    # -- the service -----------------------------------------------------------------------------------
    def resume_interrupted(self) -> None:
        """Start again every sweep a previous service left running (not one another service runs now)."""
        with self._state_lock():
            for path in sorted(state_dir(self.settings).glob("*.json")):
                state = self.load_state(path.stem)
                if state is None or state.status != "running":
                    continue
                held = self._take(state.schedule.name)
                if held is None:
                    self.say(f"schedule {state.schedule.name}: its sweep {state.sweep or '(being planned)'} is run by "
                             "another service; left to it")
                    continue
                what = f"resuming sweep {state.sweep}" if state.sweep else "no sweep was planned yet; running it afresh"
                self.say(f"schedule {state.schedule.name}: the service stopped during the fire at {state.fired_at}; {what}")
                self._start(state, held)

    def fire(self, schedule: Schedule, fired_at: str) -> None:
        """A fire from beat: run the schedule's sweep, unless one runs (then skip or queue it)."""
        name = schedule.name
        with self._state_lock():
            state = self.load_state(name)
            held = self._take(name)
            if held is None:
                # Its sweep runs, here or in another service (which set its state running before it took the lock).
                state = state or ScheduleState(schedule=schedule, status="running")
                sweep = state.sweep or "(being planned)"
                if schedule.on_late == "queue":
                    state.queued, state.queued_schedule = fired_at, schedule
                    self.save_state(state)
                    self.say(f"schedule {name}: fired at {fired_at} while sweep {sweep} runs: queued (on_late = "
                             f"queue), it runs when that sweep ends")
                    return
                note = f"fired at {fired_at} while sweep {sweep} of the schedule runs (on_late = skip)"
                self.say(f"schedule {name}: {note}: skipped")
                skipped = SweepSummary(event="skipped", schedule=name, label=schedule.label, fired_at=fired_at,
                                       sweep=state.sweep, status="running", note=note)
                threading.Thread(target=self._notify, args=(schedule, skipped), daemon=True).start()
                return
            if state is not None and state.status == "running" and state.sweep:
                # Running, yet nobody holds its lock: the service that ran it died while another one was up.
                self.say(f"schedule {name}: sweep {state.sweep} of a service that stopped is left interrupted "
                         f"(`fleet resume {state.sweep}` finishes it)")
            state = ScheduleState(schedule=schedule, status="running", fired_at=fired_at)
            try:
                self.save_state(state)
            except BaseException:
                os.close(held)
                raise
            self.say(f"schedule {name}: fired at {fired_at}; starting its sweep")
            self._start(state, held)

    def _start(self, state: ScheduleState, held: int) -> None:
        t = threading.Thread(target=self._run, args=(state, held), name=f"schedule-{state.schedule.name}", daemon=True)
        self._threads[state.schedule.name] = t
        t.start()

    def running(self) -> list[str]:
        return [n for n, t in self._threads.items() if t.is_alive()]

    def _run(self, state: ScheduleState, held: int) -> None:
        """Run the schedule's sweep (and the fires queued meanwhile, by any service) holding its run lock; it is
        let go with the state saved idle, under the state lock, so no fire falls between the two."""
        try:
            while True:
                self._one_sweep(state)
                with self._state_lock():
                    now = self.load_state(state.schedule.name) or state
                    if now.queued and now.queued_schedule is not None:
                        note = f"fired at {now.queued} while sweep {now.sweep} ran; queued (on_late = queue) and run after it"
                        self.say(f"schedule {now.schedule.name}: running the fire queued at {now.queued}")
                        state = ScheduleState(schedule=now.queued_schedule, status="running", fired_at=now.queued, note=note)
                        self.save_state(state)
                        continue
                    now.status = "idle"
                    self.save_state(now)
                    os.close(held)
                    held = -1
                    return
        finally:
            if held >= 0:
                os.close(held)

    def _one_sweep(self, state: ScheduleState) -> None:
        s = state.schedule
        resumed = bool(state.sweep)

        def on_start(sweep: Any) -> None:
            if state.sweep != sweep.id:
                with self._state_lock():
                    current = self.load_state(s.name) or state
                    current.sweep = state.sweep = sweep.id
                    self.save_state(current)
                self.say(f"schedule {s.name}: sweep {sweep.id} {'resumed' if resumed else 'started'} "
                         f"({len(sweep.cells)} cell(s))")

        def on_event(e: Any) -> None:
            if e.kind == "recorded":
                self.say(f"schedule {s.name}: {e.cell.id} attempt {e.attempt}: {e.grade or (e.result.status if e.result else '')}")

        max_attempts = s.max_attempts or self.settings.max_attempts
        co = Coordinator(self.store, self.settings,
                         retry=RetryPolicy(max_attempts=max_attempts, backoff_s=self.settings.retry_backoff_s),
                         on_event=on_event, on_start=on_start,
                         on_warning=lambda t: self.say(f"schedule {s.name}: warning: {t}"),
                         on_notice=lambda t: self.say(f"schedule {s.name}: {t}"))
        summary = SweepSummary(event="failed", schedule=s.name, label=s.label, fired_at=state.fired_at,
                               resumed=resumed, note=state.note)
        try:
            inv = load_inventory(s.inventory)
            if resumed:
                sweep = co.resume(state.sweep, inv)
            else:
                sweep = co.sweep(inv, load_catalog(s.prompts or None, partial=True), hosts=s.hosts, items=s.items,
                                 round_name=s.round, agents=s.agents, repeat=s.repeat, label=s.label)
            summary = self._after(s, sweep, summary)
            self.say(f"schedule {s.name}: sweep {sweep.id} {sweep.status}; pass rate "
                     f"{summary.rate.all if summary.rate else '-'}" + (f"; report {summary.report}" if summary.report else ""))
        except FleetError as exc:
            summary = summary.model_copy(update={"sweep": state.sweep, "error": one_line(str(exc))})
            self.say(f"schedule {s.name}: sweep {state.sweep or '(none)'} failed: {one_line(str(exc))}")
        except Exception as exc:  # noqa: BLE001 - the service outlives one sweep's unexpected error, and logs it whole
            summary = summary.model_copy(update={"sweep": state.sweep, "error": f"{type(exc).__name__}: {one_line(str(exc))}"})
            self.say(f"schedule {s.name}: sweep {state.sweep or '(none)'} failed unexpectedly: "
                     + one_line(traceback.format_exc()[-2000:]))
        self._notify(s, summary)

    def _after(self, s: Schedule, sweep: Any, summary: SweepSummary) -> SweepSummary:
        """Report, compare with the previous sweep of the label, and the summary the notification carries."""
        update: dict[str, Any] = {"event": "finished", "sweep": sweep.id, "status": sweep.status,
                                  "rate": sweep_rate(sweep)}
        if s.after.report:
            try:
                update["report"] = str(write_report(self.store, sweep)[0])
            except FleetError as exc:
                self.say(f"schedule {s.name}: cannot write the report of {sweep.id}: {one_line(str(exc))}")
        if s.after.compare and s.label:
            try:
                base = self.store.load_sweep(previous_sweep(self.store, sweep))
            except FleetError as exc:
                self.say(f"schedule {s.name}: nothing to compare {sweep.id} with: {one_line(str(exc))}")
            else:
                cmp = compare_sweeps(base, sweep, {r.id: shown_status(self.store, r) for r in (base, sweep)})
                update["previous"] = base.id
                update["regressions"] = [
                    Regression(host=r.host, item=r.item, agent=r.agent,
                               before=r.baseline.summary if r.baseline else "-",
                               after=r.candidate.summary if r.candidate else "-")
                    for r in cmp.rows if r.change == "regressed"]
                update["improved"] = cmp.counts.improved
        failures: dict[str, list[HarnessFailure]] = {}
        for c in sweep.cells:
            last = sweep.last(c.id)
            f = summary_failure(last) if last is not None else None
            if f is not None:
                failures.setdefault(c.host, []).append(HarnessFailure(cell=c.id, reason=f.reason))
        update["harness_failures"] = failures
        return summary.model_copy(update=update)

    def _notify(self, s: Schedule, summary: SweepSummary) -> None:
        if not (s.notify.webhook or s.notify.command):
            return
        try:
            notify(s.notify, summarize(summary), self.say)
        except Exception as exc:  # noqa: BLE001 - never fatal to the sweep or the service
            self.say(f"schedule {s.name}: notification failed: {type(exc).__name__}: {one_line(str(exc))}")

    # -- the control queue -----------------------------------------------------------------------------
    def handle(self, body: Any, message: Any) -> None:
        """One message from the control queue: a Celery task message of ``fleet.fire_schedule``."""
        try:
            task = (message.headers or {}).get("task")
            kwargs = body[1] if isinstance(body, (list, tuple)) and len(body) > 1 else {}
            if task != TASK_FIRE_SCHEDULE:
                raise ValueError(f"not a {TASK_FIRE_SCHEDULE} message (task {task!r})")
            schedule = Schedule.model_validate(kwargs["schedule"])
            fired_at = str(kwargs.get("fired_at") or _now())
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            self.say(f"control queue: a message that is not a schedule's fire is dropped: {one_line(str(exc))[:300]}")
            message.ack()
            return
        # The fire is recorded (state file) before it is acknowledged: a service killed in between gets it again.
        self.fire(schedule, fired_at)
        message.ack()

    def serve(self, stop: threading.Event | None = None) -> None:
        """Consume the control queue until ``stop`` is set (or a KeyboardInterrupt, i.e. SIGTERM / Ctrl-C)."""
        app = configure(self.settings)
        name = control_queue(self.settings.namespace)
        queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
        self.resume_interrupted()
        self.say(f"coordinator service: consuming {name} on {redact(self.settings.broker_url)}")
        stop = stop or threading.Event()
        while not stop.is_set():
            try:
                with app.connection_for_read() as conn:
                    conn.ensure_connection(max_retries=None, interval_start=1, interval_step=1, interval_max=10,
                                           callback=lambda: None, errback=lambda exc, interval: self.say(
                                               f"control queue: broker unreachable ({one_line(str(exc))}); "
                                               f"trying again in {interval:g} s"))
                    with conn.Consumer([queue], callbacks=[self.handle], accept=["json"], prefetch_count=1):
                        while not stop.is_set():
                            try:
                                conn.drain_events(timeout=1)
                            except socket.timeout:
                                continue
            except (ConnectionError, OSError) as exc:
                if stop.is_set():
                    break
                self.say(f"control queue: connection lost ({one_line(str(exc))}); reconnecting")
                stop.wait(1)
            except Exception as exc:  # noqa: BLE001 - kombu's and redis's own connection errors
                if stop.is_set() or "onnection" not in type(exc).__name__:
                    raise
                self.say(f"control queue: connection lost ({one_line(str(exc))}); reconnecting")
                stop.wait(1)


def line_logger(log_file: Path | None = None) -> Callable[[str], None]:
    """The service's log: one timestamped line per event on stderr (journald keeps it), and in ``log_file``."""
    lock = threading.Lock()

    def say(text: str) -> None:
        line = f"{_now()} {one_line(text)}\n"
        with lock:
            sys.stderr.write(line)
            sys.stderr.flush()
            if log_file is not None:
                with open(log_file, "a", encoding="utf-8") as f:
                    f.write(line)

    return say
