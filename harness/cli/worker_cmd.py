"""``fleet worker``: a Celery worker consuming the named hosts' queues, on Redis (the embedded default runs its
worker inside ``fleet sweep``). Apart because it is the one verb that starts Celery's own command line.
"""

from __future__ import annotations

import click

from harness.cli.console import err_console
from harness.cli.options import common_broker, common_inventory, listed, resolve_settings
from harness.core.errors import UsageError

__all__ = ["worker"]


@click.command()
@click.option("--hosts", help="Comma-separated host names whose queues to consume (default: all).")
@common_inventory
@click.option("--concurrency", type=int, default=None, help="Pool size (default: the hosts' slots added up, plus one per host for the attempt that waits for a slot).")
@click.option("--loglevel", default="INFO", show_default=True, help="Celery's log level: DEBUG, INFO, WARNING, ERROR.")
@click.option("--name", default="fleet", show_default=True, help="Worker node name (NAME@this-machine), kept in each attempt's meta.")
@common_broker
def worker(hosts, inventory, concurrency, loglevel, name, broker) -> None:
    """Start a Celery worker consuming the named hosts' queues (needs a Redis broker).

    \b
    Examples:
      fleet worker -i fleet.toml --hosts tower1,tower2 --broker redis://coordinator:6379/0
      FLEET_NAMESPACE=nightly fleet worker -i fleet.toml --concurrency 4
    """
    from harness.core.inventory import load_inventory
    from workers.app import configure, queue_for

    settings = resolve_settings(broker_url=broker)
    if settings.embedded:
        raise UsageError("fleet worker needs a broker: set FLEET_BROKER_URL or --broker redis://...")
    names = listed("--hosts", hosts)
    if inventory or not names:
        inv = load_inventory(inventory)
        chosen = inv.select(names)
        names = [h.name for h in chosen]
        total = sum(h.slots + 1 for h in chosen)
    else:
        total = 2 * len(names)
    if concurrency is not None and concurrency < total:
        err_console.print(f"fleet worker: warning: --concurrency {concurrency} is below the {total} its hosts need (their "
                          "slots plus one per host): an attempt waiting for its host's slot holds a pool process that "
                          "another host's attempt could use", markup=False, soft_wrap=True)
    # The worker's own settings reach its tasks through this call (pool processes fork after it), not the environment.
    app = configure(settings, worker=True)
    queues = ",".join(queue_for(n, settings.namespace) for n in names)
    err_console.print(f"fleet worker: queues {queues}; {settings.one_line('worker')}", markup=False, soft_wrap=True)
    app.worker_main(
        ["worker", f"--queues={queues}", f"--concurrency={concurrency or max(1, total)}", f"--loglevel={loglevel}",
         "--without-gossip", "--without-mingle", "--pool=prefork", f"--hostname={name}@%h"]
    )
