"""The coordinator service's one-sweep-per-schedule rule holds across two `fleet schedule service` processes of
one namespace (a second one started by mistake, or an old one not yet stopped): the sweep's thread holds the
schedule's run lock, so a fire the other service gets is skipped or queued, and a service starting up leaves
alone a sweep the other one runs. The sweeps themselves are stood in for (no broker needed)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from harness.schedule.config import Schedule
from harness.schedule.service import Service
from harness.core.settings import Settings


def _wait(cond, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture()
def sweeps(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[int, str]], threading.Event]:
    """Each sweep records (service, fire) and runs until the gate opens."""
    started: list[tuple[int, str]] = []
    gate = threading.Event()

    def one_sweep(self: Service, state) -> None:  # noqa: ANN001
        started.append((id(self), state.fired_at))
        assert gate.wait(20)

    monkeypatch.setattr(Service, "_one_sweep", one_sweep)
    return started, gate


def _schedule(on_late: str = "skip") -> Schedule:
    return Schedule(name="nightly", every_s=60, inventory="/nowhere/fleet.toml", label="nightly", on_late=on_late)


def test_a_fire_the_second_service_gets_while_the_first_runs_the_sweep_is_skipped_or_queued(tmp_path: Path, sweeps) -> None:
    started, gate = sweeps
    settings = Settings(runs=tmp_path / "runs")
    lines: list[str] = []
    a, b = Service(settings, say=lines.append), Service(settings, say=lines.append)
    a.fire(_schedule(), "t1")
    _wait(lambda: len(started) == 1, "the first sweep")
    b.fire(_schedule(), "t2")
    assert any("fired at t2 while sweep" in line and "skipped" in line for line in lines), lines
    b.fire(_schedule("queue"), "t3")
    assert any("fired at t3 while sweep" in line and "queued" in line for line in lines), lines
    assert started == [(id(a), "t1")]  # no second sweep beside the first
    gate.set()
    # The first service's thread runs the fire the other one queued, then lets the schedule go.
    _wait(lambda: not a.running(), "the first service's thread to end")
    assert started == [(id(a), "t1"), (id(a), "t3")]
    assert a.load_state("nightly").status == "idle"
    # Let go: the next fire, whichever service gets it, runs.
    b.fire(_schedule(), "t4")
    _wait(lambda: len(started) == 3, "the next sweep")
    assert started[-1] == (id(b), "t4")
    _wait(lambda: not b.running(), "the second service's thread to end")


def test_a_service_starting_up_leaves_alone_the_sweep_another_service_runs(tmp_path: Path, sweeps) -> None:
    started, gate = sweeps
    settings = Settings(runs=tmp_path / "runs")
    lines: list[str] = []
    a = Service(settings, say=lines.append)
    a.fire(_schedule(), "t1")
    _wait(lambda: len(started) == 1, "the first sweep")
    b = Service(settings, say=lines.append)
    b.resume_interrupted()
    assert started == [(id(a), "t1")] and not b.running()
    assert any("is run by another service; left to it" in line for line in lines), lines
    gate.set()
    _wait(lambda: not a.running(), "the sweep to end")
    assert a.load_state("nightly").status == "idle"  # b did not mark it idle, or failed, under a's feet


def test_a_second_fire_in_one_service_is_skipped_as_before(tmp_path: Path, sweeps) -> None:
    started, gate = sweeps
    lines: list[str] = []
    a = Service(Settings(runs=tmp_path / "runs"), say=lines.append)
    a.fire(_schedule(), "t1")
    _wait(lambda: len(started) == 1, "the first sweep")
    a.fire(_schedule(), "t2")
    assert len(started) == 1 and any("skipped" in line for line in lines)
    gate.set()
    _wait(lambda: not a.running(), "the sweep to end")
