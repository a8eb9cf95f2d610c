"""The ``fleet`` command: the group, its commands, and the one exit policy.

This module only builds the group and registers the commands; each command group is its own module:

- ``sweep_cmd``: sweep, rerun, resume (the verbs that run cells), status, show;
- ``grade_cmd``: grade (a regrade, or a reviewer's ``--override``), report;
- ``compare_cmd``: compare (with ``--fail-on-regressions``), sweeps;
- ``hosts_cmd``: hosts check, prepare, clean;
- ``worker_cmd``: worker;
- ``replay_cmd``: replay, import, transcript check, guard verdict;
- ``model_cmd``: model serve;
- ``schedule_cmd``: schedule list, run, service;
- ``dashboard_cmd``, ``settings_cmd``, ``prune_cmd``: dashboard, settings, prune;
- shared: ``options`` (the options several verbs take, comma-separated names, the settings and store a command
  works with), ``console`` (the two consoles, made on first use), ``loading`` (a one-shot command's start-up).

Exit policy (``main``): every ``FleetError`` is one line ``fleet: error: ...`` on stderr and its exit code, never a
traceback; a bad argument is one line too (exit 2); an interrupt is ``fleet: interrupted`` (130). The exit gates
decide below the CLI and return a verdict (``harness.core.gate``); a command turns a tripped one into its exception.
The ``--json`` objects are built by the views (``harness.views.jsonout``); a command prints them.

Lazy imports: the CLI is the one place that imports lazily, for start-up (`fleet --version`, a one-session
`fleet import` or `fleet replay`; tests/harness/cli/test_cli_startup.py checks what each loads). A command module
imports at its top only the standard library, click, ``harness.core.errors`` and its CLI siblings, so registering
every command costs `fleet --version` nothing it did not load before; what a command needs beyond that it imports
in its function. ``LAZY`` names each module so imported, and why (tests/harness/cli/test_cli_lazy.py holds the
CLI to it).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any, Final

import click

from harness import __version__
from harness.cli.console import err_console
from harness.coordinator.stopping import received, stop_signals
from harness.core.errors import FleetError, SweepInterrupted, one_line

__all__ = ["cli", "main", "LAZY", "COMMANDS"]

LAZY: Final[dict[str, str]] = {
    # The terminal.
    "rich": "tables, markup, live progress: a fifth of `fleet --version`'s start; a plain line is written "
            "without it (console.py)",
    # What only one command needs.
    "harness.core.version": "the harness commit, from git: `fleet --version` only",
    "harness.cli.loading": "the collector off while replay and import load what they need: entered before those "
                           "imports",
    "concurrent.futures": "a thread pool over the hosts: hosts prepare and clean only",
    # The settings: their table of specs and URL handling, a few ms that `fleet --version` does not need.
    "harness.core.settings": "every setting's spec, its resolution and redaction",
    # Records: pydantic models built at import, 100 ms and more for them all.
    "harness.core.inventory": "the inventory's models",
    "harness.core.catalog": "the prompts' models",
    "harness.core.transcript": "the transcript's event models",
    "harness.core.recordfile": "reading versioned record files (pydantic)",
    "harness.core.checks": "the acceptance checks' models",
    "harness.store": "the results store: its models and its SQLite index",
    "harness.grading": "the grader, its rules and models: a one-session replay loads none of it",
    # The layers above the records: each loads the records, and some a server or a queue.
    "harness.coordinator": "planning, dispatch, the hosts' check and clean: Celery, kombu, paramiko; all but "
                           "stopping, which main needs for every command",
    "harness.views": "report, comparison, sweep list, progress, --json objects: the records and rich",
    "harness.dashboard": "the web server: starlette, uvicorn, jinja2",
    "harness.schedule": "Celery beat and the coordinator service",
    "harness.importers": "other agents' sessions: import and replay only, inside loading()",
    "harness.replay": "offline replay: replay only, inside loading()",
    "harness.guard": "the guard's rules: guard verdict only",
    "harness.modelserver": "the scripted model's HTTP server: model serve only",
    "workers": "Celery (workers.app), Fabric and paramiko (workers.transport), the host installer",
}
"""Each module a ``fleet`` command imports inside its function rather than at its module's top (a package stands
for its modules), and why."""


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``fleet --version``: the package version and the harness commit (the one every result records), so a
    bug report or a host's install names the exact code."""
    if not value or ctx.resilient_parsing:
        return
    from harness.core.version import harness_commit

    click.echo(f"fleet {__version__} (harness commit {harness_commit()})")
    ctx.exit()


COMMANDS: Final[dict[str, str]] = {
    "sweep": "sweep_cmd:sweep", "rerun": "sweep_cmd:rerun", "resume": "sweep_cmd:resume",
    "status": "sweep_cmd:status", "show": "sweep_cmd:show",
    "grade": "grade_cmd:grade", "report": "grade_cmd:report",
    "compare": "compare_cmd:compare", "sweeps": "compare_cmd:sweeps_",
    "prune": "prune_cmd:prune_", "dashboard": "dashboard_cmd:dashboard", "worker": "worker_cmd:worker",
    "settings": "settings_cmd:settings_", "hosts": "hosts_cmd:hosts", "schedule": "schedule_cmd:schedule",
    "import": "replay_cmd:import_", "replay": "replay_cmd:replay", "transcript": "replay_cmd:transcript",
    "guard": "replay_cmd:guard", "model": "model_cmd:model",
}
"""Each verb and where it is defined (``MODULE:NAME`` in this package). A command's module is imported when the
command runs or is listed (``fleet --help``), not at every start: ``fleet --version`` and one command load one
module of this package each, not thirteen (about 6 ms of a 70 ms start)."""


class _Verbs(MutableMapping[str, click.Command]):
    """The ``fleet`` group's commands, as click keeps them (``Group.commands``), each command's module imported when
    the command is first looked up: ``list_commands`` reads only the names."""

    def __init__(self) -> None:
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            module, _, attr = COMMANDS[name].partition(":")
            self._loaded[name] = getattr(importlib.import_module(f"harness.cli.{module}"), attr)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("fleet's verbs are fixed by COMMANDS")

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*COMMANDS, *self._loaded}))

    def __len__(self) -> int:
        return len({*COMMANDS, *self._loaded})


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the version and the harness commit, and exit.")
def cli() -> None:
    """Fleet qualification harness: sweep prompts and rounds over your GPU hosts and grade what comes back."""


cli.commands = _Verbs()  # click keeps a group's commands in any mapping: this one imports each on first use


def main(argv: list[str] | None = None) -> Any:
    """The console script ``fleet``: run the command and turn whatever stops it into one line and an exit code."""
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
