"""Adversarial review of ``fleet replay`` (review11): one test per finding, each failing on the code it was written
against and passing once the finding is fixed. Every test says what is wrong and what the right behaviour is.

The inputs are copies (tmp_path) of the golden transcript of a builtin-agent run (three calls: write, write, exec;
delivered with a passing test) and of the pixel-fleet fixtures; nothing under tests/fixtures is changed.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.modelserver import ScriptedModelServer, parse_script
from harness.replay.batch import render_text, run_replay
from tests.support import REPO, fleet_argv

GOLDEN = (REPO / "tests" / "golden" / "v2" / "runs" / "20261201-214544-new" / "local" / "07-photo-renamer" / "builtin"
          / "r1" / "attempt-1" / "transcript.jsonl")
PHOTO_PROMPT = (REPO / "prompts" / "open" / "07-photo-renamer" / "prompt.md").read_text(encoding="utf-8")


def fleet(*args: str, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None,
          preexec: Any = None) -> subprocess.CompletedProcess[str]:
    """The real `fleet`; a run that outlives ``timeout`` fails the test (a hang is a finding, not a wait)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    base.update(env or {})
    try:
        return subprocess.run([*fleet_argv(), *args], cwd=cwd, env=base, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=preexec)
    except subprocess.TimeoutExpired:
        pytest.fail(f"fleet {' '.join(args)} did not finish in {timeout} s (hangs)")


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fleet: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def events() -> list[dict[str, Any]]:
    return [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]


def write(evs: list[dict[str, Any]], path: Path) -> Path:
    """``evs`` as a transcript, renumbered (seq is validated by the reader, so each probe passes that check)."""
    with path.open("w", encoding="utf-8") as f:
        for n, e in enumerate(evs, start=1):
            f.write(json.dumps({**e, "seq": n}) + "\n")
    return path


def at(evs: list[dict[str, Any]], kind: str, call_id: str) -> int:
    return next(i for i, e in enumerate(evs) if e["event"] == kind and e.get("call_id") == call_id)


# --- 1-3: a damaged pairing of calls and results is replayed as if nothing were wrong -------------------------


def test_a_tool_result_before_its_call_is_an_error_not_an_unrecorded_call(tmp_path: Path) -> None:
    """A transcript whose first tool_result comes before its tool_call is replayed with exit 0 and
    ``unrecorded_call: 1``: the recorded result is silently dropped and the replay blames the recording's guard.
    Right: a damaged recording is one error line naming the file and line, exit 2 (docs/replay.md)."""
    evs = events()
    call, result = at(evs, "tool_call", "call_1_1"), at(evs, "tool_result", "call_1_1")
    evs[call], evs[result] = evs[result], evs[call]
    proc = fleet("replay", str(write(evs, tmp_path / "before.jsonl")), "--json", cwd=tmp_path)
    one_line_error(proc, "before.jsonl", "call_1_1")


def test_a_tool_result_for_an_unknown_call_is_an_error(tmp_path: Path) -> None:
    """A tool_result whose call_id no tool_call has is ignored: the exec's recorded (passing) result vanishes and
    the outcome becomes ``unrecorded_call: 3``, exit 0. Right: exit 2, one line naming the line and the id."""
    evs = events()
    evs[at(evs, "tool_result", "call_3_1")]["call_id"] = "nope"
    proc = fleet("replay", str(write(evs, tmp_path / "unknown.jsonl")), "--json", cwd=tmp_path)
    one_line_error(proc, "unknown.jsonl", "nope")


def test_duplicate_call_ids_are_an_error_not_a_misattributed_result(tmp_path: Path) -> None:
    """Two calls of one reply with the same call_id: the first result is given to the second call, the second
    result is dropped, and call 1 is reported as never having run (``unrecorded_call: 1``), exit 0. Right: the
    ambiguity is one error line (file, line, the duplicate id), exit 2."""
    evs = events()
    c1, r1 = at(evs, "tool_call", "call_1_1"), at(evs, "tool_result", "call_1_1")
    c2, r2 = at(evs, "tool_call", "call_2_1"), at(evs, "tool_result", "call_2_1")
    assert (c1 + 1, c2 + 1) == (r1, r2)
    call2 = {**evs[c2], "round": 1, "call_id": "call_1_1"}
    res2 = {**evs[r2], "round": 1, "call_id": "call_1_1"}
    # Round 1 now sends both calls; their results follow in order; round 2 is left with its reply only.
    path = write([*evs[:r1], call2, evs[r1], res2, *evs[r1 + 1:c2], *evs[r2 + 1:]], tmp_path / "dup.jsonl")
    proc = fleet("replay", str(path), "--json", cwd=tmp_path)
    one_line_error(proc, "dup.jsonl", "call_1_1")


# --- 4-5: names from the input reach the terminal raw ----------------------------------------------------------


def test_a_session_name_with_a_newline_or_escape_is_escaped_in_the_table(tmp_path: Path) -> None:
    """A file named ``a<ESC>[2J<LF>fake.jsonl`` inside a folder: the ``input`` line escapes it (one_line), but the
    session's table line prints the name raw, so the newline splits the row (a forged row follows) and, on a
    terminal, ESC[2J clears the screen. Right: every name printed is one_line-escaped, every row one line."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a\x1b[2J\nfake.jsonl").write_bytes(GOLDEN.read_bytes())
    run = run_replay([str(folder)], ["default"], [], None, 1, tmp_path / "runs")
    for line in render_text(run):
        assert "\n" not in line and "\x1b" not in line, repr(line)


def test_an_external_guards_stop_reason_cannot_forge_table_rows(tmp_path: Path) -> None:
    """An external guard's stop ``reason`` (``stop_detail``) is printed raw in the table: a reason with a newline
    forges a row (``FORGED  default  ran to the end``). Right: what a guard answers is escaped like any input
    (or refused as not a reason code), and each (session, policy) is one line."""
    guard = tmp_path / "guard.py"
    guard.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    t = json.loads(line)['type']\n"
        "    out = {'type': 'hello', 'protocol': 1} if t == 'hello' else {'decision': 'ok'} if t in ('session', 'end')"
        " else {'decision': 'stop', 'reason': 'x\\nFORGED  default  ran to the end', 'text': 't'}\n"
        "    print(json.dumps(out), flush=True)\n", encoding="utf-8")
    src = tmp_path / "t.jsonl"
    src.write_bytes(GOLDEN.read_bytes())
    proc = fleet("replay", str(src), "--policy", f"cmd:{sys.executable} {guard}", cwd=tmp_path)
    assert "\nFORGED" not in proc.stdout, proc.stdout


# --- 6: policy names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "default", "a\nb"])
def test_a_policy_file_name_that_is_empty_reserved_or_multiline_is_refused(tmp_path: Path, name: str) -> None:
    """A policy file may call itself ``""`` (an empty column), ``default`` (a changed policy then reads as the
    shipped guard: here consecutive_failures = 1 is labelled ``default``) or a name with a newline (a broken
    table). Right: one line naming the file and ``name``, exit 2."""
    policy = tmp_path / "p.toml"
    policy.write_text(f"name = {json.dumps(name)}\n[budget]\nconsecutive_failures = 1\n", encoding="utf-8")
    src = tmp_path / "t.jsonl"
    src.write_bytes(GOLDEN.read_bytes())
    proc = fleet("replay", str(src), "--policy", str(policy), cwd=tmp_path)
    one_line_error(proc, "p.toml", "name")


# --- 7-9: sources and @FILEs that are not regular files hang or eat memory -------------------------------------


@pytest.mark.parametrize("extra", [(), ("--format", "transcript")])
def test_a_fifo_as_a_source_is_an_error_not_a_hang(tmp_path: Path, extra: tuple[str, ...]) -> None:
    """``fleet replay FIFO`` blocks forever (sniff opens it and waits for a writer; with --format the sha256 does).
    Right: a source that is not a regular file or folder is one error line, exit 2, at once."""
    fifo = tmp_path / "p.jsonl"
    os.mkfifo(fifo)
    one_line_error(fleet("replay", str(fifo), *extra, cwd=tmp_path, timeout=10), "p.jsonl")


def test_dev_zero_as_a_transcript_is_an_error_not_an_endless_read(tmp_path: Path) -> None:
    """``fleet replay /dev/zero --format transcript`` hashes an endless stream (100 % of a core, forever), and
    would then read it all into memory. Right: not a regular file: one line, exit 2."""
    one_line_error(fleet("replay", "/dev/zero", "--format", "transcript", cwd=tmp_path, timeout=10), "/dev/zero")


def _two_gigabytes() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_an_edit_result_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, target: str) -> None:
    """``--edit S:1=@/dev/zero`` reads without bound (on the review machine the process was SIGKILLed, exit 137,
    after eating the memory); ``@FIFO`` blocks forever. (Here the address space is capped at 2 GB so the probe
    cannot hurt the machine.) Right: an @FILE that is not a regular file, or larger than any result could be, is
    one error line naming the edit, exit 2."""
    src = tmp_path / "t.jsonl"
    src.write_bytes(GOLDEN.read_bytes())
    path = target
    if target == "fifo":
        os.mkfifo(tmp_path / "fifo")
        path = str(tmp_path / "fifo")
    proc = fleet("replay", str(src), "--edit", f"t.jsonl:1=@{path}", cwd=tmp_path, timeout=20, preexec=_two_gigabytes)
    one_line_error(proc, "--edit")


# --- 10-11: interruption and a full disk -----------------------------------------------------------------------


SLOW_GUARD = (
    "import json, sys, time\n"
    "for line in sys.stdin:\n"
    "    t = json.loads(line)['type']\n"
    "    out = {'type': 'hello', 'protocol': 1} if t == 'hello' else {'decision': 'ok'} if t in ('session', 'end')"
    " else {'decision': 'continue'} if t == 'cut' else {'decision': 'allow'}\n"
    "    time.sleep(0.2)\n"
    "    print(json.dumps(out), flush=True)\n")


def test_ctrl_c_during_a_parallel_replay_always_exits_130_with_one_line(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the process group) during ``--jobs 2`` with ``git:HEAD`` and a ``cmd:`` guard: most
    times it exits 130 with ``fleet: interrupted``, but about one time in eight the pool's management thread
    prints ``concurrent.futures._base.InvalidStateError: CANCELLED`` (a traceback) and the command and both
    workers hang forever (seen on the review machine, killed after 10 s). Right: every time, exit 130, one line,
    no process left. (Several interrupts at different moments, so the race is met.)"""
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(40):
        (folder / f"s{n}.jsonl").write_bytes(GOLDEN.read_bytes())
    guard = tmp_path / "slow.py"
    guard.write_text(SLOW_GUARD, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    problems = []
    for delay in (2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5):
        proc = subprocess.Popen([*fleet_argv(), "replay", str(folder), "--jobs", "2", "--policy", "git:HEAD",
                                 "--policy", f"cmd:{sys.executable} {guard}"], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            problems.append(f"after {delay} s: still running 15 s after Ctrl-C; stderr: {err[-300:]!r}")
            break
        if proc.returncode != 130 or "Traceback" in err or err.strip() != "fleet: interrupted":
            problems.append(f"after {delay} s: exit {proc.returncode}, stderr {err[-300:]!r}")
            break
    assert not problems, problems


def _small_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # Python ignores SIGXFSZ: a write past it is EFBIG


def test_a_full_disk_for_a_git_checkout_is_one_line_and_leaves_no_folder(tmp_path: Path) -> None:
    """``--policy git:HEAD`` when the temporary folder's disk is full (here: files capped at 4 KB; on a 64 KB tmpfs
    it is ENOSPC, the same): tarfile's OSError escapes as a traceback, exit 1, and the half-extracted
    ``fleet-replay-COMMIT-*`` folder is left in TMPDIR. Right: one line (no space for REF's checkout), a
    non-zero exit, and the folder removed."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    src = tmp_path / "t.jsonl"
    src.write_bytes(GOLDEN.read_bytes())
    proc = fleet("replay", str(src), "--policy", "git:HEAD", cwd=tmp_path, env={"TMPDIR": str(tmp)},
                 preexec=_small_files)
    assert "Traceback" not in proc.stderr, proc.stderr[-1500:]
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert list(tmp.iterdir()) == []


# --- 12: fidelity: the builtin agent's own no-progress stop -----------------------------------------------------


def test_default_reproduces_the_builtin_agents_no_progress_stop(tmp_path: Path) -> None:
    """The builtin agent, given a model that runs ``echo hi`` every round, is stopped by its budget between
    rounds (``no_progress``: more than 8 rounds without progress) with a ``budget_stop`` receipt. Replayed
    through ``default`` (the same guard), the outcome is ``unrecorded_call: 11`` ("goes on past the end of the
    recording"): the replay never asks the guard about the round the agent was stopped at, because that round
    has no model reply in the transcript. Right: the same stop (``no_progress``), the recorded receipt's status
    and source, and the delivered bytes equal to receipt.json's text."""
    turns = [{"tool_calls": [{"name": "exec", "arguments": {"command": "echo hi"}}]} for _ in range(12)]
    server = ScriptedModelServer(parse_script({"schema_version": 1, "turns": [*turns, {"text": "done"}]}))
    server.start()
    base = tmp_path / "attempt-1"
    (base / "workspace").mkdir(parents=True)
    (base / "prompt.md").write_text(PHOTO_PROMPT, encoding="utf-8")
    try:
        subprocess.run([sys.executable, "-m", "workers.host.agent", "--prompt-file", str(base / "prompt.md"),
                        "--workspace", str(base / "workspace"), "--out-dir", str(base), "--base-url", server.url,
                        "--model", "local-model", "--context", "32768", "--max-output", "2048",
                        "--retry-backoff-s", "0.05"], cwd=base / "workspace", capture_output=True, text=True,
                       timeout=90, check=False)
    finally:
        server.stop()
    receipt = json.loads((base / "receipt.json").read_text(encoding="utf-8"))
    end = json.loads((base / "transcript.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert (end["outcome"], end["reason"]) == ("stopped", "no_progress")  # the premise: the recording's stop
    proc = fleet("replay", str(base / "transcript.jsonl"), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["unrecorded_call"] is None, out
    assert (out["stop_detail"], out["receipt_status"], out["receipt_source"]) == (
        "no_progress", receipt["status"], receipt["source"])
    assert out["delivered"] == receipt["text"]


# --- 13-15: sniffing and the sha256 record ---------------------------------------------------------------------


@pytest.mark.parametrize("in_folder", [False, True])
def test_a_deeply_nested_json_file_is_one_line_not_a_recursion_traceback(tmp_path: Path, in_folder: bool) -> None:
    """A 50 kB file ``{"x": [[[[...`` (as the source, or as any *.json beside a transcript in a folder): sniff's
    ``json.loads`` of the first line raises RecursionError, uncaught: a traceback, exit 1. Right: not a session
    (left alone in a folder; as a source, one line and exit 2)."""
    deep = tmp_path / "in" / "deep.json"
    deep.parent.mkdir()
    deep.write_text('{"x": ' + "[" * 50000, encoding="utf-8")
    if in_folder:
        (tmp_path / "in" / "t.jsonl").write_bytes(GOLDEN.read_bytes())
        proc = fleet("replay", str(tmp_path / "in"), "--json", cwd=tmp_path)
        assert "Traceback" not in proc.stderr, proc.stderr[-800:]
        assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1, proc.stderr
    else:
        one_line_error(fleet("replay", str(deep), cwd=tmp_path), "deep.json")


@pytest.mark.parametrize("name, text", [
    ("config.json", '{"name": "app", "sessions": 3}'),
    ("stats.jsonl", '{"calls": 12, "host": "x"}'),
    ("chat.json", '{"info": {"x": 1}, "messages": "hello"}'),
])
def test_an_unrelated_json_file_in_a_folder_is_left_alone(tmp_path: Path, name: str, text: str) -> None:
    """docs/replay.md: in a folder, files are read "when their content is a session format; anything else is left
    alone". A JSON file that merely has a key named ``sessions`` or ``calls`` (or ``info`` and ``messages``) is
    taken for a pixel-fleet recording (an OpenCode export) and its importer's error aborts the whole folder's
    replay (exit 2), though the folder holds a good transcript. Right: the file is left alone and the transcript
    replayed (exit 0)."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "t.jsonl").write_bytes(GOLDEN.read_bytes())
    (folder / name).write_text(text + "\n", encoding="utf-8")
    proc = fleet("replay", str(folder), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1


def test_a_damaged_meta_json_does_not_silently_skip_the_sha256_check(tmp_path: Path) -> None:
    """An attempt folder (meta.json beside transcript.jsonl) whose transcript was changed after the sweep: with
    meta.json intact, replay refuses (sha256 mismatch, exit 2). Damage meta.json (here: ``{``) and the changed
    transcript is replayed with exit 0 and no word: the check is skipped because the record cannot be read.
    Right: an attempt's meta.json that cannot be read is one error line, exit 2 (nothing replayed)."""
    attempt = tmp_path / "sweep" / "attempt-1"
    attempt.mkdir(parents=True)
    (attempt / "meta.json").write_bytes((GOLDEN.parent / "meta.json").read_bytes())
    (attempt / "transcript.jsonl").write_text(GOLDEN.read_text(encoding="utf-8").replace("rename_photos",
                                                                                         "renameXphotos"))
    one_line_error(fleet("replay", str(tmp_path / "sweep"), cwd=tmp_path), "sha256")  # the premise
    (attempt / "meta.json").write_text("{", encoding="utf-8")
    one_line_error(fleet("replay", str(tmp_path / "sweep"), cwd=tmp_path), "meta.json")


# --- 16-19: an external guard's answers, stop_call, messages ---------------------------------------------------


def _guard(tmp_path: Path, body: str) -> str:
    path = tmp_path / "guard.py"
    path.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    t = json.loads(line)['type']\n"
        "    out = {'type': 'hello', 'protocol': 1} if t == 'hello' else {'decision': 'ok'} if t in ('session', 'end')"
        " else {'decision': 'continue'} if t == 'cut' else {'decision': 'allow'}\n" + body +
        "    print(json.dumps(out), flush=True)\n", encoding="utf-8")
    return f"cmd:{sys.executable} {path}"


def test_an_external_guards_negative_deferrals_are_refused(tmp_path: Path) -> None:
    """An external guard answering ``"deferrals": -5`` to a result gets ``"deferrals": -5`` into the JSON line
    ("charges the budget let wait": a count). Right: an answer that is not a count >= 0 is the guard's error,
    one line, exit 2, like any other answer the protocol does not allow."""
    src = tmp_path / "t.jsonl"
    src.write_bytes(GOLDEN.read_bytes())
    policy = _guard(tmp_path, "    if t == 'result': out['deferrals'] = -5\n")
    one_line_error(fleet("replay", str(src), "--policy", policy, "--json", cwd=tmp_path), "deferrals")


def test_stop_call_is_a_call_or_null_never_zero(tmp_path: Path) -> None:
    """The builtin agent's first reply is cut at the output limit twice (the output-limit report): the JSON line
    says ``stop_call: 0``, but docs/replay.md defines stop_call as the 1-based call whose result stopped the run
    (null when not stopped). Right: null (no call stopped it) or a real call number, never 0."""
    cut = {"text": "Writing.", "cut_at_output_limit": True,
           "tool_calls": [{"name": "write", "arguments": {"path": "Playground/p/index.html", "content": "x" * 400}}]}
    server = ScriptedModelServer(parse_script({"schema_version": 1, "turns": [cut, cut]}))
    server.start()
    base = tmp_path / "attempt-1"
    (base / "workspace").mkdir(parents=True)
    (base / "prompt.md").write_text("make me a cool looking webpage with a forest theme", encoding="utf-8")
    try:
        subprocess.run([sys.executable, "-m", "workers.host.agent", "--prompt-file", str(base / "prompt.md"),
                        "--workspace", str(base / "workspace"), "--out-dir", str(base), "--base-url", server.url,
                        "--model", "local-model", "--context", "32768", "--max-output", "2048"],
                       cwd=base / "workspace", capture_output=True, text=True, timeout=90, check=False)
    finally:
        server.stop()
    proc = fleet("replay", str(base / "transcript.jsonl"), "--json", cwd=tmp_path)
    out = json.loads(proc.stdout)
    assert out["stopped"] and out["stop_detail"] == "output_limit"  # the premise: the recorded report
    assert out["stop_call"] is None or out["stop_call"] >= 1, out["stop_call"]


def test_an_external_guard_answering_two_lines_is_told_so(tmp_path: Path) -> None:
    """A guard that writes every answer twice is caught only later, as ``answered decision 'ok'; expected one of
    allow, stop`` (the stale second line read as the next answer): the message sends its author looking at the
    wrong message. Right: the error says the guard wrote more than one line for one message."""
    src = tmp_path / "t.jsonl"
    src.write_bytes(GOLDEN.read_bytes())
    policy = _guard(tmp_path, "    if t != 'hello': print(json.dumps(out), flush=True)\n")
    line = one_line_error(fleet("replay", str(src), "--policy", policy, cwd=tmp_path))
    assert "more than one line" in line or "two lines" in line, line


def test_a_symlink_loop_as_a_source_is_named_as_such(tmp_path: Path) -> None:
    """``fleet replay loop1.jsonl`` where loop1 -> loop2 -> loop1 says ``no such file or folder, and no sweep of
    that id under runs``: the file is there (a link loop). Right: the one line says it cannot be followed (a
    link loop), as ``Store.inside`` does for stored paths."""
    (tmp_path / "loop1.jsonl").symlink_to("loop2.jsonl")
    (tmp_path / "loop2.jsonl").symlink_to("loop1.jsonl")
    line = one_line_error(fleet("replay", "loop1.jsonl", cwd=tmp_path), "loop1.jsonl")
    assert "no such file" not in line and "link" in line, line


def test_an_edit_can_name_a_session_whose_name_holds_colon_digits_equals(tmp_path: Path) -> None:
    """docs/replay.md: SESSION is a session's name. A file ``a:2=ok.jsonl`` in a folder is session
    ``a:2=ok.jsonl#a:2=ok``; ``--edit 'a:2=ok.jsonl#a:2=ok:3=failed'`` is parsed with the shortest session
    (``a``, call 2, result ``ok.jsonl#...``) and refused as "the result: not valid JSON": that session cannot be
    edited at all. Right: the edit is matched against the sessions' names (the longest name that fits), so call 3
    of that session gets the failed result."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a:2=ok.jsonl").write_bytes(GOLDEN.read_bytes())
    proc = fleet("replay", str(folder), "--edit", "a:2=ok.jsonl#a:2=ok:3=failed", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["edits"] == ["a:2=ok.jsonl#a:2=ok:3=failed"]
