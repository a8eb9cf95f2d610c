"""How a cell's result is named and colored in the terminal, the same everywhere.

A graded attempt shows its grade (DELIVERED, PARTIAL, NOTHING, CODE_IN_CHAT, HARNESS_FAILURE with its
reason). An attempt not graded yet shows its status: ``ok`` (exit 0), ``exit N``, ``timeout``, or
``running`` / ``pending``.
"""

from __future__ import annotations

from harness.records import AttemptSummary

__all__ = ["label", "STYLES"]

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
}


def label(a: AttemptSummary | None) -> tuple[str, str]:
    """(text, rich style) for a cell whose last attempt is ``a``."""
    if a is None:
        return "pending", STYLES["pending"]
    if a.status == "dispatched":
        return "running", STYLES["running"]
    if a.status == "harness_failure" or a.grade == "HARNESS_FAILURE":
        return f"HARNESS_FAILURE({a.reason})" if a.reason else "HARNESS_FAILURE", STYLES["HARNESS_FAILURE"]
    if a.grade:
        return a.grade, STYLES[a.grade]
    if a.status == "timeout":
        return "timeout", STYLES["timeout"]
    if a.exit_code == 0:
        return "ok", STYLES["ok"]
    return f"exit {a.exit_code}", STYLES["exit"]
