"""One attempt's time budget: the parts an attempt's time is made of, and every limit derived from them.

An attempt's life on a host is a row of stages, each with a bound of its own that the worker enforces
(workers/attempt.py): the start (the agent must start within FLEET_START_TIMEOUT, after the launcher ended what
earlier deliveries left), the agent's run (the item's timeout), the kill of its tree when it ran out of time, the
pack of its workspace, the item's acceptance checks, and the round trips and transfers around them. The worker's
waits, the launcher's deadline, and the Celery task's soft and hard time limits (which only catch a stuck worker) are
all read from one :class:`AttemptBudget`, as httpx reads every limit from one ``Timeout``. A limit written as "the
timeout plus some seconds" anywhere else would cover parts nobody can name: docs/budget.md has the table, and
tests/harness/core/test_budget.py fails when a fixed slack comes back beside one.

Apart, in harness.core, because both sides read it: the coordinator sends the Celery limits (and checks the Redis
visibility timeout against them), the worker runs the stages within their bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from harness.core.catalog import Item

__all__ = ["AttemptBudget", "longest_limit", "unacknowledged_s"]


@dataclass(frozen=True)
class AttemptBudget:
    """The parts of one attempt's time on its host, in seconds, and the limits derived from them.

    The worker builds it with its own timings (``workers.attempt.Timing``: FLEET_START_TIMEOUT, tests' short
    waits); the coordinator, which cannot know a worker's settings, with the defaults (:meth:`for_item`)."""

    run_s: float
    """The agent's run: the item's timeout (``Item.timeout_s``). The worker stops waiting then and ends the tree."""
    checks: int = 0
    """How many acceptance checks the item has: they run one after another, after the run."""
    start_s: float = 30.0
    """The agent must have started by then (FLEET_START_TIMEOUT), else the attempt is agent_not_started."""
    reap_s: float = 60.0
    """Added to the start's bound: the launcher's start first ends what earlier deliveries left, giving each earlier
    supervisor its TERM grace (workers/host/launcher/ TERM_GRACE) to end its own tree."""
    launcher_grace_s: float = 120.0
    """The launcher kills the agent itself this long after the timeout, if no worker did (a worker gone, a link cut)."""
    kill_s: float = 60.0
    """The launcher's kill verb: the agent's whole tree ended (TERM, a grace, KILL) when it ran out of time."""
    pack_s: float = 300.0
    """How long packing the attempt folder on the host may take (a large workspace, a slow disk): the worker waits this
    long for the supervisor's pack, and gives the launcher's pack verb as long."""
    pack_margin_s: float = 30.0
    """The supervisor's own pack is bounded this much past the worker's wait for it: it ends a little after the worker
    stopped waiting, never while the worker would still take its result."""
    check_s: float = 120.0
    """Each acceptance check's own time limit."""
    check_slack_s: float = 60.0
    """The transport's limit on a check's command, beyond the check's own: the check times itself out first."""
    check_runs: int = 2
    """A check that broke (an error, not its time limit) runs once more before it counts (workers/attempt.py)."""
    transfer_s: float = 150.0
    """The round trips around the stages, each bounded by the transport: the probes before the start ($HOME, the
    agent's version), reading the exit record after a kill, reading the delivery's bundle back. 150 s is what the
    fixed +600 s of the soft limit left once the other parts were named."""
    round_trip_s: float = 30.0
    """One command's own bound beyond what it waits for on the host: a poll's (beyond its window), a probe's."""
    unwind_s: float = 300.0
    """From the soft time limit to the hard one: the soft limit unwinds the task through the kill of the agent's tree
    (``kill_s``, and a round trip to read its exit) and the release of its slot; the hard limit kills the pool process
    when even that hangs, and the launcher's deadline and heartbeat end the agent."""

    @classmethod
    def for_item(cls, item: Item) -> AttemptBudget:
        """The budget of an attempt of ``item`` with the default parts: what the coordinator sends limits from."""
        return cls(run_s=item.timeout_s, checks=len(item.checks))

    # -- the worker's bounds ----------------------------------------------------------------------------------------
    @property
    def start_bound_s(self) -> float:
        """The launcher's start call: the reap of earlier deliveries, then the agent's start."""
        return self.start_s + self.reap_s

    @property
    def agent_deadline_s(self) -> float:
        """When the launcher ends the agent itself, counted from its start (``deadline_s`` in launch.json)."""
        return self.run_s + self.launcher_grace_s

    @property
    def supervisor_pack_s(self) -> float:
        """The supervisor's own bound on its pack (``limit_s`` of the launcher's pack request)."""
        return self.pack_s + self.pack_margin_s

    @property
    def check_command_s(self) -> float:
        """The transport's limit on one run of one check's command."""
        return self.check_s + self.check_slack_s

    @property
    def checks_s(self) -> float:
        """All the item's checks, each run as often as it may be."""
        return self.checks * self.check_runs * self.check_command_s

    # -- the task's limits ------------------------------------------------------------------------------------------
    @property
    def stages_s(self) -> float:
        """The stages one after another, each at its bound: start, run, kill, pack, checks, transfers."""
        return self.start_bound_s + self.run_s + self.kill_s + self.pack_s + self.checks_s + self.transfer_s

    @property
    def soft_limit_s(self) -> int:
        """Celery's soft time limit of the attempt's task (whole seconds): every stage at its bound fits in it."""
        return math.ceil(self.stages_s)

    @property
    def hard_limit_s(self) -> int:
        """Celery's hard time limit of the attempt's task: the soft limit and the unwinding after it."""
        return self.soft_limit_s + math.ceil(self.unwind_s)

    @property
    def beyond_run_s(self) -> int:
        """What the hard limit adds to the agent's run: everything but the run (what FLEET_VISIBILITY_TIMEOUT's check
        calls "checks and collecting")."""
        return self.hard_limit_s - math.ceil(self.run_s)

    def task_limits(self, behind: int = 0) -> tuple[int, int]:
        """The task's (soft, hard) time limits when it may first wait ``behind`` seconds for its host's slot (it was
        sent ahead: the attempt in front may hold the slot for its whole hard limit before this one's time starts)."""
        return behind + self.soft_limit_s, behind + self.hard_limit_s


def longest_limit(budgets: Iterable[AttemptBudget]) -> int:
    """The longest hard time limit among ``budgets`` (0 for none): what a Redis visibility timeout must cover, and what
    an attempt sent ahead may wait for its slot."""
    return max((b.hard_limit_s for b in budgets), default=0)


def unacknowledged_s(longest: int, ahead: int) -> int:
    """How long a task may stay unacknowledged on Redis when ``ahead`` attempts are sent beyond a host's slots: its own
    run, and before it a wait for the attempt in front (each at most ``longest``, the longest hard limit)."""
    return (1 + ahead) * longest
