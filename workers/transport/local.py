"""The local transport: this machine, for the embedded default and for workers on the host itself.

Its shell scripts run with this machine's environment as the host's, less the harness's own settings
(``FLEET_BROKER_URL`` with its Redis password, the result backend ...): those are the worker's, and a host
reached over SSH would not have them either. What the agent itself gets is narrower still (the launcher's
allow-list, docs/environment.md); this keeps the settings from the checks and probes as well.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.core.errors import HostLost
from harness.core.settings import setting_specs
from workers.transport.base import ShellResult, Transport
from workers.transport.registry import registered

__all__ = ["LocalTransport", "host_environment"]


def host_environment() -> dict[str, str]:
    """This process's environment without any variable a harness setting is read from."""
    settings = {spec.env for spec in setting_specs() if spec.env}
    return {k: v for k, v in os.environ.items() if k not in settings}


@registered("local")
class LocalTransport(Transport):
    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def shell(self, script: str, timeout: float = 60.0, stdin: bytes | None = None) -> ShellResult:
        try:
            if stdin is None:
                proc = subprocess.run(["sh", "-c", script], capture_output=True, timeout=timeout,
                                      stdin=subprocess.DEVNULL, env=host_environment())
            else:
                proc = subprocess.run(["sh", "-c", script], capture_output=True, timeout=timeout, input=stdin,
                                      env=host_environment())
        except subprocess.TimeoutExpired as exc:
            raise HostLost(f"local shell did not answer within {timeout:.0f} s", host=self.host.name) from exc
        return ShellResult(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))

    def put(self, path: str, data: bytes) -> None:
        Path(path).write_bytes(data)

    def get(self, path: str) -> bytes:
        return Path(path).read_bytes()
