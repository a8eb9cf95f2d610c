"""The ``fleet`` command. Every FleetError is printed as one line with its exit code; never a traceback."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from harness.core.errors import FleetError, SweepInterrupted, UsageError, one_line

if TYPE_CHECKING:
    from rich.console import Console

    from harness.coordinator.verbs import Coordinator
    from harness.core.records import Cell
    from harness.core.sweep import SweepRecord
    from harness.core.settings import Settings
    from harness.store import Store

def _console(stderr: bool) -> "Console":
    """A console that wraps only on a terminal: a log or a pipe gets each line whole, however long (rich would
    wrap at 80 columns there, and a grep for a cell id or a path would miss half of it)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    wide = None if stream.isatty() else 100_000
    return Console(stderr=stderr, highlight=False, width=wide)


_EMOJI_CODE = re.compile(r":\S*?:")
"""What rich would look up as an emoji name (``:smile:``) in a printed string, even with markup off."""


def _plain_line(objects: tuple[Any, ...], options: dict[str, Any]) -> str | None:
    """The text of a ``print(text, markup=False, soft_wrap=True)`` that rich would write unchanged, else None: one
    string of printable ASCII (no tab, newline or control character, no wide character) with no emoji code."""
    if len(objects) != 1 or not isinstance(objects[0], str) or options != {"markup": False, "soft_wrap": True}:
        return None
    text = objects[0]
    if not (text.isascii() and text.isprintable()) or _EMOJI_CODE.search(text):
        return None
    return text


class _LazyConsole:
    """The console of one stream, made on its first use: importing rich is a fifth of `fleet --version`'s start,
    and a command that prints through click (replay, --version, the JSON outputs) never needs it."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: "Console | None" = None

    def get(self) -> "Console":
        if self._console is None:
            self._console = _console(self._stderr)
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        text = _plain_line(objects, options)
        if text is not None and "rich" not in sys.modules:
            # A line rich would write as it is, and no rich in this process (so no live display to draw around):
            # written here, which spares a one-session `fleet import` or an error line the 20 ms of importing rich.
            stream = sys.stderr if self._stderr else sys.stdout
            stream.write(text + "\n")
            stream.flush()
            return
        self.get().print(*objects, **options)


CLI_JSON_SCHEMA_VERSION = 1
"""The version of the --json objects this module builds itself (sweep, status, rerun, resume, grade, --dry-run,
settings); the records it prints whole (compare, sweeps, show, overrides, replay lines) carry their own. Keys are
only ever added; a change of meaning gets a new version."""

console = _LazyConsole(stderr=False)
err_console = _LazyConsole(stderr=True)


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    parts = [v.strip() for v in value.split(",") if v.strip()]
    return parts or None


def _listed(flag: str, value: str | None) -> list[str] | None:
    """A comma-separated option's names. Given but naming nothing (``--items ""``, ``--items ,``) or with an
    empty name in it (``--hosts a,``, a stray comma from a script) is refused: taken as "all" or as "a", it
    would run what the caller did not ask for."""
    if value is None:
        return None
    parts = [v.strip() for v in value.split(",")]
    if not any(parts):
        raise UsageError(f"{flag} {value!r}: names nothing")
    if not all(parts):
        raise UsageError(f"{flag} {value!r}: an empty name (a stray comma?)")
    # A name given twice counts once (--agents x,x listed x twice in hosts check's agents_counted).
    return list(dict.fromkeys(parts))


def _resolve(**options: object) -> "Settings":
    """The settings of this command: defaults < FLEET_* variables < the flags given (harness/core/settings.py)."""
    from harness.core.settings import Settings

    return Settings.resolve(options, os.environ)


def _store(runs: str | None) -> "Store":
    """The results directory's store, for the commands that only read or regrade it."""
    from harness.store import Store

    return Store(_resolve(runs=runs).runs)


common_runs = click.option("--runs", "runs", default=None, help="Results directory (default: $FLEET_RUNS or ./runs).")
common_broker = click.option(
    "--broker", default=None, help="Broker URL, e.g. redis://host:6379/0 (default: $FLEET_BROKER_URL, else embedded)."
)
common_inventory = click.option(
    "--inventory", "-i", default=None, help="Inventory TOML (default: the embedded inventory/local.toml)."
)
common_log_file = click.option(
    "--log-file", "log_file", default=None, help="Append the log to this file (default: $FLEET_LOG_FILE)."
)
common_verbose = click.option("--verbose", "-v", is_flag=True, help="Log to stderr (the resolved settings first).")


common_no_worker_timeout = click.option(
    "--no-worker-timeout", "no_worker_timeout", default=None, metavar="S",
    help="On Redis: give up on a host's cells as HARNESS_FAILURE(no_worker) when no worker consumed its queue for S "
         "seconds (default: $FLEET_NO_WORKER_TIMEOUT, else wait for one, warning every 30 s).")


common_model_port = click.option(
    "--model-port", "model_port", default=None, metavar="PORT",
    help="Serve the scripted model (the embedded default's) on PORT instead of the inventory's base_url port; "
         "without it a busy port is replaced by a free one (default: $FLEET_MODEL_PORT).")


def _max_attempts(help_text: str):
    # No click default: an absent flag leaves the setting's own default (harness/core/settings.py) in force.
    return click.option("--max-attempts", "max_attempts", type=int, default=None, help=f"{help_text}  [default: 3]")


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``fleet --version``: the package version and the harness commit (the one every result records), so a
    bug report or a host's install names the exact code."""
    if not value or ctx.resilient_parsing:
        return
    from harness import __version__
    from harness.core.version import harness_commit

    click.echo(f"fleet {__version__} (harness commit {harness_commit()})")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the version and the harness commit, and exit.")
def cli() -> None:
    """Fleet qualification harness: sweep prompts and rounds over your GPU hosts and grade what comes back."""


def _log_settings(settings: "Settings", verbose: bool) -> None:
    """Log the resolved settings once, secrets redacted: to stderr with --verbose, to the log file if one is set."""
    import logging

    log = logging.getLogger("fleet")
    log.setLevel(logging.INFO)
    log.propagate = False
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()
    if verbose:
        log.addHandler(logging.StreamHandler(sys.stderr))
    if settings.log_file is not None:
        try:
            settings.log_file.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(settings.log_file, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{settings.log_file}: cannot open the log file: {exc.strerror or exc}") from None
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.addHandler(handler)
    if log.handlers:
        # On the embedded default this process is the worker too, so the worker's settings apply here as well.
        shown = settings.one_line(None if settings.embedded else "coordinator")
        log.info("fleet %s: %s", click.get_current_context().info_name, shown)


def _coordinate(settings: "Settings", verb: Callable[["Coordinator"], "SweepRecord"],
                judged: Callable[["SweepRecord"], list["Cell"]], *, gate: frozenset[str], as_json: bool,
                verbose: bool) -> None:
    """What sweep, rerun and resume share: log the settings, run the coordinator's verb with live progress,
    print the table (or --json), then the exit status over the ``judged`` cells."""
    from harness.coordinator.verbs import Coordinator
    from harness.coordinator.dispatch import RetryPolicy
    from harness.views.progress import SweepProgress
    from harness.store import Store

    _log_settings(settings, verbose)
    if not settings.embedded:
        from harness.coordinator.brokercheck import check_queue_urls

        # Before anything is planned or stored: one line within 5 s (each).
        check_queue_urls(settings.broker_url, settings.result_backend)
    store = Store(settings.runs)
    prog = SweepProgress((err_console if as_json else console).get())
    started = False

    def on_start(sweep: "SweepRecord") -> None:
        nonlocal started
        if not as_json:
            prog.start(sweep)
            started = True

    co = Coordinator(store, settings, retry=RetryPolicy(max_attempts=settings.max_attempts, backoff_s=settings.retry_backoff_s),
                     on_event=prog if not as_json else (lambda e: None), on_start=on_start, on_warning=_warn,
                     on_notice=prog.notice)
    try:
        result = verb(co)
    finally:
        if started:
            prog.stop()
    _finish(result, store, as_json)
    _gate(result, judged(result), gate)


def _warn(text: str) -> None:
    err_console.print(f"fleet: warning: {text}", markup=False, soft_wrap=True)


def _fail_on(value: str | None) -> frozenset[str]:
    from typing import get_args

    from harness.grading import GradeName

    names = _csv(value) or []
    known = get_args(GradeName)
    if value is not None and not names:
        # An empty list would silently turn the gate off: a CI job that meant to gate must hear of it.
        raise UsageError(f"--fail-on {value!r}: no grade given (grades: {', '.join(known)})")
    _listed("--fail-on", value)  # a stray comma (HARNESS_FAILURE,) like every other list flag
    bad = [n for n in names if n not in known]
    if bad:
        raise UsageError(f"--fail-on {bad[0]!r}: not a grade (grades: {', '.join(known)})")
    return frozenset(names)


def _gate(sweep, cells, fail_on: frozenset[str]) -> None:
    """The exit status a scheduler reads: 0 when the cells were measured, NothingMeasured (3) when every one
    ended in a harness failure, GradeGate (4) when a cell's grade is one of ``--fail-on``'s."""
    from harness.coordinator.verbs import summary_failure
    from harness.core.errors import GradeGate, NothingMeasured
    from harness.grading.scale import shown_grade

    lasts = [(c, sweep.last(c.id)) for c in cells]
    failed = [c for c, a in lasts if a is not None and summary_failure(a) is not None]
    if cells and len(failed) == len(cells):
        raise NothingMeasured(f"sweep {sweep.id}: nothing was measured: all {len(cells)} cell(s) ended in HARNESS_FAILURE")
    if fail_on:
        hits = []
        for c, a in lasts:
            g = shown_grade(a)  # a reviewer's override counts, as in reports and compare
            if g in fail_on:
                hits.append(f"{c.id} {g}")
        if hits:
            more = f" and {len(hits) - 5} more" if len(hits) > 5 else ""
            raise GradeGate(f"--fail-on {','.join(sorted(fail_on))}: {len(hits)} cell(s): {', '.join(hits[:5])}{more}")


def _finish(sweep, store, as_json: bool) -> None:
    from harness.views.labels import table_label
    from harness.views.progress import matrix_table

    path = store.sweep_dir(sweep.id)
    live = store.is_being_written(sweep.id)
    if sweep.status in ("planned", "running") and not live:
        # Its coordinator is gone (killed, machine rebooted): say so; `fleet resume` settles its attempts.
        sweep.status = "interrupted"
    if as_json:
        cells = []
        for c in sweep.cells:
            last = sweep.last(c.id)
            cells.append(
                {
                    "id": c.id, "host": c.host, "item": c.item, "agent": c.agent, "rep": c.rep,
                    "attempts": len(sweep.attempts.get(c.id) or []),
                    "status": last.status if last else "pending",
                    "reason": last.reason if last else "",
                    "exit_code": last.exit_code if last else None,
                    "grade": last.grade if last else "",
                    "failure": last.failure if last else "",
                    "override": last.override if last else "",
                    "label": table_label(last, live)[0],  # what the table shows (the receipt's outcome is in grade.json)
                    "rerun": sweep.rerun_of(c.id) is not None,
                }
            )
        json.dump({"schema_version": CLI_JSON_SCHEMA_VERSION, "sweep": sweep.id, "path": str(path),
                   "status": sweep.status, "cells": cells}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    # Not a terminal: the console is 100,000 columns wide (_console), no line of the table is ever folded.
    console.print(matrix_table(sweep, live, whole_lines=not sys.stdout.isatty()))
    console.print(f"sweep {sweep.id}: {sweep.status}, results in {path}")


@cli.command()
@common_inventory
@click.option("--hosts", help="Comma-separated host names (default: all in the inventory).")
@click.option("--items", help="Comma-separated open prompts by number or id, e.g. 07,09.")
@click.option("--round", "round_name", help="Add a qualification round's tasks (prompts/rounds/NAME.toml).")
@click.option("--agents", help="Comma-separated agents; each becomes a dimension of the matrix.")
@click.option("--repeat", default=1, show_default=True, help="Repetitions of every cell.")
@click.option("--label", default="", help="Label in the sweep id, e.g. main-d4a61f33.")
@click.option("--prompts", default=None, help="Prompts directory (default: the bundled prompts/).")
@_max_attempts("Attempts per cell when the harness fails.")
@click.option("--fail-on", "fail_on", default=None, metavar="GRADES",
              help="Exit 4 when a cell's grade is one of these, e.g. HARNESS_FAILURE,PARTIAL,NOTHING (for CI gating).")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary.")
@click.option("--dry-run", "dry_run", is_flag=True,
              help="Read the inventory and the prompts, print the planned cells, and stop: nothing is dispatched or stored.")
@common_runs
@common_broker
@common_verbose
@common_log_file
@common_no_worker_timeout
@common_model_port
def sweep(inventory, hosts, items, round_name, agents, repeat, label, prompts, max_attempts, fail_on, as_json, dry_run,
          runs, broker, verbose, log_file, no_worker_timeout, model_port) -> None:
    """Plan the cells, dispatch them, show progress, and print the host x item table.

    Exit status: 0 when the sweep ran to its end and measured at least one cell; 3 when every cell ended in
    HARNESS_FAILURE; 4 when --fail-on matched; 130 when interrupted (Ctrl-C, SIGTERM, SIGHUP).

    \b
    Examples:
      fleet sweep
      fleet sweep --items 07,09 --label nightly
      fleet sweep -i fleet.toml --hosts tower1,mac --agents builtin,openclaw --repeat 3
      fleet sweep --round qualification --fail-on HARNESS_FAILURE --json > sweep.json
      fleet sweep -i fleet.toml --dry-run
    """
    from harness.core.catalog import load_catalog
    from harness.core.inventory import load_inventory

    gate = _fail_on(fail_on)
    chosen = {"hosts": _listed("--hosts", hosts), "items": _listed("--items", items),
              "agents": _listed("--agents", agents)}
    inv = load_inventory(inventory)
    # A broken folder under prompts/ fails only a sweep that asks for it (harness/core/catalog.py, partial).
    cat = load_catalog(prompts, partial=True)
    for line in cat.skipped:
        _warn(one_line(line))
    settings = _resolve(runs=runs, broker_url=broker, max_attempts=max_attempts, log_file=log_file,
                        no_worker_timeout_s=no_worker_timeout, model_port=model_port)
    if dry_run:  # after the settings: a dry run checks every input the sweep would read, its flags included
        _print_plan(inv, cat, **chosen, round_name=round_name, repeat=repeat, label=label, as_json=as_json)
        return
    _coordinate(
        settings,
        lambda co: co.sweep(inv, cat, **chosen, round_name=round_name, repeat=repeat, label=label),
        lambda result: result.cells, gate=gate, as_json=as_json, verbose=verbose)


@cli.command()
@click.argument("host", required=False)
@click.argument("item", required=False)
@click.option("--sweep", "sweep_id", required=True, help="The sweep id.")
@click.option("--host", "host_opt", default=None, metavar="H",
              help="Rerun every cell of this host (instead of HOST ITEM), e.g. after its model or driver was fixed.")
@click.option("--items", default=None, help="With --host: only these items (ids or numbers), e.g. 07,09.")
@click.option("--agents", default=None, help="With --host: only these agents' cells, e.g. builtin,openclaw.")
@click.option("--agent", default=None, help="With HOST ITEM: which agent's cell, when the sweep has several.")
@click.option("--rep", type=int, default=None, help="With HOST ITEM: which repetition, when the sweep has several.")
@click.option("--inventory", "-i", default=None,
              help="Inventory TOML (default: the one the sweep recorded, by absolute path; a change since is warned about).")
@_max_attempts("Attempts for each cell when the harness fails.")
@click.option("--fail-on", "fail_on", default=None, metavar="GRADES",
              help="Exit 4 when a cell's grade is one of these, e.g. HARNESS_FAILURE,PARTIAL,NOTHING (for CI gating).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: {schema_version, sweep, path, status, cells} (README).")
@common_runs
@common_broker
@common_verbose
@common_log_file
@common_no_worker_timeout
@common_model_port
def rerun(host, item, sweep_id, host_opt, items, agents, agent, rep, inventory, max_attempts, fail_on, as_json, runs,
          broker, verbose, log_file, no_worker_timeout, model_port) -> None:
    """Run cells of a sweep again as new attempts (earlier attempts are kept), with the sweep's recorded
    inventory: one cell (HOST ITEM), or every cell of one host (--host H, narrowed by --items and --agents).
    The table, report and compare then use each cell's latest attempt and say it was rerun.

    Examples: `fleet rerun tower1 07 --sweep ID`; `fleet rerun --sweep ID --host tower2 --agents openclaw`.

    Exit status as for `fleet sweep`, over the cells rerun."""
    from harness.store import Store

    gate = _fail_on(fail_on)
    if host_opt is not None:
        if host is not None:
            raise UsageError("give HOST ITEM (one cell) or --host H (every cell of a host), not both")
        for flag, value in (("--agent", agent), ("--rep", rep)):
            if value is not None:
                raise UsageError(f"{flag} goes with HOST ITEM; with --host use --items and --agents")
        chosen_items, chosen_agents = _listed("--items", items), _listed("--agents", agents)
    else:
        for flag, value in (("--items", items), ("--agents", agents)):
            if value is not None:
                raise UsageError(f"{flag} goes with --host H (every cell of a host); one cell is HOST ITEM")
        if host is None or item is None:
            raise UsageError("name one cell (HOST ITEM) or a host (--host H)")
    settings = _resolve(runs=runs, broker_url=broker, max_attempts=max_attempts, log_file=log_file,
                        no_worker_timeout_s=no_worker_timeout, model_port=model_port)
    rec = Store(settings.runs).load_sweep(sweep_id)
    if host_opt is not None:
        from harness.coordinator.verbs import host_cells

        cells = host_cells(rec, host_opt, chosen_items, chosen_agents)  # bad names are said before anything runs
        inv = _inventory_for(rec, inventory)
        ids = {c.id for c in cells}
        _coordinate(settings, lambda co: co.rerun_host(sweep_id, inv, host_opt, chosen_items, chosen_agents),
                    lambda result: [c for c in result.cells if c.id in ids], gate=gate, as_json=as_json,
                    verbose=verbose)
        return
    inv = _inventory_for(rec, inventory)
    _coordinate(settings, lambda co: co.rerun(sweep_id, inv, host, item, agent, rep),
                lambda result: [result.one_cell(host, item, agent, rep)], gate=gate, as_json=as_json, verbose=verbose)


@cli.command()
@click.argument("sweep_id")
@click.option("--inventory", "-i", default=None,
              help="Inventory TOML (default: the one the sweep recorded, by absolute path; a change since is warned about).")
@_max_attempts("Attempts per cell on harness failures, counting those the cell already used.")
@click.option("--retry-exhausted", is_flag=True,
              help="Also run cells that used all their attempts, with a fresh budget of --max-attempts.")
@click.option("--fail-on", "fail_on", default=None, metavar="GRADES",
              help="Exit 4 when a cell's grade is one of these, e.g. HARNESS_FAILURE,PARTIAL,NOTHING (for CI gating).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: {schema_version, sweep, path, status, cells} (README).")
@common_runs
@common_broker
@common_verbose
@common_log_file
@common_no_worker_timeout
@common_model_port
def resume(sweep_id, inventory, max_attempts, retry_exhausted, fail_on, as_json, runs, broker, verbose, log_file,
           no_worker_timeout, model_port) -> None:
    """Run the cells with no attempt, or whose last attempt is a harness failure, with the sweep's recorded
    inventory. Attempts still marked running (their coordinator stopped) are settled first: their result
    is taken if it came, else they are recorded as abandoned.

    Exit status as for `fleet sweep`, over every cell of the sweep.

    \b
    Examples:
      fleet resume 20261204-031500-nightly
      fleet resume 20261204-031500-nightly --retry-exhausted --max-attempts 2
    """
    from harness.store import Store

    gate = _fail_on(fail_on)
    settings = _resolve(runs=runs, broker_url=broker, max_attempts=max_attempts, log_file=log_file,
                        no_worker_timeout_s=no_worker_timeout, model_port=model_port)
    inv = _inventory_for(Store(settings.runs).load_sweep(sweep_id), inventory)
    _coordinate(settings, lambda co: co.resume(sweep_id, inv, retry_exhausted=retry_exhausted),
                lambda result: result.cells, gate=gate, as_json=as_json, verbose=verbose)


def _print_plan(inv, cat, *, as_json: bool, **plan_options: Any) -> None:
    """`fleet sweep --dry-run`: the cells the sweep would have, from the same planner, and nothing else (a CI
    job checks an edited inventory or prompt this way before a night's sweep)."""
    from harness.coordinator.plan import plan_sweep

    planned = plan_sweep(inv, cat, **plan_options)
    if as_json:
        cells = [{"id": c.id, "host": c.host, "item": c.item, "agent": c.agent, "rep": c.rep} for c in planned.cells]
        json.dump({"schema_version": CLI_JSON_SCHEMA_VERSION, "inventory": inv.path, "prompts": cat.root,
                   "cells": cells}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    for c in planned.cells:
        console.print(c.id, markup=False, soft_wrap=True)
    console.print(f"{len(planned.cells)} cell(s) planned from {inv.path} and {cat.root}; nothing dispatched",
                  markup=False, soft_wrap=True)


def _inventory_for(rec, override: str | None):
    from harness.core.inventory import load_inventory

    return load_inventory(override or rec.inventory)


@cli.command()
@click.argument("sweep_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: {schema_version, sweep, path, status, cells} (README).")
@common_runs
def status(sweep_id, as_json, runs) -> None:
    """A sweep's state and table (the latest sweep if no id is given).

    \b
    Examples:
      fleet status
      fleet status 20261204-031500-nightly --json
    """
    store = _store(runs)
    sweep_id = sweep_id or store.latest_sweep()
    _finish(store.load_sweep(sweep_id), store, as_json)


@cli.command()
@click.argument("sweep_id")
@click.argument("host")
@click.argument("item")
@click.option("--agent", default=None, help="The cell's agent, when the sweep has several.")
@click.option("--rep", type=int, default=None, help="The cell's repetition, when it has several.")
@click.option("--attempt", type=int, default=None, help="Attempt number (default: the last).")
@click.option("--json", "as_json", is_flag=True, help="Print meta.json.")
@common_runs
def show(sweep_id, host, item, agent, rep, attempt, as_json, runs) -> None:
    """One cell: its attempts, the chosen attempt's meta, overrides, artifacts and answer.

    \b
    Examples:
      fleet show 20261204-031500-nightly tower1 07
      fleet show 20261204-031500-nightly tower1 07 --agent openclaw --attempt 1 --json
    """
    from harness.grading.gradefiles import read_grade_history
    from harness.grading.override import GradeOverride
    from harness.views.labels import STYLES, label
    from rich.markup import escape
    store = _store(runs)
    rec = store.load_sweep(sweep_id)
    cell = rec.one_cell(host, item, agent, rep)
    runs_ = rec.attempts.get(cell.id) or []
    if not runs_:
        raise UsageError(f"{cell.id}: no attempt yet")
    k = attempt or runs_[-1].attempt
    meta = store.load_meta(sweep_id, cell.id, k)
    if as_json:
        # Today's form of the record, whatever version the file was written in.
        sys.stdout.write(meta.model_dump_json(indent=2) + "\n")
        return
    folder = store.attempt_dir(sweep_id, cell.id, k)
    console.print(f"[bold]{cell.id}[/] in sweep {sweep_id}")
    for a in runs_:
        text, style = label(a)
        # A reviewer's grade counts in place of the automatic one: both are shown.
        shown = (f"[{STYLES.get(a.override, 'bold')}]{escape(one_line(a.override))}[/] (override; automatic {text})"
                 if a.override else f"[{style}]{text}[/]")
        console.print(f"  attempt {a.attempt}: {shown} {a.duration_s:.1f} s")
    console.print(f"attempt {k}: {folder}")
    chosen = next((a for a in runs_ if a.attempt == k), None)
    # The history is read only for an overridden attempt (its summary says so), as `fleet report` does.
    overrides = [h for h in read_grade_history(folder) if isinstance(h, GradeOverride)] if chosen and chosen.override else []
    if overrides:
        console.print("overrides (the latest counts):")
        for o in overrides:
            console.print(one_line(f"  {o.at}  {o.author}: {o.automatic or 'ungraded'} -> {o.grade}: {o.reason}"),
                          markup=False, soft_wrap=True)
    for key in ("status", "reason", "error", "exit_code", "agent", "agent_kind", "agent_version", "agent_command", "worker", "workspace", "started_at", "duration_s", "harness_commit"):
        value = getattr(meta, key)
        if value not in (None, "", []):
            console.print(f"  {key}: {one_line(str(value))}", markup=False)
    if meta.values:
        console.print(f"  values: {meta.values} (seed {meta.seed})", markup=False)
    _show_grade(folder, chosen.override if chosen else "")
    console.print("artifacts:")
    for art in meta.artifacts:
        # Names come from the agent's workspace: a newline or an escape sequence in one must not fake a row or
        # drive the terminal.
        console.print(f"  {art.sha256[:12]}  {art.size:>9}  {one_line(art.name)}", markup=False, soft_wrap=True)
    answer = folder / "answer.txt"
    if answer.is_file():
        text = answer.read_text(errors="replace")
        console.print("answer.txt:")
        # The agent's text, its lines and tabs kept, any other control character (an ANSI escape) shown escaped.
        shown = "\n".join("\t".join(one_line(seg) for seg in line.split("\t")) for line in text[:4000].split("\n"))
        console.print(shown + ("\n[... cut, see the file]" if len(text) > 4000 else ""), markup=False)


def _show_grade(folder: Path, override: str) -> None:
    """`fleet show`'s grade part, from the attempt's grade.json: the grade (and the reviewer's that counts instead),
    why, the guard's stop and which acceptance checks did not pass."""
    from harness.core.checks.result import failure_message
    from harness.grading.model import Grade
    from harness.core.recordfile import read_optional

    grade = read_optional(folder / "grade.json", Grade)
    if grade is None:
        console.print("grade: " + (f"{one_line(override)} (override; not graded automatically)" if override
                                   else "not graded yet (no grade.json)"), markup=False)
        return
    counted = f"{one_line(override)} (override; automatic {grade.grade})" if override else grade.grade
    failure = f"; failure {grade.failure}" if grade.failure else ""
    console.print(f"grade: {counted} (outcome {grade.outcome}{failure}; grader {grade.grader_version}"
                  + (f", graded {grade.graded_at})" if grade.graded_at else ")"), markup=False, soft_wrap=True)
    if grade.reasons:
        console.print("reasons:", markup=False)
        for reason in grade.reasons:
            console.print(f"  - {one_line(reason)}", markup=False, soft_wrap=True)
    if grade.stop:
        at = f" at call {grade.stop.at_call}" if grade.stop.at_call is not None else ""
        console.print(f"stop: {one_line(grade.stop.text)} ({one_line(grade.stop.reason)}){at}", markup=False,
                      soft_wrap=True)
    if grade.checks:
        console.print("checks:", markup=False)
    for check in grade.checks:
        why = failure_message(check) if check.status in ("failed", "error") else ""
        console.print(f"  {one_line(check.name)} {check.status}" + (f": {why}" if why else ""), markup=False,
                      soft_wrap=True)


@cli.command()
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

    settings = _resolve(broker_url=broker)
    if settings.embedded:
        raise UsageError("fleet worker needs a broker: set FLEET_BROKER_URL or --broker redis://...")
    names = _listed("--hosts", hosts)
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


@cli.command("settings")
@common_runs
@common_broker
@_max_attempts("Attempts per cell when the harness fails.")
@common_log_file
@common_no_worker_timeout
@common_model_port
@click.option("--json", "as_json", is_flag=True,
              help="Print {schema_version, settings: [{name, value, from, env, flag}]}.")
def settings_(runs, broker, max_attempts, log_file, no_worker_timeout, model_port, as_json) -> None:
    """Print every setting as this command line and environment resolve it, and where each value came from
    (default, env FLEET_<NAME>, flag --x); secrets redacted. docs/settings.md says what each one means.

    \b
    Examples:
      fleet settings
      fleet settings --broker redis://127.0.0.1:6379/0 --json
    """
    from harness.core.settings import setting_specs

    settings = _resolve(runs=runs, broker_url=broker, max_attempts=max_attempts, log_file=log_file,
                        no_worker_timeout_s=no_worker_timeout, model_port=model_port)
    if as_json:
        rows = [{"name": s.name, "value": settings.shown(s.name), "from": settings.origin(s.name), "env": s.env,
                 "flag": s.flag} for s in setting_specs()]
        json.dump({"schema_version": CLI_JSON_SCHEMA_VERSION, "settings": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    table: list[tuple[str, str, str]] = [("setting", "value", "from"), *((n, v or "-", o) for n, v, o in settings.rows())]
    widths = [max(len(r[i]) for r in table) for i in range(2)]
    for name, value, origin in table:
        console.print(f"{name:<{widths[0]}}  {value:<{widths[1]}}  {origin}", markup=False, soft_wrap=True)
    queue = (f"embedded (SQLite under {settings.queue_dir}, a worker inside fleet)" if settings.embedded
             else settings.shown("broker_url"))
    console.print(f"queue: {queue}", markup=False, soft_wrap=True)


@cli.group()
def hosts() -> None:
    """Look at the fleet's hosts."""


@hosts.command("check")
@common_inventory
@click.option("--hosts", "names", help="Comma-separated host names (default: all).")
@click.option("--agents", "agents", help="Comma-separated agent names the sweep will use: only these count towards "
              "a host being ready (default: none; a missing agent is shown, the host stays ready).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: hosts, ready, not_ready.")
def hosts_check(inventory, names, agents, as_json) -> None:
    """Per host: SSH reachable, host key matches the pin, model endpoint answers /v1/models, free disk, agents;
    a closing line names the hosts that are not ready and why. Exit 1 if any is not ready.

    \b
    Examples:
      fleet hosts check -i fleet.toml
      fleet hosts check -i fleet.toml --hosts tower1,mac --agents builtin,opencode --json
    """
    from harness.coordinator.hostcheck import check_hosts, summary_line
    from harness.core.inventory import load_inventory

    inv = load_inventory(inventory)
    chosen = inv.select(_listed("--hosts", names))
    counted = _counted_agents(inv, chosen, _listed("--agents", agents))
    results = check_hosts(chosen, counted)
    if as_json:
        json.dump(_hosts_check_json(inv, counted, results), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        console.print(_hosts_check_table(f"hosts in {inv.path}", results))
        # The table may fold a long value; this line is never cut (soft_wrap), so what to fix is always whole.
        console.print(summary_line(results), markup=False, soft_wrap=True)
    if not all(r.ok for r in results):
        sys.exit(1)


if TYPE_CHECKING:  # for the helpers of hosts_check below
    from rich.table import Table

    from harness.coordinator.hostcheck import HostCheck
    from harness.core.inventory import Host, Inventory


def _counted_agents(inv: "Inventory", chosen: list["Host"], agents: list[str] | None) -> list[str] | None:
    """--agents as given, each checked to be some chosen host's agent (a typo would otherwise count for nothing)."""
    if not agents:
        return None
    known = {a for h in chosen for a in h.agents}
    unknown = [a for a in agents if a not in known]
    if unknown:
        raise UsageError(f"--agents: no chosen host of {inv.path} has agent {unknown[0]!r} "
                         f"(they have: {', '.join(sorted(known)) or 'none'})")
    return agents


def _hosts_check_json(inv: "Inventory", counted: list[str] | None, results: list["HostCheck"]) -> dict[str, Any]:
    """`fleet hosts check --json`: one object (docs/inventory.md, Checking the hosts)."""
    return {"schema_version": CLI_JSON_SCHEMA_VERSION, "inventory": str(inv.path), "agents_counted": counted,
            "hosts": [r.as_dict() for r in results], "ready": [r.host for r in results if r.ok],
            "not_ready": {r.host: r.why for r in results if not r.ok}}


def _hosts_check_table(title: str, results: list["HostCheck"]) -> "Table":
    """The hosts table. Every column folds instead of cutting: a fingerprint, a model id or an error must be
    read whole (a host key mismatch is fixed by comparing two SHA256 strings)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(title))
    for col in ("host", "ok", "ssh", "host key", "model /v1/models", "disk free", "agents"):
        t.add_column(col, overflow="fold")
    for r in results:
        cells = (r.host, "yes" if r.ok else "no", r.ssh, r.host_key, r.model,
                 f"{r.disk_free_mb} MB" if r.disk_free_mb is not None else "?",
                 ", ".join(f"{k}: {v}" for k, v in r.agents.items()))
        # Text from the host (an error, a version line) is shown as it is, never read as rich markup.
        t.add_row(*(escape(one_line(c)) for c in cells), style=None if r.ok else "red")
    return t


@cli.command()
@click.argument("sweep_id")
@click.option("--host", default=None, help="Only this host's cells.")
@click.option("--item", default=None, help="Only this item's cells (number or id).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: the sweep's, as `fleet status --json`; with --override the override record.")
@click.option("--override", "override", default=None, metavar="GRADE",
              help="A reviewer's grade for one cell (--host and --item, with --agent and --rep when needed), counted "
              "in place of the automatic one, which stays; needs --reason and --author (docs/grading.md, Overrides).")
@click.option("--reason", default=None, help="Why the override (required with --override).")
@click.option("--author", default=None, help="Who gives the override (required with --override).")
@click.option("--agent", default=None, help="With --override: the cell's agent, when the sweep has several.")
@click.option("--rep", type=int, default=None, help="With --override: the cell's repetition, when it has several.")
@click.option("--attempt", type=int, default=None, help="With --override: the attempt (default: the last recorded).")
@common_runs
def grade(sweep_id, host, item, as_json, override, reason, author, agent, rep, attempt, runs) -> None:
    """Regrade stored attempts without rerunning anything; every earlier grade is kept in grades.jsonl. With
    --override: a reviewer's grade of one cell's attempt instead, with its reason and author.

    \b
    Examples:
      fleet grade 20261204-031500-nightly
      fleet grade 20261204-031500-nightly --host tower1 --item 07
      fleet grade 20261204-031500-nightly --host tower1 --item 07 --override PARTIAL --reason 'renames only half' --author ana
    """
    from harness.coordinator.regrade import regrade
    store = _store(runs)
    if override is not None:
        _override(store, sweep_id, host, item, agent, rep, attempt, override, reason, author, as_json)
        return
    extra = [name for name, value in (("--reason", reason), ("--author", author), ("--agent", agent),
                                      ("--rep", rep), ("--attempt", attempt)) if value is not None]
    if extra:
        raise UsageError(f"{', '.join(extra)}: only with --override GRADE (a regrade takes --host and --item)")
    rec = store.load_sweep(sweep_id)
    cells = rec.cells_matching(host, item)
    if not cells:
        raise UsageError(f"sweep {sweep_id} has no cell for host {host!r} and item {item!r}")
    n = regrade(store, rec, [(c, a.attempt) for c in cells for a in rec.attempts.get(c.id) or [] if a.status != "dispatched"])
    if not as_json:
        err_console.print(f"regraded {n} attempt(s)", markup=False)
    _finish(rec, store, as_json)


def _override(store: "Store", sweep_id: str, host: str | None, item: str | None, agent: str | None, rep: int | None,
              attempt: int | None, grade: str, reason: str | None, author: str | None, as_json: bool) -> None:
    """``fleet grade --override``: one reviewer's grade, checked whole before anything is written."""
    from harness.grading.override import check_override_input
    from harness.store import override_grade

    if host is None or item is None:
        raise UsageError("--override grades one cell: give --host and --item (and --agent, --rep when needed)")
    for flag, value in (("--reason", reason), ("--author", author)):
        if value is None:
            raise UsageError(f"--override needs {flag}")
    check_override_input(grade, reason or "", author or "")  # bad input is said before the sweep is read
    cell = store.load_sweep(sweep_id).one_cell(host, item, agent, rep)
    done = override_grade(store, sweep_id, cell.id, attempt, grade, reason or "", author or "")
    if as_json:
        sys.stdout.write(done.model_dump_json(indent=2) + "\n")
        return
    console.print(one_line(f"{cell.id}: {done.grade} by {done.author} (override of {done.automatic or 'ungraded'}, "
                           f"at {done.at}): {done.reason}"), markup=False, soft_wrap=True)


@cli.command()
@click.argument("sweep_id", required=False)
@common_runs
def report(sweep_id, runs) -> None:
    """Write REPORT.md, junit.xml and results.json for a sweep (the latest if no id is given).

    \b
    Examples:
      fleet report
      fleet report 20261204-031500-nightly
    """
    from harness.views.report import write_report
    store = _store(runs)
    sweep_id = sweep_id or store.latest_sweep()
    for path in write_report(store, store.load_sweep(sweep_id)):
        console.print(str(path), markup=False)


@cli.command()
@click.argument("baseline")
@click.argument("candidate")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/compare.md).")
@click.option("--all", "show_all", is_flag=True, help="Show the unchanged cells too.")
@click.option("--fail-on-regressions", "fail_on_regressions", type=click.IntRange(min=0), default=None, metavar="N",
              help="Exit 4 when more than N cell groups regressed (0: any regression fails; for CI).")
@common_runs
def compare(baseline, candidate, as_json, show_all, fail_on_regressions, runs) -> None:
    """Compare two sweeps cell by cell: regressions first, the counts, both pass rates, the exact sign test and
    subtotals per host and agent. BASELINE may be `previous`: the latest earlier sweep with CANDIDATE's label.

    \b
    Examples:
      fleet compare previous 20261204-031500-nightly
      fleet compare 20261203-031500-nightly 20261204-031500-nightly --all
      fleet compare previous 20261204-031500-nightly --fail-on-regressions 0 --json
    """
    from harness.views.comparison import compare_sweeps
    from harness.core.errors import RegressionGate
    from harness.views.sweeplist import previous_sweep

    store = _store(runs)
    if candidate == "previous":
        raise UsageError("`previous` stands for a BASELINE (the latest earlier sweep with CANDIDATE's label); "
                         "CANDIDATE must be a sweep id")
    cand = store.load_sweep(candidate)
    base = store.load_sweep(previous_sweep(store, cand) if baseline == "previous" else baseline)
    from harness.views.sweeplist import shown_status

    result = compare_sweeps(base, cand, {rec.id: shown_status(store, rec) for rec in (base, cand)})
    if as_json:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        _print_comparison(result, show_all)
    if fail_on_regressions is not None and result.counts.regressed > fail_on_regressions:
        hits = [f"{r.host}/{r.item}/{r.agent}" for r in result.rows if r.change == "regressed"]
        more = f" and {len(hits) - 5} more" if len(hits) > 5 else ""
        raise RegressionGate(f"--fail-on-regressions {fail_on_regressions}: {len(hits)} regressed: "
                             f"{', '.join(hits[:5])}{more}")


@cli.command()
@common_runs
@click.option("--host", "bind", default="127.0.0.1", show_default=True,
              help="Address to listen on (loopback by default: the dashboard serves every stored transcript).")
@click.option("--port", type=click.IntRange(0, 65535), default=8780, show_default=True, help="Port to listen on.")
@click.option("--token", default=None, help="Allow grade overrides to whoever gives this token (default: "
              "$FLEET_DASHBOARD_TOKEN; without one the dashboard is read-only). The variable keeps it out of ps.")
@click.option("--export", "export_dir", default=None, metavar="DIR",
              help="Write one sweep's pages as static HTML into DIR and exit (to publish a nightly).")
@click.option("--sweep", "sweep_id", default=None, help="The sweep --export writes (default: the latest).")
def dashboard(runs, bind, port, token, export_dir, sweep_id) -> None:
    """Serve the results directory in a browser: sweeps and their trend, a sweep's matrix (live while it runs),
    a cell's story, compare, replays, hosts, and grade overrides with the token (docs/dashboard.md).

    \b
    Examples:
      fleet dashboard
      FLEET_DASHBOARD_TOKEN=s3cret fleet dashboard --port 8780
      fleet dashboard --export site/ --sweep 20261204-031500-nightly
    """
    store = _store(runs)
    token = token if token is not None else os.environ.get("FLEET_DASHBOARD_TOKEN") or None
    if export_dir is not None:
        from harness.dashboard.export import export_sweep

        written = export_sweep(store, sweep_id or store.latest_sweep(), Path(export_dir))
        console.print(f"wrote {written.pages} page(s) and {written.files} file(s) of {written.sweep} to {export_dir}", markup=False)
        return
    if sweep_id is not None:
        raise UsageError("--sweep goes with --export (the server shows every sweep)")
    from harness.dashboard.serve import serve

    serve(store.root, bind, port, token)


def _print_comparison(result, show_all: bool) -> None:
    """The terminal view of a Comparison, in lines that fit 100 columns (names as stored, escaped)."""
    from harness.views.comparison import CHANGES

    def say(text: str) -> None:
        console.print(one_line(text), markup=False, soft_wrap=True)

    b, c = result.baseline, result.candidate
    say(f"baseline  {b.id} ({b.status}, {b.created_at})")
    say(f"candidate {c.id} ({c.status}, {c.created_at})")
    shown = [r for r in result.rows if show_all or r.change != "unchanged"]
    if shown:
        width = max(len(f"{r.host}/{r.item}/{r.agent}") for r in shown)
        say("")
        for r in shown:
            before = r.baseline.summary if r.baseline else "-"
            after = r.candidate.summary if r.candidate else "-"
            say(f"  {r.change:<10}  {f'{r.host}/{r.item}/{r.agent}':<{width}}  {before} -> {after}")
            for name, side in (("baseline", r.baseline), ("candidate", r.candidate)):
                if side is not None and len(side.reps) > 1:
                    reps = ", ".join(f"r{g.rep} {g.shown}" for g in side.reps)
                    say(f"  {'':<10}    {name}: pass@{side.k} {'yes' if side.pass_at_k else 'no'}; {reps}")
    else:
        say("")
        say("  no cell changed" + ("" if show_all else " (--all shows every cell)"))
    say("")
    say(result.counts.line())
    say(f"pass rate, all cells:                 {b.rate.all} -> {c.rate.all}")
    say(f"pass rate, without harness failures:  {b.rate.without_failures} -> {c.rate.without_failures}")
    t = result.test
    exact = f" ({t.p_exact})" if "/" in t.p_exact and len(t.p_exact) <= 20 else ""
    # McNemar's exact test is the sign test over single cells; with repetitions the pairs are cell groups.
    single = all(len(side.reps) <= 1 for r in result.rows for side in (r.baseline, r.candidate) if side is not None)
    what = "exact McNemar, cells both measured" if single else "exact sign test, cell groups both measured"
    say(f"sign test ({what}): b {t.b} regressed, c {t.c} improved, p {t.p:.4g}{exact}")
    for title, subtotals in (("per host", result.per_host), ("per agent", result.per_agent)):
        say("")
        say(f"{title}:")
        width = max((len(s.name) for s in subtotals), default=0)
        for s in subtotals:
            counts = ", ".join(f"{getattr(s.counts, k)} {k}" for k in CHANGES if getattr(s.counts, k))
            say(f"  {s.name:<{width}}  {s.baseline.without_failures} -> {s.candidate.without_failures}; {counts}")


def _size(n: int) -> str:
    """Bytes as a person reads them (decimal units, as `df -H` and the issue's "221 MB")."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


@cli.command("prune")
@click.option("--keep", type=int, default=None, metavar="N", help="Keep the newest N sweeps (of --label), remove the rest.")
@click.option("--older-than", "older_than", default=None, metavar="AGE",
              help="Remove the sweeps created longer than AGE ago: 30d, 12h, 90m, 2w (with --keep: both must hold).")
@click.option("--label", default=None, help="Only the sweeps with this label.")
@click.option("--dry-run", "dry_run", is_flag=True, help="List what would be removed, and remove nothing.")
@common_runs
def prune_(keep, older_than, label, dry_run, runs) -> None:
    """Remove old sweeps from the results directory (their folders and their index rows), never one that is
    running; print each one removed and the space freed (docs/retention.md).

    Examples: `fleet prune --keep 30`; `fleet prune --older-than 30d --label nightly --dry-run`."""
    from harness.store.prune import parse_age, prune

    if keep is not None and keep < 0:
        raise UsageError(f"--keep {keep}: must be 0 or more")
    age = parse_age(older_than) if older_than is not None else None
    result = prune(_store(runs), keep=keep, older_than=age, label=label, dry_run=dry_run)
    for line in result.skipped:
        _warn(one_line(line))
    verb = "would remove" if dry_run else "removed"
    for p in result.removed:
        say = f"{verb} {p.id} (label {p.label or '-'}, created {p.created_at[:16].replace('T', ' ')}, {_size(p.size)})"
        console.print(one_line(say), markup=False, soft_wrap=True)
    for sweep_id in result.kept_running:
        console.print(one_line(f"kept {sweep_id}: it is running (or being written)"), markup=False, soft_wrap=True)
    if result.finished_trash:
        console.print(f"finished an interrupted prune: {_size(result.finished_trash)}", markup=False)
    total = f"{len(result.removed)} sweep(s), {_size(result.freed)}"
    console.print(f"would prune {total} (dry run: nothing removed)" if dry_run else f"pruned {total} freed",
                  markup=False, soft_wrap=True)


@cli.command("sweeps")
@click.option("--label", default=None, help="Only the sweeps with this label.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most N sweeps (the newest).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (docs/compare.md).")
@common_runs
def sweeps_(label, limit, as_json, runs) -> None:
    """List the sweeps, newest first: id, label, date, hosts, items, agents, status and pass rate.

    \b
    Examples:
      fleet sweeps
      fleet sweeps --label nightly --limit 7 --json
    """
    from harness.views.sweeplist import list_sweeps

    listing = list_sweeps(_store(runs), label=label, limit=limit)
    for bad in listing.unreadable:
        _warn(one_line(f"sweep {bad.id} cannot be read, so it is not listed: {bad.error}"))
    if as_json:
        sys.stdout.write(listing.model_dump_json(indent=2) + "\n")
        return
    table = [("sweep", "label", "created", "hosts", "items", "agents", "status", "pass, all", "without HF")]
    for s in listing.sweeps:
        table.append((s.id, s.label or "-", s.created_at[:16].replace("T", " "), str(len(s.hosts)), str(s.items),
                      str(len(s.agents)), s.status, s.rate.all, s.rate.without_failures))
    if len(table) == 1:
        console.print("no sweeps" + (f" labelled {label!r}" if label is not None else ""), markup=False)
        return
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        cells = [v.rjust(w) if i in (3, 4, 5) else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))]
        console.print(one_line("  ".join(cells).rstrip()), markup=False, soft_wrap=True)


@cli.command("import")
@click.argument("format_name", metavar="FORMAT")
@click.argument("path")
@click.option("--out", "out", default=None, help="Folder for the runs' folders (default: ./imported/<file stem>).")
def import_(format_name, path, out) -> None:
    """Import another agent's recorded sessions (FORMAT: pixel-fleet, openclaw-jsonl, openclaw-sqlite, opencode,
    hermes) as attempt-like folders, one per run,
    grade each (grade.json, grades.jsonl) and print it.

    \b
    Examples:
      fleet import pixel-fleet tests/fixtures/pixel-fleet/photo-renamer-bfb62a2b.json
      fleet import openclaw-jsonl ~/.openclaw/agents/main/sessions/abc.jsonl --out imported/abc
    """
    from harness.cli.loading import loading

    with loading():
        from harness.importers import grade_folder, importer
        from harness.grading.gradefiles import write_grade_files

        source = importer(format_name)
    out_dir = Path(out) if out else Path("imported") / Path(path).stem
    for folder in source.import_to_folder(path, out_dir):
        g = grade_folder(folder)
        write_grade_files(folder, g)
        stop = f"; stop: {g.stop.text}" + (f" at call {g.stop.at_call}" if g.stop.at_call else "") if g.stop else ""
        console.print(f"{folder}: {g.grade} (outcome {g.outcome}{stop})", markup=False, soft_wrap=True)


@cli.group()
def transcript() -> None:
    """Read normalized transcripts (docs/transcript.md)."""


@transcript.command("check")
@click.argument("file")
def transcript_check(file) -> None:
    """Validate a transcript.jsonl line by line and print how many events of each kind it holds.

    \b
    Examples:
      fleet transcript check runs/SWEEP/local/07-photo-renamer/builtin/r1/attempt-1/transcript.jsonl
    """
    from collections import Counter

    from harness.core.transcript import read_transcript

    events = read_transcript(file)
    kinds = Counter(e.event for e in events)
    shown = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "no events"
    console.print(f"{file}: {len(events)} event(s): {shown}", markup=False, soft_wrap=True)


@cli.group()
def guard() -> None:
    """Check the guard's rules on real output."""


@guard.command("verdict")
@click.argument("file")
@click.option("--exit-code", type=int, default=None, help="The test command's exit status.")
@click.option("--command", "command", default=None, help="The test command that printed the output.")
def guard_verdict(file, exit_code, command) -> None:
    """What the test-verdict recognizer makes of a test command's output (FILE, or - for stdin), as JSON.

    \b
    Examples:
      python -m pytest -q > out.txt; fleet guard verdict out.txt --exit-code $? --command 'python -m pytest -q'
      python -m unittest 2>&1 | fleet guard verdict - --command 'python -m unittest'
    """
    from harness.guard.verdict import recognize

    if file == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise UsageError(f"{file}: cannot read: {exc.strerror or exc}") from None
    verdict = recognize(data.decode("utf-8", errors="replace"), exit_code=exit_code, command=command)
    json.dump(verdict.to_json(), sys.stdout)
    sys.stdout.write("\n")


@cli.command()
@click.argument("sources", nargs=-1, required=True)
@click.option("--policy", "policies", multiple=True, metavar="P",
              help="default, a policy file (.toml), git:REF or cmd:COMMAND; repeat to compare (default: default).")
@click.option("--edit", "edits", multiple=True, metavar="E",
              help="A counterfactual: SESSION:CALL=RESULT, SESSION:CALL+=TOOL:RESULT or SESSION:CALL=drop.")
@click.option("--format", "fmt", default=None, metavar="F",
              help="The sources' format when it cannot be told from their content (transcript, pixel-fleet, ...).")
@click.option("--jobs", type=click.IntRange(min=1, max=256), default=None,
              help="Worker processes (default: one per core).")
@click.option("--all", "show_all", is_flag=True, help="Print every session's line, however many.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per (session, policy) per line.")
@common_runs
def replay(sources, policies, edits, fmt, jobs, show_all, as_json, runs) -> None:
    """Replay recorded sessions (a sweep id, a folder, or session files) through guard policies, offline.

    \b
    Examples:
      fleet replay 20261204-031500-nightly
      fleet replay imported/ --policy default --policy my-guard.toml
      fleet replay session.json --policy git:HEAD~1 --policy default --json
    """
    from harness.cli.loading import loading

    with loading():
        from harness.importers import IMPORTERS
        from harness.replay.command import print_progress, render_json, render_text, run_replay
        from harness.replay.sources import TRANSCRIPT

    if fmt is not None and fmt != TRANSCRIPT and fmt not in IMPORTERS:
        raise UsageError(f"unknown --format {fmt!r}: expected one of {', '.join([TRANSCRIPT, *sorted(IMPORTERS)])}")
    settings = _resolve(runs=runs)
    run = run_replay(sources, policies, edits, fmt, jobs, Path(settings.runs), None if as_json else print_progress,
                     guard_timeout=settings.replay_guard_timeout_s)
    for line in render_json(run) if as_json else render_text(run, show_all):
        click.echo(line)


@cli.group()
def model() -> None:
    """The scripted model server (an OpenAI-compatible stand-in for a host's local model)."""


@model.command("serve")
@click.option("--script", "script", required=True, multiple=True,
              help="Script file, folder or glob (TOML or JSON, see docs/scripted-model.md); repeat for a script set.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8765, show_default=True, help="0 picks a free port.")
@click.option("--model-id", default=None, help="Model id to serve (default: the script's, else scripted-model).")
@click.option("--log", "log_path", default=None, help="Append every request and answer to this JSONL file.")
@click.option("--check", is_flag=True, help="Read and validate the scripts, print them, and exit without serving.")
def model_serve(script, host, port, model_id, log_path, check) -> None:
    """Serve a script over HTTP until interrupted; prints `listening on URL` first.

    \b
    Examples:
      fleet model serve --script prompts/open/07-photo-renamer/model.toml --port 8765
      fleet model serve --script 'prompts/open/*/model.toml' --check
    """
    from harness.modelserver import ScriptError, load_scripts, serve

    try:
        if check:
            for name in load_scripts(list(script)):
                console.print(f"{name}: valid", markup=False, soft_wrap=True)
            return
        serve(list(script), host=host, port=port, model_id=model_id, log_path=log_path)
    except ScriptError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@hosts.command("prepare")
@common_inventory
@click.option("--hosts", "names", help="Comma-separated host names (default: all).")
def hosts_prepare(inventory, names) -> None:
    """Install this harness (this exact code) into a virtual environment on each host, if not there yet.

    \b
    Examples:
      fleet hosts prepare -i fleet.toml
      fleet hosts prepare -i fleet.toml --hosts tower1
    """
    from concurrent.futures import ThreadPoolExecutor

    from harness.core.errors import InfrastructureError
    from harness.core.inventory import load_inventory
    from workers.install import ensure_harness, source_release
    from workers.transport import connect_for

    inv = load_inventory(inventory)
    chosen = inv.select(_listed("--hosts", names))
    release = source_release()

    def prepare(host):
        t = connect_for(host)
        try:
            return host.name, True, ensure_harness(t, host, release)
        except InfrastructureError as exc:
            return host.name, False, str(exc)
        finally:
            t.close()

    with ThreadPoolExecutor(max_workers=min(8, len(chosen))) as pool:
        results = list(pool.map(prepare, chosen))
    for name, ok, text in results:
        console.print(f"{name}: {'ready' if ok else 'FAILED'} {text}", markup=False, soft_wrap=True)
    console.print(f"release {release.id}", markup=False)
    if not all(ok for _, ok, _ in results):
        sys.exit(1)


@cli.group()
def schedule() -> None:
    """Sweeps that run themselves: schedules.toml, beat, the coordinator service (docs/schedules.md)."""


common_schedules = click.option("--file", "-f", "file", default="schedules.toml", show_default=True,
                                help="The schedules file (docs/schedules.md).")


def _schedule_settings(runs: str | None, broker: str | None, log_file: str | None = None) -> "Settings":
    settings = _resolve(runs=runs, broker_url=broker, log_file=log_file)
    if settings.embedded:
        raise UsageError("fleet schedule needs Redis (--broker or FLEET_BROKER_URL): the embedded broker lives inside "
                         "one fleet process, and beat and the coordinator service are two")
    return settings


@schedule.command("list")
@common_schedules
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with a schema_version.")
def schedule_list(file, as_json) -> None:
    """Check the schedules file and print each schedule with its next fire time, e.g. `fleet schedule list -f
    inventory/schedules.example.toml`.

    \b
    Examples:
      fleet schedule list -f inventory/schedules.example.toml
      fleet schedule list -f schedules.toml --json
    """
    from harness.schedule import load_schedules, next_fire

    parsed = load_schedules(file)
    rows = [(s, next_fire(s)) for s in parsed.schedules.values()]
    if as_json:
        json.dump({"schema_version": 1, "file": parsed.path, "schedules": [
            {"name": s.name, "when": s.when(), "next": n.isoformat(timespec="seconds"), "label": s.label,
             "inventory": s.inventory, "on_late": s.on_late} for s, n in rows]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    table = [("schedule", "when", "next fire", "label", "on late")]
    table += [(s.name, s.when(), n.strftime("%Y-%m-%d %H:%M:%S %Z"), s.label or "-", s.on_late) for s, n in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for row in table:
        console.print(one_line("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip()), markup=False,
                      soft_wrap=True)


@schedule.command("run")
@common_schedules
@click.option("--state", default=None, help="Beat's state file (default: <runs>/.schedules/beat-state).")
@click.option("--loglevel", default="INFO", show_default=True, help="Beat's log level.")
@common_runs
@common_broker
def schedule_run(file, state, loglevel, runs, broker) -> None:
    """Run Celery beat: each schedule's fire goes to the control queue, where `fleet schedule service` runs the
    sweep. Needs Redis, e.g. `fleet schedule run -f schedules.toml --broker redis://127.0.0.1:6379/0`.

    \b
    Examples:
      fleet schedule run -f schedules.toml --broker redis://127.0.0.1:6379/0
    """
    from harness.schedule import load_schedules
    from harness.schedule.beat import run_beat

    parsed = load_schedules(file)
    settings = _schedule_settings(runs, broker)
    err_console.print(f"fleet schedule run: {len(parsed.schedules)} schedule(s) from {parsed.path}; "
                      f"{settings.one_line('coordinator')}", markup=False, soft_wrap=True)
    run_beat(parsed, settings, Path(state) if state else settings.runs / ".schedules" / "beat-state", loglevel)


@schedule.command("service")
@common_runs
@common_broker
@common_log_file
def schedule_service(runs, broker, log_file) -> None:
    """The coordinator service: run each fired schedule's sweep, its report, comparison and notification; resume
    a sweep a stopped service left. Needs Redis, e.g. `fleet schedule service --broker redis://127.0.0.1:6379/0`.

    \b
    Examples:
      fleet schedule service --broker redis://127.0.0.1:6379/0 --log-file /var/log/fleet/service.log
    """
    from harness.schedule.service import Service, line_logger

    settings = _schedule_settings(runs, broker, log_file)
    say = line_logger(settings.log_file)
    say(f"fleet schedule service: {settings.one_line('coordinator')}")
    Service(settings, say=say).serve()


@hosts.command("clean")
@common_inventory
@click.option("--hosts", "names", help="Comma-separated host names (default: all).")
@click.option("--keep-attempts-days", "keep_days", type=click.FloatRange(min=0), default=14.0, show_default=True,
              metavar="D", help="Remove attempt folders untouched for D days (0: every one that is not running).")
@click.option("--dry-run", "dry_run", is_flag=True, help="List what would be removed, and remove nothing.")
def hosts_clean(inventory, names, keep_days, dry_run) -> None:
    """Remove old harness releases (every one but this harness's, one being installed or in use) and attempt
    folders older than D days (never one whose attempt is running) from each host's work dir (docs/retention.md).

    Example: `fleet hosts clean -i fleet.toml --hosts tower1,tower2 --keep-attempts-days 7 --dry-run`."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.core.errors import InfrastructureError
    from harness.coordinator.hostclean import clean_host
    from harness.core.inventory import load_inventory
    from workers.install import source_release
    from workers.transport import connect_for

    inv = load_inventory(inventory)
    chosen = inv.select(_listed("--hosts", names) if names is not None else None)
    release = source_release().id

    def clean(host):
        t = connect_for(host)
        try:
            return host.name, clean_host(t, host, release, keep_days, dry_run), ""
        except InfrastructureError as exc:
            return host.name, None, str(exc)
        finally:
            t.close()

    with ThreadPoolExecutor(max_workers=min(8, len(chosen))) as pool:
        results = list(pool.map(clean, chosen))
    verb = "would remove" if dry_run else "removed"

    def say(text: str) -> None:
        console.print(one_line(text), markup=False, soft_wrap=True)

    for name, report, error in results:
        if report is None:
            say(f"{name}: FAILED {error}")
            continue
        for r in report.releases:
            say(f"{name}: {verb} release {r.path} ({_size(r.size)})")
        for r in report.attempts:
            say(f"{name}: {verb} attempt folder {r.path} ({_size(r.size)})")
        for path, why in report.kept:
            say(f"{name}: kept {path}: {why}")
        for note in report.notes:
            say(f"{name}: {note}")
        if report.trash:
            say(f"{name}: finished an interrupted clean: {_size(report.trash)}")
        total = (f"{len(report.releases)} release(s) and {len(report.attempts)} attempt folder(s), "
                 f"{_size(report.freed)}")
        say(f"{name}: would free {total} (dry run: nothing removed)" if dry_run else f"{name}: cleaned {total} freed")
    console.print(f"current release {release}", markup=False)
    if any(report is None for _, report, _ in results):
        sys.exit(1)


def main(argv: list[str] | None = None) -> Any:
    from harness.coordinator.stopping import stop_signals

    try:
        with stop_signals():
            return cli.main(args=argv, prog_name="fleet", standalone_mode=False)
    except SweepInterrupted as exc:
        # Running attempts were revoked, their agents stopped, and each was recorded.
        err_console.print(f"fleet: {exc}", markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        err_console.print("fleet: interrupted", soft_wrap=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # `fleet` or a group with nothing after it: the help is the answer
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        # A bad argument is bad input like a bad file: one line (click's own form is usage, hint, blank, error).
        hint = f" (see `{exc.ctx.command_path} -h`)" if isinstance(exc, click.UsageError) and exc.ctx else ""
        err_console.print(f"fleet: error: {one_line(exc.format_message())}{hint}", markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except FleetError as exc:
        from harness.coordinator.stopping import received

        stop = received()
        if stop is not None:
            # The interrupt came first and cut something short (an import, a connection) that then failed in its
            # own words: the command was interrupted, and says so, with what it was doing.
            err_console.print(f"fleet: interrupted ({stop.how}); while stopping: {one_line(str(exc))}", markup=False,
                              soft_wrap=True)
            sys.exit(130)
        # one_line: a UsageError quotes arguments as given (a host or sweep name with a newline in it).
        err_console.print(f"fleet: error: {one_line(str(exc))}", markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
