"""The dispatcher's order of work when a result comes: the host's next attempt is sent before this one is recorded.

Recording writes and syncs the attempt's files and grades it (tens of milliseconds, more for a large workspace);
a host with work queued waited through all of it, between one agent and the next, for nothing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

import pytest

from harness.core.catalog import Item
from harness.coordinator.dispatch import Dispatcher, Planned
from harness.core.inventory import load_inventory
from harness.core.records import Cell
from tests.support import REPO

ITEM = Item(id="07-photo-renamer", number="07", kind="open", title="t", prompt="p", timeout_s=60)


HOST = load_inventory(str(REPO / "inventory" / "fleet.toml")).hosts["tower1"]


def _dispatch(monkeypatch: pytest.MonkeyPatch, reps: tuple[int, ...], order: list, *,
              read: Callable[[Dispatcher, SimpleNamespace, str], None] | None = None,
              record: Callable[[Dispatcher, Cell, object], None] | None = None,
              sent: Callable[[], None] | None = None) -> None:
    """A dispatcher running one attempt of each of ``reps``' cells on tower1 (one slot), each result SUCCESS as soon as
    it is sent: ``order`` gets ("send", rep) for each send; ``read``, ``record`` and ``sent`` are told of each result
    read, each record and each send."""
    cells = [Cell(id=Cell.make_id(HOST.name, ITEM.id, HOST.default_agent, rep), host=HOST.name, item=ITEM.id,
                  agent=HOST.default_agent, rep=rep, seed=rep) for rep in reps]
    done = SimpleNamespace(state="SUCCESS", result={})

    def send(self: Dispatcher, cell: Cell, attempt: int) -> None:
        order.append(("send", cell.rep))
        if sent is not None:
            sent()
        self._in_flight[f"t{cell.rep}"] = SimpleNamespace(cell=cell, attempt=attempt, async_result=done, started=True)
        self._per_host[cell.host] += 1

    def result_of(self: Dispatcher, f: SimpleNamespace, state: str) -> SimpleNamespace:
        if read is not None:
            read(self, f, state)
        return SimpleNamespace(attempt=f.attempt)

    monkeypatch.setattr(Dispatcher, "_send", send)
    monkeypatch.setattr(Dispatcher, "_result_of", result_of)
    monkeypatch.setattr(Dispatcher, "_record", record or (lambda self, cell, result: None))
    monkeypatch.setattr("harness.coordinator.dispatch.forget_result", lambda *args: None)
    writer = SimpleNamespace(set_status=lambda *a: None, sync_journal=lambda: None)
    d = Dispatcher(app=SimpleNamespace(), writer=writer, sweep=SimpleNamespace(id="s1", uid="", items={ITEM.id: ITEM}),  # type: ignore[arg-type]
                   inventory=SimpleNamespace(hosts={HOST.name: HOST}))  # type: ignore[arg-type]
    d.run([Planned(cell=c, attempt=1, last_attempt=1) for c in cells])


def test_a_free_host_gets_its_next_attempt_before_the_last_one_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert HOST.slots == 1
    order: list[tuple[str, int]] = []
    _dispatch(monkeypatch, (1, 2, 3), order, record=lambda self, cell, result: order.append(("record", cell.rep)))
    assert order == [("send", 1), ("send", 2), ("record", 1), ("send", 3), ("record", 2), ("record", 3)]


def test_a_free_host_gets_its_next_attempt_before_the_last_ones_result_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The result's state says the host is free: its next attempt goes out before the result is read and checked (a
    worker's result is parsed and validated, its blobs fetched), which the host does not need to wait for."""
    order: list[tuple[str, int]] = []
    _dispatch(monkeypatch, (1, 2), order, read=lambda self, f, state: order.append(("read", f.cell.rep)))
    assert order == [("send", 1), ("send", 2), ("read", 1), ("read", 2)]


def test_what_recording_imports_is_loaded_before_the_first_attempt_goes_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first record imports the grading code (40 ms and more) unless it is loaded already: that happened beside the
    host's second start. It is loaded before the first send."""
    import sys

    for name in [m for m in sys.modules if m == "harness.grading" or m.startswith("harness.grading.")]:
        monkeypatch.delitem(sys.modules, name)
    loaded: list[bool] = []
    _dispatch(monkeypatch, (1,), [], sent=lambda: loaded.append("harness.grading" in sys.modules))
    assert loaded == [True]


def test_one_attempt_more_than_its_slots_goes_to_a_host_and_its_time_limits_cover_the_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``ahead`` 1 (Redis) a one-slot host gets two attempts at once: the second waits in a worker for the slot the
    first gives back when its agent ends, so the next agent starts while the first attempt is collected. Its hard and
    soft time limits count the first one's time limit on top of its own (it may wait that long before its own time
    starts); the first one's do not."""
    assert HOST.slots == 1
    long_item = ITEM.model_copy(update={"id": "08-long", "timeout_s": 3000})
    sent: list[dict] = []

    class App:
        def send_task(self, name: str, **kwargs: object) -> SimpleNamespace:
            sent.append(kwargs)
            return SimpleNamespace(id=kwargs["task_id"])

    monkeypatch.setattr(Dispatcher, "_request", lambda self, cell, attempt, task_id: SimpleNamespace(
        model_dump=lambda mode: {}))
    writer = SimpleNamespace(dispatched=lambda *a, **k: None)
    cells = [Cell(id=Cell.make_id(HOST.name, item.id, HOST.default_agent, 1), host=HOST.name, item=item.id,
                  agent=HOST.default_agent, rep=1, seed=1) for item in (long_item, ITEM, ITEM)]
    d = Dispatcher(app=App(), writer=writer,  # type: ignore[arg-type]
                   sweep=SimpleNamespace(id="s1", uid="", items={ITEM.id: ITEM, long_item.id: long_item}),  # type: ignore[arg-type]
                   inventory=SimpleNamespace(hosts={HOST.name: HOST}), ahead=1)  # type: ignore[arg-type]
    d._waiting[HOST.name].extend((c, 1) for c in cells)
    d._dispatch_host(HOST.name)
    assert len(sent) == 2 and len(d._waiting[HOST.name]) == 1
    first, second = sent
    assert (first["time_limit"], first["soft_time_limit"]) == (3000 + 900, 3000 + 600)
    # The first may hold the slot for its whole time limit (its timeout and the grace for checks and collecting).
    assert (second["time_limit"], second["soft_time_limit"]) == (3900 + 60 + 900, 3900 + 60 + 600)
    plain = Dispatcher(app=App(), writer=writer, sweep=d.sweep, inventory=d.inventory)  # ahead 0: the embedded worker
    plain._waiting[HOST.name].extend((c, 1) for c in cells)
    sent.clear()
    plain._dispatch_host(HOST.name)
    assert len(sent) == 1


def test_an_attempt_a_worker_took_is_not_watched_and_one_on_a_queue_nobody_consumes_is() -> None:
    """The no-worker watch asks the workers (a 1 s broadcast) about a host whose attempt waited unstarted for 5 s. One
    sent ahead that a worker took (WAITING: it waits for the slot in a pool process) has a worker, however long the
    attempt in front of it runs; one still on the queue is watched from its send, even while the host has an attempt
    STARTED (that worker may have died since: its STARTED never changes)."""
    import time

    seen: list[dict] = []
    watch = SimpleNamespace(check=lambda waiting: seen.append(dict(waiting)) or [])
    d = Dispatcher(app=SimpleNamespace(), writer=SimpleNamespace(), sweep=SimpleNamespace(id="s1", uid="", items={}),  # type: ignore[arg-type]
                   inventory=SimpleNamespace(hosts={HOST.name: HOST}), watch=watch, ahead=1)  # type: ignore[arg-type]
    cell = Cell(id=Cell.make_id(HOST.name, ITEM.id, HOST.default_agent, 1), host=HOST.name, item=ITEM.id,
                agent=HOST.default_agent, rep=1, seed=1)
    long_ago = time.monotonic() - 600
    d._in_flight["t1"] = SimpleNamespace(cell=cell, attempt=1, started=True, taken=False, sent_at=long_ago)  # type: ignore[assignment]
    d._in_flight["t2"] = SimpleNamespace(cell=cell, attempt=2, started=False, taken=True, sent_at=long_ago)  # type: ignore[assignment]
    d._watch_workers()
    assert seen[-1] == {}
    d._in_flight["t2"].taken = False  # on the queue: nobody took it
    d._watch_workers()
    assert seen[-1][HOST.name].since == long_ago and seen[-1][HOST.name].count == 1


def test_an_attempt_is_sent_ahead_only_when_its_wait_and_run_fit_the_visibility_timeout() -> None:
    """Redis delivers an unacknowledged task again after the visibility timeout: an attempt sent ahead is unacknowledged
    through its wait (the attempt in front's time limit) and its own run, so a sweep whose longest time limit, twice,
    is past the timeout sends none ahead."""
    from harness.coordinator.verbs import ahead_for

    long_item = ITEM.model_copy(update={"id": "08-long", "timeout_s": 4 * 3600})
    cells = [Cell(id=Cell.make_id(HOST.name, item.id, HOST.default_agent, 1), host=HOST.name, item=item.id,
                  agent=HOST.default_agent, rep=1, seed=1) for item in (ITEM, long_item)]
    sweep = SimpleNamespace(cells=cells, items={ITEM.id: ITEM, long_item.id: long_item})
    assert ahead_for(sweep, {HOST.name}, 6 * 3600) == 0  # type: ignore[arg-type]  # 2 x (4 h + 900 s) > 6 h
    assert ahead_for(sweep, {HOST.name}, 2 * (4 * 3600 + 900)) == 1  # type: ignore[arg-type]
    assert ahead_for(SimpleNamespace(cells=cells[:1], items=sweep.items), {HOST.name}, 6 * 3600) == 1  # type: ignore[arg-type]
    assert ahead_for(sweep, {"other"}, 6 * 3600) == 0  # type: ignore[arg-type]  # no cell of it here
