"""A reviewer's grade: an override of the automatic grade of one attempt, with a required reason.

The automatic grade stays (``grade.json``, and its lines in ``grades.jsonl``); an override is one more line of
``grades.jsonl``, ``{"kind": "override", ...}``, with who gave it and when, so the file is the attempt's whole
grade history in order. The latest override is also the attempt's ``AttemptSummary.override`` in the sweep's
state and a row of the index's ``overrides`` table; reports, compare and the dashboard count it in place of the
automatic grade and say so (docs/grading.md, "Overrides").

Here: the override's record and the checks of its input. The grade files it is a line of are
``harness.grading.gradefiles``'s; giving one to a recorded attempt (under the sweep's writer lock, into its journal and
index) is the store's (``harness.store.overrides.override_grade``).
"""

from __future__ import annotations

from typing import Final, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field

from harness.core.errors import UsageError
from harness.grading.model import Grade, GradeName

__all__ = ["OVERRIDE_SCHEMA_VERSION", "REASON_MAX", "AUTHOR_MAX", "GRADE_NAMES", "GradeOverride", "GradeHistory",
           "check_override_input", "check_author"]

OVERRIDE_SCHEMA_VERSION: Final = 1
REASON_MAX: Final = 2000
"""Characters of an override's reason: a paragraph, not a file."""
AUTHOR_MAX: Final = 100
GRADE_NAMES: Final[tuple[str, ...]] = get_args(GradeName)


class GradeOverride(BaseModel):
    """One reviewer's grade of one attempt: a line of ``grades.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = OVERRIDE_SCHEMA_VERSION
    kind: Literal["override"] = "override"
    grade: GradeName = Field(description="The reviewer's grade, counted in place of the automatic one.")
    automatic: str = Field(description="The automatic grade it overrides, as it was when the override was given.")
    reason: str = Field(min_length=1, max_length=REASON_MAX, description="Why: required, for the next reader.")
    author: str = Field(min_length=1, max_length=AUTHOR_MAX,
                        description="Who gave it (the name the reviewer signed in with).")
    at: str = Field(description="When it was given (UTC, ISO 8601).")


GradeHistory = list[Grade | GradeOverride]


def check_override_input(grade: str, reason: str, author: str) -> tuple[GradeName, str, str]:
    """The grade, reason and author of an override as they will be stored (reason and author stripped), or a
    ``UsageError`` saying in one line what is wrong: a grade that is not one of the five names, a missing or
    too long reason, a missing, too long or multi-line author."""
    if grade not in GRADE_NAMES:
        raise UsageError(f"override grade {grade!r} is not one of {', '.join(GRADE_NAMES)}")
    reason = reason.strip()
    if not reason:
        raise UsageError("an override needs a reason (why the automatic grade is wrong, for the next reader)")
    if len(reason) > REASON_MAX:
        raise UsageError(f"the override's reason is {len(reason)} characters long; at most {REASON_MAX}")
    return cast(GradeName, grade), reason, check_author(author)


def check_author(author: str) -> str:
    """A reviewer's name as it is stored (stripped), or the ``UsageError`` saying why it cannot be one."""
    author = author.strip()
    if not author:
        raise UsageError("an override needs its author's name")
    if len(author) > AUTHOR_MAX or not author.isprintable():
        # Printed in reports and terminals after "override by": one short line of text, no control characters.
        raise UsageError(f"the author's name must be one line of printable text of at most {AUTHOR_MAX} characters")
    return author
