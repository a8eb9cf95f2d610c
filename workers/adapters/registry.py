"""Which adapter class drives which agent kind: each class registers itself against its declaration in
``harness.core.agents``, so a kind is declared once and an adapter cannot name a kind the inventory would refuse."""

from __future__ import annotations

from typing import Callable, TypeVar

from harness.core.agents import agent_kind
from harness.core.inventory import AgentConfig
from workers.adapters.base import AgentAdapter

__all__ = ["ADAPTERS", "adapter_for", "registered"]

A = TypeVar("A", bound=type[AgentAdapter])

ADAPTERS: dict[str, type[AgentAdapter]] = {}
"""kind name -> adapter class; filled as ``workers.adapters`` imports each adapter module."""


def registered(kind: str) -> Callable[[A], A]:
    """Class decorator: ``cls`` drives agents of ``kind`` (declared in ``harness.core.agents``); sets ``cls.kind``."""
    spec = agent_kind(kind)  # a kind nobody declared fails at import, not at the first attempt

    def register(cls: A) -> A:
        if kind in ADAPTERS and ADAPTERS[kind] is not cls:
            raise RuntimeError(f"agent kind {kind!r} has two adapters: {ADAPTERS[kind].__name__} and {cls.__name__}")
        cls.kind = spec
        ADAPTERS[kind] = cls
        return cls

    return register


def adapter_for(name: str, config: AgentConfig) -> AgentAdapter:
    """The adapter for an inventory agent entry. ``config.kind`` is a declared kind (the inventory admits no
    other), and importing this module imports ``workers.adapters`` first, which registers every adapter
    module; a test keeps every declared kind registered, so the lookup cannot miss."""
    return ADAPTERS[config.kind](name, config)
