"""The dispatcher's order of work when a result comes: the host's next attempt is sent before this one is recorded.

Recording writes and syncs the attempt's files and grades it (tens of milliseconds, more for a large workspace);
a host with work queued waited through all of it, between one agent and the next, for nothing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.catalog import Item
from harness.dispatch import Dispatcher, Planned
from harness.inventory import load_inventory
from harness.records import Cell
from tests.support import REPO

ITEM = Item(id="07-photo-renamer", number="07", kind="open", title="t", prompt="p", timeout_s=60)


def test_a_free_host_gets_its_next_attempt_before_the_last_one_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    host = load_inventory(str(REPO / "inventory" / "fleet.toml")).hosts["tower1"]
    assert host.slots == 1
    cells = [Cell(id=Cell.make_id(host.name, ITEM.id, host.default_agent, rep), host=host.name, item=ITEM.id,
                  agent=host.default_agent, rep=rep, seed=rep) for rep in (1, 2, 3)]
    done = SimpleNamespace(state="SUCCESS", result={})
    order: list[tuple[str, int]] = []

    def send(self: Dispatcher, cell: Cell, attempt: int) -> None:
        order.append(("send", cell.rep))
        self._in_flight[f"t{cell.rep}"] = SimpleNamespace(cell=cell, attempt=attempt, async_result=done, started=True)
        self._per_host[cell.host] += 1

    monkeypatch.setattr(Dispatcher, "_send", send)
    monkeypatch.setattr(Dispatcher, "_result_of", lambda self, f, state: SimpleNamespace(attempt=f.attempt))
    monkeypatch.setattr(Dispatcher, "_record", lambda self, cell, result: order.append(("record", cell.rep)))
    monkeypatch.setattr("harness.dispatch.forget_result", lambda *args: None)
    writer = SimpleNamespace(set_status=lambda *a: None, sync_journal=lambda: None)
    d = Dispatcher(app=SimpleNamespace(), writer=writer, sweep=SimpleNamespace(id="s1", uid="", items={ITEM.id: ITEM}),  # type: ignore[arg-type]
                   inventory=SimpleNamespace(hosts={host.name: host}))  # type: ignore[arg-type]
    d.run([Planned(cell=c, attempt=1, last_attempt=1) for c in cells])
    assert order == [("send", 1), ("send", 2), ("record", 1), ("send", 3), ("record", 2), ("record", 3)]
