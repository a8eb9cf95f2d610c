"""Grade records and the evidence they are computed from. Stored as ``grade.json`` per attempt."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["GRADER_VERSION", "GradeName", "StopRecord", "Evidence", "Grade"]

GRADER_VERSION = 3
"""Bump when a rule changes meaning: stored grades name the version that made them.
2: an attempt folder without a workspace manifest (an imported session) takes its files from the
transcript's successful write/edit results, and an answer its source did not record is said so.
3: the agent kind comes from meta.json (``agent_kind``); OpenClaw, OpenCode and Hermes attempts, whose
sessions the harness turns into transcript.jsonl, are harness failures when that transcript is missing."""

GradeName = Literal["DELIVERED", "PARTIAL", "NOTHING", "CODE_IN_CHAT", "HARNESS_FAILURE"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StopRecord(_Record):
    """A guard stop read from the transcript."""

    reason: str = Field(description="Stable code: consecutive_failures, recursive_delete, output_limit, ...")
    text: str = Field(description="For people, e.g. '4 consecutive failures'.")
    at_call: int | None = Field(default=None, description="1-based index of the tool call it stopped at.")


class Evidence(_Record):
    """What a grade is decided from: all of it comes from the stored attempt, nothing from memory."""

    status: str = Field(description="The attempt's status: finished, timeout, harness_failure.")
    reason: str = ""
    error: str = ""
    exit_code: int | None = None
    deliverable: Literal["workspace", "answer"] = "workspace"
    expects_transcript: bool = Field(default=False, description="The agent writes a normalized transcript.")
    transcript_present: bool = False
    run_outcome: str = Field(default="", description="run_end.outcome of the transcript, if any.")
    files: list[str] = Field(default_factory=list, description="Non-empty files the agent left in its workspace.")
    files_from: Literal["workspace", "transcript"] = Field(
        default="workspace",
        description="Where files came from: the workspace manifest, or (a folder without one, such as an imported "
        "session) the transcript's successful write/edit results, a call whose path was not recorded counting once.")
    answer: str = ""
    answer_recorded: bool = Field(
        default=True, description="False when the source of an imported session did not record what the owner got.")
    receipt: Literal["passed", "failed", "pending", "none"] = "none"
    stop: StopRecord | None = None
    shell_trace_failure: str = Field(default="", description="A tool result showing the host's shell failed.")
    checks: list[dict] = Field(default_factory=list, description="CheckResult records (name, status, summary).")


class Grade(_Record):
    schema_version: int = 1
    grader_version: int = GRADER_VERSION
    grade: GradeName
    outcome: Literal["passed", "failed", "pending", "none"] = Field(description="The product outcome: the receipt.")
    stop: StopRecord | None = None
    failure: str = Field(default="", description="For HARNESS_FAILURE: the stable failure code "
                         "(harness.failures.FailureReason), e.g. no_transcript, model_endpoint, shell_failure.")
    reasons: list[str] = Field(default_factory=list, description="Why this grade, in order.")
    checks: list[dict] = Field(default_factory=list)
    graded_at: str = ""
