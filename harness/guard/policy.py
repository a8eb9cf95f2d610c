"""A guard policy: which guard rules are on, and their limits. The builtin agent runs ``DEFAULT_GUARD``; a replay
runs any policy over recorded sessions (``fleet replay --policy FILE``, docs/replay.md).

A policy file is TOML, every key optional (a missing key keeps the shipped value)::

    name = "no-deferral"                 # shown in replay tables; default: the file's stem
    [guards]
    budget = true                        # the run-progress budget (seed 000)
    recursive_delete = true              # refuse an unrequested recursive delete (seed 003)
    output_limit = true                  # continue or report a reply cut at the output limit (seed 002)
    coding_loop = false                  # stop a test-and-repair loop without progress (off as shipped)
    [budget]
    consecutive_failures = 4
    total_failures = 12
    rounds_without_progress = 8
    identical_successes = 2
    deferral = true
    max_deferrals = 2
    correctable = ["pixel_ods_workspace_preview_inspect"]
    correctable_kinds = ["invalid_request", "transition_untested", "unmeasured_locator"]
    [coding_loop]
    failed_test_runs = 6

Why the classifiers are named, not written in the file: a result classifier is code (seed 000's rule reads a
nested receipt); a file names which tools use it and which of its three kinds count, which is what a team
changes when it asks "what if only rejected arguments could wait?".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from harness.core.errors import PolicyError
from harness.guard.budget import DEFAULT_POLICY, INSPECTION_TOOL, BudgetPolicy, ResultTest
from harness.guard.results import (
    TRANSITION_UNTESTED,
    is_correctable_inspection_failure,
    is_passed_inspection,
)

__all__ = ["POLICY_SCHEMA_VERSION", "CorrectableKind", "GuardSwitches", "BudgetLimits", "CodingLoopLimits",
           "GuardPolicy", "DEFAULT_GUARD", "load_policy_file"]

POLICY_SCHEMA_VERSION: Final = 1

CorrectableKind = Literal["invalid_request", "transition_untested", "unmeasured_locator"]
ALL_KINDS: tuple[CorrectableKind, ...] = ("invalid_request", "transition_untested", "unmeasured_locator")


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GuardSwitches(_Part):
    budget: StrictBool = True
    recursive_delete: StrictBool = True
    output_limit: StrictBool = True
    coding_loop: StrictBool = False


class BudgetLimits(_Part):
    consecutive_failures: StrictInt = Field(default=DEFAULT_POLICY.consecutive_failures, ge=1)
    total_failures: StrictInt = Field(default=DEFAULT_POLICY.total_failures, ge=1)
    rounds_without_progress: StrictInt = Field(default=DEFAULT_POLICY.rounds_without_progress, ge=0)
    identical_successes: StrictInt = Field(default=DEFAULT_POLICY.identical_successes, ge=0)
    deferral: StrictBool = DEFAULT_POLICY.deferral
    max_deferrals: StrictInt = Field(default=DEFAULT_POLICY.max_deferrals, ge=0)
    correctable: tuple[str, ...] = (INSPECTION_TOOL,)
    """Tools whose unmeasured failures may wait (seed 000's inspection classifier)."""
    correctable_kinds: tuple[CorrectableKind, ...] = ALL_KINDS
    """Which of the classifier's kinds count: rejected arguments, an untested transition, a locator that
    measured nothing."""


class CodingLoopLimits(_Part):
    failed_test_runs: StrictInt = Field(default=6, ge=1)


def _kind_of(result: Mapping[str, Any]) -> CorrectableKind | None:
    """Which correctable kind a failed inspection is (None when it is not correctable)."""
    if not is_correctable_inspection_failure(result):
        return None
    details = result.get("details")
    code = details.get("errorCode") if isinstance(details, Mapping) else None
    if code == "invalid_request":
        return "invalid_request"
    if code == TRANSITION_UNTESTED:
        return "transition_untested"
    return "unmeasured_locator"


class GuardPolicy(_Part):
    """Everything a guard run depends on besides the session itself. ``model_dump(mode="json")`` is the form a
    replay records and an external guard receives."""

    schema_version: Literal[1] = POLICY_SCHEMA_VERSION
    name: str = Field(default="default", min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$",
                      description="What tables and JSON lines call it: one line, no control characters.")
    guards: GuardSwitches = GuardSwitches()
    budget: BudgetLimits = BudgetLimits()
    coding_loop: CodingLoopLimits = CodingLoopLimits()

    def budget_policy(self) -> BudgetPolicy:
        """The run-progress budget this policy runs (the shipped classifiers, narrowed as the file says)."""
        b = self.budget
        kinds = frozenset(b.correctable_kinds)

        def correctable(result: Mapping[str, Any]) -> bool:
            return _kind_of(result) in kinds

        test: ResultTest = is_correctable_inspection_failure if kinds == frozenset(ALL_KINDS) else correctable
        return DEFAULT_POLICY.model_copy(update={
            "consecutive_failures": b.consecutive_failures, "total_failures": b.total_failures,
            "rounds_without_progress": b.rounds_without_progress, "identical_successes": b.identical_successes,
            "deferral": b.deferral, "max_deferrals": b.max_deferrals,
            "correctable": {tool: test for tool in b.correctable},
            "corrects": {tool: is_passed_inspection for tool in b.correctable},
        })


DEFAULT_GUARD: Final = GuardPolicy()
"""The guard as the builtin agent ships it."""

def load_policy_file(path: Path) -> GuardPolicy:
    """Read a policy file; a bad one is one ``PolicyError`` line naming the file, the key and the problem."""
    # The project's one TOML road (depth-limited, one line); here, not at the top: the builtin agent's start and a
    # replay with the shipped guard read no policy file.
    from harness.core.tomlfile import read_toml, validate  # lazy: a policy file only (2 ms)

    data = read_toml(path, PolicyError)
    data.setdefault("name", path.stem)
    policy = validate(GuardPolicy, data, str(path), PolicyError)
    if policy.name == DEFAULT_GUARD.name or policy.name.startswith(("git:", "cmd:")):
        # A changed policy must never read as the shipped guard, nor as another kind of policy.
        raise PolicyError(str(path), "name", f"{policy.name!r} names another policy: choose another name")
    return policy
