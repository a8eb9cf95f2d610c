"""Agent adapters: how one kind of agent is started on a host and what it leaves behind.

Adapters are chosen by the inventory's ``agents.<name>.kind``: each adapter class registers against its
kind's declaration in ``harness.core.agents`` (``workers.adapters.registry``). Importing this package imports
every adapter module, so every declared kind is registered. The builtin guarded agent, OpenClaw, OpenCode
and Hermes get their own adapters; ``command`` runs any command template.
"""

from __future__ import annotations

from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.adapters.builtin import BuiltinAdapter
from workers.adapters.command import CommandAdapter
from workers.adapters.hermes import HermesAdapter
from workers.adapters.opencode import OpenCodeAdapter
from workers.adapters.openclaw import OpenClawAdapter
from workers.adapters.registry import ADAPTERS, adapter_for

__all__ = ["ADAPTERS", "AgentAdapter", "AttemptPaths", "BuiltinAdapter", "CommandAdapter", "HermesAdapter",
           "OpenClawAdapter", "OpenCodeAdapter", "adapter_for"]
