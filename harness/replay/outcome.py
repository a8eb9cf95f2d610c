"""What one replay of one session under one policy decided: the record behind every table and ``--json`` line
(docs/replay.md). Stable on purpose: scripts read these lines."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["REPLAY_SCHEMA_VERSION", "StopReason", "Refusal", "ReplayOutcome"]

REPLAY_SCHEMA_VERSION: Final = 1

StopReason = Literal["run_progress", "recursive_delete", "output_limit", "coding_loop", "external"]
"""The rule family that stopped the run; ``stop_detail`` says more (``consecutive_failures``, ...)."""


class Refusal(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    call: int = Field(description="The 1-based call.")
    rule: str = Field(description="budget, recursive_delete, coding_loop, an external guard's, or the recording "
                      "agent's own rule (workspace_route, tool_policy ...) for a refusal the replay keeps.")
    reason: str = Field(description="after_stop, recursive_delete, latch, coding_loop, recorded, ...")
    text: str = Field(default="", description="What the model is told instead of a result.")


class ReplayOutcome(BaseModel):
    """One (session, policy): whether and where it stops, which calls are refused, and what the owner gets."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = REPLAY_SCHEMA_VERSION
    source: str = Field(description="The input: a file, or a sweep's attempt folder.")
    session: str = Field(description="The session's name in this replay (also what --edit names).")
    sha256: str = Field(description="The input file's sha256.")
    policy: str = Field(description="The policy's name: default, a file's name, git:REF, cmd:...")
    calls: int = Field(description="Calls in the session (after edits).")
    stopped: bool
    stop_reason: StopReason | None = None
    stop_detail: str | None = Field(default=None, description="consecutive_failures, total_failures, no_progress, "
                                    "lanes_exhausted, recursive_delete, coding_loop, output_limit, or an external "
                                    "guard's own reason.")
    stop_call: int | None = Field(default=None, description="The 1-based call whose result stopped the run; for a "
                                  "refusal that stops it, the refused call; for a stop between rounds, the last "
                                  "call before it. Null when the run was not stopped.")
    stop_text: str | None = None
    refused_calls: list[int] = Field(default_factory=list, description="Calls refused before they ran, 1-based.")
    refusals: list[Refusal] = Field(default_factory=list)
    receipt_status: Literal["passed", "failed", "pending", "none"] | None = Field(
        default=None, description="What the owner's receipt says; null when the replay cannot tell (unrecorded).")
    receipt_source: str | None = Field(default=None, description="model, refusal_receipt, budget_stop, "
                                       "coding_loop_stop, output_limit_report, or agent_guard (an external "
                                       "guard's stop, when it gave no receipt of its own).")
    delivered_sha256: str | None = Field(default=None, description="sha256 of the delivered text (UTF-8).")
    delivered: str | None = Field(default=None, description="The delivered text.")
    unrecorded_call: int | None = Field(default=None, description="The policy lets this call run (or, one past the "
                                        "last call, lets the run go on past the recording's own stop), but the "
                                        "recording holds no result for it: the replay cannot say what came next. "
                                        "Supply one with --edit.")
    deferrals: int = Field(default=0, description="Charges the budget let wait (seed 000).")
    edits: list[str] = Field(default_factory=list, description="The counterfactual edits applied, as given.")

    def decisions(self) -> tuple[object, ...]:
        """What two policies are compared on: everything but the names."""
        return (self.stopped, self.stop_reason, self.stop_detail, self.stop_call, tuple(self.refused_calls),
                self.receipt_status, self.delivered_sha256, self.unrecorded_call)
