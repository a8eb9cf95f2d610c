"""harness/loading.py: a command's start-up with the garbage collector off, then frozen out of its generations."""

from __future__ import annotations

import gc

import pytest

from harness.loading import loading


@pytest.fixture(autouse=True)
def _collector_as_it_was():
    was_on = gc.isenabled()
    yield
    gc.unfreeze()  # the rest of this test process: collected as before
    if was_on:
        gc.enable()
    else:
        gc.disable()


class _Built:
    """An object the collector tracks (a class instance with a __dict__)."""


def test_the_collector_is_off_inside_and_on_again_after_with_what_was_built_frozen() -> None:
    gc.enable()
    before = gc.get_freeze_count()
    with loading():
        assert not gc.isenabled()
        kept = [_Built() for _ in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(kept)
    assert not any(gc.is_tracked(b) and b in gc.get_objects(generation=0) for b in kept[:3])


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
