"""Helpers shared by the unit tests: a synthetic sweep and attempt results, no inventory or prompt files."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from harness.core.catalog import Item
from harness.core.records import Artifact, AttemptResult, Cell, HostSummary, utc_now
from harness.core.sweep import SweepRecord

__all__ = ["REPO", "TESTS", "synthetic_sweep", "finished_result", "fleet_argv", "run_fleet", "assert_one_line_error",
           "table_column"]

REPO = Path(__file__).resolve().parents[1]
"""The checkout: docs/, prompts/, workers/ and the tests are found from here, wherever a test file lives."""
TESTS = REPO / "tests"


def synthetic_sweep(sweep_id: str = "20261201-000000-t", hosts: int = 2, items: int = 3, reps: int = 1) -> SweepRecord:
    """A planned sweep of hosts x items x reps cells for the builtin agent."""
    host_names = [f"host{i}" for i in range(hosts)]
    its = [Item(id=f"{i:02d}-item", number=f"{i:02d}", kind="open", title="t", prompt="p", timeout_s=60)
           for i in range(1, items + 1)]
    cells = [Cell(id=Cell.make_id(h, it.id, "builtin", r), host=h, item=it.id, agent="builtin", rep=r, seed=r)
             for h in host_names for it in its for r in range(1, reps + 1)]
    summary = HostSummary(name="h", transport="local", os="linux", address="", slots=1, tags=[], model_id="m",
                          model_base_url="http://127.0.0.1:9/v1", context=4096, max_output=512)
    return SweepRecord(id=sweep_id, created_at=utc_now(), inventory="/inv.toml", prompts="/prompts", harness_commit="c",
                       hosts={h: summary.model_copy(update={"name": h}) for h in host_names},
                       items={i.id: i for i in its}, cells=cells)


def finished_result(sweep: SweepRecord, cell: Cell, attempt: int = 1, **fields) -> AttemptResult:  # type: ignore[no-untyped-def]
    """A finished attempt with a few artifacts, as a worker sends it."""
    data: dict = dict(
        sweep_id=sweep.id, cell_id=cell.id, attempt=attempt, status="finished", exit_code=0, host=cell.host,
        agent=cell.agent, item=cell.item, duration_s=1.0,
        artifacts=[Artifact.of("agent.stdout", b"out\n"), Artifact.of("answer.txt", f"answer {cell.id}".encode())],
    )
    data.update(fields)
    return AttemptResult(**data)


def fleet_argv() -> list[str]:
    """The installed `fleet` console script (beside this Python), else `python -m harness.cli`."""
    beside = Path(sys.executable).parent / "fleet"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("fleet")
    return [found] if found else [sys.executable, "-m", "harness.cli"]


def run_fleet(*args: str, cwd: Path, **fleet_env: str) -> subprocess.CompletedProcess[str]:
    """The real `fleet` command in ``cwd`` with no FLEET_* settings but ``fleet_env``, 80 columns wide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_") and k not in ("COLUMNS", "LINES")}
    # The width of a plain 80-column terminal (also what rich assumes when stderr is not a terminal):
    # an error line must stay one line however long the file path in it is.
    env["COLUMNS"] = "80"
    env["FLEET_HARNESS_COMMIT"] = "test-commit"
    env.update(fleet_env)
    return subprocess.run(
        [*fleet_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Bad input: exit 2, one line `fleet: error: ...` holding every needle, no traceback; returns the line."""
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("fleet: error: ")
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def table_column(text: str, index: int) -> str:
    """Column ``index`` (from 1) of a rich table printed in ``text``, every body line's piece of it joined with
    the spacing taken out: what a folded cell says, whole, whatever the terminal's width."""
    pieces = [line.split("│")[index] for line in text.splitlines() if line.count("│") > index]
    return "".join("".join(p.split()) for p in pieces)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process; a zombie (or a process ending) counts as dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, IndexError):
        return False


def replace_failing_at(n: int) -> "tuple[Callable[[str, Path], None], list[Path]]":
    """An ``os.replace`` for monkeypatching whose ``n``-th call fails as on a full disk (ENOSPC), and the targets it
    was called with: a batch of renames that stops half-way."""
    real, calls = os.replace, []

    def replace(src: str, dst: Path) -> None:
        calls.append(dst)
        if len(calls) == n:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    return replace, calls
