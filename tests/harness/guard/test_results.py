"""How a tool result is classified: failed, running process, correctable inspection, passed inspection."""

from __future__ import annotations

from typing import Any

import pytest

from harness.guard.results import (
    INSPECTION_KIND,
    TRANSITION_UNTESTED,
    is_correctable_inspection_failure,
    is_failed,
    is_passed_inspection,
    is_running_process,
)

SITE = {"siteId": "site-" + "a" * 24, "sha256": "a" * 64}


def inspection(details: dict[str, Any], is_error: bool | None = True) -> dict[str, Any]:
    receipt: dict[str, Any] = {"details": {"schemaVersion": 1, "kind": INSPECTION_KIND, **details}}
    if is_error is not None:
        receipt["isError"] = is_error
    return receipt


def unmeasured(error_code: str, **extra: Any) -> dict[str, Any]:
    """A failed inspection whose last step's locator failed, nothing measured."""
    steps = [{"index": 0, "action": "assert-visible", "status": "passed"},
             {"index": 1, "action": "assert-hidden", "status": "failed", "errorCode": error_code}]
    return inspection({"status": "failed", **SITE, "blockedRequests": [], "steps": steps, **extra})


REJECTED = inspection({"status": "failed", "errorCode": "invalid_request"})
INCOMPLETE = inspection({"status": "incomplete", "errorCode": TRANSITION_UNTESTED, **SITE})
PASSED = inspection({"status": "passed", **SITE, "blockedRequests": [],
                     "steps": [{"index": 0, "action": "click", "status": "passed"}]}, is_error=None)


@pytest.mark.parametrize("result", [
    {"isError": True},
    {"details": {"status": "failed"}},
    {"details": {"status": "error"}},
    {"details": {"status": "blocked"}},
    {"details": {"exitCode": 1}},
    {"details": {"exitCode": -9}},
    {"details": {"exitCode": 3.0}},  # read back from JSON as a float: still the integer 3
    {"isError": False, "details": {"status": "completed", "exitCode": 3}},  # OpenClaw: exit 3, isError false
    {"details": {"result": {"isError": True}}},  # a Tool Search envelope around a failure
    {"details": {"result": {"details": {"result": {"details": {"status": "failed"}}}}}},  # third level
])
def test_failed_results(result: dict[str, Any]) -> None:
    assert is_failed(result)


@pytest.mark.parametrize("result", [
    {},
    {"content": [{"type": "text", "text": "Example error: failed"}], "details": {"exitCode": 0}},
    {"details": {"status": "completed", "exitCode": 0}},
    {"details": {"status": "succeeded"}},
    {"isError": "true"},  # only the boolean counts
    {"details": {"exitCode": True}},  # a boolean is not an exit code
    {"details": {"exitCode": 1.5}},  # not an integer
    {"details": {"exitCode": "1"}},
    {"details": "failed"},
    # a fourth level is not read
    {"details": {"result": {"details": {"result": {"details": {"result": {"isError": True}}}}}}},
])
def test_succeeded_results(result: dict[str, Any]) -> None:
    assert not is_failed(result)


def test_running_process_needs_the_structured_receipt() -> None:
    assert is_running_process({"details": {"status": "running", "sessionId": "s-1"}})
    not_running: list[dict[str, Any]] = [
        {"details": {"status": "running"}},
        {"details": {"status": "running", "sessionId": ""}},
        {"details": {"status": "completed", "sessionId": "s-1"}},
        {"content": [{"type": "text", "text": "still running"}]},
        {"isError": True, "details": {"status": "running", "sessionId": "s-1"}},
    ]
    for result in not_running:
        assert not is_running_process(result), result


@pytest.mark.parametrize("result", [
    REJECTED, INCOMPLETE,
    unmeasured("no_match"), unmeasured("selector_not_unique"), unmeasured("invalid_selector"),
])
def test_correctable_inspection_failures(result: dict[str, Any]) -> None:
    assert is_correctable_inspection_failure(result)


@pytest.mark.parametrize("result", [
    unmeasured("visibility_mismatch"),
    unmeasured("click_failed"),
    unmeasured("unstable"),
    unmeasured("no_match", pageErrors={"count": 1, "messages": ["boom"]}),
    unmeasured("no_match", blockedRequests=["navigation"]),
    unmeasured("no_match", errorCode="unavailable"),
    *[inspection({"status": "failed", "errorCode": code, **SITE})
      for code in ["unavailable", "timeout", "cancelled", "output_limit"]],
    inspection({"status": "failed", "blockedRequests": [], "steps": []}),
    inspection({"status": "passed", "errorCode": "invalid_request"}),
    inspection({"status": "incomplete", "errorCode": "unavailable"}),
    PASSED,
    {**REJECTED, "isError": False},
    {"details": REJECTED["details"]},
    {**unmeasured("no_match"), "isError": False},
    {"isError": True, "details": {**REJECTED["details"], "kind": "ods-pixel-workspace-preview"}},
    {"isError": True, "details": {"status": "blocked", "deniedReason": "plugin-before-tool-call"}},
    {"isError": True, "details": {"persistedDetailsTruncated": True, "status": "failed"}},
])
def test_measured_or_foreign_failures_are_not_correctable(result: dict[str, Any]) -> None:
    assert not is_correctable_inspection_failure(result)


def test_only_a_clean_passing_inspection_is_the_corrected_attempt() -> None:
    assert is_passed_inspection(PASSED)
    for result in [
        REJECTED, INCOMPLETE, unmeasured("no_match"),
        {**PASSED, "isError": True},
        inspection({**PASSED["details"], "pageErrors": {"count": 1, "messages": ["boom"]}}, is_error=None),
        {"details": {**PASSED["details"], "kind": "ods-pixel-workspace-preview"}},
        {"content": [], "details": {"status": "passed"}},
        {"details": {"persistedDetailsTruncated": True, "status": "passed"}},
    ]:
        assert not is_passed_inspection(result), result
