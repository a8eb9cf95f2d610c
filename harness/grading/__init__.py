"""Grading: the harness's verdict on an attempt, from evidence it can show (docs/grading.md)."""

from harness.grading.evidence import evidence_from_attempt
from harness.grading.model import GRADER_VERSION, Evidence, Grade, GradeName, StopRecord
from harness.grading.rules import grade

__all__ = ["GRADER_VERSION", "Evidence", "Grade", "GradeName", "StopRecord", "evidence_from_attempt", "grade"]
