"""Adversarial review of ``fleet replay``, second round (review11b): one test per finding, each failing on the code
it was written against and passing once the finding is fixed. Every test says what is wrong and what is right.

Inputs are copies (tmp_path) of the pixel-fleet fixtures and of the golden builtin-agent transcript; nothing under
tests/fixtures is changed.
"""

from __future__ import annotations

import json
import os
import signal
import shutil
import sys
from pathlib import Path

import pytest

from tests.harness.replay.test_review_probes import GOLDEN, fleet
from tests.support import alive

PIXEL = Path(__file__).resolve().parents[2] / "fixtures" / "pixel-fleet"
STRIXY_TAIL = "unittest-verdict-strixy-tail-d4a61f33.json"
STRIXY_SESSION = "519cb0fa-5bbd-4653-8993-567054320464"
CODING_LOOP = Path(__file__).resolve().parents[3] / "docs" / "examples" / "coding-loop.toml"
PROTOCOL_DOC = Path(__file__).resolve().parents[3] / "docs" / "replay-protocol.md"
UNITTEST = "cd /workspace/Playground/renamer && python3 -m unittest test_renamer -v 2>&1"
PASSING = {"isError": False, "details": {"exitCode": 0, "status": "completed"},
           "text": "test_a (test_renamer.T) ... ok\n\n" + "-" * 70 + "\nRan 5 tests in 0.010s\n\nOK\n"}


def _no_traceback_one_answer(proc: object) -> None:
    stderr = getattr(proc, "stderr", "")
    code = getattr(proc, "returncode", None)
    assert "Traceback" not in stderr, stderr[-1500:]
    assert code in (0, 2), (code, stderr[-500:])
    if code == 2:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fleet: error: "), stderr


# --- 1-2: a lone surrogate in the delivered text ----------------------------------------------------------------


def test_a_recorded_answer_holding_a_lone_surrogate_is_not_a_traceback(tmp_path: Path) -> None:
    """A pixel-fleet recording whose final answer holds a lone surrogate (``\\ud800``, which JSON allows and the
    importer keeps: the protocol doc itself says recordings can hold one) crashes ``fleet replay`` under the
    default policy: ``UnicodeEncodeError`` traceback from ``engine.outcome`` (``receipt.text.encode("utf-8")``
    for ``delivered_sha256``), exit 1. Right: the session is replayed (the sha256 taken over an encoding that
    cannot fail, e.g. ``surrogatepass`` or the escaped form the protocol uses), or at worst one line, exit 2."""
    data = json.loads((PIXEL / "photo-renamer-tower3-d4a61f33.json").read_text(encoding="utf-8"))
    data["finalAssistant"]["text"] = "Done \ud800 here"
    src = tmp_path / "tower3-surrogate.json"
    src.write_text(json.dumps(data), encoding="utf-8")
    _no_traceback_one_answer(fleet("replay", str(src), "--json", cwd=tmp_path))


@pytest.mark.parametrize("where", ["stop", "receipt"])
def test_an_external_guards_lone_surrogate_is_not_a_traceback_from_a_worker(tmp_path: Path, where: str) -> None:
    """An external guard answering a stop text (or an ``end`` receipt text) ``"\\ud800"`` (valid JSON, ASCII on
    the wire) gets a traceback out of a ``--jobs 2`` worker (``multiprocessing ... raise value`` then
    ``UnicodeEncodeError``), exit 1: the one-line error handling covers ``ReplayError`` only. Right: the answer is
    either accepted (replayed, exit 0) or the guard's error, one ``fleet: error:`` line, exit 2 (docs/
    replay-protocol.md, "Errors and timeouts"), from a worker exactly as from one process."""
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(3):
        for f in PIXEL.glob("*.json"):
            shutil.copy(f, folder / f"{n}-{f.name}")
    guard = tmp_path / "guard.py"
    guard.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    t = json.loads(line)['type']\n"
        "    a = {'decision': {'cut': 'deliver', 'session': 'ok', 'end': 'ok'}.get(t, 'allow')}\n"
        "    if t == 'hello': a = {'protocol': 1}\n"
        f"    if {where!r} == 'stop' and t == 'result': a = {{'decision': 'stop', 'reason': 'x', 'text': 'b\\ud800'}}\n"
        f"    if {where!r} == 'receipt' and t == 'end':\n"
        "        a = {'decision': 'ok', 'receipt': {'status': 'passed', 'text': 'b\\ud800', 'source': 'model'}}\n"
        "    print(json.dumps(a), flush=True)\n", encoding="utf-8")
    proc = fleet("replay", str(folder), "--jobs", "2", "--policy", f"cmd:{sys.executable} {guard}", cwd=tmp_path)
    _no_traceback_one_answer(proc)


# --- 3: sniffing ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    '{"name": "metrics", "calls": []}',
    '{"calls": [{"endpoint": "/api", "ms": 12}]}',
    '{"sessions": [{"user": "bob", "minutes": 3}]}',
    '{"source": "web", "messages": [{"text": "hi"}]}',
    '{"type": "session", "id": "abc", "user": "bob"}',
])
def test_an_application_json_with_a_recording_like_key_is_left_alone(tmp_path: Path, text: str) -> None:
    """The first review's fix keys the sniffing on a key's kind (``"sessions": 3`` is left alone), but a file in a
    folder is still taken for a recording when it merely has ``calls`` as a list of objects (or an empty list),
    ``sessions`` as a list of objects, ``source`` beside a ``messages`` list, or ``type: session`` with an
    ``id``: then its importer's error (``name: unknown key``, ``calls[0].endpoint: unknown key``, ``line 1.id:
    missing``, ``session version 1 is not supported``) aborts the whole folder, exit 2. docs/replay.md: "A JSON
    file in a folder counts as a recording only when its keys and their kinds are one". Right: a file whose
    keys are not a recording's (pixel-fleet calls carry ``tool``/``name`` and ``id``; a Hermes export an ``id``;
    an OpenClaw session header a ``version``) is left alone, and the folder's transcript replayed (exit 0)."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "t.jsonl").write_bytes(GOLDEN.read_bytes())
    (folder / "app.json").write_text(text + "\n", encoding="utf-8")
    proc = fleet("replay", str(folder), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1


# --- 4-5: the coding-loop rule ----------------------------------------------------------------------------------


def _coding_loop_after_inserting(tmp_path: Path, tool: str, arguments: dict[str, object]) -> dict[str, object]:
    src = tmp_path / STRIXY_TAIL
    shutil.copy(PIXEL / STRIXY_TAIL, src)
    call = tmp_path / f"{tool}.json"
    call.write_text(json.dumps({"tool": tool, "arguments": arguments, "result": PASSING}), encoding="utf-8")
    proc = fleet("replay", str(src), "--policy", str(CODING_LOOP), "--json",
                 "--edit", f"{STRIXY_SESSION}:11+=@{call}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def test_a_wrapped_passing_test_run_resets_the_coding_loop_as_a_direct_one_does(tmp_path: Path) -> None:
    """The coding-loop rule judges a Tool Search call (``tool_call`` with ``id: exec``) as the tool it selects when
    it REFUSES a test run (``coding_loop._test_run``), but an inserted (``--edit``) wrapped test run's result is
    never read by the test-verdict recognizer (``edits._recorded`` only looks at ``SHELL_TOOLS``), so a passing
    wrapped run does not reset the count. On the strixy tail, a passing ``exec`` unittest run inserted after call
    11 resets the count (call 16 would run: unrecorded), the same run wrapped in ``tool_call`` does not (stopped
    at call 16, ``coding_loop``). Right: a call that counts as a test run for the refusal counts as one for the
    reset too: both give the same outcome."""
    direct = _coding_loop_after_inserting(tmp_path, "exec", {"command": UNITTEST})
    assert direct["unrecorded_call"] == 16 and not direct["stopped"]  # the premise: the reset
    wrapped = _coding_loop_after_inserting(tmp_path, "tool_call", {"id": "exec", "args": {"command": UNITTEST}})
    assert (wrapped["stopped"], wrapped["unrecorded_call"]) == (direct["stopped"], direct["unrecorded_call"]), wrapped


def test_the_coding_loop_example_says_what_the_rule_refuses(tmp_path: Path) -> None:
    """docs/examples/coding-loop.toml's comment says "after 6 failed test runs without a passing one, the next
    command or file change is refused and the run stops", but the rule (harness/guard/coding_loop.py,
    docs/replay.md) refuses only the next TEST run: on the strixy tail, the edit of call 14 (after the sixth
    failed run, call 13) runs, and call 15 (the seventh unittest run) is the refused one. Right: the example's
    comment says the next test run is refused (edits and reads stay allowed)."""
    src = tmp_path / STRIXY_TAIL
    shutil.copy(PIXEL / STRIXY_TAIL, src)
    out = json.loads(fleet("replay", str(src), "--policy", str(CODING_LOOP), "--json", cwd=tmp_path).stdout)
    assert out["stop_call"] == 15 and 14 not in out["refused_calls"]  # the premise: the file change ran
    comment = " ".join(line.lstrip("# ").strip() for line in CODING_LOOP.read_text(encoding="utf-8").splitlines()
                       if line.startswith("#"))
    assert "command or file change is refused" not in comment, comment


# --- 6: the protocol doc on stop_call ---------------------------------------------------------------------------


def test_the_protocol_doc_says_what_stop_call_is_for_a_stop_before_any_call(tmp_path: Path) -> None:
    """docs/replay-protocol.md (``round``): a stop at ``round`` makes ``stop_call`` "the last call before the stop
    (``0`` before any call)"; docs/replay.md and the code say null (the first review's fix). A guard that stops at
    the very first ``round`` gets ``stop_call: null``. Right: the protocol doc says null, as replay.md does."""
    src = tmp_path / "bfb.json"
    shutil.copy(PIXEL / "photo-renamer-bfb62a2b.json", src)
    guard = tmp_path / "guard.py"
    guard.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    t = json.loads(line)['type']\n"
        "    a = {'decision': {'cut': 'deliver', 'session': 'ok', 'end': 'ok'}.get(t, 'allow')}\n"
        "    if t == 'hello': a = {'protocol': 1}\n"
        "    if t == 'round': a = {'decision': 'stop', 'reason': 'nope', 'text': 'no rounds'}\n"
        "    print(json.dumps(a), flush=True)\n", encoding="utf-8")
    out = json.loads(fleet("replay", str(src), "--policy", f"cmd:{sys.executable} {guard}", "--json",
                           cwd=tmp_path).stdout)
    assert out["stopped"] and out["stop_call"] is None  # what the code does
    assert "(`0` before any call)" not in PROTOCOL_DOC.read_text(encoding="utf-8")


# --- 7: lockstep at the last message ----------------------------------------------------------------------------


def test_a_second_answer_to_the_last_end_is_not_ignored(tmp_path: Path) -> None:
    """Lockstep (docs/replay-protocol.md): "waits for exactly one answer line". The "more than one line" check runs
    only before the next message is sent, so a guard that answers the LAST ``end`` of its process twice (here
    ``ok``, then ``ok`` with a passing receipt, the one its author meant) is never told: exit 0, and the outcome
    silently uses the first line. Right: when the replay closes the guard, a line it wrote that no message asked
    for is the same one-line error as anywhere else ("wrote more than one line for one message"), exit 2."""
    src = tmp_path / "tower3.json"
    shutil.copy(PIXEL / "photo-renamer-tower3-d4a61f33.json", src)
    guard = tmp_path / "guard.py"
    guard.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    t = json.loads(line)['type']\n"
        "    a = {'protocol': 1} if t == 'hello' else"
        " {'decision': {'cut': 'deliver', 'session': 'ok', 'end': 'ok'}.get(t, 'allow')}\n"
        "    print(json.dumps(a), flush=True)\n"
        "    if t == 'end':\n"
        "        print(json.dumps({'decision': 'ok', 'receipt': {'status': 'passed', 'text': 'all good',"
        " 'source': 'model'}}), flush=True)\n", encoding="utf-8")
    proc = fleet("replay", str(src), "--jobs", "1", "--policy", f"cmd:{sys.executable} {guard}", "--json",
                 cwd=tmp_path)
    assert proc.returncode == 2 and "more than one line" in proc.stderr, (proc.returncode, proc.stderr)


# --- 8: guards of --jobs workers outlive the replay -------------------------------------------------------------




def test_a_parallel_replay_ends_its_guards_as_a_serial_one_does(tmp_path: Path) -> None:
    """docs/replay-protocol.md: stdin closes when the replay is over, and a guard that is still running is killed 2 s
    later. With ``--jobs 1`` that holds: a guard that does not exit when its input closes is gone when ``fleet
    replay`` returns. With ``--jobs 2`` (21 sessions, so the pool is used) the workers exit without closing their
    guard processes: both guards are still running after the replay returned exit 0 (orphans, here for 60 s).
    Right: every worker ends its guards as the serial path does (close, then kill), so none outlives the replay."""
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(3):
        for f in PIXEL.glob("*.json"):
            shutil.copy(f, folder / f"{n}-{f.name}")
    pids = tmp_path / "pids"
    guard = tmp_path / "guard.py"
    guard.write_text(
        "import json, os, sys, time\n"
        f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "for line in sys.stdin:\n"
        "    t = json.loads(line)['type']\n"
        "    a = {'protocol': 1} if t == 'hello' else"
        " {'decision': {'cut': 'deliver', 'session': 'ok', 'end': 'ok'}.get(t, 'allow')}\n"
        "    print(json.dumps(a), flush=True)\n"
        "time.sleep(60)  # does not exit when its input closes\n", encoding="utf-8")
    try:
        for jobs in ("1", "2"):
            pids.write_text("", encoding="utf-8")
            proc = fleet("replay", str(folder), "--jobs", jobs, "--policy", f"cmd:{sys.executable} {guard}",
                         cwd=tmp_path)
            assert proc.returncode == 0, proc.stderr
            started = [int(p) for p in pids.read_text(encoding="utf-8").split()]
            assert started, "no guard started"
            left = [p for p in started if alive(p)]
            assert not left, f"--jobs {jobs}: guards {left} still running after the replay returned"
    finally:
        for p in [int(x) for x in pids.read_text(encoding="utf-8").split()] if pids.exists() else []:
            if alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.parametrize("name, tables", [
    ("app.db", ("sessions(id integer primary key, user text)", "messages(id integer primary key, body text)")),
    ("chat.sqlite", ("session(id text)", "message(id text)", "part(id text)")),
])
def test_an_application_database_with_session_like_tables_is_left_alone(tmp_path: Path, name: str,
                                                                        tables: tuple[str, ...]) -> None:
    """The same gap for SQLite: a ``*.db``/``*.sqlite`` in a folder is taken for a Hermes store when it merely has
    tables named ``sessions`` and ``messages`` (an OpenCode store: ``session``, ``message``, ``part``), whatever
    their columns; the importer's ``not a readable SQLite session store (no such column: started_at)`` then
    aborts the whole folder, exit 2. Right: a database whose tables lack the store's columns is left alone (as
    docs/replay.md says of files that are not a session format), and the folder's transcript replayed."""
    import sqlite3

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "t.jsonl").write_bytes(GOLDEN.read_bytes())
    db = sqlite3.connect(folder / name)
    for table in tables:
        db.execute(f"create table {table}")
    db.commit()
    db.close()
    proc = fleet("replay", str(folder), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
