"""A command's start-up without the cyclic garbage collector scanning what it loads.

Loading the modules a command needs builds tens of thousands of long-lived objects (classes, pydantic models and
their validators) and almost no garbage. With the collector on, each 700 new objects start a pass and every tenth
of those a pass over everything built so far: about 70 passes, 20 ms of a 300 ms `fleet import`. At exit the
interpreter scans everything once more before it frees it (another 20 ms). ``loading()`` keeps the collector off
while the command loads what it needs, then freezes what was loaded (``gc.freeze``: no later pass, nor the one at
exit, scans it) and turns the collector back on for the work.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["loading"]


@contextmanager
def loading() -> Iterator[None]:
    """Around a command's imports (and any other one-time set-up it builds to keep): the collector is off inside and
    as it was before afterwards; what was built inside is frozen out of its generations, even when the block raises."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_on:
            gc.enable()
