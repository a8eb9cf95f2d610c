"""The embedded default's worker runs inside the coordinator's process and leaves it as it found it."""

from __future__ import annotations

from pathlib import Path

from celery._state import task_join_will_block

from harness.core.settings import Settings
from harness.coordinator.embedded import embedded_worker
from workers.app import configure


def test_a_process_may_wait_on_a_result_again_once_its_embedded_worker_stopped(tmp_path: Path) -> None:
    # A worker marks its process as one where joining a task would block ("Never call result.get() within a task!"):
    # a script or test that goes on after an in-process sweep must not be left so.
    app = configure(Settings.resolve({"runs": tmp_path / "runs"}, {}))
    assert not task_join_will_block()
    with embedded_worker(app, ["fleet.test.embedded"], 1, lock_dir=tmp_path / "runs"):
        assert task_join_will_block()
    assert not task_join_will_block()


def test_a_worker_that_did_not_start_leaves_the_process_as_it_was(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from harness.coordinator import embedded
    from harness.core.errors import DispatchError

    def broken(self) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("the broker is gone")

    monkeypatch.setattr(embedded._Controller, "start", broken)
    app = configure(Settings.resolve({"runs": tmp_path / "runs"}, {}))
    with pytest.raises(DispatchError, match="did not start: the broker is gone"):
        with embedded_worker(app, ["fleet.test.broken"], 1, lock_dir=tmp_path / "runs"):
            pass
    assert not task_join_will_block()
