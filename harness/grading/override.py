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
from typing import TYPE_CHECKING, Final, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.core.errors import StoreError, UsageError
from harness.grading.model import Grade, GradeName
from harness.core.records import AttemptSummary, utc_now
from harness.core.sweep import SweepRecord

if TYPE_CHECKING:
    from harness.store import Store

__all__ = ["OVERRIDE_SCHEMA_VERSION", "REASON_MAX", "AUTHOR_MAX", "GRADE_NAMES", "GradeOverride", "GradeHistory",
           "read_grade_history", "latest_override", "check_override_input", "check_author", "override_grade"]

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


def latest_override(folder: Path) -> GradeOverride | None:
    """The attempt's latest override (the one its summary counts), or None."""
    overrides = [h for h in read_grade_history(folder) if isinstance(h, GradeOverride)]
    return overrides[-1] if overrides else None


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


def override_grade(store: "Store", sweep_id: str, cell_id: str, attempt: int | None, grade: str, reason: str,
                   author: str) -> GradeOverride:
    """Give a reviewer's grade to a recorded attempt of ``cell_id`` (``attempt`` None: its last recorded one).

    Everything is checked before anything is written, and any refusal is one ``UsageError`` line: the input
    (``check_override_input``), the sweep and cell exist, the attempt is recorded (not in flight, meta.json
    present), and no coordinator is writing the sweep (its writer lock). Then, holding that lock, the override
    is one more line of the attempt's ``grades.jsonl``, the summary's ``override``, and the index's rows
    (``SweepWriter.record_override``). The automatic grade (``grade.json``) is left as it is."""
    from harness.grading.scale import shown_grade

    grade_name, reason, author = check_override_input(grade, reason, author)
    sweep = store.load_sweep(sweep_id)  # before the writer: that would make a folder for a sweep that is not there
    _recorded(store, sweep, cell_id, attempt)
    if store.is_being_written(sweep_id):
        raise UsageError(f"sweep {sweep_id} is being written by a coordinator (fleet sweep, rerun or resume); "
                         "override its grades when it has ended")
    with store.writer(sweep_id) as w:
        # Read again under the lock: a coordinator may have written the sweep since.
        sweep = store.load_sweep(sweep_id)
        summary = _recorded(store, sweep, cell_id, attempt)
        override = GradeOverride(grade=grade_name, automatic=shown_grade(summary.model_copy(update={"override": ""})),
                                 reason=reason, author=author, at=utc_now())
        w.record_override(sweep, cell_id, summary.attempt, override)
    return override


def _recorded(store: "Store", sweep: SweepRecord, cell_id: str, attempt: int | None) -> AttemptSummary:
    """The summary of the recorded attempt an override is for; else the ``UsageError`` saying why not."""
    if cell_id not in {c.id for c in sweep.cells}:
        raise UsageError(f"sweep {sweep.id} has no cell {cell_id!r}")
    runs = sweep.attempts.get(cell_id) or []
    if attempt is None:
        recorded = [a for a in runs if a.status != "dispatched"]
        if not recorded:
            raise UsageError(f"{cell_id}: no recorded attempt to override yet")
        summary = recorded[-1]
    else:
        found = next((a for a in runs if a.attempt == attempt), None)
        if found is None:
            raise UsageError(f"{cell_id}: no attempt {attempt}")
        summary = found
        if summary.status == "dispatched":
            raise UsageError(f"{cell_id}: attempt {attempt} is not recorded yet (it is still running)")
    if not (store.attempt_dir(sweep.id, cell_id, summary.attempt) / "meta.json").is_file():
        raise UsageError(f"{cell_id}: attempt {summary.attempt} has no meta.json: it is not recorded")
    return summary
