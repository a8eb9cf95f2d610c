"""The run-progress budget rule by rule (seed 000 and DESIGN's guard facts), then replays of the
recorded fleet sessions in tests/fixtures/pixel-fleet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import harness.guard
from harness.guard.budget import (
    DEFAULT_POLICY,
    INSPECTION_TOOL,
    BudgetDecision,
    BudgetPolicy,
    Lane,
    RunProgressBudget,
)
from harness.guard.results import INSPECTION_KIND, TRANSITION_UNTESTED
from tests.fixtures import PIXEL_FLEET
from tests.support import REPO

OFF = DEFAULT_POLICY.model_copy(update={"deferral": False})
FAILED = {"isError": True}
OK: dict[str, Any] = {}


def inspection(details: dict[str, Any], is_error: bool = True) -> dict[str, Any]:
    receipt: dict[str, Any] = {"details": {"schemaVersion": 1, "kind": INSPECTION_KIND, **details}}
    return {**receipt, "isError": True} if is_error else receipt


def unmeasured(error_code: str) -> dict[str, Any]:
    return inspection({"status": "failed", "blockedRequests": [], "steps": [
        {"index": 0, "action": "assert-visible", "status": "passed"},
        {"index": 1, "action": "assert-hidden", "status": "failed", "errorCode": error_code}]})


REJECTED = inspection({"status": "failed", "errorCode": "invalid_request"})
INCOMPLETE = inspection({"status": "incomplete", "errorCode": TRANSITION_UNTESTED})
MISMATCH = unmeasured("visibility_mismatch")
PASSED = inspection({"status": "passed", "blockedRequests": [], "steps": [
    {"index": 0, "action": "click", "status": "passed"}]}, is_error=False)


def fail(budget: RunProgressBudget, call_id: str, lane: Lane | None = None,
         tool: str = "exec") -> BudgetDecision:
    return budget.on_result(call_id, tool, {"command": call_id}, FAILED, lane)


def fail_times(budget: RunProgressBudget, prefix: str, count: int, lane: Lane | None = None) -> None:
    for i in range(count):
        fail(budget, f"{prefix}-{i}", lane)


def succeed(budget: RunProgressBudget, call_id: str, lane: Lane | None = None) -> BudgetDecision:
    return budget.on_result(call_id, "read", {"path": call_id}, OK, lane)


def inspect(budget: RunProgressBudget, call_id: str, result: dict[str, Any],
            lane: Lane | None = None) -> BudgetDecision:
    return budget.on_result(call_id, INSPECTION_TOOL, {"plan": call_id}, result, lane)


def discover(budget: RunProgressBudget, call_id: str) -> BudgetDecision:
    return budget.on_result(call_id, "tool_search", {"query": call_id}, OK)


def assert_consecutive_reset(budget: RunProgressBudget, prefix: str) -> None:
    """Consecutive count 0: three more ordinary failures are allowed, the fourth stops."""
    for i in range(4):
        decision = fail(budget, f"{prefix}-{i}")
        assert decision.allowed is (i < 3), f"{prefix} failure {i + 1}"


# --- policy and API ----------------------------------------------------------------------------------

def test_policy_defaults_are_the_seed_limits_and_frozen() -> None:
    policy = BudgetPolicy()
    assert (policy.consecutive_failures, policy.total_failures, policy.rounds_without_progress,
            policy.identical_successes) == (4, 12, 8, 2)
    assert policy.deferral and policy.max_deferrals == 2
    assert policy == DEFAULT_POLICY and OFF != DEFAULT_POLICY
    with pytest.raises(ValidationError):
        policy.total_failures = 20
    with pytest.raises(ValidationError):
        BudgetPolicy(consecutive_failures=0)


def test_recorded_policy_is_plain_stable_data() -> None:
    dumped = DEFAULT_POLICY.model_dump(mode="json")
    assert "correctable" not in dumped and dumped["discovery_tools"] == sorted(dumped["discovery_tools"])
    assert json.loads(json.dumps(dumped)) == dumped


def test_package_exports_and_import_isolation() -> None:
    assert set(harness.guard.__all__) >= {"RunProgressBudget", "BudgetPolicy", "BudgetDecision", "Stop"}
    for name in harness.guard.__all__:
        assert hasattr(harness.guard, name), name
    code = ("import sys, harness.guard; heavy = {'celery', 'fabric', 'rich', 'click', 'workers', 'paramiko'};"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    root = REPO
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(root)})
    assert out.stdout.strip() == "[]"


def test_call_id_and_lane_are_checked() -> None:
    budget = RunProgressBudget()
    with pytest.raises(ValueError, match="call id"):
        budget.on_result("", "read", {}, OK)
    with pytest.raises(ValueError, match="unknown lane"):
        budget.on_result("c", "read", {}, OK, lane="model-supplied-lane")  # type: ignore[arg-type]


# --- consecutive and total failures, de-duplication, stickiness ---------------------------------------------

def test_fourth_consecutive_failure_stops_the_run_and_the_stop_is_sticky() -> None:
    budget = RunProgressBudget()
    succeed(budget, "first")
    for i in range(3):
        assert fail(budget, f"bad-{i}").allowed
    decision = fail(budget, "bad-3")
    assert not decision.allowed and decision.stop is not None
    assert (decision.stop.reason, decision.stop.text) == ("consecutive_failures", "4 consecutive failures")
    assert (decision.stop.call_index, decision.stop.call_id) == (5, "bad-3")
    late = succeed(budget, "recovery")
    assert not late.allowed and not late.observed and late.stop == decision.stop
    assert not budget.check_call().allowed and budget.check_call().stop == decision.stop
    budget.on_round()
    assert budget.snapshot()["results"] == 5


def test_a_success_resets_the_consecutive_count() -> None:
    budget = RunProgressBudget()
    fail_times(budget, "a", 3)
    succeed(budget, "progress")
    assert_consecutive_reset(budget, "b")


def test_twelfth_failure_stops_the_run_even_with_progress_between() -> None:
    budget = RunProgressBudget()
    for i in range(12):
        decision = fail(budget, f"bad-{i}")
        assert decision.allowed is (i < 11)
        succeed(budget, f"progress-{i}")
    assert budget.stop is not None
    assert (budget.stop.reason, budget.stop.text) == ("total_failures", "12 failures in total")
    assert budget.stop.call_index == 23


def test_duplicate_receipts_count_once() -> None:
    budget = RunProgressBudget()
    for _ in range(30):
        decision = fail(budget, "same")
    assert decision.allowed and not decision.observed
    assert budget.snapshot()["failures"] == 1
    fail_times(budget, "next", 2)
    assert fail(budget, "next-2").stop is not None


def test_nested_tool_search_children_are_not_observed() -> None:
    budget = RunProgressBudget()
    for i in range(6):
        decision = fail(budget, f"tool_search_code:outer-{i}:exec:1")
        assert not decision.observed
    assert budget.snapshot()["failures"] == 0


def test_forgotten_call_ids_count_again() -> None:
    budget = RunProgressBudget(BudgetPolicy(seen_calls_kept=2))
    fail(budget, "a")
    succeed(budget, "b")
    succeed(budget, "c")  # forgets "a"
    fail(budget, "a")
    assert budget.snapshot()["failures"] == 2


# --- rounds without progress ------------------------------------------------------------------------

def test_ninth_idle_round_stops_the_run() -> None:
    budget = RunProgressBudget()
    succeed(budget, "first")
    for _ in range(8):
        assert budget.on_round().allowed
    decision = budget.on_round()
    assert decision.stop is not None
    assert decision.stop.reason == "no_progress"
    assert decision.stop.text == "more than 8 rounds without progress"
    assert (decision.stop.call_index, decision.stop.call_id) == (1, None)


def test_distinct_successes_are_progress_but_a_third_identical_success_is_not() -> None:
    budget = RunProgressBudget()
    for i in range(100):
        assert budget.on_round().allowed
        succeed(budget, f"file-{i}")
    for i in range(2):  # an identical pair still resets twice...
        budget.on_round()
        budget.on_result(f"echo-{i}", "exec", {"command": "echo done"}, OK)
    assert budget.snapshot()["rounds_without_progress"] == 0
    for i in range(2, 10):  # ...and never again
        assert budget.on_round().allowed
        budget.on_result(f"echo-{i}", "exec", {"command": "echo done"}, OK)
    assert budget.on_round().stop is not None


def test_identical_means_same_tool_and_arguments_in_any_key_order() -> None:
    budget = RunProgressBudget()
    for i, args in enumerate([{"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, {"a": 1, "b": [1, 2]}]):
        budget.on_round()
        budget.on_result(f"c{i}", "exec", args, OK)
    assert budget.snapshot()["rounds_without_progress"] == 1  # the third one did not reset
    for i, (tool, args) in enumerate([("read", {"a": 1, "b": [1, 2]}), ("exec", {"a": 1, "b": [2, 1]})]):
        budget.on_round()
        budget.on_result(f"d{i}", tool, args, OK)
        assert budget.snapshot()["rounds_without_progress"] == 0, (tool, args)


def test_forgotten_success_pairs_count_as_new() -> None:
    budget = RunProgressBudget(BudgetPolicy(fingerprints_kept=1))
    for i, path in enumerate(["x", "x", "y", "x"]):  # "y" pushes "x" out: x's third success is new again
        budget.on_round()
        budget.on_result(f"c{i}", "read", {"path": path}, OK)
    assert budget.snapshot()["rounds_without_progress"] == 0


def test_a_running_process_receipt_resets_rounds_every_time() -> None:
    budget = RunProgressBudget()
    running = {"details": {"status": "running", "sessionId": "s-1"}}
    for i in range(100):
        assert budget.on_round().allowed
        budget.on_result(f"poll-{i}", "process", {"action": "poll", "sessionId": "s-1"}, running)
    text_only = {"content": [{"type": "text", "text": "still running"}]}
    for i in range(11):  # text is not a receipt: only two identical successes count, then 9 idle rounds
        assert budget.stop is None
        budget.on_round()
        budget.on_result(f"text-{i}", "process", {"action": "poll", "sessionId": "s-1"}, text_only)
    assert budget.stop is not None and budget.stop.reason == "no_progress"


# --- discovery ---------------------------------------------------------------------------------------

def test_discovery_successes_do_not_reset_failures() -> None:
    budget = RunProgressBudget()
    for i in range(4):
        discover(budget, f"search-{i}")
        budget.on_result(f"guide-{i}", "pixel_ods_skill", {"topic": "web"}, OK)
        decision = fail(budget, f"bad-{i}")
    assert decision.stop is not None and decision.stop.reason == "consecutive_failures"


def test_discovery_successes_do_not_reset_rounds() -> None:
    budget = RunProgressBudget()
    for i in range(8):
        assert budget.on_round().allowed
        budget.on_result(f"d-{i}", "tool_describe" if i % 2 else "tool_search", {"query": str(i)}, OK)
    assert not budget.on_round().allowed


def test_failed_discovery_still_counts() -> None:
    budget = RunProgressBudget()
    for i in range(4):
        decision = budget.on_result(f"search-{i}", "tool_search", {"query": str(i)}, FAILED)
    assert decision.stop is not None


def test_a_wrapped_call_is_classified_as_the_tool_it_selects() -> None:
    budget = RunProgressBudget()
    fail_times(budget, "bad", 3)
    describe = {"id": "tool_describe", "args": {"id": "exec"}}
    described = {"details": {"tool": {"name": "tool_describe"}, "result": OK}}
    budget.on_result("describe", "tool_call", describe, described)
    assert budget.snapshot()["consecutive_failures"] == 3, "a wrapped describe is discovery"
    exited = {"isError": False, "details": {"tool": {"name": "exec"}, "result": {"details": {"exitCode": 2}}}}
    decision = budget.on_result("wrapped-exec", "tool_call", {"id": "openclaw:core:exec", "args": {}}, exited)
    assert decision.stop is not None, "the failure inside the envelope counts"


# --- lanes -------------------------------------------------------------------------------------------

def test_a_lane_is_exhausted_alone_and_refuses_only_its_calls() -> None:
    budget = RunProgressBudget()
    for i in range(4):
        decision = fail(budget, f"ext-{i}", lane="extension")
        budget.on_result(f"status-{i}", "tool_search", {"q": i}, OK, lane="extension")
        succeed(budget, f"write-{i}", lane="workspace")
    assert decision.allowed and decision.exhausted_lanes == ("extension",)
    succeed(budget, "late", lane="extension")
    assert budget.snapshot()["exhausted_lanes"] == ["extension"], "exhaustion is sticky"
    assert not budget.check_call("extension").allowed and budget.check_call("extension").stop is None
    assert budget.check_call("workspace").allowed and budget.check_call().allowed


def test_lane_failures_do_not_charge_the_run_wide_counter() -> None:
    budget = RunProgressBudget()
    fail_times(budget, "run", 3)
    fail_times(budget, "ws", 3, lane="workspace")
    assert budget.check_call().allowed
    snapshot = budget.snapshot()
    assert snapshot["consecutive_failures"] == 3 and snapshot["lane_failures"]["workspace"] == 3


def test_a_lane_success_resets_its_lane_and_the_run_wide_counter() -> None:
    budget = RunProgressBudget()
    fail_times(budget, "run", 3)
    fail_times(budget, "ws", 3, lane="workspace")
    fail_times(budget, "ext", 3, lane="extension")
    succeed(budget, "ws-progress", lane="workspace")
    assert budget.snapshot()["lane_failures"] == {"workspace": 0, "extension": 3}
    assert budget.snapshot()["consecutive_failures"] == 0


def test_the_run_stops_when_every_lane_is_exhausted() -> None:
    budget = RunProgressBudget()
    fail_times(budget, "ext", 4, lane="extension")
    assert budget.check_call().allowed
    fail_times(budget, "ws", 3, lane="workspace")
    decision = fail(budget, "ws-3", lane="workspace")
    assert decision.stop is not None
    assert decision.stop.reason == "lanes_exhausted"
    assert decision.stop.text == "4 consecutive failures in every lane"


def test_lanes_share_the_total_cap_and_the_rounds_cap() -> None:
    budget = RunProgressBudget()
    for i in range(12):
        decision = fail(budget, f"ext-{i}", lane="extension")
    assert decision.stop is not None and decision.stop.reason == "total_failures"
    rounds = RunProgressBudget()
    for i in range(8):
        rounds.on_round()
        rounds.on_result(f"status-{i}", "tool_search", {"q": i}, OK, lane="extension")
    assert rounds.on_round().stop is not None


# --- deferral of a correctable failure (seed 000) ---------------------------------------------------------

@pytest.mark.parametrize("next_result", ["passes", "fails", "other success", "running process"])
def test_at_consecutive_three_a_correctable_failure_waits_exactly_one_result(next_result: str) -> None:
    budget = RunProgressBudget()
    fail_times(budget, "bad", 3)
    decision = inspect(budget, "incomplete", INCOMPLETE)
    assert decision.allowed, "the result carrying the fix does not end the run"
    assert decision.deferral is not None and decision.deferral.action == "waits"
    assert budget.snapshot()["waiting"] == {"counter": "run", "call_id": "incomplete"}
    if next_result == "passes":
        decision = inspect(budget, "corrected", PASSED)
        assert decision.deferral is not None and decision.deferral.action == "forgiven"
        assert_consecutive_reset(budget, "later")
        return
    if next_result == "fails":
        decision = inspect(budget, "corrected", unmeasured("no_match"))
    elif next_result == "other success":
        decision = succeed(budget, "unrelated-read")
    else:
        decision = budget.on_result("poll", "process", {"sessionId": "s"},
                                    {"details": {"status": "running", "sessionId": "s"}})
    assert decision.stop is not None and decision.stop.reason == "consecutive_failures"
    assert decision.deferral is not None and decision.deferral.action == "charged"
    assert decision.deferral.failed_call_id == "incomplete"


def test_with_deferral_off_the_same_failure_stops_at_once() -> None:
    budget = RunProgressBudget(OFF)
    fail_times(budget, "bad", 3)
    decision = inspect(budget, "incomplete", INCOMPLETE)
    assert decision.stop is not None and decision.deferral is None


def test_below_the_fuse_a_correctable_failure_is_charged_at_once_and_spends_nothing() -> None:
    budget = RunProgressBudget()
    for i in range(4):  # C S C S C S C S: correctable failures early, each followed by progress
        assert inspect(budget, f"early-{i}", unmeasured("no_match") if i % 2 else REJECTED).deferral is None
        succeed(budget, f"progress-{i}")
    fail_times(budget, "bad", 3)
    assert inspect(budget, "incomplete", INCOMPLETE).allowed, "the allowance is still there at the fuse"
    assert budget.snapshot()["deferrals"] == 1
    inspect(budget, "corrected", PASSED)
    assert_consecutive_reset(budget, "later")


@pytest.mark.parametrize("start", range(4))
def test_a_streak_of_correctable_failures_gets_exactly_one_more_attempt(start: int) -> None:
    budget = RunProgressBudget()
    fail_times(budget, "bad", start)
    attempts = 0
    while budget.check_call().allowed and attempts < 10:
        inspect(budget, f"rejected-{attempts}", REJECTED)
        attempts += 1
    assert attempts == 4 - start + 1


def test_a_deferred_charge_lands_with_the_next_failure_of_any_tool() -> None:
    budget = RunProgressBudget()
    fail_times(budget, "bad", 3)
    inspect(budget, "rejected", REJECTED)
    decision = inspect(budget, "rejected-again", REJECTED)
    assert decision.stop is not None and budget.snapshot()["consecutive_failures"] == 5
    assert decision.deferral is not None and decision.deferral.action == "charged"


def test_at_most_max_deferrals_charges_wait_in_a_run() -> None:
    budget = RunProgressBudget()
    for i in range(2):
        fail_times(budget, f"bad-{i}", 3)
        assert inspect(budget, f"rejected-{i}", REJECTED).allowed, f"deferral {i + 1}"
        inspect(budget, f"corrected-{i}", PASSED)
    fail_times(budget, "bad-last", 3)
    decision = inspect(budget, "rejected-third", REJECTED)
    assert decision.stop is not None and decision.deferral is None
    single = RunProgressBudget(BudgetPolicy(max_deferrals=1))
    fail_times(single, "bad", 3)
    inspect(single, "rejected-0", REJECTED)
    inspect(single, "corrected", PASSED)
    fail_times(single, "again", 3)
    assert inspect(single, "rejected-1", REJECTED).stop is not None


def test_the_total_cap_is_never_deferred() -> None:
    spread = RunProgressBudget()
    for i in range(12):
        decision = inspect(spread, f"unmeasured-{i}", unmeasured("no_match"))
        assert decision.allowed is (i < 11)
        succeed(spread, f"progress-{i}")
    at_cap = RunProgressBudget()  # failure 12 arrives at consecutive 3 with both allowances unused
    for i in range(4):
        fail_times(at_cap, f"pair-{i}", 2)
        succeed(at_cap, f"progress-{i}")
    fail_times(at_cap, "bad", 3)
    decision = inspect(at_cap, "incomplete", INCOMPLETE)
    assert decision.stop is not None and decision.stop.reason == "total_failures"
    assert decision.deferral is None and at_cap.snapshot()["deferrals"] == 0
    waiting = RunProgressBudget()  # a waiting failure already counts toward the total
    for i in range(3):
        fail_times(waiting, f"pair-{i}", 2)
        succeed(waiting, f"progress-{i}")
    fail_times(waiting, "bad", 3)
    inspect(waiting, "rejected", REJECTED)
    assert waiting.snapshot()["waiting"] is not None and waiting.snapshot()["failures"] == 10


@pytest.mark.parametrize("next_result", ["failure", "other success", "corrected pass"])
def test_discovery_and_free_corrections_neither_charge_nor_forgive(next_result: str) -> None:
    policy = BudgetPolicy(discovery_tools=DEFAULT_POLICY.discovery_tools | {"process"},
                          corrects={**DEFAULT_POLICY.corrects, "process": lambda result: True})
    budget = RunProgressBudget(policy)
    fail_times(budget, "bad", 3)
    inspect(budget, "rejected", REJECTED)
    before = budget.snapshot()
    discover(budget, "search")
    budget.on_result("describe", "tool_describe", {"id": INSPECTION_TOOL}, OK)
    budget.on_result("skill", "pixel_ods_skill", {"name": "web"}, OK)
    budget.on_result("free-correction", "process", {}, OK)  # discovery, even though it would "correct"
    assert {**budget.snapshot(), "results": 0} == {**before, "results": 0}
    if next_result == "failure":
        decision = fail(budget, "bad-after")
    elif next_result == "other success":
        decision = succeed(budget, "read-after")
    else:
        decision = inspect(budget, "corrected", PASSED)
    assert decision.allowed is (next_result == "corrected pass")


def test_model_rounds_keep_counting_while_a_charge_waits() -> None:
    budget = RunProgressBudget()
    fail_times(budget, "bad", 3)
    inspect(budget, "rejected", REJECTED)
    for i in range(8):
        assert budget.on_round().allowed
        discover(budget, f"search-{i}")
    decision = budget.on_round()
    assert decision.stop is not None and decision.stop.reason == "no_progress"


def test_a_lane_charge_is_forgiven_only_by_a_pass_in_the_same_lane() -> None:
    def waiting() -> RunProgressBudget:
        budget = RunProgressBudget()
        fail_times(budget, "ws", 3, lane="workspace")
        decision = inspect(budget, "rejected", REJECTED, lane="workspace")
        assert decision.exhausted_lanes == () and decision.deferral is not None
        assert decision.deferral.counter == "workspace"
        return budget

    forgiven = waiting()
    inspect(forgiven, "corrected", PASSED, lane="workspace")
    fail_times(forgiven, "ws-later", 3, lane="workspace")
    assert forgiven.check_call("workspace").allowed
    fail(forgiven, "ws-last", lane="workspace")
    assert not forgiven.check_call("workspace").allowed

    cases: list[tuple[str, dict[str, Any], Lane | None]] = [
        ("a success in the other lane", OK, "extension"),
        ("an unrelated success in the same lane", OK, "workspace"),
        ("a passing check in the other lane", PASSED, "extension"),
        ("a passing check outside any lane", PASSED, None),
        ("a failure in the other lane", FAILED, "extension"),
    ]
    for label, result, lane in cases:
        budget = waiting()
        tool = INSPECTION_TOOL if result is PASSED else "read"
        budget.on_result("next", tool, {"label": label}, result, lane)
        assert budget.snapshot()["exhausted_lanes"] == ["workspace"], label
        assert budget.check_call("extension").allowed, f"{label}: the other lane remains"


@pytest.mark.parametrize("result", [MISMATCH, unmeasured("click_failed"),
                                    inspection({"status": "failed", "errorCode": "unavailable"})])
def test_measured_failures_are_never_deferred(result: dict[str, Any]) -> None:
    budget = RunProgressBudget()
    fail_times(budget, "bad", 3)
    assert inspect(budget, "measured", result).stop is not None


def test_only_the_classified_tool_gets_the_allowance() -> None:
    budget = RunProgressBudget()
    fail_times(budget, "bad", 3)
    decision = budget.on_result("exec-receipt", "exec", {"command": "true"}, REJECTED)
    assert decision.stop is not None, "an inspection-shaped receipt from another tool is not correctable"
    custom = RunProgressBudget(BudgetPolicy(correctable={"lint": lambda result: True}))
    fail_times(custom, "bad", 3)
    assert custom.on_result("lint-1", "lint", {}, FAILED).allowed
    assert custom.on_result("inspect-1", INSPECTION_TOOL, {}, REJECTED).stop is not None


def test_a_wrapped_inspection_is_deferred_and_a_wrapped_pass_forgives() -> None:
    def wrapped(result: dict[str, Any]) -> dict[str, Any]:
        return {"isError": False, "details": {"tool": {"name": INSPECTION_TOOL}, "result": result}}

    budget = RunProgressBudget()
    fail_times(budget, "bad", 3)
    call = {"id": INSPECTION_TOOL, "args": {"siteId": "s"}}
    assert budget.on_result("wrapped-rejected", "tool_call", call, wrapped(REJECTED)).allowed
    call = {**call, "args": {"siteId": "t"}}
    decision = budget.on_result("wrapped-pass", "tool_call", call, wrapped(PASSED))
    assert decision.deferral is not None and decision.deferral.action == "forgiven"


def test_a_duplicate_receipt_of_a_deferred_failure_is_ignored_and_the_stop_stays() -> None:
    budget = RunProgressBudget()
    fail_times(budget, "bad", 3)
    inspect(budget, "rejected", REJECTED)
    inspect(budget, "rejected", REJECTED)
    fail(budget, "rejected")
    assert budget.check_call().allowed, "one call id is one result"
    fail(budget, "bad-3")
    assert budget.stop is not None
    inspect(budget, "late-progress", PASSED)
    assert budget.stop is not None and not budget.check_call().allowed


def test_snapshot_reports_the_counters() -> None:
    budget = RunProgressBudget()
    budget.on_round()
    fail(budget, "run-1")
    fail(budget, "ext-1", lane="extension")
    fail_times(budget, "run-more", 2)
    inspect(budget, "rejected", REJECTED)
    assert budget.snapshot() == {
        "results": 5, "rounds_without_progress": 1, "failures": 5, "consecutive_failures": 3,
        "lane_failures": {"workspace": 0, "extension": 1}, "exhausted_lanes": [],
        "waiting": {"counter": "run", "call_id": "rejected"}, "deferrals": 1, "stop": None,
    }


# --- replays of recorded fleet sessions -------------------------------------------------------------------

FIXTURES = PIXEL_FLEET


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def session(label: str) -> dict[str, Any]:
    return next(item for item in load("inspection-budget-replay-round106-107.json")["sessions"]
                if item["label"] == label)


def arguments_of(call: dict[str, Any]) -> dict[str, Any]:
    """The recorded arguments; where only their digest was kept, the digest stands in (identical
    digests are identical arguments, which is all identical-success accounting compares)."""
    args = call.get("args", {"argsSha256": call.get("argsSha256")})
    return {"id": call["selected"], "args": args} if call["tool"] == "tool_call" else args


def result_of(call: dict[str, Any]) -> dict[str, Any]:
    """The recorded result; a Tool Search call's inner result goes back into its envelope."""
    if call.get("envelope"):
        return {"isError": call["persistedIsError"], "details": {"tool": {"name": call["selected"]},
                                                                 "result": call["result"]}}
    result: dict[str, Any] = call["result"]
    return result


def replay(budget: RunProgressBudget, calls: list[dict[str, Any]],
           results: dict[int, dict[str, Any]] | None = None) -> list[int]:
    """Feed calls in order (a new model round when the recorded round changes); returns the
    numbers of the calls the budget refused. A call refused in the recording has no result, so
    if the budget lets it run, ``results`` must supply one."""
    refused, current_round = [], None
    for call in calls:
        if call["round"] != current_round:
            current_round = call["round"]
            budget.on_round()
        if not budget.check_call().allowed:
            refused.append(call["n"])
            continue
        if call.get("stopped"):
            assert results is not None and call["n"] in results, f"call {call['n']} never ran: no result"
            result = results[call["n"]]
        else:
            result = result_of(call)
        budget.on_result(call["id"], call["tool"], arguments_of(call), result)
    return refused


def stopped_calls(calls: list[dict[str, Any]]) -> list[int]:
    return [call["n"] for call in calls if call.get("stopped")]


@pytest.mark.parametrize("policy", [OFF, DEFAULT_POLICY], ids=["deferral off", "deferral on"])
def test_photo_renamer_bfb62a2b_stops_at_the_sixth_call(policy: BudgetPolicy) -> None:
    """Calls 1 and 3-6 were refused exec runs; call 6 was the fourth consecutive failure, and the
    stop refused call 7 (the write the refusals asked for) and call 8. exec is never correctable."""
    fixture = load("photo-renamer-bfb62a2b.json")
    calls = [{"n": n, "round": n, "id": call["id"], "tool": call["tool"], "args": call["args"],
              "stopped": n > 6, "result": {"isError": call["recorded"]["isError"],
                                           "details": {"status": call["recorded"]["state"]}}}
             for n, call in enumerate(fixture["calls"], start=1)]
    budget = RunProgressBudget(policy)
    assert replay(budget, calls) == [7, 8]
    assert budget.stop is not None
    assert (budget.stop.reason, budget.stop.text, budget.stop.call_index, budget.stop.call_id) == (
        "consecutive_failures", "4 consecutive failures", 6, fixture["calls"][5]["id"])
    assert budget.snapshot()["failures"] == 5


@pytest.mark.parametrize(("label", "stop_at", "reason", "failures"), [
    ("strixy-r107", 11, "consecutive_failures", 4),
    ("mac-mini-r106", 12, "consecutive_failures", 6),
    ("windows-laptop-wsl-beta-r107", 40, "total_failures", 12),
])
def test_without_deferral_the_recorded_stops_are_reproduced(label: str, stop_at: int, reason: str,
                                                            failures: int) -> None:
    calls = session(label)["calls"]
    budget = RunProgressBudget(OFF)
    assert replay(budget, calls) == stopped_calls(calls)
    assert budget.stop is not None
    assert (budget.stop.call_index, budget.stop.reason) == (stop_at, reason)
    assert budget.snapshot()["failures"] == failures


def test_laptop_never_had_more_than_two_failures_in_a_row() -> None:
    calls = session("windows-laptop-wsl-beta-r107")["calls"]
    budget, worst = RunProgressBudget(OFF), 0
    for call in calls[:40]:
        budget.on_result(call["id"], call["tool"], arguments_of(call), result_of(call))
        worst = max(worst, budget.snapshot()["consecutive_failures"])
    assert worst == 2 and calls[39]["entry"] == 86


@pytest.mark.parametrize(("label", "correctable"), [
    ("strixy-r107", [8, 11]),
    ("mac-mini-r106", [9, 10, 11, 12]),
    ("windows-laptop-wsl-beta-r107", [4, 5, 9, 10, 13, 14, 24, 40]),
])
def test_the_recorded_correctable_failures(label: str, correctable: list[int]) -> None:
    calls = [call for call in session(label)["calls"] if not call.get("stopped")]
    test = DEFAULT_POLICY.correctable[INSPECTION_TOOL]
    found = [call["n"] for call in calls
             if call.get("selected", call["tool"]) == INSPECTION_TOOL and test(call["result"])]
    assert found == correctable


def strixy_call_12() -> dict[int, dict[str, Any]]:
    """Never executed on main. Seed 000: its steps still carry flat step-level ``selector`` keys,
    like #8 and #11, so it gets the same invalid_request as #11."""
    calls = {call["n"]: call for call in session("strixy-r107")["calls"]}

    def flat(n: int) -> list[dict[str, Any]]:
        return [step for step in calls[n]["args"]["steps"] if "selector" in step]

    assert flat(12) and flat(12) == flat(11)
    return {12: result_of({**calls[11], "persistedIsError": False})}


def mac_call_13() -> dict[int, dict[str, Any]]:
    """Never executed on main. Seed 000: its four steps are the first four steps of #12, which
    passed on the same snapshot; with the owner's show/hide change untested it is INCOMPLETE."""
    calls = {call["n"]: call for call in session("mac-mini-r106")["calls"]}
    steps = calls[13]["args"]["steps"]
    assert steps == calls[12]["args"]["steps"][:4]
    assert calls[13]["args"]["siteId"] == calls[12]["args"]["siteId"]
    assert [step["status"] for step in calls[12]["result"]["details"]["steps"][:4]] == ["passed"] * 4
    return {13: {"isError": True, "details": {"schemaVersion": 1, "kind": INSPECTION_KIND,
                                              "status": "incomplete", "errorCode": TRANSITION_UNTESTED}}}


def test_strixy_with_deferral_stops_one_call_later_at_12() -> None:
    calls = session("strixy-r107")["calls"]
    before = RunProgressBudget()
    assert replay(before, calls[:11]) == [] and before.stop is None
    assert before.snapshot()["waiting"] == {"counter": "run", "call_id": calls[10]["id"]}
    budget = RunProgressBudget()
    assert replay(budget, calls, strixy_call_12()) == [13]
    assert budget.stop is not None
    assert (budget.stop.call_index, budget.stop.reason) == (12, "consecutive_failures")


def test_mac_with_deferral_charges_9_to_11_at_once_and_stops_at_13() -> None:
    calls = session("mac-mini-r106")["calls"]
    budget, notes = RunProgressBudget(), {}
    for call in calls[:12]:
        decision = budget.on_result(call["id"], call["tool"], arguments_of(call), result_of(call))
        notes[call["n"]] = decision.deferral
    assert [notes[n] for n in (9, 10, 11)] == [None, None, None]
    assert notes[12] is not None and notes[12].action == "waits" and budget.stop is None
    budget = RunProgressBudget()
    assert replay(budget, calls, mac_call_13()) == [14]
    assert budget.stop is not None
    assert (budget.stop.call_index, budget.stop.reason) == (13, "consecutive_failures")


def test_laptop_with_deferral_still_stops_at_40_on_the_total_cap() -> None:
    calls = session("windows-laptop-wsl-beta-r107")["calls"]
    budget = RunProgressBudget()
    assert replay(budget, calls) == stopped_calls(calls) == [41, 42]
    assert budget.stop is not None
    assert (budget.stop.call_index, budget.stop.reason) == (40, "total_failures")
    assert budget.snapshot()["deferrals"] == 0, "no correctable failure reached the fuse"


def test_strixy_counterfactual_an_unrelated_read_after_11_stops_the_run() -> None:
    budget = RunProgressBudget()
    replay(budget, session("strixy-r107")["calls"][:11])
    decision = budget.on_result("unrelated-read", "read", {"path": "styles.css"}, OK)
    assert decision.stop is not None and decision.stop.call_index == 12


@pytest.mark.parametrize("last", [8, 11])
def test_strixy_counterfactual_a_passing_corrected_call_resets_the_count(last: int) -> None:
    calls = session("strixy-r107")["calls"]
    budget = RunProgressBudget()
    replay(budget, calls[:last])
    steps = [{"action": "assert-hidden", "locator": {"selector": "#midnight-card"}}]
    args = {**calls[7]["args"], "steps": steps}
    passed = {"isError": False, "details": {"tool": {"name": INSPECTION_TOOL}, "result": PASSED}}
    assert budget.on_result("corrected", "tool_call", {"id": INSPECTION_TOOL, "args": args}, passed).allowed
    assert budget.snapshot()["consecutive_failures"] == 0
    assert_consecutive_reset(budget, "failed-read")


def test_arguments_with_a_lone_surrogate_are_fingerprinted_not_a_crash() -> None:
    """JSON may hold "\\ud800" (a recorded session did): identical such calls are identical, others distinct."""
    budget = RunProgressBudget()
    for _ in range(3):
        budget.on_round()
        budget.on_result(f"s-{_}", "exec", {"command": "echo \ud800"}, OK)
    budget.on_round()
    budget.on_result("t", "exec", {"command": "echo \ud801"}, OK)
    assert budget.snapshot()["rounds_without_progress"] == 0
    again = RunProgressBudget()
    for n in range(3):
        again.on_round()
        again.on_result(f"s-{n}", "exec", {"command": "echo \ud800"}, OK)
    assert again.snapshot()["rounds_without_progress"] == 1  # the third identical success is no progress
