"""The SSH transport's deadlines (a command's limit, a transfer's no-progress limit): one watchdog thread per process
ends whatever passed its deadline, not a thread started per command (three per attempt, each start on its path)."""

from __future__ import annotations

import threading
import time

from workers.transport.ssh import _Deadline


def _watch_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("ssh-deadline"))


def test_many_deadlines_at_once_are_watched_by_one_thread() -> None:
    fired: list[int] = []
    held = [_Deadline(30.0, lambda n=n: fired.append(n)) for n in range(20)]
    for d in held:
        d.__enter__()
    try:
        assert _watch_threads() == 1
    finally:
        for d in held:
            d.__exit__(None, None, None)
    assert fired == []


def test_a_deadline_fires_once_passed_and_never_after_its_operation_ended() -> None:
    fired: list[str] = []
    ended = _Deadline(0.2, lambda: fired.append("ended"))
    with ended:
        pass
    passed = _Deadline(0.3, lambda: fired.append("passed"))
    started = time.monotonic()
    with passed:
        while not fired and time.monotonic() - started < 10:
            time.sleep(0.01)
    assert fired == ["passed"] and passed.expired and not ended.expired
    assert 0.25 <= time.monotonic() - started < 5
    time.sleep(0.3)
    assert fired == ["passed"]  # once


def test_progress_moves_a_deadline_and_an_earlier_one_is_not_held_up_by_a_later_one() -> None:
    fired: list[str] = []
    late = _Deadline(60.0, lambda: fired.append("late"))
    moving = _Deadline(0.3, lambda: fired.append("moving"))
    with late, moving:
        started = time.monotonic()
        while time.monotonic() - started < 0.9:  # three times its limit, with progress every 0.1 s
            moving.progress()
            time.sleep(0.1)
        assert fired == []
        soon = _Deadline(0.1, lambda: fired.append("soon"))  # sooner than anything the watchdog waits for
        with soon:
            time.sleep(0.05)
            while "moving" not in fired and time.monotonic() - started < 10:
                time.sleep(0.01)
        assert fired[:1] == ["soon"] and "moving" in fired and "late" not in fired


def test_a_deadline_fires_when_no_thread_can_be_started_for_it_and_the_watch_goes_on(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real_start = threading.Thread.start
    refused: list[str] = []

    def start(self: threading.Thread) -> None:
        if self.name == "ssh-deadline-expired" and not refused:
            refused.append(self.name)
            raise RuntimeError("can't start new thread")  # the process at its limit of threads
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    fired: list[str] = []
    for name in ("first", "second"):
        with _Deadline(0.05, lambda name=name: fired.append(name)):
            started = time.monotonic()
            while name not in fired and time.monotonic() - started < 5:
                time.sleep(0.01)
    assert refused and fired == ["first", "second"]
