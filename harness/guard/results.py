"""Read a tool result the way the run-progress budget does.

Agents differ in what they flag: OpenClaw records a command that exited 3 with ``isError: false``,
and a Tool Search envelope keeps the selected tool's failure inside ``details.result``. So a result
is judged by every signal it carries, at the top and in nested results, never by one flag alone.

The inspection classifiers encode seed 000: a preview inspection that *measured nothing* and already
hands the model its correction is "correctable" (its charge may wait one result), and only a clean
passing inspection is the corrected attempt that forgives that charge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "SHELL_TOOLS",
    "WRAPPER_TOOLS",
    "selected_call",
    "recorded_view",
    "FAILED_STATUSES",
    "INSPECTION_KIND",
    "TRANSITION_UNTESTED",
    "LOCATOR_ERRORS",
    "is_failed",
    "is_running_process",
    "is_correctable_inspection_failure",
    "is_passed_inspection",
]

FAILED_STATUSES = frozenset({"failed", "error", "blocked"})
"""``details.status`` values that mean the call failed (``blocked``: a guard refused it)."""

NESTED_RESULT_DEPTH = 3
"""How many ``details.result`` levels are read: an envelope inside an envelope, and no deeper."""

INSPECTION_KIND = "ods-pixel-preview-inspection"
"""``details.kind`` of a preview inspection receipt."""

TRANSITION_UNTESTED = "transition_untested"
"""``errorCode`` of an INCOMPLETE inspection that never tested the requested show/hide change."""

LOCATOR_ERRORS = frozenset({"no_match", "selector_not_unique", "invalid_selector"})
"""Last-step errors of a locator that matched nothing, matched several, or was not valid CSS."""


def _details(result: object) -> Mapping[str, Any]:
    details = result.get("details") if isinstance(result, Mapping) else None
    return details if isinstance(details, Mapping) else {}


def _nonzero_integer(value: object) -> bool:
    # JSON has one number type: an exit code read back as 3.0 is still the integer 3.
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value != 0
    return isinstance(value, float) and value.is_integer() and value != 0


def is_failed(result: Mapping[str, Any]) -> bool:
    """Whether a tool result counts as a failure.

    It does when the result, or a nested ``details.result`` (up to three levels in all), has
    ``isError: true``, a ``details.status`` of failed / error / blocked, or an integer
    ``details.exitCode`` other than 0. A thrown tool error should reach here as ``{"isError": True}``.
    """
    current: object = result
    for _ in range(NESTED_RESULT_DEPTH):
        if not isinstance(current, Mapping):
            return False
        details = _details(current)
        if (
            current.get("isError") is True
            or details.get("status") in FAILED_STATUSES
            or _nonzero_integer(details.get("exitCode"))
        ):
            return True
        current = details.get("result")
    return False


def is_running_process(result: Mapping[str, Any]) -> bool:
    """Whether the result is a real running-process receipt: status ``running`` with a session id.

    Such a receipt is a verified wait, so it resets the rounds-without-progress counter. Only the
    structured receipt counts; text that merely says "running" never does.
    """
    details = _details(result)
    session = details.get("sessionId")
    return (
        not is_failed(result)
        and details.get("status") == "running"
        and isinstance(session, str)
        and bool(session)
    )


def is_correctable_inspection_failure(result: Mapping[str, Any]) -> bool:
    """Whether a failed inspection measured nothing and its text already carries the fix.

    True for an error receipt of kind ``ods-pixel-preview-inspection`` that is one of: arguments
    rejected before execution (``invalid_request``, status failed); INCOMPLETE with
    ``transition_untested``; or status failed with no top-level error code, no page errors, no
    blocked requests and a last step of no_match / selector_not_unique / invalid_selector. Measured
    failures (visibility mismatch, click failed, page errors, timeouts ...) are never correctable.
    """
    details = _details(result)
    if result.get("isError") is not True or details.get("kind") != INSPECTION_KIND:
        return False
    status = details.get("status")
    if details.get("errorCode") == "invalid_request":
        return status == "failed"
    if status == "incomplete":
        return details.get("errorCode") == TRANSITION_UNTESTED
    blocked = details.get("blockedRequests")
    steps = details.get("steps")
    last = steps[-1] if isinstance(steps, list) and steps else None
    return (
        status == "failed"
        and "errorCode" not in details
        and "pageErrors" not in details
        and isinstance(blocked, list)
        and not blocked
        and isinstance(last, Mapping)
        and last.get("errorCode") in LOCATOR_ERRORS
    )


def is_passed_inspection(result: Mapping[str, Any]) -> bool:
    """Whether the result is an inspection receipt that passed cleanly: not an error, status
    ``passed``, no page errors. Only this forgives a waiting correctable charge."""
    details = _details(result)
    return (
        result.get("isError") is not True
        and details.get("kind") == INSPECTION_KIND
        and details.get("status") == "passed"
        and "pageErrors" not in details
    )


def recorded_view(agent_is_error: bool | None, agent_details: Mapping[str, Any] | None, ran: bool) -> dict[str, Any]:
    """A recorded result as the run-progress budget reads it: the agent's own flag and details, as its budget read
    them; a call it refused is a failure, ``blocked``. Importers and the replay of an imported transcript share it."""
    details = dict(agent_details or {})
    if not ran and "status" not in details:
        details["status"] = "blocked"
    return {"isError": agent_is_error is True or not ran, "details": details}


SHELL_TOOLS = frozenset({"exec", "bash", "shell", "terminal"})
"""Tools that run a command (``arguments.command``): OpenClaw's and ours ``exec``, OpenCode's ``bash``, Hermes's
``terminal``."""
WRAPPER_TOOLS = frozenset({"tool_call"})
"""Tool Search transports: a call that runs the tool named in ``arguments["id"]`` with ``arguments["args"]``."""


def selected_call(tool: str, arguments: Mapping[str, Any] | None,
                  wrappers: frozenset[str] = WRAPPER_TOOLS) -> tuple[str, Mapping[str, Any] | None]:
    """The tool a call really runs and its own arguments: a wrapper names it in ``arguments["id"]`` (possibly
    qualified, ``openclaw:core:exec``) and passes ``arguments["args"]`` (or ``["arguments"]``); any other call is itself."""
    if tool not in wrappers or not isinstance(arguments, Mapping) or not isinstance(arguments.get("id"), str):
        return tool, arguments
    inner = arguments.get("args") if isinstance(arguments.get("args"), Mapping) else arguments.get("arguments")
    return str(arguments["id"]).rsplit(":", 1)[-1], inner if isinstance(inner, Mapping) else None
