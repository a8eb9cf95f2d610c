"""The coordinator's verbs: sweep, rerun, resume. Each plans attempts and hands them to the Dispatcher.

The coordinator is the store's only writer; workers only return results over the queue.

Retry budgets: a cell gets ``max_attempts`` attempts on harness failures in all. ``resume`` counts the
ones a cell already used (attempts the user stopped, ``revoked``, or whose coordinator went away,
``abandoned``, do not count: they measured nothing and were nobody's fault on the host), so resuming
again and again never buys a broken cell a fresh budget; ``resume --retry-exhausted`` asks for one.
"""

from __future__ import annotations

import contextlib
import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence
from urllib.parse import urlsplit

from celery.result import AsyncResult

from harness.core.timebudget import AttemptBudget, longest_limit, unacknowledged_s
from harness.core.catalog import Catalog
from harness.coordinator.brokercheck import check_queue_urls
from harness.coordinator.dispatch import Dispatcher, Event, Planned, RetryPolicy, grade_attempt, settle_attempt
from harness.core.diskfull import is_disk_full
from harness.core.errors import DiskFull, DispatchError, FleetError, SweepInterrupted, UsageError
from harness.core.failures import classify
from harness.core.gate import HELD, GateVerdict
from harness.core.inventory import Inventory
from harness.coordinator.noworker import WorkerWatch, consumed_queues, start_command, withdraw
from harness.coordinator.outage import Outage
from harness.coordinator.plan import plan_sweep
from harness.core.records import AttemptSummary, Cell, RerunRecord, utc_now
from harness.core.sweep import SweepRecord
from harness.core.settings import Settings, redact
from harness.coordinator.stopping import Stopped
from harness.coordinator.wakeup import wakeup_for
from harness.store import Store, SweepWriter
from workers.app import configure, queue_for
from workers.blobs import blobs_for

__all__ = ["Coordinator", "ahead_for", "summary_failure", "budget_used", "nothing_measured", "host_cells", "NOT_COUNTED"]

NOT_COUNTED = frozenset({"revoked", "abandoned", "no_worker"})
"""Harness failures that do not use up a cell's retry budget: the user or the coordinator stopped them, or no
worker ever took them (nothing ran on the host)."""


def summary_failure(a: AttemptSummary):
    """classify() for an attempt as the sweep lists it (its own status, or its grade's failure code)."""
    return classify(a.status, a.reason, a.grade, a.failure)


def nothing_measured(sweep_id: str, lasts: Sequence[tuple[str, AttemptSummary | None]]) -> GateVerdict:
    """The exit gate every sweep, rerun and resume has (exit 3 when tripped): over each judged cell's id and last
    attempt, it trips when every one ended in a harness failure (``summary_failure``). A cell with no attempt is not
    a failure, and no cell judged trips nothing."""
    failed = tuple(cell_id for cell_id, a in lasts if a is not None and summary_failure(a) is not None)
    if not lasts or len(failed) < len(lasts):
        return HELD
    return GateVerdict(True, failed, f"sweep {sweep_id}: nothing was measured: all {len(lasts)} cell(s) ended in "
                                     "HARNESS_FAILURE")


def budget_used(runs: list[AttemptSummary]) -> int:
    """How many of a cell's attempts were harness failures that count against its retry budget."""
    return sum(1 for a in runs if (f := summary_failure(a)) is not None and f.reason not in NOT_COUNTED)


def host_cells(sweep: SweepRecord, host: str, items: list[str] | None = None,
               agents: list[str] | None = None) -> list[Cell]:
    """The cells of ``host`` in ``sweep``, only those of ``items`` (ids or open-prompt numbers) and ``agents`` when
    given. A host, item or agent the sweep does not have is the user's error, in one line naming what it has."""
    hosts = sorted({c.host for c in sweep.cells})
    if host not in hosts:
        raise UsageError(f"--host {host!r}: sweep {sweep.id} has no such host (hosts: {', '.join(hosts)})")
    mine = [c for c in sweep.cells if c.host == host]
    for name in items or []:
        if not any(name in (c.item, sweep.items[c.item].number) for c in mine):
            known = ", ".join(sorted({c.item for c in mine}))
            raise UsageError(f"--items {name!r}: sweep {sweep.id} has no such item on host {host} (items: {known})")
    for name in agents or []:
        if not any(c.agent == name for c in mine):
            known = ", ".join(sorted({c.agent for c in mine}))
            raise UsageError(f"--agents {name!r}: sweep {sweep.id} has no such agent on host {host} (agents: {known})")
    return [c for c in mine if (not items or any(n in (c.item, sweep.items[c.item].number) for n in items))
            and (not agents or c.agent in agents)]


@dataclass
class Coordinator:
    store: Store
    settings: Settings
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_event: Callable[[Event], None] = lambda e: None
    on_start: Callable[[SweepRecord], None] = lambda s: None
    on_warning: Callable[[str], None] = lambda text: None
    on_notice: Callable[[str], None] = lambda text: None
    """Lines about the queue itself (unreachable since N s, reachable again), for the progress."""

    # -- verbs -----------------------------------------------------------------------------------------
    def sweep(self, inventory: Inventory, catalog: Catalog, **plan_options) -> SweepRecord:
        sweep = plan_sweep(inventory, catalog, **plan_options)
        # The folder's creation claims the id: a second coordinator in the same second gets the next one.
        sweep.id = self.store.claim_sweep_id(sweep.id)
        planned = [Planned(c, 1, self.retry.max_attempts) for c in sweep.cells]
        return self._run(sweep, inventory, lambda w: planned, fresh=True)

    def rerun(
        self, sweep_id: str, inventory: Inventory, host: str, item: str, agent: str | None = None, rep: int | None = None
    ) -> SweepRecord:
        """Add a new attempt to one cell (with its own retry budget: the user asked for it)."""
        sweep = self.store.load_sweep(sweep_id)
        cell = sweep.one_cell(host, item, agent, rep)
        return self._rerun(sweep, inventory, host, [cell])

    def rerun_host(self, sweep_id: str, inventory: Inventory, host: str, items: list[str] | None = None,
                   agents: list[str] | None = None) -> SweepRecord:
        """Add a new attempt to every cell of one host (or those of the named items and agents), e.g. after its
        model or driver was fixed; each cell gets its own retry budget, as a one-cell rerun does."""
        sweep = self.store.load_sweep(sweep_id)
        return self._rerun(sweep, inventory, host, host_cells(sweep, host, items, agents))

    def _rerun(self, sweep: SweepRecord, inventory: Inventory, host: str, cells: list[Cell]) -> SweepRecord:
        self._check_unfinished(sweep)
        self._check_inventory(sweep, inventory)

        def plan(w: SweepWriter) -> list[Planned]:
            planned = []
            for cell in cells:
                k = self._next_attempt(sweep, cell)
                planned.append(Planned(cell, k, k + self.retry.max_attempts - 1))
            # In the snapshot written before anything is sent: the table, report and compare say the cells'
            # latest attempts came from a rerun, and which attempt it began with.
            sweep.reruns.append(RerunRecord(at=utc_now(), host=host, cells={p.cell.id: p.attempt for p in planned}))
            return planned

        return self._run(sweep, inventory, plan)

    def resume(self, sweep_id: str, inventory: Inventory, retry_exhausted: bool = False) -> SweepRecord:
        """Run the cells with no attempt, or whose last attempt is a harness failure, within their budget, and
        the cells a rerun that was stopped had planned but never sent."""
        sweep = self.store.load_sweep(sweep_id)
        self._check_inventory(sweep, inventory)
        budget = self.retry.max_attempts
        # cell id -> the attempt the latest rerun naming it planned for it (recorded before anything was sent).
        rerun_planned = {cid: k for r in sweep.reruns for cid, k in r.cells.items()}

        def todo(w: SweepWriter) -> list[Planned]:
            out, exhausted = [], []
            app = None
            for cell in sweep.cells:
                last = sweep.last(cell.id)
                if last is not None and last.status == "dispatched":
                    app = app or configure(self.settings)
                    self._settle(app, w, sweep, cell, last.attempt, last.task_id)
                    last = sweep.last(cell.id)
                if last is None:
                    out.append(Planned(cell, 1, budget))
                    continue
                if not last.grade:
                    # Recorded but never graded (the coordinator was stopped in between): grade it now, or a
                    # harness failure only its grade can show would pass for a measured result.
                    try:
                        grade_attempt(w, sweep, cell, last.attempt)
                    except FleetError as exc:
                        self.on_warning(f"{cell.id} attempt {last.attempt}: cannot grade: {exc}")
                    # The writer records a graded copy of the summary; the one read above is still ungraded.
                    last = sweep.last(cell.id) or last
                k = self._next_attempt(sweep, cell)
                if summary_failure(last) is None:
                    if rerun_planned.get(cell.id, 0) >= k:
                        # A rerun stopped before it sent this cell's attempt: the rerun is recorded (the report
                        # says the cell was run again), so resume finishes it, with the rerun's own budget.
                        out.append(Planned(cell, k, k + budget - 1))
                    continue  # measured: a model result is never run again by resume (unless a rerun asked)
                used = budget_used(sweep.attempts.get(cell.id) or [])
                if retry_exhausted:
                    out.append(Planned(cell, k, k + budget - 1))
                elif used < budget:
                    out.append(Planned(cell, k, k + budget - used - 1))
                else:
                    exhausted.append(cell.id)
            if exhausted:
                names = ", ".join(exhausted[:3]) + (f" and {len(exhausted) - 3} more" if len(exhausted) > 3 else "")
                self.on_warning(
                    f"{len(exhausted)} cell(s) already used all {budget} attempts on harness failures and are not run "
                    f"again ({names}); `fleet resume {sweep.id} --retry-exhausted` gives them a fresh budget")
            return out

        return self._run(sweep, inventory, todo)

    # -- internals -------------------------------------------------------------------------------------
    @staticmethod
    def _next_attempt(sweep: SweepRecord, cell: Cell) -> int:
        runs = sweep.attempts.get(cell.id) or []
        return max((a.attempt for a in runs), default=0) + 1

    def _check_unfinished(self, sweep: SweepRecord) -> None:
        """A rerun of a sweep whose coordinator stopped before every cell ran to its end would end it `finished`,
        with those cells pending (or dispatched) for good and its pass rate over the cells that did run: resume
        it first. One a coordinator is still writing gets the writer's own "being written" line instead."""
        if self.store.is_being_written(sweep.id):
            return
        open_cells = [c.id for c in sweep.cells if (last := sweep.last(c.id)) is None or last.status == "dispatched"]
        if open_cells:
            more = f" and {len(open_cells) - 1} more" if len(open_cells) > 1 else ""
            raise UsageError(f"sweep {sweep.id} was stopped before every cell ran ({open_cells[0]}{more} not run to "
                             f"its end): `fleet resume {sweep.id}` first, then rerun")

    def _check_inventory(self, sweep: SweepRecord, inventory: Inventory) -> None:
        if sweep.inventory_sha256 and inventory.sha256 and inventory.sha256 != sweep.inventory_sha256:
            self.on_warning(f"{inventory.path} changed since sweep {sweep.id} was planned (sha256 "
                            f"{sweep.inventory_sha256[:12]} then, {inventory.sha256[:12]} now); the new attempts use it as it is now")

    def _settle(self, app, w: SweepWriter, sweep: SweepRecord, cell: Cell, attempt: int, task_id: str) -> None:
        """An attempt dispatched by a coordinator that stopped: take its result if it came, else close it."""
        ar = AsyncResult(task_id, app=app)
        try:
            state = ar.state
        except Exception as exc:  # noqa: BLE001 - the backend's own errors, translated here
            raise DispatchError(f"cannot read results from the result backend: {exc}") from exc
        settle_attempt(app, w, sweep, cell, attempt, ar, state, "abandoned",
                       "the coordinator stopped before this attempt's result arrived; a late result is discarded",
                       self.on_event, namespace=self.settings.namespace)

    @contextlib.contextmanager
    def _scripted_models(self, sweep: SweepRecord, inventory: Inventory, hosts: set[str]) -> Iterator[Inventory]:
        """Serve each ``model.scripted`` endpoint with the demo scripts (``model.toml``) of the sweep's items, and
        yield the inventory with each one's actual URL: ``--model-port`` if given, else the inventory's port, else
        (that port busy: another sweep on this machine) a free one, said as a notice."""
        from harness.modelserver import ScriptedModelServer, ScriptError  # lazy: a scripted model only (25 ms)

        # Per-agent scripts (models/<kind>.toml, selected by the agent's system prompt or tools) come before
        # the items' model.toml (the builtin agent's), so each conversation finds its own agent's script.
        folders = [Path(i.check_folder) for i in sweep.items.values() if i.check_folder]
        scripts = [str(f) for folder in folders for f in sorted((folder / "models").glob("*.toml"))]
        scripts += [str(folder / "model.toml") for folder in folders if (folder / "model.toml").is_file()]
        scripted = [name for name in sorted(hosts) if inventory.hosts[name].model.scripted]
        forced = self.settings.model_port
        if forced is not None and len(scripted) > 1:
            raise UsageError(f"--model-port {forced}: {len(scripted)} hosts of this sweep serve a scripted model "
                             f"({', '.join(scripted)}); give each its port in {inventory.path}")
        served = dict(inventory.hosts)
        with contextlib.ExitStack() as stack:
            for name in scripted:
                model = inventory.hosts[name].model
                if not scripts:
                    self.on_warning(f"host {name}: no item of this sweep has a model.toml; its scripted model answers nothing")
                    continue
                url = urlsplit(model.base_url)
                bind = url.hostname or "127.0.0.1"

                def server_at(port: int) -> ScriptedModelServer:
                    server = ScriptedModelServer(scripts, host=bind, port=port, model_id=model.id,
                                                 context_size=model.context, max_output_tokens=model.max_output)
                    stack.enter_context(server)
                    return server

                try:
                    try:
                        server = server_at(forced if forced is not None else url.port or 80)
                    except OSError as exc:
                        if forced is not None or exc.errno != errno.EADDRINUSE:
                            raise
                        server = server_at(0)
                        self.on_notice(f"host {name}: port {url.port} is busy (another sweep on this machine?); "
                                       f"its scripted model listens on port {server.port} for this sweep")
                except ScriptError as exc:
                    raise UsageError(str(exc)) from None
                except OSError as exc:
                    where = f"--model-port {forced}" if forced is not None else f"{inventory.path}: hosts.{name}.model.base_url"
                    raise UsageError(f"{where}: cannot serve the scripted model at {bind}:"
                                     f"{forced if forced is not None else url.port}: {exc.strerror or exc}") from None
                if server.port != url.port:
                    netloc = f"[{bind}]:{server.port}" if ":" in bind else f"{bind}:{server.port}"
                    moved = model.model_copy(update={"base_url": url._replace(netloc=netloc).geturl()})
                    served[name] = inventory.hosts[name].model_copy(update={"model": moved})
            yield inventory.model_copy(update={"hosts": served})

    @contextlib.contextmanager
    def _workers(self, sweep: SweepRecord, inventory: Inventory, hosts: set[str]) -> Iterator[None]:
        app = configure(self.settings)
        if not self.settings.embedded:
            self._check_visibility(sweep, hosts)
            _check_broker(app, self.settings)
            yield
            return
        from harness.coordinator.embedded import embedded_worker  # lazy: the worker's tasks (0.5 s): embedded only

        queues = [queue_for(h, self.settings.namespace) for h in sorted(hosts)]
        concurrency = min(16, sum(inventory.hosts[h].slots for h in hosts))
        with embedded_worker(app, queues, concurrency, lock_dir=self.settings.queue_dir):
            yield

    def _check_visibility(self, sweep: SweepRecord, hosts: set[str]) -> None:
        """Redis hands an unacknowledged task to another worker after the visibility timeout. One shorter than a
        task's run would deliver a running attempt again and again, even after the sweep ended: refuse it."""
        longest = longest_time_limit(sweep, hosts)
        if self.settings.visibility_timeout_s < longest:
            item = max((sweep.items[c.item] for c in sweep.cells if c.host in hosts),
                       key=lambda i: AttemptBudget.for_item(i).hard_limit_s)
            budget = AttemptBudget.for_item(item)
            raise UsageError(
                f"FLEET_VISIBILITY_TIMEOUT={self.settings.visibility_timeout_s} s is shorter than an attempt of "
                f"{item.id} may run ({item.timeout_s} s timeout + {budget.beyond_run_s} s for checks and collecting = "
                f"{budget.hard_limit_s} s): Redis would deliver it again while it runs; set it to at least {longest}")

    def _run(
        self, sweep: SweepRecord, inventory: Inventory, plan: Callable[[SweepWriter], list[Planned]], fresh: bool = False
    ) -> SweepRecord:
        """Run the planned attempts. A KeyboardInterrupt (Ctrl-C, or SIGTERM / SIGHUP through
        ``harness.coordinator.stopping``) stops it: what is in flight is revoked and recorded, the sweep is left
        ``interrupted``, and ``SweepInterrupted`` names the id to resume.
        A new sweep that fails before it dispatched anything is removed again: it never becomes "the latest"."""
        try:
            with self.store.writer(sweep.id) as writer:
                planned = plan(writer)
                hosts = {p.cell.host for p in planned}
                missing = sorted(hosts - set(inventory.hosts))
                if missing:
                    raise UsageError(f"{inventory.path}: the sweep needs host {missing[0]!r}, which this inventory lacks")
                for p in planned:
                    if p.cell.agent not in inventory.hosts[p.cell.host].agents:
                        raise UsageError(f"{inventory.path}: hosts.{p.cell.host}.agents has no {p.cell.agent!r}, which "
                                         f"cell {p.cell.id} of the sweep needs")
                writer.save_sweep(sweep)
                self.on_start(sweep)
                if not planned:
                    if sweep.status != "finished":
                        writer.set_status(sweep, "finished")  # nothing left to run: the sweep has run to its end
                    return sweep
                app = configure(self.settings)
                with self._scripted_models(sweep, inventory, hosts) as inventory, \
                        self._workers(sweep, inventory, hosts):
                    d = Dispatcher(
                        app=app, writer=writer, sweep=sweep, inventory=inventory,
                        namespace=self.settings.namespace, retry=self.retry, on_event=self.on_event,
                        outage=self._outage(), watch=self._watch(app, inventory),
                    )
                    if not self.settings.embedded:
                        # One attempt more than its slots per host: it waits in a worker for the slot the host's
                        # last agent gives back, so the next agent starts while the last attempt is collected and
                        # recorded (a third of the host's wait between two agents). The embedded worker's threads run
                        # beside this process, on the same cores: nothing to gain there.
                        d.ahead = ahead_for(sweep, hosts, self.settings.visibility_timeout_s)
                        broker = self.settings.broker_url
                        d.withdraw = lambda queue, task_ids: withdraw(app, broker, queue, task_ids)
                    if self.settings.embedded:
                        from harness.coordinator.embedded import internal_error  # lazy: as embedded_worker

                        d.internal_error = internal_error
                    d.blobs = blobs_for(self.settings.celery_backend)
                    d.wakeup = wakeup_for(self.settings.embedded, self.settings.celery_backend,
                                          lambda task_id: app.backend.get_key_for_task(task_id).decode(), app.backend)
                    try:
                        d.run(planned)
                    finally:
                        d.wakeup.close()
        except BaseException as exc:
            dispatched = any(sweep.attempts.values())
            if fresh and not dispatched:
                self.store.discard_sweep(sweep.id)
            if isinstance(exc, Exception) and is_disk_full(exc):
                # SQLite's and SQLAlchemy's errors run over several lines (the SQL, its parameters): one line.
                what = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                then = (f"sweep {sweep.id} is interrupted: free some space, then `fleet resume {sweep.id}`"
                        if dispatched or not fresh else "nothing was kept")
                raise DiskFull(f"no space left on device under {self.settings.runs} ({what}); {then}") from exc
            if isinstance(exc, KeyboardInterrupt):
                how = exc.how if isinstance(exc, Stopped) else "Ctrl-C"
                raise SweepInterrupted(sweep.id, how, resumable=dispatched or not fresh) from exc
            raise
        return sweep


    def _watch(self, app, inventory: Inventory) -> WorkerWatch | None:
        """On Redis, who says which host queues no worker consumes (the embedded worker consumes every queue)."""
        if self.settings.embedded:
            return None
        namespace, broker = self.settings.namespace, redact(self.settings.broker_url)
        return WorkerWatch(
            ask=lambda: consumed_queues(app), queue_for=lambda host: queue_for(host, namespace),
            command_for=lambda host: start_command(host, inventory.path, namespace, broker),
            on_warning=self.on_warning, timeout_s=self.settings.no_worker_timeout_s)

    def _outage(self) -> Outage:
        """How this coordinator rides out an unreachable queue: a Redis one for FLEET_BROKER_OUTAGE_S; the embedded
        SQLite queue never (its errors are the disk's, and waiting mends none of them)."""
        if self.settings.embedded:
            return Outage(limit_s=0)
        return Outage(limit_s=self.settings.broker_outage_s, where=f"the broker at {redact(self.settings.broker_url)}",
                      on_notice=self.on_notice)


def _check_broker(app, settings: Settings) -> None:
    """Reach the broker once before anything is dispatched: a wrong URL is one clear line, at once
    (harness/coordinator/brokercheck.py: a PING bounded on the reply too, not only on the connect)."""
    check_queue_urls(settings.broker_url, settings.result_backend)


def ahead_for(sweep: SweepRecord, hosts: set[str], visibility_timeout_s: int) -> int:
    """Attempts sent to a host beyond its slots on Redis: 1, unless one of them could stay unacknowledged past the
    visibility timeout (its wait for the attempt in front, then its own run: two of the longest time limit), which
    would have Redis deliver it again while it waits; then none, as an attempt of hours gains nothing by it."""
    longest = longest_time_limit(sweep, hosts)
    return 1 if longest and unacknowledged_s(longest, ahead=1) <= visibility_timeout_s else 0


def longest_time_limit(sweep: SweepRecord, hosts: set[str]) -> int:
    """The longest hard time limit of an attempt of the sweep on ``hosts`` (0 when none of its cells is there): what
    the visibility timeout must cover, and what an attempt sent ahead may wait (harness/core/timebudget.py)."""
    return longest_limit(AttemptBudget.for_item(sweep.items[c.item]) for c in sweep.cells if c.host in hosts)
