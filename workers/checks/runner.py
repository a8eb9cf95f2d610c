"""One protocol for running an acceptance check, one runner per check kind.

A :class:`CheckRunner` runs one :class:`~harness.core.checks.CheckSpec` on a host through the transport's
hooks (``shell``, ``put``, ``get``): in its own check folder, against the workspace the agent left, with the
harness release's Python, within a time limit; it returns the check's :class:`CheckResult` and never raises
for a bad deliverable. :func:`run_check` makes the folder afresh and hands the check to the runner of its
kind (:data:`RUNNERS`).

The attempt lifecycle (``workers.attempt``) runs every check through :func:`run_check`, and so do the tests,
on the local transport: there is no second way to run a check that only tests use.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from workers.checks.pytest_files import CHECK_KIND, JUNIT_NAME, build_check_command, parse_junit, staged_files, timed_out_exit
from harness.core.timebudget import AttemptBudget
from harness.core.checks.result import CheckResult
from harness.core.checks.spec import CheckSpec

if TYPE_CHECKING:  # the runners only call the hooks; harness code never imports the worker side at run time
    from workers.transport.base import Transport

__all__ = ["CheckPlace", "CheckRunner", "PytestRunner", "WebRunner", "RUNNERS", "runner_for", "run_check"]

@dataclass(frozen=True)
class CheckPlace:
    """Where and how one check runs on the host (absolute paths there)."""

    folder: str
    """The check's own folder; :func:`run_check` empties it first."""
    workspace: str
    """The workspace the agent left (checks work on copies of it)."""
    python: str
    """The Python of the harness release on the host (it has pytest and playwright)."""
    timeout_s: float
    """The check's own time limit."""
    hidden_env: tuple[str, ...] = ()
    """Host variables the check must not see: the model's API key and the agent's ``pass_env``. A check runs code
    the agent wrote, whose output is kept in checks.json (docs/environment.md)."""

    @property
    def command_s(self) -> float:
        """The transport's own limit on the check's command (``AttemptBudget.check_command_s``): beyond the check's,
        so the check times itself out first and says so."""
        return AttemptBudget(run_s=0, check_s=self.timeout_s).check_command_s


@runtime_checkable
class CheckRunner(Protocol):
    """Runs the checks of one kind (``CheckSpec.kind``)."""

    kind: str

    def run(self, t: Transport, check: CheckSpec, at: CheckPlace) -> CheckResult:
        """Run ``check`` in the empty folder ``at.folder`` and say what it concluded."""
        ...


def _q(s: str) -> str:
    return shlex.quote(s)


def _unset(at: CheckPlace) -> str:
    """The shell prefix that removes ``at.hidden_env`` from the check's environment."""
    return f"unset {' '.join(_q(n) for n in at.hidden_env)}; " if at.hidden_env else ""


def _get(t: Transport, path: str) -> bytes | None:
    try:
        return t.get(path)
    except FileNotFoundError:
        return None


class PytestRunner:
    """pytest check files (docs/checks-pytest.md): staged with the harness's ``conftest.py`` and ``pytest.ini``,
    run by :func:`build_check_command`, judged from the JUnit XML."""

    kind = CHECK_KIND

    def run(self, t: Transport, check: CheckSpec, at: CheckPlace) -> CheckResult:
        started = time.monotonic()
        for name, text in staged_files(check.files, check.values).items():
            t.put(f"{at.folder}/{name}", text.encode("utf-8"))
        junit = f"{at.folder}/{JUNIT_NAME}"
        argv = build_check_command(at.python, [f"{at.folder}/{n}" for n in check.files], at.workspace, junit,
                                   int(at.timeout_s))
        r = t.shell(f"{_unset(at)}cd {_q(at.folder)} && " + " ".join(_q(a) for a in argv),
                    timeout=at.command_s)
        timed_out = timed_out_exit(r.exit_code)
        res = parse_junit(_get(t, junit), check.name, round(time.monotonic() - started, 3), timed_out=timed_out,
                          timeout_s=at.timeout_s)
        if res.status == "error" and not timed_out and r.tail():
            # No report: what pytest (or the shell) said is the only clue to why.
            res = res.model_copy(update={"summary": f"{res.summary} -- pytest said: {r.tail(600)}"})
        return res


class WebRunner:
    """Web checks (docs/checks-web.md): ``python -m workers.host.webcheck`` in real headless Chromium on the host,
    which prints the CheckResult as JSON."""

    kind = "web"

    def run(self, t: Transport, check: CheckSpec, at: CheckPlace) -> CheckResult:
        started = time.monotonic()
        t.put(f"{at.folder}/spec.json", json.dumps(check.spec).encode("utf-8"))
        r = t.shell(
            f"{_unset(at)}{_q(at.python)} -m workers.host.webcheck {_q(at.workspace)} {_q(at.folder)}/spec.json "
            f"--timeout {int(at.timeout_s)}",
            timeout=at.command_s,
        )
        try:
            return CheckResult.model_validate_json(r.stdout)
        except ValueError:
            return CheckResult(name=check.name, kind=self.kind, status="error",
                               summary=f"the web check did not answer: {r.tail()}", details=[],
                               duration_s=round(time.monotonic() - started, 3))


RUNNERS: dict[str, CheckRunner] = {r.kind: r for r in (PytestRunner(), WebRunner())}
"""check kind -> its runner; a test keeps it equal to the kinds ``CheckSpec.kind`` allows."""


def runner_for(kind: str) -> CheckRunner:
    """The runner of a check kind (``CheckSpec`` validation admits no other kind)."""
    return RUNNERS[kind]


def run_check(t: Transport, check: CheckSpec, at: CheckPlace) -> CheckResult:
    """Run one check in a fresh ``at.folder`` on the host reached by ``t``."""
    t.shell(f"rm -rf {_q(at.folder)} && mkdir -p {_q(at.folder)}", timeout=30)
    return runner_for(check.kind).run(t, check, at)
