"""The coordinator's verbs: sweep, rerun, resume. Each plans attempts and hands them to the Dispatcher.

The coordinator is the store's only writer; workers only return results over the queue.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

from harness.catalog import Catalog
from harness.dispatch import Dispatcher, Event, RetryPolicy, grade_attempt, harness_failure
from harness.errors import UsageError
from harness.inventory import Inventory
from harness.records import Cell, SweepRecord
from harness.store import Store, SweepWriter
from workers.app import Settings, configure, queue_for

__all__ = ["Coordinator"]


@dataclass
class Coordinator:
    store: Store
    settings: Settings
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_event: Callable[[Event], None] = lambda e: None
    on_start: Callable[[SweepRecord], None] = lambda s: None
    on_warning: Callable[[str], None] = lambda text: None

    # -- verbs -----------------------------------------------------------------------------------------
    def sweep(self, inventory: Inventory, catalog: Catalog, **plan_options) -> SweepRecord:  # type: ignore[no-untyped-def]
        from harness.plan import plan_sweep

        sweep = plan_sweep(inventory, catalog, taken=set(self.store.list_sweeps()), **plan_options)
        return self._run(sweep, inventory, lambda w: [(c, 1) for c in sweep.cells])

    def rerun(
        self, sweep_id: str, inventory: Inventory, host: str, item: str, agent: str | None = None, rep: int | None = None
    ) -> SweepRecord:
        """Add a new attempt to one cell."""
        sweep = self.store.load_sweep(sweep_id)
        cell = sweep.one_cell(host, item, agent, rep)
        return self._run(sweep, inventory, lambda w: [(cell, self._next_attempt(sweep, cell))])

    def resume(self, sweep_id: str, inventory: Inventory) -> SweepRecord:
        """Run the cells with no finished attempt, or whose last attempt is a harness failure."""
        sweep = self.store.load_sweep(sweep_id)

        def todo(w: SweepWriter) -> list[tuple[Cell, int]]:
            out = []
            for cell in sweep.cells:
                last = sweep.last(cell.id)
                if last is not None and last.status == "dispatched":
                    self._settle(w, sweep, cell, last.attempt, last.task_id)
                    last = sweep.last(cell.id)
                if last is None or last.status == "harness_failure":
                    out.append((cell, self._next_attempt(sweep, cell)))
            return out

        return self._run(sweep, inventory, todo)

    # -- internals -------------------------------------------------------------------------------------
    @staticmethod
    def _next_attempt(sweep: SweepRecord, cell: Cell) -> int:
        runs = sweep.attempts.get(cell.id) or []
        return max((a.attempt for a in runs), default=0) + 1

    def _settle(self, w: SweepWriter, sweep: SweepRecord, cell: Cell, attempt: int, task_id: str) -> None:
        """An attempt dispatched by a coordinator that stopped: take its result if it came, else close it."""
        from celery.result import AsyncResult

        from harness.records import AttemptResult

        app = configure(self.settings)
        ar = AsyncResult(task_id, app=app)
        if ar.state == "SUCCESS":
            if w.record_attempt(sweep, AttemptResult.model_validate(ar.result)):
                grade_attempt(w, sweep, cell, attempt)
            return
        app.control.revoke(task_id, terminate=True, signal="SIGTERM")
        w.record_attempt(
            sweep,
            harness_failure(
                sweep.id, cell, attempt, "abandoned",
                "the coordinator stopped before this attempt's result arrived; a late result is discarded",
            ),
        )
        grade_attempt(w, sweep, cell, attempt)

    @contextlib.contextmanager
    def _scripted_models(self, sweep: SweepRecord, inventory: Inventory, hosts: set[str]) -> Iterator[None]:
        """Serve each ``model.scripted`` endpoint with the demo scripts (``model.toml``) of the sweep's items."""
        from pathlib import Path
        from urllib.parse import urlsplit

        from harness.modelserver import ScriptedModelServer, ScriptError

        # Per-agent scripts (models/<kind>.toml, selected by the agent's system prompt or tools) come before
        # the items' model.toml (the builtin agent's), so each conversation finds its own agent's script.
        folders = [Path(i.check_folder) for i in sweep.items.values() if i.check_folder]
        scripts = [str(f) for folder in folders for f in sorted((folder / "models").glob("*.toml"))]
        scripts += [str(folder / "model.toml") for folder in folders if (folder / "model.toml").is_file()]
        with contextlib.ExitStack() as stack:
            for name in sorted(hosts):
                model = inventory.hosts[name].model
                if not model.scripted:
                    continue
                if not scripts:
                    self.on_warning(f"host {name}: no item of this sweep has a model.toml; its scripted model answers nothing")
                    continue
                url = urlsplit(model.base_url)
                try:
                    server = ScriptedModelServer(scripts, host=url.hostname or "127.0.0.1", port=url.port or 80,
                                                 model_id=model.id, context_size=model.context,
                                                 max_output_tokens=model.max_output)
                    stack.enter_context(server)
                except ScriptError as exc:
                    raise UsageError(str(exc)) from None
                except OSError as exc:
                    raise UsageError(
                        f"{inventory.path}: hosts.{name}.model.base_url: cannot serve the scripted model at "
                        f"{model.base_url}: {exc.strerror or exc}"
                    ) from None
            yield

    @contextlib.contextmanager
    def _workers(self, sweep: SweepRecord, inventory: Inventory, hosts: set[str]) -> Iterator[None]:
        app = configure(self.settings)
        if not self.settings.embedded:
            self._warn_unserved(app, hosts)
            yield
            return
        from harness.embedded import embedded_worker

        queues = [queue_for(h, self.settings.namespace) for h in sorted(hosts)]
        concurrency = min(16, sum(inventory.hosts[h].slots for h in hosts))
        with embedded_worker(app, queues, concurrency):
            yield

    def _warn_unserved(self, app, hosts: set[str]) -> None:  # type: ignore[no-untyped-def]
        """Say which host queues no running worker consumes: the sweep would wait for one."""
        try:
            replies = app.control.inspect(timeout=1.5).active_queues() or {}
        except Exception as exc:  # noqa: BLE001 - only a hint; dispatch itself reports broker errors
            self.on_warning(f"could not ask the workers which queues they consume: {exc}")
            return
        served = {q["name"] for queues in replies.values() for q in queues}
        for host in sorted(hosts):
            queue = queue_for(host, self.settings.namespace)
            if queue not in served:
                self.on_warning(f"no running worker consumes {queue}: start one with `fleet worker --hosts {host}`")

    def _run(
        self, sweep: SweepRecord, inventory: Inventory, plan: Callable[[SweepWriter], list[tuple[Cell, int]]]
    ) -> SweepRecord:
        with self.store.writer(sweep.id) as writer:
            pairs = plan(writer)
            hosts = {c.host for c, _ in pairs}
            missing = sorted(hosts - set(inventory.hosts))
            if missing:
                raise UsageError(f"{inventory.path}: the sweep needs host {missing[0]!r}, which this inventory lacks")
            writer.save_sweep(sweep)
            self.on_start(sweep)
            if not pairs:
                return sweep
            with self._scripted_models(sweep, inventory, hosts), self._workers(sweep, inventory, hosts):
                d = Dispatcher(
                    app=configure(self.settings), writer=writer, sweep=sweep, inventory=inventory,
                    namespace=self.settings.namespace, retry=self.retry, on_event=self.on_event,
                )
                try:
                    d.run(pairs)
                except KeyboardInterrupt:
                    d.revoke_in_flight()
                    raise
        return sweep
