"""Replay benchmark: N recorded sessions of C calls each through two policies, in calls per second per core.

The sessions are real transcript files (the builtin agent's format, written by the one transcript writer) of a
coding run: files written and edited, reads, commands, and pytest runs with pytest's own summaries, mostly
passing; one session in ten has four failing test runs in a row (a budget stop), one in twenty an unrequested
``rm -rf`` (a refusal and its receipt). Measured in the same run:

* **read**: the folder read into sessions (sniff, parse, validate every event), once;
* **replay, 1 job**: every session under ``default`` and ``no-deferral`` in this process: calls/s on one core;
* **replay, N jobs**: the same over N worker processes: calls/s in all, and per core;
* **baseline**: the same recorded results through the run-progress budget alone (no walk, no other rule, no
  receipt), the cheapest guard there is: what the whole replay costs beside it.

Run: .venv/bin/python bench/bench_replay.py [--sessions 1000] [--calls 100] [--jobs 2] [--json bench/results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.record import record, setup_without_syncs  # noqa: E402
from harness.guard.budget import RunProgressBudget  # noqa: E402
from harness.guard.policy import BudgetLimits, GuardPolicy  # noqa: E402
from harness.guard.verdict import recognize  # noqa: E402
from harness.core.records import utc_now  # noqa: E402
from harness.replay.policies import PolicySpec  # noqa: E402
from harness.replay.parallel import replay_all  # noqa: E402
from harness.replay.sources import read_source  # noqa: E402
from harness.core.transcript import (  # noqa: E402
    ModelResponse,
    OwnerReceipt,
    ReceiptEvent,
    RunEnd,
    RunStart,
    ToolCall,
    ToolCallRecord,
    ToolDetails,
    ToolResult,
    TranscriptWriter,
    Usage,
)

PASSED = "...\n3 passed in 0.04s\n"
FAILED = "F..\n=========================== short test summary info ===========================\n" \
         "FAILED test_app.py::test_total - assert 3 == 4\n1 failed, 2 passed in 0.05s\n"
PROMPT = "Write a small inventory app in Playground/shop with tests, and make the tests pass."


def _call(n: int, session: int, calls: int) -> tuple[str, dict[str, Any], bool, str, ToolDetails]:
    """The n-th call (0-based) of a session: (tool, arguments, is_error, text, details)."""
    project = f"Playground/shop{session}"
    cwd = f"/ws/{project}"
    failing_streak = session % 10 == 0 and calls // 2 <= n < calls // 2 + 8 and n % 2 == 0
    if session % 20 == 1 and n == calls * 4 // 5:
        command = f"cd {cwd} && python3 -m pytest -q && rm -rf {cwd}/build"
        return "exec", {"command": command}, False, PASSED, ToolDetails(status="ok", exit_code=0, cwd=cwd)
    kind = n % 5
    if kind == 0:
        path = f"{project}/mod{n}.py"
        return "write", {"path": path, "content": "def total(xs):\n    return sum(xs)\n"}, False, \
            f"wrote {path}", ToolDetails(status="ok", path=path, bytes=34)
    if kind == 1 or failing_streak:
        command = f"cd {cwd} && python3 -m pytest -q"
        out = FAILED if failing_streak else PASSED
        code = 1 if failing_streak else 0
        verdict = recognize(out, code, command)
        return "exec", {"command": command}, code != 0, out, ToolDetails(
            status="failed" if code else "ok", exit_code=code, cwd=cwd, test=verdict)
    if kind == 2:
        return "read", {"path": f"{project}/mod{n - 2}.py"}, False, "def total(xs):\n    return sum(xs)\n", \
            ToolDetails(status="ok", path=f"{project}/mod{n - 2}.py", bytes=34)
    if kind == 3:
        path = f"{project}/mod{n - 3}.py"
        return "edit", {"path": path, "old": "sum(xs)", "new": f"sum(xs) + {n}"}, False, "replaced 1", \
            ToolDetails(status="ok", path=path, replacements=1)
    return "exec", {"command": f"ls -la {cwd} && grep -rn TODO {cwd} | head -5"}, False, "total 8\n", \
        ToolDetails(status="ok", exit_code=0, cwd=cwd)


def write_sessions(folder: Path, sessions: int, calls: int) -> int:
    written = 0
    for s in range(sessions):
        attempt = folder / f"s{s:05d}"
        attempt.mkdir()
        with TranscriptWriter(attempt / "transcript.jsonl") as w:
            w.append(RunStart(run_id=f"run-{s}", agent="builtin", agent_version="bench", harness_commit="", model="m",
                              base_url="http://127.0.0.1:1/v1", context=32768, max_output=2048, stream=False,
                              timeout_s=60, retries=0, exec_timeout_s=60, workspace="/ws", prompt_file="prompt.md",
                              prompt=PROMPT, system_prompt="", tools=["read", "write", "edit", "exec"],
                              budget_policy={}, python="3", platform="bench"))
            for n in range(calls):
                tool, args, is_error, text, details = _call(n, s, calls)
                call_id = f"c{n}"
                w.append(ModelResponse(round=n + 1, text="", tool_calls=[ToolCallRecord(
                    id=call_id, name=tool, arguments=json.dumps(args))], finish_reason="tool_calls", usage=None,
                    latency_s=0.1, attempts=1, model="m"))
                w.append(ToolCall(round=n + 1, call_id=call_id, name=tool, arguments=args))
                w.append(ToolResult(round=n + 1, call_id=call_id, name=tool, is_error=is_error, text=text,
                                    details=details))
                written += 1
            w.append(ModelResponse(round=calls + 1, text="Done: the tests pass.", tool_calls=[],
                                   finish_reason="stop", usage=None, latency_s=0.1, attempts=1, model="m"))
            w.append(ReceiptEvent(receipt=OwnerReceipt(status="passed", text="Done: the tests pass.", source="model")))
            w.append(RunEnd(outcome="completed", exit_code=0, rounds=calls + 1, tool_calls=calls, duration_s=1.0,
                            usage=Usage()))
    return written


def baseline(sessions: list[Any], policies: int) -> float:
    """Seconds for every recorded result through the budget alone, once per policy."""
    started = time.perf_counter()
    for _ in range(policies):
        for session in sessions:
            budget = RunProgressBudget()
            for call in session.calls:
                if call.result is not None:
                    budget.on_result(call.call_id, call.name, call.arguments, call.result.view)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    specs = [PolicySpec("default", "default", GuardPolicy()),
             PolicySpec("no-deferral", "file", GuardPolicy(name="no-deferral", budget=BudgetLimits(deferral=False)))]
    with tempfile.TemporaryDirectory(prefix="fleet-bench-replay-") as tmp:
        folder = Path(tmp)
        with setup_without_syncs():
            calls = write_sessions(folder, args.sessions, args.calls)
        t = time.perf_counter()
        inputs = read_source(str(folder), folder)
        read_s = time.perf_counter() - t
    sessions = [s for item in inputs for s in item.sessions]
    replayed = calls * len(specs)
    t = time.perf_counter()
    one = replay_all(sessions, specs, jobs=1)
    one_s = time.perf_counter() - t
    t = time.perf_counter()
    many = replay_all(sessions, specs, jobs=args.jobs)
    many_s = time.perf_counter() - t
    assert [[o.decisions() for o in per] for per in one] == [[o.decisions() for o in per] for per in many]
    base_s = baseline(sessions, len(specs))
    stopped = sum(o.stopped for per in one for o in per)
    row = {
        "sessions": args.sessions, "calls": calls, "policies": len(specs), "calls_replayed": replayed,
        "stopped_outcomes": stopped, "read_s": round(read_s, 3), "read_calls_per_s": round(calls / read_s),
        "one_job_s": round(one_s, 3), "calls_per_s_per_core": round(replayed / one_s),
        "jobs": args.jobs, "jobs_s": round(many_s, 3), "jobs_calls_per_s": round(replayed / many_s),
        "jobs_calls_per_s_per_core": round(replayed / many_s / args.jobs),
        "baseline_budget_only_s": round(base_s, 3), "baseline_calls_per_s": round(replayed / base_s),
        "measured_at": utc_now(),
    }
    print(json.dumps(row, indent=1))
    record(args.json_path, "replay", row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
