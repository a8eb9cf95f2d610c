"""An exit gate's verdict: whether a gate a CI job reads from the exit status tripped, what tripped it, and the line
that says so.

Each gate decides in the domain it judges, as a pure function over records that prints nothing and exits nothing:

- nothing measured (exit 3): ``harness.coordinator.verbs.nothing_measured``, every judged cell a harness failure;
- ``--fail-on GRADES`` (exit 4): ``harness.grading.scale.grade_gate``, a cell's shown grade is one of them;
- ``fleet compare --fail-on-regressions N`` (exit 4): ``harness.views.comparison.regression_gate``.

The CLI turns a tripped verdict into the gate's exception (``NothingMeasured``, ``GradeGate``, ``RegressionGate`` in
``harness.core.errors``, which carry the exit codes), so the decision can be tested, and reused, without a process.
Apart from errors.py because a verdict is data, not an error: most of the time the gate holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["GateVerdict", "HELD", "first_hits"]


@dataclass(frozen=True)
class GateVerdict:
    """One gate's decision."""

    tripped: bool
    """Whether the gate tripped: the command exits with the gate's code."""
    hits: tuple[str, ...] = ()
    """What tripped it, as the message names each one (``CELL GRADE``, ``host/item/agent``, a cell id)."""
    message: str = ""
    """The one line the command prints when it tripped; '' when it held."""


HELD = GateVerdict(tripped=False)
"""The verdict of a gate that held (or was not asked for)."""


def first_hits(hits: Sequence[str], shown: int = 5) -> str:
    """The first ``shown`` hits and how many more: the line stays short when a whole fleet trips a gate."""
    more = f" and {len(hits) - shown} more" if len(hits) > shown else ""
    return f"{', '.join(hits[:shown])}{more}"
