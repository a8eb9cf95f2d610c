"""Agent adapters: how one kind of agent is started on a host and what it leaves behind.

Adapters are chosen by the inventory's ``agents.<name>.kind``. The builtin guarded agent, OpenClaw,
OpenCode and Hermes get their own adapters; ``command`` runs any command template.
"""

from __future__ import annotations

from harness.errors import UsageError
from harness.inventory import AgentConfig
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.adapters.builtin import BuiltinAdapter
from workers.adapters.command import CommandAdapter
from workers.adapters.hermes import HermesAdapter
from workers.adapters.opencode import OpenCodeAdapter
from workers.adapters.openclaw import OpenClawAdapter

__all__ = ["AgentAdapter", "AttemptPaths", "BuiltinAdapter", "CommandAdapter", "HermesAdapter", "OpenClawAdapter",
           "OpenCodeAdapter", "adapter_for"]

_ADAPTERS: dict[str, type[AgentAdapter]] = {
    "command": CommandAdapter,
    "builtin": BuiltinAdapter,
    "openclaw": OpenClawAdapter,
    "opencode": OpenCodeAdapter,
    "hermes": HermesAdapter,
}


def adapter_for(name: str, config: AgentConfig) -> AgentAdapter:
    """The adapter for an inventory agent entry."""
    try:
        cls = _ADAPTERS[config.kind]
    except KeyError:
        raise UsageError(f"agent {name!r}: kind {config.kind!r} has no adapter in this harness version") from None
    return cls(name, config)
