"""The result of one independent acceptance check, shared by every check kind (web, command, file ...).

A check is a list of assertions (``details``); the check's ``status`` folds them:

- ``passed``: every assertion held;
- ``failed``: at least one assertion did not hold (the deliverable's fault);
- ``untested``: the check could not be run on this host (e.g. no Chromium); never counts as passed;
- ``error``: the check itself broke (the harness's or the host's fault, e.g. Chromium crashed at launch).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.errors import one_line

__all__ = ["CHECK_SCHEMA_VERSION", "CheckStatus", "AssertionResult", "CheckResult", "fold_status", "failure_message"]

CHECK_SCHEMA_VERSION = 1

CheckStatus = Literal["passed", "failed", "untested", "error"]


class AssertionResult(BaseModel):
    """One assertion of a check: its name, whether it held, and a human sentence saying why."""

    model_config = ConfigDict(extra="forbid")

    name: str
    status: CheckStatus
    message: str = ""


class CheckResult(BaseModel):
    """What one acceptance check concluded about one workspace."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = CHECK_SCHEMA_VERSION
    name: str
    kind: str
    status: CheckStatus
    summary: str = ""
    details: list[AssertionResult] = Field(default_factory=list)
    duration_s: float = 0.0


def fold_status(details: list[AssertionResult]) -> CheckStatus:
    """The check status implied by its assertions: error > failed > untested > passed."""
    statuses = {d.status for d in details}
    for s in ("error", "failed", "untested"):
        if s in statuses:
            return s
    return "passed"


MESSAGE_LIMIT = 300
"""How much of a check's failure ``failure_message`` keeps: enough for a test name and its assertion line."""


def failure_message(result: CheckResult, limit: int = MESSAGE_LIMIT) -> str:
    """One line saying why a check did not pass, for `fleet report` and `fleet show`: its first failed (or broken)
    assertion, named, with its message and how many others failed; the summary when it has no such assertion.
    Control characters escaped (the text comes from the deliverable's tests), cut to ``limit``. '' when it passed."""
    if result.status == "passed":
        return ""
    bad = [d for d in result.details if d.status in ("failed", "error")]
    if bad:
        first = bad[0]
        text = f"{first.name}: {first.message}" if first.message else first.name
        if len(bad) > 1:
            text += f" (and {len(bad) - 1} more)"
    else:
        text = result.summary or result.status
    text = one_line(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."
