"""How an attempt's result is named and colored in the terminal, the same everywhere.

Until the grading issue lands, a cell's label comes from its last attempt: ``ok`` (the agent exited 0),
``exit N``, ``timeout``, ``HARNESS_FAILURE`` (with its reason), or ``running`` / ``pending``.
"""

from __future__ import annotations

from harness.records import AttemptSummary

__all__ = ["label"]

STYLES = {"ok": "green", "exit": "yellow", "timeout": "yellow", "HARNESS_FAILURE": "red", "pending": "dim", "running": "cyan"}


def label(a: AttemptSummary | None) -> tuple[str, str]:
    """(text, rich style) for a cell whose last attempt is ``a``."""
    if a is None:
        return "pending", STYLES["pending"]
    if a.status == "dispatched":
        return "running", STYLES["running"]
    if a.status == "harness_failure":
        return f"HARNESS_FAILURE({a.reason})" if a.reason else "HARNESS_FAILURE", STYLES["HARNESS_FAILURE"]
    if a.status == "timeout":
        return "timeout", STYLES["timeout"]
    if a.exit_code == 0:
        return "ok", STYLES["ok"]
    return f"exit {a.exit_code}", STYLES["exit"]
