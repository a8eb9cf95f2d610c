"""A command's start-up without the cyclic garbage collector scanning what it loads.

Loading the modules a command needs builds tens of thousands of long-lived objects (classes, pydantic models and
their validators) and almost no garbage. With the collector on, every 700 new objects start a pass, and some of
those passes go over everything built so far: about 70 passes, 20 ms of a 300 ms `fleet import`. At exit the
interpreter scans everything once more before it frees it (another 20 ms). ``loading()`` keeps the collector off
while the command loads what it needs, then freezes what was loaded (``gc.freeze``: no later pass, nor the one at
exit, scans it) and turns the collector back on for the work.

A freeze keeps everything the collector tracks at that moment, garbage waiting for a pass included, until the
process ends. So only the first ``loading()`` of a process freezes: in the `fleet` process that is the command's
start, with nothing before it but the interpreter's and the CLI's own start; a process that runs commands one
after another (a test, a script calling ``harness.cli.main``) would otherwise keep each moment's garbage for good.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["loading"]

_frozen = False
"""Whether this process has frozen its start-up already (at most once: see above)."""


@contextmanager
def loading() -> Iterator[None]:
    """Around a command's imports (and any other one-time set-up it keeps): the collector is off inside and as it
    was before afterwards, even when the block raises; the first time in a process, what exists then is frozen out
    of the collector's generations."""
    global _frozen
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if not _frozen:
            _frozen = True
            gc.freeze()
        if was_on:
            gc.enable()
