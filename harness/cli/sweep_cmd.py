"""``fleet sweep``, ``rerun`` and ``resume`` (the verbs that run cells) and ``fleet status`` and ``show`` (a sweep's
table, one cell's story).

The three running verbs share one path (``_coordinate``): log the settings, run the coordinator's verb with live
progress, print the table or ``--json``, then turn the exit gates' verdicts (nothing measured, ``--fail-on``) into
the exit status. The gates decide in their domains (``harness.coordinator.verbs.nothing_measured``,
``harness.grading.scale.grade_gate``); the JSON object is ``harness.views.jsonout.sweep_json``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import click

from harness.cli.console import console, err_console, print_json, warn
from harness.cli.options import (common_broker, common_fail_on, common_inventory, common_log_file, common_model_port,
                                 common_no_worker_timeout, common_runs, common_sweep_json, common_verbose, csv_names,
                                 listed, max_attempts_option, open_store, recorded_inventory, resolve_settings)
from harness.core.errors import GradeGate, NothingMeasured, UsageError, one_line

if TYPE_CHECKING:
    from harness.coordinator.verbs import Coordinator
    from harness.core.catalog import Catalog
    from harness.core.inventory import Inventory
    from harness.core.records import Cell
    from harness.core.settings import Settings
    from harness.core.sweep import SweepRecord
    from harness.store import Store

__all__ = ["sweep", "rerun", "resume", "status", "show", "print_sweep"]


def _log_settings(settings: "Settings", verbose: bool) -> None:
    """Log the resolved settings once, secrets redacted: to stderr with --verbose, to the log file if one is set."""
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
                     on_event=prog if not as_json else (lambda e: None), on_start=on_start, on_warning=warn,
                     on_notice=prog.notice)
    try:
        result = verb(co)
    finally:
        if started:
            prog.stop()
    print_sweep(result, store, as_json)
    _gate(result, judged(result), gate)


def _fail_on(value: str | None) -> frozenset[str]:
    """``--fail-on GRADES``: the grades to gate on, each checked to be a grade."""
    from harness.grading.scale import GRADE_ORDER

    names = csv_names(value) or []
    if value is not None and not names:
        # An empty list would silently turn the gate off: a CI job that meant to gate must hear of it.
        raise UsageError(f"--fail-on {value!r}: no grade given (grades: {', '.join(GRADE_ORDER)})")
    listed("--fail-on", value)  # a stray comma (HARNESS_FAILURE,) like every other list flag
    bad = [n for n in names if n not in GRADE_ORDER]
    if bad:
        raise UsageError(f"--fail-on {bad[0]!r}: not a grade (grades: {', '.join(GRADE_ORDER)})")
    return frozenset(names)


def _gate(sweep: "SweepRecord", cells: list["Cell"], fail_on: frozenset[str]) -> None:
    """The exit status a scheduler reads: 0 when the cells were measured, NothingMeasured (3) when every one
    ended in a harness failure, GradeGate (4) when a cell's grade is one of ``--fail-on``'s. The gates decide;
    this turns the first that tripped into its exit."""
    from harness.coordinator.verbs import nothing_measured
    from harness.grading.scale import grade_gate

    lasts = [(c.id, sweep.last(c.id)) for c in cells]
    measured = nothing_measured(sweep.id, lasts)
    if measured.tripped:
        raise NothingMeasured(measured.message)
    graded = grade_gate(lasts, fail_on)
    if graded.tripped:
        raise GradeGate(graded.message)


def print_sweep(sweep: "SweepRecord", store: "Store", as_json: bool) -> None:
    """A sweep's table and where its results are, or its ``--json`` object (sweep, rerun, resume, status, grade)."""
    path = store.sweep_dir(sweep.id)
    live = store.is_being_written(sweep.id)
    if sweep.status in ("planned", "running") and not live:
        # Its coordinator is gone (killed, machine rebooted): say so; `fleet resume` settles its attempts.
        sweep.status = "interrupted"
    if as_json:
        from harness.views.jsonout import sweep_json

        print_json(sweep_json(sweep, path, live))
        return
    from harness.views.progress import matrix_table

    # Not a terminal: the console is 100,000 columns wide (harness/cli/console.py), no line of the table is ever
    # folded.
    console.print(matrix_table(sweep, live, whole_lines=not sys.stdout.isatty()))
    console.print(f"sweep {sweep.id}: {sweep.status}, results in {path}")


@click.command()
@common_inventory
@click.option("--hosts", help="Comma-separated host names (default: all in the inventory).")
@click.option("--items", help="Comma-separated open prompts by number or id, e.g. 07,09.")
@click.option("--round", "round_name", help="Add a qualification round's tasks (prompts/rounds/NAME.toml).")
@click.option("--agents", help="Comma-separated agents; each becomes a dimension of the matrix.")
@click.option("--repeat", default=1, show_default=True, help="Repetitions of every cell.")
@click.option("--label", default="", help="Label in the sweep id, e.g. main-d4a61f33.")
@click.option("--prompts", default=None, help="Prompts directory (default: the bundled prompts/).")
@max_attempts_option("Attempts per cell when the harness fails.")
@common_fail_on
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
    chosen = {"hosts": listed("--hosts", hosts), "items": listed("--items", items),
              "agents": listed("--agents", agents)}
    inv = load_inventory(inventory)
    # A broken folder under prompts/ fails only a sweep that asks for it (harness/core/catalog.py, partial).
    cat = load_catalog(prompts, partial=True)
    for line in cat.skipped:
        warn(one_line(line))
    settings = resolve_settings(runs=runs, broker_url=broker, max_attempts=max_attempts, log_file=log_file,
                                no_worker_timeout_s=no_worker_timeout, model_port=model_port)
    if dry_run:  # after the settings: a dry run checks every input the sweep would read, its flags included
        _print_plan(inv, cat, **chosen, round_name=round_name, repeat=repeat, label=label, as_json=as_json)
        return
    _coordinate(
        settings,
        lambda co: co.sweep(inv, cat, **chosen, round_name=round_name, repeat=repeat, label=label),
        lambda result: result.cells, gate=gate, as_json=as_json, verbose=verbose)


@click.command()
@click.argument("host", required=False)
@click.argument("item", required=False)
@click.option("--sweep", "sweep_id", required=True, help="The sweep id.")
@click.option("--host", "host_opt", default=None, metavar="H",
              help="Rerun every cell of this host (instead of HOST ITEM), e.g. after its model or driver was fixed.")
@click.option("--items", default=None, help="With --host: only these items (ids or numbers), e.g. 07,09.")
@click.option("--agents", default=None, help="With --host: only these agents' cells, e.g. builtin,openclaw.")
@click.option("--agent", default=None, help="With HOST ITEM: which agent's cell, when the sweep has several.")
@click.option("--rep", type=int, default=None, help="With HOST ITEM: which repetition, when the sweep has several.")
@recorded_inventory
@max_attempts_option("Attempts for each cell when the harness fails.")
@common_fail_on
@common_sweep_json
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
        chosen_items, chosen_agents = listed("--items", items), listed("--agents", agents)
    else:
        for flag, value in (("--items", items), ("--agents", agents)):
            if value is not None:
                raise UsageError(f"{flag} goes with --host H (every cell of a host); one cell is HOST ITEM")
        if host is None or item is None:
            raise UsageError("name one cell (HOST ITEM) or a host (--host H)")
    settings = resolve_settings(runs=runs, broker_url=broker, max_attempts=max_attempts, log_file=log_file,
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


@click.command()
@click.argument("sweep_id")
@recorded_inventory
@max_attempts_option("Attempts per cell on harness failures, counting those the cell already used.")
@click.option("--retry-exhausted", is_flag=True,
              help="Also run cells that used all their attempts, with a fresh budget of --max-attempts.")
@common_fail_on
@common_sweep_json
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
    settings = resolve_settings(runs=runs, broker_url=broker, max_attempts=max_attempts, log_file=log_file,
                                no_worker_timeout_s=no_worker_timeout, model_port=model_port)
    inv = _inventory_for(Store(settings.runs).load_sweep(sweep_id), inventory)
    _coordinate(settings, lambda co: co.resume(sweep_id, inv, retry_exhausted=retry_exhausted),
                lambda result: result.cells, gate=gate, as_json=as_json, verbose=verbose)


def _print_plan(inv: "Inventory", cat: "Catalog", *, as_json: bool, **plan_options: Any) -> None:
    """`fleet sweep --dry-run`: the cells the sweep would have, from the same planner, and nothing else (a CI
    job checks an edited inventory or prompt this way before a night's sweep)."""
    from harness.coordinator.plan import plan_sweep

    planned = plan_sweep(inv, cat, **plan_options)
    if as_json:
        from harness.views.jsonout import plan_json

        print_json(plan_json(inv, cat, planned))
        return
    for c in planned.cells:
        console.print(c.id, markup=False, soft_wrap=True)
    console.print(f"{len(planned.cells)} cell(s) planned from {inv.path} and {cat.root}; nothing dispatched",
                  markup=False, soft_wrap=True)


def _inventory_for(rec: "SweepRecord", override: str | None) -> "Inventory":
    from harness.core.inventory import load_inventory

    return load_inventory(override or rec.inventory)


@click.command()
@click.argument("sweep_id", required=False)
@common_sweep_json
@common_runs
def status(sweep_id, as_json, runs) -> None:
    """A sweep's state and table (the latest sweep if no id is given).

    \b
    Examples:
      fleet status
      fleet status 20261204-031500-nightly --json
    """
    store = open_store(runs)
    sweep_id = sweep_id or store.latest_sweep()
    print_sweep(store.load_sweep(sweep_id), store, as_json)


@click.command()
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
    store = open_store(runs)
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
