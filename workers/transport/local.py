"""The local transport: this machine, for the embedded default and for workers on the host itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.errors import HostLost
from workers.transport.base import ShellResult, Transport
from workers.transport.registry import registered

__all__ = ["LocalTransport"]


@registered("local")
class LocalTransport(Transport):
    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def shell(self, script: str, timeout: float = 60.0, stdin: bytes | None = None) -> ShellResult:
        try:
            if stdin is None:
                proc = subprocess.run(["sh", "-c", script], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
            else:
                proc = subprocess.run(["sh", "-c", script], capture_output=True, timeout=timeout, input=stdin)
        except subprocess.TimeoutExpired as exc:
            raise HostLost(f"local shell did not answer within {timeout:.0f} s", host=self.host.name) from exc
        return ShellResult(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))

    def put(self, path: str, data: bytes) -> None:
        Path(path).write_bytes(data)

    def get(self, path: str) -> bytes:
        return Path(path).read_bytes()
