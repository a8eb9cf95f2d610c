"""The one failure model: every code has one row, the docs show the same table, and classify() decides
from the attempt's status or its grade alike."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import get_args

import pytest

from harness.core import errors
from harness.core.failures import REASONS, FailureReason, classify, coded_exceptions, exception_for, is_retried
from harness.grading import Evidence, grade
from tests.support import REPO

DOC = REPO / "docs" / "failures.md"


def test_every_infrastructure_error_names_a_known_code_and_each_code_its_class() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.InfrastructureError)]
    for cls in classes:
        assert cls.reason in get_args(FailureReason), cls
        assert exception_for(cls.reason) is cls
    assert {r.exception for r in REASONS.values() if r.exception} == set(classes)


def test_the_documented_table_is_the_code() -> None:
    rows = re.findall(r"^\| `([a-z_]+)` \| (yes|no) \| (.+?) \| .*\|$", DOC.read_text(), re.M)
    assert [(code, retried == "yes", why) for code, retried, why in rows] == [
        (r.code, r.retried, r.why) for r in REASONS.values()]


@pytest.mark.parametrize("code", ["host_key_mismatch", "agent_missing", "agent_unsuited", "agent_unavailable",
                                  "revoked", "artifact_refused"])
def test_failures_a_retry_cannot_mend_are_not_retried(code: str) -> None:
    assert classify("harness_failure", code) == classify("finished", "", "HARNESS_FAILURE", code)
    assert not is_retried(code)


def test_a_model_result_is_never_a_failure() -> None:
    for g in ("DELIVERED", "PARTIAL", "NOTHING", "CODE_IN_CHAT", ""):
        assert classify("finished", "", g) is None
        assert classify("timeout", "", g) is None
    assert classify("dispatched") is None


def test_an_unknown_code_is_still_the_fleets_failure_and_retried() -> None:
    f = classify("harness_failure", "from_a_newer_worker")
    assert f is not None and f.retry and f.reason == "from_a_newer_worker"
    assert classify("harness_failure", "") == classify("harness_failure", "infrastructure")


@pytest.mark.parametrize(("evidence", "code"), [
    (dict(status="finished", exit_code=0, expects_transcript=True, transcript_present=False), "no_transcript"),
    (dict(status="finished", exit_code=0, transcript_present=True, run_outcome="infrastructure"), "model_endpoint"),
    (dict(status="finished", exit_code=0, transcript_present=True, shell_trace_failure="Wsl/0x8007274c"), "shell_failure"),
    (dict(status="harness_failure", reason="host_lost"), "host_lost"),
])
def test_a_grade_of_harness_failure_carries_its_code_and_classify_retries_it(evidence: dict, code: str) -> None:
    g = grade(Evidence(**evidence))
    assert (g.grade, g.failure) == ("HARNESS_FAILURE", code)
    f = classify(evidence["status"], evidence.get("reason", ""), g.grade, g.failure)
    assert f is not None and f.reason == code and f.retry


def test_each_code_is_named_once_on_its_class_and_every_row_is_used() -> None:
    """A class's code is written on the class alone: it must have a row in REASONS; a row no class carries must be
    a code some code path of the harness or the workers sets (a status's reason or a grade's failure)."""
    carried = coded_exceptions()
    assert set(carried) <= set(REASONS), f"codes with no row: {sorted(set(carried) - set(REASONS))}"
    sources = [p for d in ("harness", "workers") for p in sorted((REPO / d).rglob("*.py"))
               if p != REPO / "harness" / "core" / "failures.py"]
    text = "\n".join(p.read_text() for p in sources)
    unused = [code for code in REASONS if code not in carried
              and f'"{code}"' not in text and f"'{code}'" not in text]
    assert unused == [], f"rows no class carries and no code path sets: {unused}"
    for code, row in REASONS.items():
        assert row.exception is carried.get(code)


def test_the_documented_exception_of_each_code_is_its_class() -> None:
    rows = re.findall(r"^\| `([a-z_]+)` \| (?:yes|no) \| .+? \| (`\w+`|-) \|$", DOC.read_text(), re.M)
    assert rows == [(r.code, f"`{r.exception.__name__}`" if r.exception else "-") for r in REASONS.values()]


def test_a_code_carried_by_two_classes_is_refused() -> None:
    class Twin(errors.HostLost):
        reason = "host_unreachable"

    try:
        with pytest.raises(TypeError, match="host_unreachable.*HostUnreachable and Twin"):
            coded_exceptions()
    finally:
        del Twin.reason  # it declares no code of its own while it lingers among HostLost's subclasses
    assert exception_for("host_lost") is errors.HostLost and exception_for("host_unreachable") is errors.HostUnreachable
