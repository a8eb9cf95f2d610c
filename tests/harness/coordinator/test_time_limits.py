"""The coordinator's time limits are the attempt budget's (harness/core/timebudget.py): the Celery limits it sends, the
wait it counts for the attempt in front, the Redis visibility timeout it checks and whether it sends one ahead."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.core.timebudget import AttemptBudget
from harness.core.catalog import Item
from harness.core.errors import UsageError
from harness.coordinator.dispatch import Dispatcher
from harness.coordinator.verbs import Coordinator, ahead_for, longest_time_limit
from harness.core.inventory import load_inventory
from harness.core.records import Cell
from tests.support import REPO

HOST = load_inventory(str(REPO / "inventory" / "fleet.toml")).hosts["tower1"]
PLAIN = Item(id="07-photo-renamer", kind="open", title="t", prompt="p", timeout_s=3000)
CHECKED = Item(id="24-csv-chart", kind="open", title="t", prompt="p", timeout_s=600, checks=["chart.web.toml"])


def _cells(*items: Item) -> list[Cell]:
    return [Cell(id=Cell.make_id(HOST.name, item.id, HOST.default_agent, rep), host=HOST.name, item=item.id,
                 agent=HOST.default_agent, rep=rep, seed=rep) for rep, item in enumerate(items, 1)]


def _sent(monkeypatch: pytest.MonkeyPatch, *items: Item) -> list[dict]:
    """What a dispatcher sending ahead (Redis) sends for one attempt of each of ``items`` on one-slot tower1."""
    sent: list[dict] = []

    class App:
        def send_task(self, name: str, **kwargs: object) -> SimpleNamespace:
            sent.append(kwargs)
            return SimpleNamespace(id=kwargs["task_id"])

    monkeypatch.setattr(Dispatcher, "_request", lambda self, cell, attempt, task_id: SimpleNamespace(
        model_dump=lambda mode: {}))
    d = Dispatcher(app=App(), writer=SimpleNamespace(dispatched=lambda *a, **k: None),  # type: ignore[arg-type]
                   sweep=SimpleNamespace(id="s1", uid="", items={i.id: i for i in items}),  # type: ignore[arg-type]
                   inventory=SimpleNamespace(hosts={HOST.name: HOST}), ahead=1)  # type: ignore[arg-type]
    d._waiting[HOST.name].extend((c, 1) for c in _cells(*items))
    d._dispatch_host(HOST.name)
    return sent


def test_the_tasks_limits_are_the_budgets_and_the_one_sent_ahead_counts_the_hard_limit_in_front(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert HOST.slots == 1
    first, second = _sent(monkeypatch, CHECKED, PLAIN)
    checked, plain = AttemptBudget.for_item(CHECKED), AttemptBudget.for_item(PLAIN)
    assert (first["soft_time_limit"], first["time_limit"]) == checked.task_limits()
    # The checked item's check counts in its own limits, and so in the wait of the one sent behind it.
    assert checked.hard_limit_s == 600 + 900 + checked.checks_s
    assert (second["soft_time_limit"], second["time_limit"]) == plain.task_limits(behind=checked.hard_limit_s)


def test_the_visibility_check_and_sending_ahead_read_one_longest_limit() -> None:
    """The visibility timeout must cover the longest hard limit (else Redis delivers a running attempt again); one sent
    ahead stays unacknowledged through the attempt in front and its own run, two of that same limit."""
    sweep = SimpleNamespace(cells=_cells(PLAIN, CHECKED), items={PLAIN.id: PLAIN, CHECKED.id: CHECKED})
    longest = longest_time_limit(sweep, {HOST.name})  # type: ignore[arg-type]
    assert longest == max(AttemptBudget.for_item(i).hard_limit_s for i in (PLAIN, CHECKED)) == 3900
    for visibility in (longest - 1, longest, 2 * longest - 1, 2 * longest):
        coordinator = SimpleNamespace(settings=SimpleNamespace(visibility_timeout_s=visibility))
        refused = False
        try:
            Coordinator._check_visibility(coordinator, sweep, {HOST.name})  # type: ignore[arg-type]
        except UsageError:
            refused = True
        assert refused == (visibility < longest), visibility
        assert ahead_for(sweep, {HOST.name}, visibility) == (1 if 2 * longest <= visibility else 0), visibility  # type: ignore[arg-type]


def test_the_visibility_message_names_the_longest_items_parts_from_its_budget() -> None:
    """The item named is the one with the longest limit (a checked item may outlast a longer timeout), and its parts are
    its budget's: the timeout, and everything else the hard limit adds."""
    long_checks = CHECKED.model_copy(update={"checks": [f"c{i}.web.toml" for i in range(10)]})
    sweep = SimpleNamespace(cells=_cells(PLAIN, long_checks), items={PLAIN.id: PLAIN, long_checks.id: long_checks})
    b = AttemptBudget.for_item(long_checks)
    assert b.hard_limit_s > AttemptBudget.for_item(PLAIN).hard_limit_s
    coordinator = SimpleNamespace(settings=SimpleNamespace(visibility_timeout_s=600))
    with pytest.raises(UsageError) as caught:
        Coordinator._check_visibility(coordinator, sweep, {HOST.name})  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"FLEET_VISIBILITY_TIMEOUT=600 s is shorter than an attempt of {long_checks.id} may run (600 s timeout + "
        f"{b.beyond_run_s} s for checks and collecting = {b.hard_limit_s} s): Redis would deliver it again while it "
        f"runs; set it to at least {b.hard_limit_s}")
