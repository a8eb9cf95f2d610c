"""``fleet replay``: read the inputs, check their sha256, apply the edits, replay under every policy, and print what
was decided: a line per (session, policy), and per further policy the sessions that differ from the first
(docs/replay.md)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import ReplayError, UsageError, one_line
from harness.replay.differ import Difference, describe_stop, differences
from harness.replay.edits import apply_edits, check_edit
from harness.replay.outcome import ReplayOutcome
from harness.replay.policies import PolicySpec, resolve_policy
from harness.replay.parallel import replay_all
from harness.replay.sources import Input, read_source

__all__ = ["ReplayRun", "run_replay", "render_text", "render_json"]

SESSION_LINES = 60
"""Up to this many sessions, every (session, policy) line is printed; past it, only what differs (``--all``)."""


@dataclass
class ReplayRun:
    inputs: list[Input]
    policies: list[str]
    outcomes: list[list[ReplayOutcome]]
    """Per session, per policy."""
    seconds: float
    calls: int


def _check_recorded(inputs: Sequence[Input]) -> None:
    for item in inputs:
        if item.recorded_sha256 is not None and item.recorded_sha256 != item.sha256:
            raise ReplayError(item.path, "sha256", f"is {item.sha256}, but meta.json beside it recorded "
                              f"{item.recorded_sha256}: the file changed after it was recorded")


def run_replay(sources: Sequence[str], policies: Sequence[str], edits: Sequence[str], fmt: str | None,
               jobs: int | None, store_root: Path,
               progress: Callable[[int, int], None] | None = None, guard_timeout: float = 60.0) -> ReplayRun:
    for text in edits:
        check_edit(text)  # a malformed edit fails before anything is read
    inputs = [item for source in sources for item in read_source(source, store_root, fmt)]
    _check_recorded(inputs)
    sessions = [s for item in inputs for s in item.sessions]
    names: dict[str, str] = {}
    for s in sessions:
        if s.name in names:
            raise ReplayError(s.source, "", f"session name {s.name!r} is also a session of {names[s.name]}; "
                              "replay the two inputs apart")
        names[s.name] = s.source
    sessions = apply_edits(sessions, list(edits))
    specs: list[PolicySpec] = []
    try:
        for text in policies or ["default"]:
            specs.append(resolve_policy(text, guard_timeout))
        seen: dict[str, int] = {}
        for spec in specs:
            seen[spec.name] = seen.get(spec.name, 0) + 1
            if seen[spec.name] > 1:
                raise UsageError(f"--policy {spec.name!r} is given twice (a policy file's name is its 'name' key "
                                 "or its file name)")
        started = time.monotonic()
        outcomes = replay_all(sessions, specs, jobs, progress)
        seconds = time.monotonic() - started
    finally:
        for spec in specs:
            spec.close()
    calls = sum(len(s.calls) for s in sessions) * len(specs)
    return ReplayRun(inputs, [spec.name for spec in specs], outcomes, seconds, calls)


def _calls(numbers: Sequence[int]) -> str:
    """1,2,3,5,7,8 -> 1-3,5,7-8."""
    if not numbers:
        return "-"
    parts, start, last = [], numbers[0], numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == last + 1:
            last = n
            continue
        parts.append(f"{start}" if start == last else f"{start}-{last}")
        if n is not None:
            start = last = n
    return ",".join(parts)


def _line(o: ReplayOutcome, width: int, policy_width: int) -> str:
    if o.unrecorded_call is not None:
        what = (f"call {o.unrecorded_call} would run, but the recording holds no result for it: "
                f"--edit {o.session}:{o.unrecorded_call}=RESULT") if o.unrecorded_call <= o.calls else (
            f"goes on past the end of the recording (its agent's own stop, or a run that ended without an answer): "
            f"nothing after call {o.calls} was recorded")
        return f"{one_line(o.session):<{width}}  {one_line(o.policy):<{policy_width}}  {one_line(what)}"
    stop = one_line(describe_stop(o)) if o.stopped else "ran to the end"
    refused = _calls(o.refused_calls)
    return (f"{one_line(o.session):<{width}}  {one_line(o.policy):<{policy_width}}  {stop:<28}  refused {refused:<12}  "
            f"receipt {o.receipt_status} ({o.receipt_source})")


def _diff_line(d: Difference, width: int) -> str:
    a, b = d.baseline, d.candidate
    detail = []
    if {"newly stopped", "no longer stopped", "stopped elsewhere", "unrecorded"} & set(d.changes):
        detail.append(f"stop {describe_stop(a)} -> {describe_stop(b)}")
    if "refusals changed" in d.changes:
        detail.append(f"refused {_calls(a.refused_calls)} -> {_calls(b.refused_calls)}")
    if "receipt changed" in d.changes:
        detail.append(f"receipt {a.receipt_status} -> {b.receipt_status}")
    if "text changed" in d.changes and a.delivered_sha256 and b.delivered_sha256:
        detail.append(f"text {a.delivered_sha256[:12]} -> {b.delivered_sha256[:12]}")
    return f"{one_line(d.session):<{width}}  {', '.join(d.changes):<36}  {one_line('; '.join(detail))}"


def render_text(run: ReplayRun, show_all: bool = False) -> list[str]:
    out = []
    for item in run.inputs:
        count = len(item.sessions)
        recorded = ("  sha256 matches meta.json" if item.recorded_sha256 == item.sha256 else "")
        out.append(f"input {item.sha256}  {item.format}, {count} session{'s' if count != 1 else ''}  "
                   f"{one_line(item.path)}{recorded}")
    flat = [o for per in run.outcomes for o in per]
    width = min(44, max([len(one_line(o.session)) for o in flat] + [7]))
    pwidth = max(len(one_line(p)) for p in run.policies)
    sessions = len(run.outcomes)
    if show_all or sessions <= SESSION_LINES:
        out.append("")
        out.extend(_line(o, width, pwidth) for o in flat)
    out.append("")
    for n, policy in enumerate(run.policies):
        column = [per[n] for per in run.outcomes]
        stopped = sum(o.stopped for o in column)
        unrecorded = sum(o.unrecorded_call is not None for o in column)
        passed = sum(o.receipt_status == "passed" for o in column)
        out.append(f"policy {one_line(policy)}: {sessions} session{'s' if sessions != 1 else ''}, {stopped} stopped, "
                   f"{sessions - stopped - unrecorded} ran to the end, {unrecorded} past what was recorded; "
                   f"{passed} receipt{'s' if passed != 1 else ''} passed")
    base = run.policies[0]
    for n, policy in enumerate(run.policies[1:], start=1):
        diffs, same = differences([per[0] for per in run.outcomes], [per[n] for per in run.outcomes])
        out.append("")
        out.append(f"{one_line(base)} -> {one_line(policy)}: {len(diffs)} of {sessions} session{'s' if sessions != 1 else ''} differ, "
                   f"{same} byte-identical")
        out.extend(_diff_line(d, width) for d in diffs)
    rate = run.calls / run.seconds if run.seconds > 0 else 0.0
    out.append("")
    out.append(f"replayed {sessions} session{'s' if sessions != 1 else ''} x {len(run.policies)} "
               f"polic{'ies' if len(run.policies) != 1 else 'y'} ({run.calls} calls) in {run.seconds:.3f} s"
               + (f", {rate:,.0f} calls/s" if rate else ""))
    return out


def _json_line(o: ReplayOutcome) -> str:
    """One outcome as compact JSON; a text holding a lone surrogate is written with \\u escapes (still JSON)."""
    data = o.model_dump(mode="python")
    try:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8").decode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(data, ensure_ascii=True, separators=(",", ":"))


def render_json(run: ReplayRun) -> list[str]:
    return [_json_line(o) for per in run.outcomes for o in per]


def print_progress(done: int, total: int) -> None:
    if sys.stderr.isatty() and total >= 200:
        sys.stderr.write(f"\rreplayed {done}/{total} sessions")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()

