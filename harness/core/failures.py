"""The one failure model: what a harness failure is, its stable reason code, and whether it is retried.

A harness failure is the fleet's fault, never the model's result. It is decided in two places that
both land here:

- the attempt itself says so (``status == "harness_failure"`` with a ``reason``): the host could not
  be reached, the worker died, the store refused the delivery ...;
- the grader says so from the stored evidence (``grade == "HARNESS_FAILURE"`` with ``Grade.failure``):
  a real agent left no transcript, the agent's model endpoint failed, the host's shell itself failed.

:func:`classify` turns either into one :class:`Failure` (reason, retried?) and is what the dispatcher,
``fleet resume``, the terminal tables and the report use. :data:`REASONS` is the table of every code,
whether a retry can mend it, and why (docs/failures.md shows it; a test keeps the two equal). The exception
that carries a code is not named here: each ``InfrastructureError`` class says its own code (``reason``), and
:func:`exception_for` finds the class from that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from harness.core import errors

__all__ = ["FailureReason", "Failure", "Reason", "REASONS", "classify", "is_retried", "exception_for", "coded_exceptions"]

FailureReason = Literal[
    "host_unreachable",
    "host_key_mismatch",
    "host_lost",
    "supervision_lost",
    "agent_not_started",
    "agent_missing",
    "agent_unsuited",
    "agent_unavailable",
    "worker_lost",
    "worker_error",
    "no_worker",
    "revoked",
    "abandoned",
    "model_endpoint",
    "no_transcript",
    "shell_failure",
    "artifact_corrupt",
    "artifact_refused",
    "store_error",
    "infrastructure",
]
"""Stable codes of harness failures, in reports, queries and ``HARNESS_FAILURE(<code>)``."""


@dataclass(frozen=True)
class Reason:
    """One row of the failure table."""

    code: FailureReason
    retried: bool
    why: str

    @property
    def exception(self) -> type[errors.InfrastructureError] | None:
        """The class whose ``reason`` is this code; None for a code no exception carries (it is decided from a
        status or a grade: ``no_worker``, ``revoked``, ``no_transcript`` ...)."""
        return coded_exceptions().get(self.code)


REASONS: dict[str, Reason] = {
    r.code: r
    for r in (
        Reason("host_unreachable", True, "SSH refused or timed out: a rebooting host or a dropped link comes back"),
        Reason("host_key_mismatch", False, "the host's key is not the pinned one: waiting cannot change a key, and "
               "connecting again would only talk to the impostor again"),
        Reason("host_lost", True, "the connection died mid-run: the host may come back"),
        Reason("supervision_lost", True, "the run was not supervised to its end (its launcher died, a later "
               "delivery of its attempt or slot ended it or took its attempt folder before it was packed, or the "
               "worker's heartbeat stopped): nothing was measured"),
        Reason("agent_not_started", True, "the launcher reported no start in time: a slow or busy host"),
        Reason("agent_missing", False, "the agent's program is not installed there: it will not appear by itself"),
        Reason("agent_unsuited", False, "the agent cannot work with the host's setup until the inventory changes"),
        Reason("agent_unavailable", False, "this harness version has no adapter for the agent's kind"),
        Reason("worker_lost", True, "the worker process running the attempt died"),
        Reason("worker_error", True, "the worker raised an unexpected error"),
        Reason("no_worker", False, "no worker consumed the host's queue for --no-worker-timeout seconds, so nothing "
               "ran: a retry would wait for a worker that is not there (start one, then `fleet resume`, for which "
               "it does not count against the budget)"),
        Reason("revoked", False, "the user stopped the attempt"),
        Reason("abandoned", True, "the coordinator stopped before the attempt's result came; nothing was measured"),
        Reason("model_endpoint", True, "the host's model endpoint failed (HTTP errors, refused, timed out)"),
        Reason("no_transcript", True, "an agent that always leaves a transcript left none: it never really ran"),
        Reason("shell_failure", True, "the host's own shell failed (WSL's 0x8007274c): the environment, not the model"),
        Reason("artifact_corrupt", True, "an artifact's bytes did not match its sha256 on arrival"),
        Reason("artifact_refused", False, "the worker sent an artifact name outside the attempt folder: the same "
               "agent would send it again"),
        Reason("store_error", True, "the results directory could not take the delivery (disk full, permissions)"),
        Reason("infrastructure", True, "an infrastructure failure with no more specific code"),
    )
}


def is_retried(code: str) -> bool:
    """Whether a harness failure with this code is tried again. An unknown code (a newer worker, an older
    record) is still the fleet's failure: retrying it is the safe side."""
    row = REASONS.get(code)
    return row.retried if row is not None else True


def coded_exceptions() -> dict[str, type[errors.InfrastructureError]]:
    """code -> the exception class that carries it: ``InfrastructureError`` and each subclass that sets its own
    ``reason``, found by walking the class tree, so a code is written once, on its class."""
    found: dict[str, type[errors.InfrastructureError]] = {}
    tree: list[type[errors.InfrastructureError]] = [errors.InfrastructureError]
    while tree:
        cls = tree.pop(0)
        tree.extend(cls.__subclasses__())
        if "reason" in vars(cls):
            other = found.setdefault(cls.reason, cls)
            if other is not cls:
                raise TypeError(f"failure code {cls.reason!r} is carried by two classes: {other.__name__} and {cls.__name__}")
    return found


def exception_for(code: str) -> type[errors.InfrastructureError]:
    """The exception class that carries ``code`` (the base class for codes raised by no code path)."""
    return coded_exceptions().get(code, errors.InfrastructureError)


@dataclass(frozen=True)
class Failure:
    """A harness failure: its code and whether the dispatcher and ``resume`` try the cell again."""

    reason: str
    retry: bool


def classify(status: str, reason: str = "", grade: str = "", grade_failure: str = "") -> Failure | None:
    """The one decision: is this attempt a harness failure, which one, and is it retried?

    ``status`` and ``reason`` are the attempt's (meta.json / the sweep's summary); ``grade`` and
    ``grade_failure`` its latest grade's name and failure code. None: a model result, never retried.
    An attempt still in flight (``dispatched``) is not a failure yet.
    """
    if status == "harness_failure":
        code = reason or "infrastructure"
    elif grade == "HARNESS_FAILURE":
        code = grade_failure or reason or "infrastructure"
    else:
        return None
    return Failure(code, is_retried(code))


assert set(REASONS) == set(get_args(FailureReason)), "every failure code has exactly one row"
