"""Stopping a `fleet` command: Ctrl-C, SIGTERM (a service manager) and SIGHUP (a closed terminal) alike.

The first of them raises ``Stopped`` (a KeyboardInterrupt) in the main thread, so a running sweep revokes
what is in flight, records it, kills its agents and leaves the sweep ``interrupted``. Every later one is
ignored: a second Ctrl-C while the agents are being killed must not cut that short (and leave them running),
nor print a traceback from the interpreter's shutdown.

The first one also quiets every library's logging (all but the ``fleet`` logger): ``Stopped`` is raised wherever
the main thread happens to be, and a library that logs what it caught there (SQLAlchemy's pool logs "Exception
closing connection" with a traceback when the signal lands while the embedded broker closes a connection) would
print a traceback before the one line the stop is reported with.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from types import FrameType
from typing import Iterator

__all__ = ["Stopped", "stop_signals", "received", "quiet_libraries", "SIGNALS"]

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal reached the process; ``how`` names it as people say it (Ctrl-C, SIGTERM, SIGHUP)."""

    def __init__(self, signum: int) -> None:
        self.how = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        super().__init__(self.how)


_received: list[Stopped] = []


def received() -> Stopped | None:
    """The stop signal this process got inside its latest ``stop_signals`` block, if any. An error raised after it is
    most likely its consequence (a library import or a connection cut short by the interrupt, reported as something
    else)."""
    return _received[0] if _received else None


def quiet_libraries() -> None:
    """From now on no library logs anything: the root logger and every logger with a level of its own (a child
    without one inherits its parent's) are raised above CRITICAL. ``fleet``'s own log (its log file) is kept."""
    loggers = [logging.getLogger(), *(logger for name, logger in logging.root.manager.loggerDict.items()
                                      if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET
                                      and name != "fleet" and not name.startswith("fleet."))]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """While the block runs, the first stop signal raises ``Stopped`` and the rest are ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be set from the main thread; whoever runs us there owns them
        return
    # A process that runs commands one after another (a test, a script, the fuzz runner) starts each afresh: a signal
    # that stopped an earlier command must not make this one's errors read as an interrupt.
    _received.clear()
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        stopped = Stopped(signum)
        _received.append(stopped)
        quiet_libraries()
        raise stopped

    old = {sig: signal.signal(sig, stop) for sig in SIGNALS}
    try:
        yield
    finally:
        # Still stopping (agents being killed, records written) until here: only now do the old handlers return.
        for sig, handler in old.items():
            signal.signal(sig, handler)
