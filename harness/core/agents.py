"""The agent kinds this harness knows, each declared once: what the inventory accepts as
``agents.<name>.kind``, what grading expects a run of the kind to leave, and how the agent says that
its model endpoint (not the model) failed.

Three places read this table: ``harness.core.inventory`` (an unknown kind is a bad inventory),
``harness.grading`` (a kind that always leaves a transcript and left none is a harness failure) and
``workers.adapters`` (each adapter class registers against its kind; a test keeps the two one to one).
It imports nothing of the harness on purpose: the inventory loads it, and loading an inventory must
not pull in Celery, Fabric or the adapters.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AgentKind", "AGENT_KINDS", "EXIT_INFRASTRUCTURE", "UnknownAgentKind", "agent_kind", "writes_transcript"]

EXIT_INFRASTRUCTURE = 75
"""The builtin agent's exit code when its model endpoint failed (EX_TEMPFAIL): retried, never graded."""


@dataclass(frozen=True)
class AgentKind:
    """One kind of agent the harness can drive."""

    name: str
    """The inventory's ``kind`` value."""
    transcript: bool
    """A run of this kind always ends with a ``transcript.jsonl`` (the agent writes it, or the harness imports
    the agent's session store into it): one missing means the run or its import failed, a harness failure,
    not a model that said nothing."""
    infrastructure_exit: int | None
    """The exit code with which the agent reports that its model endpoint failed; None: it has no such code
    (its adapter reads the failure from the session, or the agent cannot say)."""
    summary: str
    """One line for people (docs, ``fleet hosts check``)."""


AGENT_KINDS: dict[str, AgentKind] = {
    k.name: k
    for k in (
        AgentKind("command", False, None, "any command template from the inventory; it leaves what it leaves"),
        AgentKind("builtin", True, EXIT_INFRASTRUCTURE, "the harness's own guarded agent (python -m workers.host.agent)"),
        AgentKind("openclaw", True, None, "OpenClaw, one headless turn; its SQLite session store is imported"),
        AgentKind("opencode", True, None, "OpenCode, headless opencode run; its session store is imported"),
        AgentKind("hermes", True, None, "Hermes Agent, one hermes -z; its state.db is imported"),
    )
}


class UnknownAgentKind(ValueError):
    """A kind no entry of :data:`AGENT_KINDS` declares."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown kind {name!r} (known: {', '.join(sorted(AGENT_KINDS))})")
        self.name = name


def agent_kind(name: str) -> AgentKind:
    """The declaration of ``name``; :class:`UnknownAgentKind` when there is none."""
    try:
        return AGENT_KINDS[name]
    except KeyError:
        raise UnknownAgentKind(name) from None


def writes_transcript(name: str) -> bool:
    """Whether a run of kind ``name`` always leaves a transcript. An unknown or empty kind (an imported
    session, a record older than ``agent_kind`` in meta.json) promises none."""
    kind = AGENT_KINDS.get(name)
    return kind is not None and kind.transcript
