"""The transport interface: a handful of hooks that the attempt lifecycle (workers.attempt) calls.

A transport knows how to reach one host: open a connection, run a short POSIX shell script, put and get
a file. Everything else (workspaces, starting the agent in its own process group, waiting, killing,
downloading artifacts) is written once in ``workers.attempt`` on top of these hooks, so the embedded
default (local) and the fleet (SSH) run the same code.

Scripts passed to ``shell`` are built by the harness from fixed text and ``shlex.quote``-d paths; no
prompt, model or transcript text is ever put into one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from harness.core.inventory import Host

__all__ = ["ShellResult", "Transport"]


@dataclass(frozen=True)
class ShellResult:
    """What a short shell script did."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def tail(self, n: int = 400) -> str:
        return (self.stderr or self.stdout)[-n:].strip()


class Transport(ABC):
    """Reach one host. Implementations translate their library's errors into InfrastructureError."""

    kind: ClassVar[str] = ""
    """The ``hosts.<name>.transport`` value it serves, set by ``workers.transport.registry.registered``;
    empty for a transport no inventory can name (``MemoryTransport``, for tests)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.memo: dict[str, str] = {}
        """Facts about the host that do not change between attempts (its $HOME, the interpreter its ``python``
        names: a shim resolved once), found
        by the first attempt and reused by the next ones: a worker keeps one transport per host
        (workers.tasks), so each costs one command per worker process instead of one per attempt."""
        self.leftovers: list[str] = []
        """Delivery folders on the host whose files this worker has taken: the next launcher call removes them
        (workers.attempt), or ``workers.tasks.forget_leftovers`` when the worker stops."""

    @abstractmethod
    def open(self) -> None:
        """Connect (checking the pinned host key); idempotent."""

    @abstractmethod
    def close(self) -> None:
        """Drop the connection; idempotent."""

    @abstractmethod
    def shell(self, script: str, timeout: float = 60.0, stdin: bytes | None = None) -> ShellResult:
        """Run a short POSIX ``sh`` script on the host and wait for it. ``stdin``, when given, is the script's
        standard input, then end of file: how the launcher's source and its per-delivery key reach the host
        without a file, an argv or an environment variable (workers/host/launcher/)."""

    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` to the absolute ``path`` on the host (parent folders exist)."""

    @abstractmethod
    def get(self, path: str) -> bytes:
        """Read the absolute ``path`` on the host."""

    @property
    def alive(self) -> bool:
        """Whether a reused connection still looks usable."""
        return True
