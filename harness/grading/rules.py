"""The rules that map evidence to a grade. Documented, with the seeds' cases, in docs/grading.md.

In order, the first that applies:
1. The fleet failed -> HARNESS_FAILURE: the attempt is a harness failure; the agent's transcript says
   its model endpoint failed; an agent that writes transcripts left none; a tool result shows the
   host's shell itself failed (the WSL ``0x8007274c`` trace failure). Never scored as the model's.
2. A written-answer item: an answer and no failing check -> DELIVERED; a failing check -> PARTIAL;
   no answer -> NOTHING.
3. A workspace item with no file written: the answer carries code -> CODE_IN_CHAT, else NOTHING.
4. Files written: every required check passes (or, with no checks, the receipt passed or the run ended
   normally with an answer), the owner got an answer, and no guard stopped the run -> DELIVERED;
   otherwise PARTIAL, with the reasons (a failing or untested check, a failed receipt, the stop).
"""

from __future__ import annotations

import re

from harness.grading.model import Evidence, Grade
from harness.core.records import utc_now

__all__ = ["grade"]

_CODE_BLOCK = re.compile(r"```[^\n]*\n((?:.*\n){3,}?)```")


def _carries_code(answer: str) -> bool:
    return bool(_CODE_BLOCK.search(answer))


def _files_written(e: Evidence) -> str:
    if e.files_from == "transcript":
        return f"{len(e.files)} file(s) written or changed by recorded tool calls (no workspace was captured)"
    return f"{len(e.files)} file(s) written"


def _harness_failure(e: Evidence) -> tuple[str, list[str]] | None:
    """(failure code, reasons) when the fleet failed; codes are harness.core.failures.FailureReason."""
    if e.status == "harness_failure":
        code = e.reason or "infrastructure"
        return code, [f"harness failure: {code}" + (f": {e.error}" if e.error else "")]
    if e.run_outcome == "infrastructure":
        return "model_endpoint", ["the agent's model endpoint failed"]
    if e.expects_transcript and not e.transcript_present:
        return "no_transcript", ["the agent left no transcript: it never ran"]
    if e.shell_trace_failure:
        return "shell_failure", [f"the host's shell failed: {e.shell_trace_failure}"]
    return None


def grade(e: Evidence) -> Grade:
    """Grade one attempt from its evidence."""

    def out(name: str, reasons: list[str], failure: str = "") -> Grade:
        return Grade(grade=name, outcome=e.receipt, stop=e.stop, failure=failure, reasons=reasons, checks=e.checks,
                     graded_at=utc_now())

    failure = _harness_failure(e)
    if failure is not None:
        return out("HARNESS_FAILURE", failure[1], failure[0])
    failed_checks = [c.name for c in e.checks if c.status in ("failed", "error")]
    untested = [c.name for c in e.checks if c.status == "untested"]
    reasons: list[str] = []
    if e.stop:
        reasons.append(f"stopped: {e.stop.text}")
    if e.status == "timeout":
        reasons.append("the agent ran past the item's timeout")
    if e.deliverable == "answer":
        if not e.answer.strip():
            return out("NOTHING", reasons + ["no answer was delivered"])
        if failed_checks:
            return out("PARTIAL", reasons + [f"check failed: {', '.join(failed_checks)}"])
        return out("DELIVERED", reasons + ["the owner got a written answer"])
    if not e.files:
        if _carries_code(e.answer):
            return out("CODE_IN_CHAT", reasons + ["the answer carries code but no file was written"])
        return out("NOTHING", reasons + ["nothing usable was written to the workspace"])
    problems = []
    if failed_checks:
        problems.append(f"check failed: {', '.join(failed_checks)}")
    if untested:
        problems.append(f"check untested: {', '.join(untested)}")
    if e.receipt == "failed":
        problems.append("the receipt failed")
    if e.stop or e.status == "timeout":
        problems.append("the run did not end normally")
    if not e.answer.strip():
        problems.append("the owner got no answer" if e.answer_recorded else "the owner's answer was not recorded")
    checks_ok = bool(e.checks) and not failed_checks and not untested
    ended_well = e.receipt == "passed" or (e.status == "finished" and e.exit_code == 0 and e.receipt != "failed")
    if not problems and (checks_ok or ended_well):
        return out("DELIVERED", reasons + [_files_written(e), "all required checks passed" if checks_ok
                                           else f"receipt {e.receipt}, no acceptance check ran"])
    return out("PARTIAL", reasons + [_files_written(e)] + [p for p in problems if not p.startswith("the run did not")])
