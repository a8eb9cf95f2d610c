"""``fleet replay`` over the recorded pixel-fleet sessions: the seeds' replays, counterfactuals, two policies, the
JSON lines scripts read, and bad input.

Expected stops are the seeds' words (seed 000's table, seed 003's tower2 receipt), and where a test derives one
it reads the fixture, never the replay's own output."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import PolicyError, ReplayError
from harness.guard.budget import INSPECTION_TOOL
from harness.guard.policy import BudgetLimits, GuardPolicy, GuardSwitches, load_policy_file
from harness.guard.results import INSPECTION_KIND, TRANSITION_UNTESTED
from harness.replay.differ import differences
from harness.replay.edits import apply_edits, parse_edit
from harness.replay.engine import SessionGuard, replay_session
from harness.replay.outcome import ReplayOutcome
from harness.replay.session import ReplayRound, ReplaySession
from harness.replay.sources import read_source, sniff
from tests.fixtures import PIXEL_FLEET
from tests.support import REPO

FLEET = REPO / ".venv" / "bin" / "fleet"
ROUNDS = PIXEL_FLEET / "inspection-budget-replay-round106-107.json"
TOWER2 = PIXEL_FLEET / "photo-renamer-tower2-d4a61f33.json"
TAIL = PIXEL_FLEET / "unittest-verdict-strixy-tail-d4a61f33.json"
NO_DEFERRAL = GuardPolicy(name="no-deferral", budget=BudgetLimits(deferral=False))
DEFAULT = GuardPolicy()
SEED_RECEIPT = (
    "Pixel stopped using tools because a command included a recursive deletion that you did not ask for. "
    "That command was refused and did not run.\n"
    "Results recorded by Pixel's tools before that:\n"
    "- File written: `/workspace/Playground/photo-renamer/rename_photos.py`.\n"
    "- File written: `/workspace/Playground/photo-renamer/test_rename.py`.\n"
    "- The latest recognized test command, `python3 test_rename.py` in `/workspace/Playground/photo-renamer`, "
    "passed, and no tool call that could change the workspace ran after it.\n"
    "This does not establish complete test coverage or completion of every requested step."
)


def sessions(path: Path) -> dict[str, ReplaySession]:
    return {s.name: s for item in read_source(str(path), Path("runs")) for s in item.sessions}


def replay(session: ReplaySession, policy: GuardPolicy = DEFAULT) -> ReplayOutcome:
    return replay_session(session, SessionGuard(policy, session), policy.name)


def recorded(label: str) -> dict[str, Any]:
    data = json.loads(ROUNDS.read_text(encoding="utf-8"))
    return next(s for s in data["sessions"] if s["label"] == label)


def call(label: str, n: int) -> dict[str, Any]:
    return next(c for c in recorded(label)["calls"] if c["n"] == n)


def strixy_12_result() -> dict[str, Any]:
    """Seed 000: strixy's #12, never executed, still has flat step-level selector keys, like #11, so it gets the
    same invalid_request as #11 (checked here against the recorded arguments)."""
    def flat(n: int) -> list[dict[str, Any]]:
        return [step for step in call("strixy-r107", n)["args"]["steps"] if "selector" in step]

    assert flat(12) and flat(12) == flat(11)
    c11 = call("strixy-r107", 11)
    return {"isError": False, "details": {"tool": {"name": c11["selected"]}, "result": c11["result"]}}


def mac_13_result() -> dict[str, Any]:
    """Seed 000: mac-mini's #13 repeats the first four steps of #12, which passed: INCOMPLETE transition_untested."""
    c12, c13 = call("mac-mini-r106", 12), call("mac-mini-r106", 13)
    assert c13["args"]["steps"] == c12["args"]["steps"][:4]
    assert [step["status"] for step in c12["result"]["details"]["steps"][:4]] == ["passed"] * 4
    return {"isError": True, "details": {"schemaVersion": 1, "kind": INSPECTION_KIND, "status": "incomplete",
                                         "errorCode": TRANSITION_UNTESTED}}


def stopped_in_recording(label: str) -> list[int]:
    return [c["n"] for c in recorded(label)["calls"] if c.get("stopped")]


# --- seed 000's table ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("label", "stop_at", "detail"), [
    ("strixy-r107", 11, "consecutive_failures"),
    ("mac-mini-r106", 12, "consecutive_failures"),
    ("windows-laptop-wsl-beta-r107", 40, "total_failures"),
])
def test_without_deferral_the_recorded_stops_are_reproduced(label: str, stop_at: int, detail: str) -> None:
    outcome = replay(sessions(ROUNDS)[label], NO_DEFERRAL)
    assert (outcome.stopped, outcome.stop_reason, outcome.stop_detail, outcome.stop_call) == (
        True, "run_progress", detail, stop_at)
    refused_by_budget = [r.call for r in outcome.refusals if r.rule == "budget"]
    assert refused_by_budget == stopped_in_recording(label)
    assert outcome.receipt_status == "failed" and outcome.receipt_source == "budget_stop"


def test_with_deferral_strixy_and_mac_go_past_the_recording_and_say_so() -> None:
    found = {label: replay(s) for label, s in sessions(ROUNDS).items()}
    assert found["strixy-r107"].unrecorded_call == 12 and not found["strixy-r107"].stopped
    assert found["mac-mini-r106"].unrecorded_call == 13
    assert found["strixy-r107"].receipt_status is None and found["strixy-r107"].delivered_sha256 is None


def test_with_deferral_and_the_seeds_results_strixy_stops_at_12_mac_at_13_the_laptop_still_at_40() -> None:
    edits = [parse_edit(f"strixy-r107:12={json.dumps(strixy_12_result())}"),
             parse_edit(f"mac-mini-r106:13={json.dumps(mac_13_result())}")]
    edited = {s.name: s for s in apply_edits(list(sessions(ROUNDS).values()), edits)}
    table = {label: (o.stop_call, o.stop_detail, o.deferrals)
             for label, o in ((label, replay(s)) for label, s in edited.items())}
    assert table == {"strixy-r107": (12, "consecutive_failures", 1), "mac-mini-r106": (13, "consecutive_failures", 1),
                     "windows-laptop-wsl-beta-r107": (40, "total_failures", 0)}
    # The refusals after each stop are the calls the model sent next in the recording.
    assert replay(edited["strixy-r107"]).refused_calls == [13]


def test_two_policies_differ_on_strixy_and_mac_and_the_laptop_is_byte_identical() -> None:
    edits = [parse_edit(f"strixy-r107:12={json.dumps(strixy_12_result())}"),
             parse_edit(f"mac-mini-r106:13={json.dumps(mac_13_result())}")]
    edited = apply_edits(list(sessions(ROUNDS).values()), edits)
    diffs, same = differences([replay(s, NO_DEFERRAL) for s in edited], [replay(s) for s in edited])
    assert same == 1 and [d.session for d in diffs] == ["strixy-r107", "mac-mini-r106"]
    assert all(d.changes == ["stopped elsewhere", "refusals changed"] for d in diffs)


# --- seed 000's counterfactuals ------------------------------------------------------------------------------

def _passing_inspection() -> str:
    args = {**call("strixy-r107", 8)["args"],
            "steps": [{"action": "assert-hidden", "locator": {"selector": "#midnight-card"}}]}
    passed = {"isError": False, "details": {"tool": {"name": INSPECTION_TOOL},
                                            "result": {"details": {"kind": INSPECTION_KIND, "status": "passed"}}}}
    return json.dumps({"tool": "tool_call", "arguments": {"id": INSPECTION_TOOL, "args": args}, "result": passed})


@pytest.mark.parametrize("after", [8, 11])
def test_a_passing_inspection_after_8_or_11_keeps_the_run(after: int) -> None:
    strixy = sessions(ROUNDS)["strixy-r107"]
    edited = apply_edits([strixy], [parse_edit(f"strixy-r107:{after}+={_passing_inspection()}")])[0]
    outcome = replay(edited)
    # The run is not stopped: it goes on to the recording's #12 (now 13), which its own stop never ran.
    assert not outcome.stopped and outcome.unrecorded_call == 13 and outcome.calls == 14
    # Without deferral, a pass after #11 comes too late: #11 is the fourth consecutive failure.
    late = replay(edited, NO_DEFERRAL)
    assert (late.stop_call, late.unrecorded_call) == ((11, None) if after == 11 else (None, 13))


def test_an_unrelated_successful_read_after_11_stops_the_run_at_it() -> None:
    edited = apply_edits([sessions(ROUNDS)["strixy-r107"]], [parse_edit("strixy-r107:11+=read:ok")])[0]
    outcome = replay(edited)
    assert (outcome.stop_call, outcome.stop_detail) == (12, "consecutive_failures")
    assert outcome.edits == ["strixy-r107:11+=read:ok"]


def test_dropping_a_failure_moves_the_stop() -> None:
    # Without call 11 (the 4th consecutive failure) the no-deferral budget is not tripped by the recorded calls.
    edited = apply_edits([sessions(ROUNDS)["strixy-r107"]], [parse_edit("strixy-r107:11=drop")])[0]
    outcome = replay(edited, NO_DEFERRAL)
    assert outcome.calls == 12 and not outcome.stopped and outcome.unrecorded_call == 11


# --- seed 003: tower2, the tail, tower3 ---------------------------------------------------------------------

def test_tower2_stops_at_the_refused_delete_and_delivers_the_seeds_receipt_with_status_passed() -> None:
    (session,) = sessions(TOWER2).values()
    outcome = replay(session)
    assert (outcome.stop_reason, outcome.stop_call) == ("recursive_delete", 10)
    assert outcome.receipt_status == "passed" and outcome.delivered == SEED_RECEIPT
    # Call 1 stays refused by the recording agent's own path correction; 11 hits the latch.
    assert [(r.call, r.rule, r.reason) for r in outcome.refusals] == [
        (1, "workspace_route", "recorded"), (10, "recursive_delete", "recursive_delete"),
        (11, "recursive_delete", "latch")]
    assert outcome.delivered_sha256 == hashlib.sha256(SEED_RECEIPT.encode()).hexdigest()


def test_tower2_without_the_delete_call_runs_into_what_was_never_recorded() -> None:
    (session,) = sessions(TOWER2).values()
    outcome = replay(apply_edits([session], [parse_edit(f"{session.name}:10=drop")])[0])
    assert outcome.unrecorded_call == 10  # call 11 (now 10) was refused by the recording's latch: no result


def test_the_strixy_tail_stops_at_the_coding_loop_only_when_the_rule_is_on() -> None:
    (session,) = sessions(TAIL).values()
    data = json.loads(TAIL.read_text(encoding="utf-8"))
    first_refused = next(i for i, c in enumerate(data["calls"], start=1) if "blocked" in c)
    assert replay(session).unrecorded_call == first_refused
    on = GuardPolicy(name="coding-loop", guards=GuardSwitches(coding_loop=True))
    outcome = replay(session, on)
    assert (outcome.stop_reason, outcome.stop_call) == ("coding_loop", first_refused)
    assert outcome.refused_calls == list(range(first_refused, len(data["calls"]) + 1))
    assert outcome.receipt_source == "coding_loop_stop" and "6 failed test runs" in (outcome.delivered or "")
    looser = GuardPolicy(name="loose", guards=GuardSwitches(coding_loop=True), coding_loop={"failed_test_runs": 7})
    assert replay(session, looser).unrecorded_call == first_refused


def test_tower3_runs_to_the_end_and_delivers_the_models_answer() -> None:
    (session,) = sessions(PIXEL_FLEET / "photo-renamer-tower3-d4a61f33.json").values()
    outcome = replay(session)
    data = json.loads((PIXEL_FLEET / "photo-renamer-tower3-d4a61f33.json").read_text(encoding="utf-8"))
    assert not outcome.stopped and outcome.unrecorded_call is None and outcome.refused_calls == []
    assert outcome.receipt_status == "passed" and outcome.delivered == data["finalAssistant"]["text"]


# --- policies ------------------------------------------------------------------------------------------------

def test_a_policy_file_reads_every_key_and_keeps_the_rest(tmp_path: Path) -> None:
    policy = load_policy_file(REPO / "docs" / "examples" / "no-deferral.toml")
    assert policy.name == "no-deferral" and policy.budget.deferral is False and policy.budget.total_failures == 12
    path = tmp_path / "tight.toml"
    path.write_text('[budget]\nconsecutive_failures = 2\ncorrectable_kinds = ["invalid_request"]\n')
    tight = load_policy_file(path)
    assert tight.name == "tight" and tight.budget_policy().consecutive_failures == 2


@pytest.mark.parametrize(("text", "problem"), [
    ("[budget]\nconsecutive_failures = 0\n", "budget.consecutive_failures: Input should be greater than or equal to 1"),
    ("[budget]\nconsecutive = 3\n", "budget.consecutive: unknown key"),
    ("[guards]\nbudget = 'yes'\n", "guards.budget: Input should be a valid boolean"),
    ("[budget]\ncorrectable_kinds = ['everything']\n", "budget.correctable_kinds[0]"),
    ("name = \n", "not valid TOML"),
])
def test_a_bad_policy_file_is_one_line_naming_the_key(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy_file(path)
    assert problem in str(caught.value) and "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_narrowing_correctable_kinds_changes_which_failures_wait() -> None:
    strixy = sessions(ROUNDS)["strixy-r107"]
    # strixy's #11 is an invalid_request: with only locator failures correctable it is charged at once.
    only_locators = GuardPolicy(name="locators", budget=BudgetLimits(correctable_kinds=("unmeasured_locator",)))
    assert replay(strixy, only_locators).stop_call == 11
    assert replay(strixy).unrecorded_call == 12


# --- sources -------------------------------------------------------------------------------------------------

def test_every_pixel_fleet_recording_is_read_and_replayed_under_both_policies() -> None:
    for path in sorted(PIXEL_FLEET.glob("*.json")):
        assert sniff(path) == "pixel-fleet"
        for session in sessions(path).values():
            for policy in (DEFAULT, NO_DEFERRAL):
                outcome = replay(session, policy)
                assert outcome.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
                assert outcome.calls == len(session.calls) > 0


def test_a_folder_is_every_session_in_it_and_a_changed_transcript_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(ROUNDS, folder / "rounds.json")
    shutil.copy(TOWER2, folder / "tower2.json")
    (folder / "notes.txt").write_text("not a session")
    (folder / "other.json").write_text('{"hello": 1}')
    imported = tmp_path / "imported"
    subprocess.run([str(FLEET), "import", "pixel-fleet", str(TOWER2), "--out", str(imported)], check=True,
                   capture_output=True)
    shutil.copytree(imported, folder / "imported")
    inputs = read_source(str(folder), Path("runs"))
    names = [s.name for item in inputs for s in item.sessions]
    assert len(names) == 5 and "rounds.json#strixy-r107" in names
    attempt = next(item for item in inputs if item.path.endswith("transcript.jsonl"))
    assert attempt.recorded_sha256 == attempt.sha256  # the import's meta.json recorded it
    transcript = Path(attempt.path)
    transcript.write_text(transcript.read_text(encoding="utf-8").replace('"Playground', '"playground', 1))
    out = subprocess.run([str(FLEET), "replay", str(folder)], capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("fleet: error: ") and "the file changed after it was recorded" in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


# --- the command ---------------------------------------------------------------------------------------------

def fleet(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLEET), "replay", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_the_command_prints_each_inputs_sha256_the_sessions_and_the_differences(tmp_path: Path) -> None:
    edit12 = tmp_path / "strixy-12.json"
    edit12.write_text(json.dumps(strixy_12_result()))
    out = fleet(str(ROUNDS), "--policy", "docs/examples/no-deferral.toml", "--policy", "default",
                "--edit", f"strixy-r107:12=@{edit12}", "--edit", f"mac-mini-r106:13={json.dumps(mac_13_result())}")
    assert out.returncode == 0, out.stderr
    digest = hashlib.sha256(ROUNDS.read_bytes()).hexdigest()
    assert out.stdout.splitlines()[0] == f"input {digest}  pixel-fleet, 3 sessions  {ROUNDS}"
    assert "no-deferral -> default: 2 of 3 sessions differ, 1 byte-identical" in out.stdout
    assert "stop 11 consecutive_failures -> 12 consecutive_failures" in out.stdout
    assert "stop 12 consecutive_failures -> 13 consecutive_failures" in out.stdout


def test_json_is_one_object_per_session_and_policy_with_the_documented_keys() -> None:
    out = fleet(str(ROUNDS), str(TOWER2), "--policy", "default", "--policy", "docs/examples/no-deferral.toml",
                "--json", "--jobs", "2")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 8
    required = {"source", "session", "sha256", "policy", "stopped", "stop_reason", "stop_call", "refused_calls",
                "receipt_status", "delivered_sha256"}
    assert all(required <= set(line) for line in lines)
    tower2 = [line for line in lines if line["source"] == str(TOWER2)]
    assert [line["policy"] for line in tower2] == ["default", "no-deferral"]
    assert tower2[0]["stop_call"] == 10 and tower2[0]["refused_calls"] == [1, 10, 11]
    assert tower2[0]["delivered_sha256"] == hashlib.sha256(SEED_RECEIPT.encode()).hexdigest()
    assert all(ReplayOutcome.model_validate(line) for line in lines)


@pytest.mark.parametrize(("args", "problem"), [
    (["nope.json"], "nope.json: no such file or folder, and no sweep of that id under"),
    ([str(ROUNDS), "--policy", "missing.toml"], "missing.toml: file not found"),
    ([str(ROUNDS), "--policy", "sometimes"], "sometimes: a policy is default, a .toml policy file, git:REF or cmd:"),
    ([str(ROUNDS), "--edit", "strixy-r107"], "--edit: strixy-r107: expected SESSION:CALL=RESULT"),
    ([str(ROUNDS), "--edit", "nobody:3=ok"], "no session named 'nobody'"),
    ([str(ROUNDS), "--edit", "strixy-r107:99=ok"], "session strixy-r107 has 13 calls"),
    ([str(ROUNDS), "--edit", "strixy-r107:3={not json"], "not valid JSON"),
    ([str(ROUNDS), "--edit", "strixy-r107:3=@/nonexistent/r.json"], "cannot read"),
    ([str(ROUNDS), "--edit", 'strixy-r107:3={"isError": "yes"}'], "a result is"),
    ([str(ROUNDS), "--policy", "default", "--policy", "default"], "is given twice"),
    ([str(ROUNDS), "--format", "word"], "unknown --format 'word'"),
    ([str(REPO / "README.md")], "not a session in a format replay reads"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], problem: str) -> None:
    out = fleet(*args)
    assert out.returncode == 2, out
    assert out.stdout == "" and out.stderr.count("\n") == 1 and problem in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_damaged_recording_is_the_importers_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "cut.json"
    bad.write_bytes(ROUNDS.read_bytes()[:5000])
    out = fleet(str(bad), "--format", "pixel-fleet")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and str(bad) in out.stderr


def test_the_sweep_source_needs_a_real_sweep_id_not_a_path_lookalike(tmp_path: Path) -> None:
    out = fleet("../etc", "--runs", str(tmp_path))
    assert out.returncode == 2 and "no such file or folder" in out.stderr



# --- both transports: direct calls and Tool Search envelopes ----------------------------------------------------

def _other_transport(session: ReplaySession) -> ReplaySession:
    """Every direct call wrapped in a Tool Search envelope (its failure inside, the envelope's isError false, as
    OpenClaw persists it), and every wrapped call unwrapped to the tool it selects."""
    rounds = []
    for rnd in session.rounds:
        calls = []
        for c in rnd.calls:
            args, view = dict(c.arguments or {}), dict(c.result.view) if c.result is not None else None
            if c.name == "tool_call":
                inner = (view or {}).get("details", {}).get("result") if view else None
                new = replace(c, name=str(args["id"]), arguments=args.get("args", {}))
                if c.result is not None and isinstance(inner, dict):
                    new = replace(new, result=replace(c.result, view=inner))
            else:
                new = replace(c, name="tool_call", arguments={"id": c.name, "args": args})
                if c.result is not None and view is not None:
                    envelope = {"isError": False, "details": {"tool": {"name": c.name}, "result": view}}
                    new = replace(new, result=replace(c.result, view=envelope))
            calls.append(new)
        rounds.append(replace(rnd, calls=tuple(calls)))
    return replace(session, rounds=tuple(rounds))


@pytest.mark.parametrize("policy", [NO_DEFERRAL, DEFAULT], ids=["no-deferral", "default"])
@pytest.mark.parametrize("label", ["strixy-r107", "mac-mini-r106", "windows-laptop-wsl-beta-r107"])
def test_the_same_stops_whichever_transport_carried_the_calls(label: str, policy: GuardPolicy) -> None:
    """strixy and the laptop called through Tool Search, mac-mini directly (seed 000): the replay's accounting is
    the same both ways, including a failure the envelope hides (persisted isError false)."""
    edits = [parse_edit(f"strixy-r107:12={json.dumps(strixy_12_result())}"),
             parse_edit(f"mac-mini-r106:13={json.dumps(mac_13_result())}")]
    session = {s.name: s for s in apply_edits(list(sessions(ROUNDS).values()), edits)}[label]
    other = _other_transport(session)
    assert [c.name for c in other.calls] != [c.name for c in session.calls]
    a, b = replay(session, policy), replay(other, policy)
    assert (a.stop_call, a.stop_detail, a.refused_calls, a.deferrals) == (
        b.stop_call, b.stop_detail, b.refused_calls, b.deferrals)


# --- sibling calls of one reply, in either order (seed 003) ---------------------------------------------------

def _tower2_with_siblings(order: list[str]) -> ReplaySession:
    """tower2 with its passing test (#9) and a write made siblings in one reply, in ``order``, before the refused
    delete: the pass shared its window with a call that could change the workspace."""
    (session,) = sessions(TOWER2).values()
    calls = session.calls
    test = calls[8]
    write = next(c for c in calls if c.name == "write" and c.result is not None and c.result.ran)
    extra = replace(write, call_id="sibling-write")
    pair = {"test": test, "write": extra}
    rounds = [replace(r, number=i + 1) for i, r in enumerate(session.rounds) if r.calls and r.calls[0] is not test]
    at = next(i for i, r in enumerate(rounds) if r.calls[0] is calls[9])
    rounds.insert(at, ReplayRound(number=100, calls=tuple(pair[name] for name in order)))
    return replace(session, rounds=tuple(rounds))


@pytest.mark.parametrize("order", [["write", "test"], ["test", "write"]])
def test_a_pass_that_shared_its_reply_with_a_write_is_overlapped_in_either_order(order: list[str]) -> None:
    outcome = replay(_tower2_with_siblings(order))
    assert outcome.stop_reason == "recursive_delete" and outcome.receipt_status == "failed"
    assert "another tool call or command ran at the same time" in (outcome.delivered or "")


def test_the_same_write_in_its_own_reply_before_the_test_keeps_the_pass_current() -> None:
    session = _tower2_with_siblings(["write", "test"])
    rounds = list(session.rounds)
    at = next(i for i, r in enumerate(rounds) if r.number == 100)
    write, test = rounds[at].calls
    rounds[at:at + 1] = [ReplayRound(number=100, calls=(write,)), ReplayRound(number=101, calls=(test,))]
    outcome = replay(replace(session, rounds=tuple(rounds)))
    assert outcome.receipt_status == "passed" and outcome.delivered is not None
    assert "no tool call that could change the workspace ran after it" in outcome.delivered
