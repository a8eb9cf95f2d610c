"""The attempt's time budget (harness/core/timebudget.py): every limit derived from its parts covers them, the numbers a
fleet had before the budget are kept, and no fixed slack is written beside a time limit anywhere else."""

from __future__ import annotations

import ast
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.timebudget import AttemptBudget, longest_limit, unacknowledged_s
from harness.core.catalog import Item
from harness.core.settings import Settings
from tests.support import REPO


def _item(timeout_s: int, checks: int = 0) -> Item:
    return Item(id="07-photo-renamer", kind="open", title="t", prompt="p", timeout_s=timeout_s,
                checks=[f"test_{i}.py" for i in range(checks)])


@pytest.mark.parametrize("timeout_s", [1, 60, 900, 4 * 3600, 24 * 3600])
def test_an_item_without_checks_keeps_the_limits_it_had(timeout_s: int) -> None:
    """The fixed sums the budget replaced: Celery's soft limit the timeout + 600 s, its hard limit + 900 s, the
    launcher's deadline + 120 s, the start's bound 30 + 60 s, the supervisor's pack 300 + 30 s, a check's command
    its limit + 60 s."""
    b = AttemptBudget.for_item(_item(timeout_s))
    assert b.task_limits() == (timeout_s + 600, timeout_s + 900)
    assert (b.soft_limit_s, b.hard_limit_s, b.beyond_run_s) == (timeout_s + 600, timeout_s + 900, 900)
    assert b.agent_deadline_s == timeout_s + 120.0
    assert (b.start_bound_s, b.supervisor_pack_s, b.check_command_s) == (90.0, 330.0, 180.0)


def test_each_check_adds_every_run_of_it_at_its_commands_bound_to_both_limits() -> None:
    """A check may run twice (once more when it broke), each run within its limit and the transport's slack: the
    soft limit, which covers every stage at its bound, counts them, and the hard limit with it."""
    plain, checked = AttemptBudget.for_item(_item(900)), AttemptBudget.for_item(_item(900, checks=3))
    added = 3 * checked.check_runs * checked.check_command_s
    assert checked.checks_s == added == 3 * 2 * 180
    assert checked.soft_limit_s - plain.soft_limit_s == checked.hard_limit_s - plain.hard_limit_s == added
    assert checked.task_limits(behind=1000) == (1000 + checked.soft_limit_s, 1000 + checked.hard_limit_s)


_parts = st.floats(min_value=0, max_value=10_000, allow_nan=False, allow_infinity=False)


@given(run=st.integers(min_value=1, max_value=24 * 3600), checks=st.integers(min_value=0, max_value=20),
       start=_parts, reap=_parts, kill=_parts, pack=_parts, check=_parts, slack=_parts, runs=st.integers(1, 3),
       transfer=_parts, unwind=st.floats(min_value=1, max_value=10_000, allow_nan=False))
def test_the_limits_cover_their_parts_whatever_the_parts(run: int, checks: int, start: float, reap: float, kill: float,
                                                         pack: float, check: float, slack: float, runs: int,
                                                         transfer: float, unwind: float) -> None:
    """The soft limit covers every stage one after another at its bound; the hard limit comes after it; a part that
    grows grows the limits (nothing is a fixed sum that forgets a part)."""
    b = AttemptBudget(run_s=run, checks=checks, start_s=start, reap_s=reap, kill_s=kill, pack_s=pack, check_s=check,
                      check_slack_s=slack, check_runs=runs, transfer_s=transfer, unwind_s=unwind)
    stages = start + reap + run + kill + pack + checks * runs * (check + slack) + transfer
    assert b.stages_s == pytest.approx(stages)
    assert b.soft_limit_s >= b.stages_s - 1e-6 and isinstance(b.soft_limit_s, int)
    assert b.hard_limit_s > b.soft_limit_s and isinstance(b.hard_limit_s, int)
    assert b.hard_limit_s - b.soft_limit_s >= unwind
    assert b.beyond_run_s == b.hard_limit_s - run
    bigger = AttemptBudget(run_s=run, checks=checks, start_s=start, reap_s=reap, kill_s=kill, pack_s=pack + 100,
                           check_s=check, check_slack_s=slack, check_runs=runs, transfer_s=transfer, unwind_s=unwind)
    assert bigger.soft_limit_s >= b.soft_limit_s + 99 and bigger.hard_limit_s >= b.hard_limit_s + 99


def test_with_the_default_parts_the_launcher_and_the_unwinding_fit_inside_the_task() -> None:
    """The launcher ends an agent its worker lost (the item's timeout and its grace) before Celery's soft limit comes;
    after the soft limit, the unwinding (the kill and the read of its exit) has time before the hard one; the
    supervisor's own bound on its pack ends after the worker's wait for it."""
    b = AttemptBudget.for_item(_item(900))
    assert b.agent_deadline_s < b.soft_limit_s
    assert b.unwind_s >= b.kill_s + b.round_trip_s
    assert b.pack_s < b.supervisor_pack_s < b.pack_s + 60
    assert b.check_s < b.check_command_s


def test_the_coordinators_default_start_timeout_is_the_budgets() -> None:
    """FLEET_START_TIMEOUT's default is the start part the coordinator's limits count."""
    assert Settings().start_timeout_s == AttemptBudget.start_s == AttemptBudget(run_s=1).start_s


def test_the_longest_limit_and_how_long_a_task_sent_ahead_stays_unacknowledged() -> None:
    budgets = [AttemptBudget.for_item(_item(t, checks=c)) for t, c in ((900, 0), (600, 2), (60, 0))]
    assert longest_limit(budgets) == max(b.hard_limit_s for b in budgets) == 600 + 900 + 2 * 2 * 180
    assert longest_limit([]) == 0
    # One sent ahead: its wait for the attempt in front, then its own run, each at most the longest limit.
    assert unacknowledged_s(1000, ahead=1) == 2000 and unacknowledged_s(1000, ahead=0) == 1000


# -- no fixed slack anywhere else ------------------------------------------------------------------------------------
ATTEMPT_TIME = ["harness/coordinator/dispatch.py", "harness/coordinator/verbs.py", "workers/attempt.py",
                "workers/tasks.py", "workers/delivery/*.py", "workers/checks/*.py"]
"""Where an attempt's time limits are used: the coordinator's sends and checks, the lifecycle and its delivery, the
task, the check runners. Only harness/core/timebudget.py adds their parts up."""

_TIMEISH = re.compile(r"timeout|time_limit|grace|slack|allowance", re.I)


def _constant(node: ast.expr) -> bool:
    """A number written in place, or a module constant (an upper-case name)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return bool(name) and name.lstrip("_").isupper()


def fixed_slack(source: str, where: str) -> list[str]:
    """Sums in ``source`` that add a fixed amount (a number, a constant, another limit) to a time limit, and Celery
    limits given as a sum: each is a part of the budget written outside it."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            left, right = (ast.get_source_segment(source, n) or "" for n in (node.left, node.right))
            if ((_TIMEISH.search(left) and (_constant(node.right) or _TIMEISH.search(right)))
                    or (_TIMEISH.search(right) and _constant(node.left))):
                found.append(f"{where}:{node.lineno}: {ast.get_source_segment(source, node)}")
        elif isinstance(node, ast.keyword) and node.arg in ("soft_time_limit", "time_limit") \
                and isinstance(node.value, ast.BinOp):
            found.append(f"{where}:{node.value.lineno}: {node.arg}={ast.get_source_segment(source, node.value)}")
    return found


def test_no_time_limit_gets_a_fixed_slack_outside_the_budget() -> None:
    """A limit written as "the timeout plus some seconds" anywhere but the budget would cover parts nobody named: add
    the part to AttemptBudget and derive the limit there (docs/budget.md)."""
    files = sorted({p for pattern in ATTEMPT_TIME for p in REPO.glob(pattern)})
    assert len(files) > 6
    found = [hit for p in files for hit in fixed_slack(p.read_text(), str(p.relative_to(REPO)))]
    assert found == []


@pytest.mark.parametrize("line", [
    "soft_time_limit=waits + item.timeout_s + 600",
    "def task_time_limit(timeout_s): return timeout_s + 900",
    "bound = self.timing.start_timeout_s + REAP_ALLOWANCE_S",
    "deadline = self.req.item.timeout_s + self.timing.launcher_grace_s",
    "limit = at.timeout_s + _SHELL_SLACK_S",
    "send(time_limit=soft + 300)",
])
def test_the_scan_finds_the_sums_the_budget_replaced(line: str) -> None:
    """Each of these was in the code before the budget (dispatch, verbs, attempt, the check runner): the scan above
    would fail on any of them."""
    assert fixed_slack(line, "x.py")

