"""harness/cli/loading.py: a command's start-up with the garbage collector off, then frozen out of its generations (the
first start-up of a process only)."""

from __future__ import annotations

import gc
import weakref

import pytest

import harness.cli.loading
from harness.cli.loading import loading


@pytest.fixture(autouse=True)
def _collector_as_it_was(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(harness.cli.loading, "_frozen", False)  # each test: a process that has not started a command
    was_on = gc.isenabled()
    yield
    gc.unfreeze()  # the rest of this test process: collected as before
    if was_on:
        gc.enable()
    else:
        gc.disable()


class _Node:
    """An object the collector tracks; two that point at each other are freed only by a collector pass."""

    other: "_Node | None" = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_the_collector_is_off_inside_and_on_again_after_with_what_was_built_frozen() -> None:
    gc.enable()
    before = gc.get_freeze_count()
    with loading():
        assert not gc.isenabled()
        kept = [_Node() for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(kept)


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with loading():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_the_collector_is_back_on_when_the_start_up_raises() -> None:
    gc.enable()
    with pytest.raises(ImportError):
        with loading():
            raise ImportError("no module named 'missing'")
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0


def test_only_the_first_start_up_of_a_process_freezes_so_later_garbage_is_still_collected() -> None:
    gc.enable()
    with loading():
        pass
    frozen = gc.get_freeze_count()
    for _ in range(3):  # commands run one after another in one process, each leaving a cycle behind
        left = _cycle()
        with loading():
            pass
        assert gc.get_freeze_count() == frozen
        gc.collect()
        assert left() is None
