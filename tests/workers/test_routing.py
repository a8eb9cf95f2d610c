"""The Celery routing table (workers/app.py): every task the app registers is routed, and the queues a
`fleet worker` consumes for an inventory are exactly the queues the routes send those hosts' attempts to,
so no task lands in a queue nobody consumes (the default queue included) and no worker waits on a queue
nothing is sent to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.core.catalog import Item
from harness.coordinator.dispatch import Dispatcher
from harness.core.inventory import Host, load_inventory
from harness.core.records import Cell
from harness.core.sweep import AttemptRequest
from workers.app import TASKS, app, queue_for
from tests.support import REPO

ROOT = REPO
FLEET = ROOT / "inventory" / "fleet.toml"
ITEM = Item(id="07-photo-renamer", kind="open", title="Photo renamer", prompt="write it", timeout_s=60)


def registered_tasks() -> set[str]:
    """The tasks a worker of this app registers: its ``include`` modules imported, as a worker does."""
    app.loader.import_default_modules()
    return {name for name in app.tasks if not name.startswith("celery.")}


def request_for(host: Host, namespace: str) -> dict:
    agent = host.default_agent
    cell = Cell(id=Cell.make_id(host.name, ITEM.id, agent, 1), host=host.name, item=ITEM.id, agent=agent, rep=1, seed=1)
    req = AttemptRequest(sweep_id="s1", cell=cell, attempt=1, host=host, agent=host.agents[agent], item=ITEM,
                         prompt="p", harness_commit="test", namespace=namespace)
    return req.model_dump(mode="json")


def routed_queue(task: str, host: Host, namespace: str) -> str | None:
    """The queue Celery's own router picks for ``task`` with this host's request, as ``send_task`` does."""
    options = app.amqp.router.route({}, task, args=(request_for(host, namespace),), kwargs={})
    queue = options.get("queue")
    return getattr(queue, "name", queue)


def test_every_registered_task_is_in_the_routing_table() -> None:
    assert registered_tasks() == set(TASKS)


@pytest.mark.parametrize("namespace", ["", "team-a"])
def test_every_task_is_routed_to_its_hosts_queue(namespace: str) -> None:
    hosts = list(load_inventory(FLEET).hosts.values())
    for task in registered_tasks():
        for host in hosts:
            assert routed_queue(task, host, namespace) == queue_for(host.name, namespace), (task, host.name)
    assert app.conf.task_default_queue not in {queue_for(h.name, namespace) for h in hosts}


def worker_queues(*args: str, namespace: str = "") -> list[str]:
    """The ``--queues`` the real ``fleet worker`` command passes to Celery (its worker_main replaced, in a
    separate interpreter so this process's app stays unconfigured)."""
    code = (
        "import json, sys\n"
        "import workers.app\n"
        "workers.app.app.worker_main = lambda argv: print(json.dumps(argv))\n"
        "from harness.cli import cli\n"
        "cli(sys.argv[1:])\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "FLEET_NAMESPACE": namespace,
           "FLEET_HARNESS_COMMIT": "test"}
    out = subprocess.run([sys.executable, "-c", code, "worker", "--broker", "redis://127.0.0.1:1/0", *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (argv,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]
    (queues,) = [a.removeprefix("--queues=") for a in argv if a.startswith("--queues=")]
    return queues.split(",")


@pytest.mark.parametrize("namespace", ["", "team-a"])
def test_a_worker_consumes_exactly_the_queues_the_routes_produce_for_its_hosts(namespace: str) -> None:
    hosts = load_inventory(FLEET).hosts
    everything = worker_queues("-i", str(FLEET), namespace=namespace)
    assert len(everything) == len(set(everything))
    assert set(everything) == {routed_queue(t, h, namespace) for t in registered_tasks() for h in hosts.values()}
    some = worker_queues("-i", str(FLEET), "--hosts", "tower2,laptop", namespace=namespace)
    assert set(some) == {routed_queue(t, hosts[n], namespace) for t in registered_tasks() for n in ("tower2", "laptop")}


def sending_dispatcher(host: Host) -> tuple[Dispatcher, Cell, list[tuple[str, dict]]]:
    """A dispatcher for ``host`` whose app keeps what it is asked to send (task name, options), with a cell to send."""
    sent: list[tuple[str, dict]] = []
    fake_app = SimpleNamespace(send_task=lambda name, **kw: sent.append((name, kw)) or SimpleNamespace())
    sweep = SimpleNamespace(id="s1", uid="", items={ITEM.id: ITEM})
    writer = SimpleNamespace(dispatched=lambda *a, **kw: None)
    d = Dispatcher(app=fake_app, writer=writer, sweep=sweep, inventory=SimpleNamespace(hosts={host.name: host}))  # type: ignore[arg-type]
    cell = Cell(id=Cell.make_id(host.name, ITEM.id, host.default_agent, 1), host=host.name, item=ITEM.id,
                agent=host.default_agent, rep=1, seed=1)
    return d, cell, sent


def test_the_dispatcher_sends_the_routed_task_name_from_its_one_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    """harness.coordinator.dispatch names the task through workers.app.TASK_RUN_ATTEMPT, not a copy of the string: renaming the
    task in its one definition renames what the dispatcher sends."""
    import harness.coordinator.dispatch

    d, cell, sent = sending_dispatcher(load_inventory(FLEET).hosts["tower1"])
    monkeypatch.setattr(Dispatcher, "_request", lambda self, c, a, t: SimpleNamespace(model_dump=lambda mode: {}))
    d._send(cell, 1)
    monkeypatch.setattr(harness.coordinator.dispatch, "TASK_RUN_ATTEMPT", "fleet.renamed")
    d._send(cell, 2)
    assert [name for name, _ in sent] == [TASKS[0], "fleet.renamed"]


def test_what_monitors_show_of_a_sent_attempt_is_its_cell_and_attempt_not_the_request() -> None:
    """Celery puts ``argsrepr`` in every message's headers, and logs, ``celery inspect`` and monitors show it. Left to
    Celery it is a repr of the whole request (an agent's env values, the prompt), made on the path of every send."""
    host = load_inventory(FLEET).hosts["tower1"]
    secret = "sk-do-not-show-me"
    agent = host.agents[host.default_agent].model_copy(update={"env": {"MODEL_API_KEY": secret}})
    host = host.model_copy(update={"agents": {**host.agents, host.default_agent: agent}})
    d, cell, sent = sending_dispatcher(host)
    d._send(cell, 2)
    ((_, kw),) = sent
    assert secret in json.dumps(kw["args"])  # the worker gets it ...
    assert kw["argsrepr"] == f"({cell.id!r}, attempt 2)" and kw["kwargsrepr"] == "{}"  # ... no monitor shows it
