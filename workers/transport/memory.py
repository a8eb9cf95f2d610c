"""An in-memory transport for fast tests of the attempt lifecycle: no host, no process, no network.

Files live in :attr:`MemoryTransport.files` (absolute path -> bytes). Each shell script is answered by the
first scripted reply whose regular expression it contains (``re.search``): a ``str`` (the stdout of a
script that succeeded), a :class:`ShellResult`, an exception (raised, as a real transport raises
``HostUnreachable`` or ``HostLost``), or a handler ``(script, transport) -> ShellResult | str`` that may
read and write :attr:`files` or raise. :meth:`on` puts a reply in front of the others, so a test overrides
one step of an otherwise healthy host. A script nothing answers gets exit 127, as a missing command would.
Every script is kept in :attr:`scripts` (its stdin in :attr:`stdins`), answered or not, so a test can see what the lifecycle tried
(a kill, for one).

No inventory names it (it registers no ``transport``): tests construct it directly.
"""

from __future__ import annotations

import re
from typing import Callable, Union

from harness.core.inventory import Host
from workers.transport.base import ShellResult, Transport

__all__ = ["MemoryTransport", "Reply"]

Reply = Union[str, ShellResult, BaseException, Callable[[str, "MemoryTransport"], Union[ShellResult, str]]]


class MemoryTransport(Transport):
    """A scripted host held in memory."""

    def __init__(self, host: Host, replies: list[tuple[str, Reply]] | None = None,
                 files: dict[str, bytes] | None = None) -> None:
        super().__init__(host)
        self.replies: list[tuple[re.Pattern[str], Reply]] = [(re.compile(p), r) for p, r in replies or []]
        self.files: dict[str, bytes] = dict(files or {})
        self.scripts: list[str] = []
        self.stdins: list[bytes | None] = []
        """The standard input of each script in :attr:`scripts` (None: none was given)."""
        self.opened = 0

    def on(self, pattern: str, reply: Reply) -> MemoryTransport:
        """Answer scripts matching ``pattern`` with ``reply`` before any earlier reply."""
        self.replies.insert(0, (re.compile(pattern), reply))
        return self

    def ran(self, pattern: str) -> list[str]:
        """The scripts run so far that match ``pattern``."""
        return [s for s in self.scripts if re.search(pattern, s)]

    def open(self) -> None:
        self.opened += 1

    def close(self) -> None:
        pass

    def shell(self, script: str, timeout: float = 60.0, stdin: bytes | None = None) -> ShellResult:
        self.scripts.append(script)
        self.stdins.append(stdin)
        reply = next((r for p, r in self.replies if p.search(script)), None)
        if reply is None:
            return ShellResult(127, "", f"memory transport: no reply scripted for: {script[:200]}")
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply) and not isinstance(reply, ShellResult):
            reply = reply(script, self)
        return ShellResult(0, reply, "") if isinstance(reply, str) else reply

    def put(self, path: str, data: bytes) -> None:
        self.files[path] = bytes(data)

    def get(self, path: str) -> bytes:
        try:
            return self.files[path]
        except KeyError:
            raise FileNotFoundError(path) from None
