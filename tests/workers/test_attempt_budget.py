"""The lifecycle's bounds are its budget's (harness/core/timebudget.py): the launcher's start, the agent's deadline, the
supervisor's pack, the kill, a check's command, each poll, all read from the one AttemptBudget its Timing makes."""

from __future__ import annotations

import json
import re

from harness.core.timebudget import AttemptBudget
from harness.core.checks.spec import CheckSpec
from harness.core.settings import Settings
from workers.adapters import adapter_for
from workers.attempt import PACK_TIMEOUT_S, Timing, run_attempt
from workers.transport.base import ShellResult
from workers.transport.memory import MemoryTransport
from tests.workers.test_attempt_failures import ITEM, healthy_host, launcher_requests
from tests.workers.test_attempt_failures import request as attempt_request

TIMING = Timing(start_timeout_s=2.0, poll_min_s=0.01, poll_max_s=0.02, launcher_grace_s=7.0, check_timeout_s=11.0)


def _timed(t: MemoryTransport) -> list[tuple[str, float]]:
    """Record each script ``t`` runs with the transport's limit the lifecycle gave it."""
    seen: list[tuple[str, float]] = []
    shell = t.shell

    def timed(script: str, timeout: float = 60.0, stdin: bytes | None = None) -> ShellResult:
        seen.append((script, timeout))
        return shell(script, timeout=timeout, stdin=stdin)

    t.shell = timed  # type: ignore[method-assign]
    return seen


def _limits(seen: list[tuple[str, float]], pattern: str) -> set[float]:
    return {timeout for script, timeout in seen if re.search(pattern, script)}


def test_the_workers_default_timings_make_the_coordinators_budget() -> None:
    """The coordinator counts the default parts in the Celery limits it sends: a worker with the default timings (and
    FLEET_START_TIMEOUT's default) runs its stages within those same parts."""
    item = ITEM.model_copy(update={"checks": ["a.web.toml", "b.web.toml"]})
    assert Timing().budget(item.timeout_s, len(item.checks)) == AttemptBudget.for_item(item)
    assert Timing(start_timeout_s=Settings().start_timeout_s) == Timing()
    assert PACK_TIMEOUT_S == AttemptBudget.pack_s


def test_every_bound_of_a_finished_attempt_with_a_check_is_its_budgets() -> None:
    check = CheckSpec(name="site", kind="web", spec={"name": "site", "page": "index.html"})
    req = attempt_request(checks=[check])
    t = healthy_host(req)
    t.on(r"-m workers\.host\.webcheck ", json.dumps({"name": "site", "kind": "web", "status": "passed", "summary": "ok"}))
    t.on(r"^rm -rf .*/checks/site && mkdir -p ", "")
    seen = _timed(t)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=TIMING)
    assert result.status == "finished", result.error
    b = TIMING.budget(req.item.timeout_s, checks=1)
    (run,) = launcher_requests(t, "run")
    assert (run["deadline_s"], run["spec"]["deadline_s"]) == (b.agent_deadline_s, b.agent_deadline_s) == (67.0, 67.0)
    assert run["pack"]["limit_s"] == b.supervisor_pack_s
    assert _limits(seen, r"' run [0-9a-f]+$") == {b.start_bound_s} == {62.0}
    assert _limits(seen, r"-m workers\.host\.webcheck ") == {b.check_command_s} == {71.0}
    assert "--timeout 11" in t.ran(r"-m workers\.host\.webcheck ")[0]
    polls = _limits(seen, r"r exit\.json")
    assert polls and all(b.round_trip_s <= p <= b.round_trip_s + TIMING.poll_max_s for p in polls)


def test_a_timeouts_kill_is_bounded_by_the_budgets_kill_part() -> None:
    req = attempt_request(item=ITEM.model_copy(update={"timeout_s": 1}))
    t = healthy_host(req, exit_code=None)
    seen = _timed(t)
    result = run_attempt(t, req, adapter_for("echo", req.agent), timing=TIMING)
    assert result.status == "timeout", result.error
    b = TIMING.budget(1)
    assert _limits(seen, r"' kill [0-9a-f]+$") == {b.kill_s}
    assert _limits(seen, r"' pack [0-9a-f]+$") == {b.pack_s}
