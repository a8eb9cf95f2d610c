"""External replay guards (docs/replay-protocol.md): the JavaScript example over the real pixel-fleet recordings,
the shipped guard behind the protocol (``cmd:`` and ``git:``) deciding exactly as in-process, every way a guard
can fail as one line through the real ``fleet replay``, and ``--jobs 2`` deciding as ``--jobs 1``."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.guard.policy import DEFAULT_GUARD, GuardPolicy, load_policy_file
from harness.guard.verdict import recognize
from harness.replay.engine import SessionGuard, replay_session
from harness.replay.external import ExternalGuard, GuardProcess, encode_line
from harness.replay.guard_server import serve
from harness.replay.outcome import ReplayOutcome
from harness.replay.policies import SERVER_MODULE
from harness.replay.session import RecordedResult, ReplayCall, ReplayRound, ReplaySession
from harness.replay.sources import read_source
from tests.support import REPO, assert_one_line_error, run_fleet

FIXTURES = REPO / "tests" / "fixtures" / "pixel-fleet"
JS_GUARD = REPO / "docs" / "examples" / "guard-budget.mjs"
SERVER_ARGV = [sys.executable, "-m", SERVER_MODULE]
SERVER = f"cmd:{sys.executable} -m {SERVER_MODULE}"


def node() -> str:
    """Node.js: this machine's, else the one ``.ci/agents`` installs (CI exports FLEET_AGENTS_CACHE)."""
    for candidate in ("/usr/bin/node", shutil.which("node")):
        if candidate and Path(candidate).is_file():
            return candidate
    cache = os.environ.get("FLEET_AGENTS_CACHE")
    if cache and (Path(cache) / "npm" / "node_modules" / ".bin" / "node").exists():
        return str(Path(cache) / "npm" / "node_modules" / ".bin" / "node")
    pytest.fail("the JavaScript guard's tests need node: none at /usr/bin/node, on PATH, or in $FLEET_AGENTS_CACHE "
                "(bash .ci/agents installs Node 24 there)")


def js_policy(*args: str) -> str:
    return f"cmd:{node()} {JS_GUARD}" + "".join(f" {a}" for a in args)


def replay_json(*args: str, cwd: Path, **env: str) -> list[ReplayOutcome]:
    proc = run_fleet("replay", *args, "--json", cwd=cwd, **env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return [ReplayOutcome.model_validate_json(line) for line in proc.stdout.splitlines()]


def decided(o: ReplayOutcome) -> dict[str, Any]:
    """Every field of an outcome but the policy's name."""
    return o.model_dump(exclude={"policy"})


def by_policy(outcomes: list[ReplayOutcome]) -> dict[str, list[ReplayOutcome]]:
    out: dict[str, list[ReplayOutcome]] = {}
    for o in outcomes:
        out.setdefault(o.policy, []).append(o)
    return out


# -- the JavaScript guard, against stops worked out by hand from the recordings ---------------------------------

def _raw_results(fixture: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(tool, arguments, result) of each recorded call, read straight from the recording's JSON (these files hold
    one session each: ``calls`` in order; older ones say ``args``/``recorded``, newer ``arguments``/``result``)."""
    data = json.loads((FIXTURES / fixture).read_text(encoding="utf-8"))
    return [(c["tool"], c.get("arguments") or c.get("args") or {}, c.get("result") or c.get("recorded") or {})
            for c in data["calls"]]


def _failed(result: dict[str, Any]) -> bool:
    details = result.get("details") or {}
    status = details.get("status", result.get("state"))  # the older recordings keep the status as `state`
    exit_code = details.get("exitCode")
    return (result.get("isError") is True or status in ("failed", "error", "blocked")
            or (isinstance(exit_code, int) and exit_code != 0))


def _blocked(result: dict[str, Any]) -> bool:
    """The recording's own agent refused the call: it never ran (the replay keeps it refused)."""
    return (result.get("details") or {}).get("status", result.get("state")) == "blocked"


def expected_js(fixture: str, limit: int) -> tuple[int | None, str | None, list[int]]:
    """What guard-budget.mjs must decide, worked out from the recording: (stop_call, stop_reason, refused)."""
    calls = _raw_results(fixture)
    consecutive = 0
    refused: list[int] = []
    for n, (tool, arguments, result) in enumerate(calls, start=1):
        command = arguments.get("command")
        if tool == "exec" and isinstance(command, str) and re.search(r"\brm\s+-[a-zA-Z]*[rR]", command):
            return n, "recursive_delete", [*refused, *range(n, len(calls) + 1)]  # this call and all after it
        if _blocked(result):
            refused.append(n)
        consecutive = consecutive + 1 if _failed(result) else 0
        if consecutive == limit:
            return n, "run_progress", [*refused, *range(n + 1, len(calls) + 1)]
    return None, None, refused


@pytest.mark.parametrize(("fixture", "limit"), [
    ("photo-renamer-bfb62a2b.json", 4),          # blocked execs before the first write: a budget stop
    ("photo-renamer-bfb62a2b.json", 3),          # the limit from GUARD_BUDGET_FAILURES stops it a call sooner
    ("photo-renamer-tower2-d4a61f33.json", 4),   # the unrequested rm -rf of call 10
    ("photo-renamer-tower3-d4a61f33.json", 4),   # one failed test run, then passes: runs to the end
])
def test_the_javascript_guard_stops_where_the_recording_says_it_must(tmp_path: Path, fixture: str,
                                                                       limit: int) -> None:
    stop_call, family, refused = expected_js(fixture, limit)
    env = {} if limit == 4 else {"GUARD_BUDGET_FAILURES": str(limit)}
    [o] = replay_json(str(FIXTURES / fixture), "--policy", js_policy(), cwd=tmp_path, **env)
    assert o.unrecorded_call is None
    assert (o.stopped, o.stop_call, o.stop_reason) == (stop_call is not None, stop_call, family)
    assert o.refused_calls == refused
    if family == "run_progress":
        assert (o.stop_detail, o.stop_text) == ("consecutive_failures", f"{limit} consecutive failures")
    if family == "recursive_delete":
        assert stop_call is not None and o.refusals[refused.index(stop_call)].rule == "recursive_delete"
        assert o.stop_text == "refused recursive delete"
    if stop_call is not None:  # no receipt of its own: the harness's failed one with the stop's text
        assert (o.receipt_status, o.receipt_source, o.delivered) == ("failed", "agent_guard", o.stop_text)


def test_the_hand_derivation_finds_the_stops_it_is_meant_to() -> None:
    # The expectations above are computed, so make sure they are not vacuous: bfb62a2b's 4th failure in a row is
    # call 6 (call 2 the only success before it), and tower2's rm -rf is call 10.
    assert expected_js("photo-renamer-bfb62a2b.json", 4)[:2] == (6, "run_progress")
    assert expected_js("photo-renamer-tower2-d4a61f33.json", 4)[:2] == (10, "recursive_delete")


def test_the_javascript_guard_over_every_recording_answers_every_message(tmp_path: Path) -> None:
    proc = run_fleet("replay", str(FIXTURES), "--policy", "default", "--policy", js_policy(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "7 sessions" in proc.stdout and "fleet: error" not in proc.stderr


# -- conformance: the shipped guard behind the protocol decides as it does in-process --------------------------

def test_the_shipped_guard_through_cmd_decides_exactly_as_default(tmp_path: Path) -> None:
    outcomes = by_policy(replay_json(str(FIXTURES), "--policy", "default", "--policy", SERVER, "--jobs", "1",
                                     cwd=tmp_path))
    assert len(outcomes["default"]) == 7
    assert [decided(o) for o in outcomes[SERVER]] == [decided(o) for o in outcomes["default"]]


def _cut_sessions() -> list[ReplaySession]:
    """Sessions no recording here holds: replies cut at the output limit (continued, then reported; continued
    and answered; delivered after a passing test)."""
    wrote = ReplayCall("w1", "write", {"path": "app.py", "content": "print('hi')"},
                       RecordedResult(view={"isError": False, "details": {}}, path="app.py"))
    command = "python -m pytest -q"
    out = "3 passed in 0.01s"
    tested = ReplayCall("t1", "exec", {"command": command}, RecordedResult(
        view={"isError": False, "details": {"status": "completed", "exitCode": 0}}, text=out, exit_code=0,
        test=recognize(out, 0, command)))

    def session(name: str, *rounds: ReplayRound, final_text: str | None = None) -> ReplaySession:
        return ReplaySession(source="synthetic", name=name, sha256="0", workspace="/w", rounds=rounds,
                             prompt="write app.py that prints hi, and test it", final_text=final_text)

    return [
        session("cut-twice", ReplayRound(1, (wrote,)), ReplayRound(2, (), "half", cut=True),
                ReplayRound(3, (), "more", cut=True)),
        session("cut-then-answer", ReplayRound(1, (wrote,)), ReplayRound(2, (), "half", cut=True),
                ReplayRound(3, (), "done"), final_text="done"),
        session("tested-then-cut", ReplayRound(1, (wrote, tested)), ReplayRound(2, (), "all good", cut=True)),
    ]


def _sessions() -> list[ReplaySession]:
    return [s for item in read_source(str(FIXTURES), REPO / "runs") for s in item.sessions] + _cut_sessions()


@pytest.mark.parametrize("policy", [DEFAULT_GUARD, load_policy_file(REPO / "docs/examples/no-deferral.toml"),
                                    load_policy_file(REPO / "docs/examples/coding-loop.toml")],
                         ids=lambda p: p.name)
def test_the_shipped_guard_under_a_policy_sent_in_hello_decides_as_that_policy_in_process(policy: GuardPolicy) -> None:
    sessions = _sessions()
    proc = GuardProcess("guard_server", SERVER_ARGV, policy.model_dump(mode="json"))
    try:
        assert proc.guard_name == f"harness guard ({policy.name})"  # the policy reached it
        external = [replay_session(s, ExternalGuard(proc, s), policy.name) for s in sessions]
    finally:
        proc.close()
    local = [replay_session(s, SessionGuard(policy, s), policy.name) for s in sessions]
    assert external == local
    cut = {o.session: o for o in local}
    assert (cut["cut-twice"].stop_reason, cut["cut-twice"].receipt_source) == ("output_limit", "output_limit_report")
    assert (cut["cut-then-answer"].stopped, cut["cut-then-answer"].delivered) == (False, "done")
    assert (cut["tested-then-cut"].stopped, cut["tested-then-cut"].receipt_status) == (False, "passed")


def test_a_policy_in_hello_really_changes_what_the_shipped_guard_decides() -> None:
    # Else the test above would pass with a guard that ignored the policy it was sent.
    policy = load_policy_file(REPO / "docs/examples/no-deferral.toml")
    sessions = _sessions()
    changed = [replay_session(s, SessionGuard(policy, s), "p").decisions() for s in sessions]
    default = [replay_session(s, SessionGuard(DEFAULT_GUARD, s), "p").decisions() for s in sessions]
    assert changed != default


# -- git:REF ---------------------------------------------------------------------------------------------------

def _replay_temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("fleet-replay-"))


def test_git_head_decides_exactly_as_default_and_leaves_no_folder(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    outcomes = by_policy(replay_json(str(FIXTURES), "--policy", "default", "--policy", "git:HEAD", cwd=tmp_path,
                                     TMPDIR=str(temp)))
    assert [decided(o) for o in outcomes["git:HEAD"]] == [decided(o) for o in outcomes["default"]]
    assert _replay_temps(temp) == []


def test_the_git_checkout_exists_while_the_replay_runs_and_is_removed_after_an_error(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    # A second guard that fails at once, saying on stderr what the temporary folder holds meanwhile.
    lister = tmp_path / "lister.py"
    lister.write_text("import os, sys\nsys.stderr.write(' '.join(sorted(os.listdir(sys.argv[1]))) + '\\n')\n"
                      "sys.exit(5)\n", encoding="utf-8")
    proc = run_fleet("replay", str(FIXTURES / "photo-renamer-bfb62a2b.json"), "--policy", "git:HEAD", "--policy",
                     f"cmd:{sys.executable} {lister} {temp}", cwd=tmp_path, TMPDIR=str(temp))
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert_one_line_error(proc, "closed its output and exited 5", f"fleet-replay-{head.strip()[:12]}-")
    assert _replay_temps(temp) == []


def test_git_of_a_commit_older_than_the_protocol_is_one_line(tmp_path: Path) -> None:
    root = subprocess.run(["git", "-C", str(REPO), "rev-list", "--max-parents=0", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.split()[0]
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = run_fleet("replay", str(FIXTURES), "--policy", f"git:{root}", cwd=tmp_path, TMPDIR=str(temp))
    assert_one_line_error(proc, f"git:{root}", f"commit {root[:12]} has no harness/replay/guard_server.py")
    assert _replay_temps(temp) == []


@pytest.mark.parametrize("ref", ["no-such-branch-anywhere", "-x"])
def test_git_of_a_bad_ref_is_one_line(tmp_path: Path, ref: str) -> None:
    proc = run_fleet("replay", str(FIXTURES), "--policy", f"git:{ref}", cwd=tmp_path)
    assert_one_line_error(proc, f"git:{ref}: ")


# -- a guard that fails: one line, exit 2, no traceback ----------------------------------------------------------

HELLO = 'import json, sys\nfor line in sys.stdin:\n    m = json.loads(line)\n'
GUARDS = {
    "exits": ("import sys\nsys.stderr.write('loading rules\\n')\nsys.stderr.write('no rules file: rules.json\\n')\n"
              "sys.exit(3)\n", ["hello: closed its output and exited 3", "(its stderr: no rules file: rules.json)"]),
    "non_json": (HELLO + "    print('OK then', flush=True)\n", ["hello: answered a line that is not JSON: 'OK then'"]),
    "unknown_decision": (
        HELLO + "    a = {'protocol': 1} if m['type'] == 'hello' else {'decision': 'ok'} if m['type'] == 'session' "
        "else {'decision': 'perhaps'}\n    print(json.dumps(a), flush=True)\n",
        ["round after call 0: answered decision 'perhaps'; expected one of allow, stop"]),
    "error": (
        HELLO + "    a = {'protocol': 1} if m['type'] == 'hello' else {'decision': 'ok'} if m['type'] == 'session' "
        "else {'decision': 'error', 'text': 'no rule for ' + m.get('tool', 'rounds')}\n"
        "    print(json.dumps(a), flush=True)\n", ["round after call 0: reported an error: no rule for rounds"]),
    "other_protocol": (HELLO + "    print(json.dumps({'protocol': 2}), flush=True)\n",
                       ["hello: speaks protocol 2, not 1"]),
    "hangs": (
        "import json, sys, time\nsys.stderr.write('thinking hard\\n')\nsys.stderr.flush()\nfor line in sys.stdin:\n"
        "    m = json.loads(line)\n    if m['type'] == 'call':\n        time.sleep(600)\n"
        "    a = {'protocol': 1} if m['type'] == 'hello' else {'decision': 'ok'} if m['type'] == 'session' "
        "else {'decision': 'allow'}\n    print(json.dumps(a), flush=True)\n",
        ["call 1: gave no answer in 2 s", "(its stderr: thinking hard)"]),
}


@pytest.mark.parametrize("kind", sorted(GUARDS))
def test_a_failing_guard_is_one_line_naming_it_and_where(tmp_path: Path, kind: str) -> None:
    source, needles = GUARDS[kind]
    guard = tmp_path / f"{kind}.py"
    guard.write_text(source, encoding="utf-8")
    policy = f"cmd:{sys.executable} {guard}"
    proc = run_fleet("replay", str(FIXTURES / "photo-renamer-bfb62a2b.json"), "--policy", "default", "--policy",
                     policy, cwd=tmp_path, FLEET_REPLAY_GUARD_TIMEOUT="2")
    line = assert_one_line_error(proc, f"fleet: error: {policy}: ", *needles)
    if kind == "exits":
        assert "loading rules" not in line  # the last stderr line only
    assert proc.stdout == ""


def test_a_guard_command_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    proc = run_fleet("replay", str(FIXTURES / "photo-renamer-bfb62a2b.json"), "--policy", "cmd:no-such-guard --x",
                     cwd=tmp_path)
    assert_one_line_error(proc, "cmd:no-such-guard --x: cannot start 'no-such-guard': No such file or directory")


@pytest.mark.parametrize("value", ["soon", "0", "-1"])
def test_a_bad_guard_timeout_is_one_line_naming_the_variable(tmp_path: Path, value: str) -> None:
    proc = run_fleet("replay", str(FIXTURES / "photo-renamer-bfb62a2b.json"), "--policy", SERVER, cwd=tmp_path,
                     FLEET_REPLAY_GUARD_TIMEOUT=value)
    assert_one_line_error(proc, f"FLEET_REPLAY_GUARD_TIMEOUT={value!r}: expected a number of seconds")


# -- parallel ----------------------------------------------------------------------------------------------------

def test_jobs_2_gives_the_outcomes_of_jobs_1(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    for copy in ("a", "b", "c"):
        shutil.copytree(FIXTURES, sessions / copy, ignore=shutil.ignore_patterns("*.md"))
    args = [str(sessions), "--policy", js_policy(), "--policy", SERVER]
    one = replay_json(*args, "--jobs", "1", cwd=tmp_path)
    two = replay_json(*args, "--jobs", "2", cwd=tmp_path)
    assert len(one) == 3 * 7 * 2
    assert [o.model_dump() for o in two] == [o.model_dump() for o in one]


# -- the lines themselves ----------------------------------------------------------------------------------------

def test_a_line_is_utf8_json_and_a_lone_surrogate_is_escaped_not_a_crash() -> None:
    assert encode_line({"text": "café ✓"}) == '{"text": "café ✓"}\n'.encode()
    odd = encode_line({"text": "a\ud800b", "more": "é"})
    assert odd.isascii() and odd.endswith(b"\n") and b"\n" not in odd[:-1]
    assert json.loads(odd) == {"text": "a\ud800b", "more": "é"}


def test_the_shipped_guard_answers_a_message_it_cannot_use_with_an_error_and_goes_on() -> None:
    inp = io.StringIO("not json\n" + json.dumps({"type": "call", "call": 1}) + "\n"
                      + json.dumps({"type": "hello", "protocol": 1, "policy": None}) + "\n"
                      + json.dumps({"type": "session", "session": "s", "prompt": "p", "workspace": ""}) + "\n"
                      + json.dumps({"type": "call", "call": 1}) + "\n" + json.dumps({"type": "bogus"}) + "\n")
    out = io.StringIO()
    assert serve(inp, out) == 0
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [a.get("decision") for a in answers] == ["error", "error", None, "ok", "error", "error"]
    assert "before any session" in answers[1]["text"]
    assert "missing field 'id'" in answers[4]["text"]
    assert answers[2]["protocol"] == 1


def test_a_recording_with_a_lone_surrogate_reaches_an_external_guard(tmp_path: Path) -> None:
    # A transcript may hold "\ud800" (JSON allows the escape); it cannot be UTF-8, so its line goes escaped, and
    # the JavaScript guard reads it. (Before, the harness's own write of the line was a traceback.)
    imported = run_fleet("import", "pixel-fleet", str(FIXTURES / "photo-renamer-bfb62a2b.json"), "--out",
                         str(tmp_path / "imported"), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    [transcript] = (tmp_path / "imported").rglob("transcript.jsonl")
    text = transcript.read_text(encoding="utf-8")
    assert text.count('"python3 --version"') >= 1
    odd = tmp_path / "odd.jsonl"
    odd.write_text(text.replace('"python3 --version"', '"python3 --version \\ud800"'), encoding="utf-8")
    [o] = replay_json(str(odd), "--policy", js_policy(), cwd=tmp_path)
    assert (o.stop_call, o.stop_reason) == expected_js("photo-renamer-bfb62a2b.json", 4)[:2]
