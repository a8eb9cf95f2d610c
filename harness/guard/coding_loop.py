"""The coding-loop rule: a test-and-repair loop that makes no progress is stopped.

A model that keeps editing and re-running a failing test suite can spend a whole run there: each edit
is a success, so the run-progress budget's consecutive count never reaches its fuse (the strixy tail of
the pixel-fleet recordings: six failing ``unittest`` runs with an edit before each, 941 s, then the
agent's own coding-loop stop). The rule counts **failed verifications**: recognized test commands that
ran and whose delivery verdict is ``failed`` (``harness.guard.verdict.delivery_verdict``, so a run where
no test ran and the runner exited non-zero counts, as seed 002 has it). A passing test run resets the
count. Once ``limit`` failed runs are counted, the next **test run** is refused before it runs and the run
stops, reason ``coding_loop``; the stop is sticky, so every later call is refused too. Edits and reads stay
allowed until then, as in the recording (strixy's last edit ran, the seventh test run was refused): the
model may still repair, but it may not verify a seventh time in the same loop.

The builtin agent ships with this rule off (``GuardPolicy.coding_loop``): it is here so that a replay
can ask what turning it on would do to what was recorded, before anyone ships it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.guard.results import SHELL_TOOLS, selected_call
from harness.guard.verdict import TestVerdict, delivery_verdict, is_test_command

__all__ = ["CODING_LOOP_REFUSAL", "CodingLoopGuard", "CodingLoopDecision"]

CODING_LOOP_REFUSAL = (
    "error: the run was stopped after {failed} failed test runs without a passing one (a test-and-repair loop "
    "that makes no progress); this call did not run."
)


@dataclass(frozen=True)
class CodingLoopDecision:
    allowed: bool
    text: str | None = None
    """The model-facing refusal text; None when allowed."""
    stops: bool = False
    """This refusal is the one that stops the run (the first)."""


def _test_run(tool: str, arguments: Mapping[str, Any] | None) -> bool:
    """Whether the call would run a recognized test command (a wrapped call is judged as the tool it selects)."""
    tool, arguments = selected_call(tool, arguments)
    command = arguments.get("command") if isinstance(arguments, Mapping) else None
    return tool in SHELL_TOOLS and isinstance(command, str) and is_test_command(command)


class CodingLoopGuard:
    """Counts failed verifications; refuses the next test run once ``limit`` are counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.failed = 0
        self.stopped = False

    def check(self, tool: str, arguments: Mapping[str, Any] | None) -> CodingLoopDecision:
        """Decide one call before it runs."""
        if self.stopped:
            return CodingLoopDecision(False, CODING_LOOP_REFUSAL.format(failed=self.failed))
        if self.failed >= self.limit and _test_run(tool, arguments):
            self.stopped = True
            return CodingLoopDecision(False, CODING_LOOP_REFUSAL.format(failed=self.failed), stops=True)
        return CodingLoopDecision(True)

    def on_test(self, verdict: TestVerdict, exit_code: int | None) -> None:
        """A recognized test command ran: count a failed one, reset on a passing one."""
        gate = delivery_verdict(verdict, exit_code)
        if gate == "failed":
            self.failed += 1
        elif gate == "passed":
            self.failed = 0
