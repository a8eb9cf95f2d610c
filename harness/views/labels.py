"""How a cell's result is named and colored in the terminal, the same everywhere.

A graded attempt shows its grade (DELIVERED, PARTIAL, NOTHING, CODE_IN_CHAT, HARNESS_FAILURE with its
reason). An attempt not graded yet shows its status: ``ok`` (exit 0), ``exit N``, ``timeout``, or
``running`` / ``pending``; an attempt still marked running in a sweep nobody writes any more (its
coordinator was killed) shows ``abandoned`` until ``fleet resume`` settles it. Whether an attempt is a
harness failure is ``harness.core.failures.classify``'s decision, the same one the dispatcher retries on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.failures import classify

if TYPE_CHECKING:  # a type only: the --json objects built with these labels (jsonout.py) load no record model
    from harness.core.records import AttemptSummary

__all__ = ["label", "table_label", "STYLES"]

STYLES = {
    "DELIVERED": "green",
    "PARTIAL": "yellow",
    "NOTHING": "magenta",
    "CODE_IN_CHAT": "magenta",
    "HARNESS_FAILURE": "red",
    "ok": "green",
    "exit": "yellow",
    "timeout": "yellow",
    "pending": "dim",
    "running": "cyan",
    "abandoned": "red",
}


def label(a: AttemptSummary | None, live: bool = True) -> tuple[str, str]:
    """(text, rich style) for a cell whose last attempt is ``a``; ``live``: a coordinator is writing the sweep."""
    if a is None:
        return "pending", STYLES["pending"]
    if a.status == "dispatched":
        return ("running", STYLES["running"]) if live else ("abandoned", STYLES["abandoned"])
    failure = classify(a.status, a.reason, a.grade, a.failure)
    if failure is not None:
        return f"HARNESS_FAILURE({failure.reason})", STYLES["HARNESS_FAILURE"]
    if a.grade:
        return a.grade, STYLES[a.grade]
    if a.status == "timeout":
        return "timeout", STYLES["timeout"]
    if a.exit_code == 0:
        return "ok", STYLES["ok"]
    return f"exit {a.exit_code}", STYLES["exit"]


def table_label(a: AttemptSummary | None, live: bool = True) -> tuple[str, str]:
    """``label`` as the sweep's table and ``--json`` show it: a reviewer's override counts (``shown_grade``), so it
    is what the table says, marked as one (the automatic grade is in `fleet show` and the dashboard)."""
    if a is not None and a.status != "dispatched" and a.override:
        return f"{a.override} (override)", STYLES.get(a.override, STYLES["ok"])
    return label(a, live)
