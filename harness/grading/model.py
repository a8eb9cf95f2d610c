"""Grade records and the evidence they are computed from. Stored as ``grade.json`` per attempt."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationInfo, model_validator

from harness.core.checks.result import CheckResult
from harness.core.recordfile import check_version

__all__ = ["GRADER_VERSION", "GRADE_SCHEMA_VERSION", "GradeName", "StopRecord", "Evidence", "Grade", "CHECKS_ADAPTER"]

GRADE_SCHEMA_VERSION: Final = 1
"""The version of grade.json's format (not of the rules: that is ``grader_version``)."""

CHECKS_ADAPTER: TypeAdapter[list[CheckResult]] = TypeAdapter(list[CheckResult])
"""An attempt's ``checks.json``: the results of its acceptance checks, in the order they ran."""

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
    checks: list[CheckResult] = Field(default_factory=list, description="The acceptance checks' results (checks.json).")


def _failure_of_older_grade(reasons: Any) -> str:
    """The failure code of a HARNESS_FAILURE graded before grades carried one (grader 1 and 2, before commit
    be30429). Those rules said it only in their first reason, in fixed words, so the code is read back
    from them, exactly; anything else is the catch-all code."""
    first = reasons[0] if isinstance(reasons, list) and reasons and isinstance(reasons[0], str) else ""
    if first.startswith("harness failure: "):
        code = first.removeprefix("harness failure: ").split(":", 1)[0].strip()
        return "infrastructure" if code in ("", "unknown") else code
    for start, code in (("the agent's model endpoint failed", "model_endpoint"),
                        ("the agent left no transcript", "no_transcript"), ("the host's shell failed", "shell_failure")):
        if first.startswith(start):
            return code
    return "infrastructure"


class Grade(_Record):
    """grade.json: the harness's verdict on one attempt, from its stored folder (docs/grading.md)."""

    schema_version: Literal[1] = Field(default=GRADE_SCHEMA_VERSION, description="The record's format version.")
    grader_version: int = Field(default=GRADER_VERSION, ge=1, description="The version of the rules that gave it.")
    grade: GradeName = Field(description="DELIVERED, PARTIAL, NOTHING, CODE_IN_CHAT or HARNESS_FAILURE.")
    outcome: Literal["passed", "failed", "pending", "none"] = Field(description="The product outcome: the receipt.")
    stop: StopRecord | None = Field(default=None, description="The guard stop, if the run was stopped.")
    failure: str = Field(default="", description="For HARNESS_FAILURE: the stable failure code "
                         "(harness.core.failures.FailureReason), e.g. no_transcript, model_endpoint, shell_failure.")
    reasons: list[str] = Field(default_factory=list, description="Why this grade, in order.")
    checks: list[CheckResult] = Field(default_factory=list, description="The acceptance checks' results the grade "
                                      "was given from (the attempt's checks.json).")
    graded_at: str = Field(default="", description="When it was given (UTC, ISO 8601).")

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        check_version(data, (GRADE_SCHEMA_VERSION,), info)
        if "failure" not in data and data.get("grade") == "HARNESS_FAILURE":
            return {**data, "failure": _failure_of_older_grade(data.get("reasons"))}
        return data
