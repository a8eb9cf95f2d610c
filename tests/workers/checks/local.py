"""Run acceptance checks in tests the way the attempt lifecycle does: ``workers.checks.runner.run_check``
over the local transport, with this interpreter as the host's Python."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.core.checks.result import CheckResult
from workers.checks.runner import CheckPlace, run_check
from harness.core.checks.spec import CheckSpec
from harness.core.inventory import AgentConfig, Host, ModelEndpoint
from workers.transport.local import LocalTransport

__all__ = ["HERE", "pytest_check", "run_here"]

HERE = Host(name="here", transport="local", python=sys.executable,
            model=ModelEndpoint(base_url="http://127.0.0.1:9/v1", id="none", context=4096, max_output=512),
            agents={"none": AgentConfig(command=["true"])})


def pytest_check(*files: Path, name: str = "item-checks", values: dict[str, str] | None = None) -> CheckSpec:
    """A pytest check of these files, as the catalog sends it with an attempt."""
    return CheckSpec(name=name, kind="pytest", files={Path(f).name: Path(f).read_text(encoding="utf-8") for f in files},
                     values=values or {})


def run_here(check: CheckSpec, workspace: Path, timeout_s: float, folder: Path | None = None) -> CheckResult:
    """``check`` against ``workspace`` on this machine, in ``folder`` (default: beside the workspace)."""
    folder = folder or Path(workspace).parent / f".checks-{check.name}"
    place = CheckPlace(folder=str(folder), workspace=str(workspace), python=sys.executable, timeout_s=timeout_s)
    return run_check(LocalTransport(HERE), check, place)
