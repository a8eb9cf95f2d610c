"""The guard: rules that watch an agent's tool calls (seeds 000, 002, 003). Import-light on purpose."""

from harness.guard.budget import (
    DEFAULT_POLICY,
    BudgetDecision,
    BudgetPolicy,
    DeferralNote,
    RunProgressBudget,
    Stop,
)
from harness.guard.results import (
    is_correctable_inspection_failure,
    is_failed,
    is_passed_inspection,
    is_running_process,
)

__all__ = [
    "DEFAULT_POLICY",
    "BudgetDecision",
    "BudgetPolicy",
    "DeferralNote",
    "RunProgressBudget",
    "Stop",
    "is_correctable_inspection_failure",
    "is_failed",
    "is_passed_inspection",
    "is_running_process",
]
