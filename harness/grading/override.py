"""A reviewer's grade: an override of the automatic grade of one attempt, with a required reason.

The automatic grade stays (``grade.json``, and its lines in ``grades.jsonl``); an override is one more line of
``grades.jsonl``, ``{"kind": "override", ...}``, with who gave it and when, so the file is the attempt's whole
grade history in order. The latest override is also the attempt's ``AttemptSummary.override`` in the sweep's
state and a row of the index's ``overrides`` table; reports, compare and the dashboard count it in place of the
automatic grade and say so (docs/grading.md, "Overrides").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import StoreError
from harness.grading.model import Grade, GradeName

__all__ = ["OVERRIDE_SCHEMA_VERSION", "GradeOverride", "GradeHistory", "read_grade_history"]

OVERRIDE_SCHEMA_VERSION: Final = 1


class GradeOverride(BaseModel):
    """One reviewer's grade of one attempt: a line of ``grades.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = OVERRIDE_SCHEMA_VERSION
    kind: Literal["override"] = "override"
    grade: GradeName = Field(description="The reviewer's grade, counted in place of the automatic one.")
    automatic: str = Field(description="The automatic grade it overrides, as it was when the override was given.")
    reason: str = Field(min_length=1, max_length=2000, description="Why: required, for the next reader.")
    author: str = Field(min_length=1, max_length=100, description="Who gave it (the name the reviewer signed in with).")
    at: str = Field(description="When it was given (UTC, ISO 8601).")


GradeHistory = list[Grade | GradeOverride]


def read_grade_history(folder: Path) -> GradeHistory:
    """Every grade given to the attempt in ``folder``, oldest first: automatic grades (``Grade``) and overrides
    (``GradeOverride``), from ``grades.jsonl``. No file is no history; a bad line is a ``StoreError`` naming the
    file and the line."""
    path = folder / "grades.jsonl"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
    history: GradeHistory = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
            if isinstance(obj, dict) and obj.get("kind") == "override":
                history.append(GradeOverride.model_validate(obj))
            else:
                history.append(Grade.model_validate(obj))
        except ValueError as exc:
            # ValidationError is a ValueError; json's too.
            why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise StoreError(f"{path}: line {n}: {why}") from None
    return history
