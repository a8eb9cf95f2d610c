"""Is an agent installed on a host, and which version? One probe for the attempt lifecycle and
``fleet hosts check``, run over the transport with the agent's own environment (its PATH)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from harness.core.inventory import Host
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.transport.base import Transport

__all__ = ["AgentProbe", "probe_agent"]


@dataclass(frozen=True)
class AgentProbe:
    program: str | None
    """The executable looked for (None: the adapter names none)."""
    found: bool
    version: str
    """The last non-empty line of the version command's first lines ('' without a version command)."""


def probe_agent(t: Transport, adapter: AgentAdapter, host: Host, paths: AttemptPaths) -> AgentProbe:
    env = adapter.env(host, paths)
    prefix = f"export PATH={shlex.quote(env['PATH'])}; " if "PATH" in env else ""
    program = adapter.program()
    if program:
        r = t.shell(f"{prefix}command -v {shlex.quote(program)}", timeout=30)
        if not r.ok or not r.stdout.strip():
            return AgentProbe(program, False, "")
    version = ""
    argv = adapter.version_argv()
    if argv:
        r = t.shell(f"({prefix}{' '.join(shlex.quote(a) for a in argv)}) 2>&1 < /dev/null | head -n 5", timeout=60)
        lines = [line.strip() for line in r.stdout.splitlines() if line.strip()]
        version = lines[-1] if lines else ""
    return AgentProbe(program, True, version)
