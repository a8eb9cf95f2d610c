"""The first stop signal raises Stopped; the ones after it are ignored until the command is done stopping."""

from __future__ import annotations

import os
import signal

import pytest

from harness.stopping import Stopped, stop_signals


@pytest.mark.parametrize(("sig", "how"), [(signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP"),
                                          (signal.SIGINT, "Ctrl-C")])
def test_the_first_signal_stops_and_the_next_ones_are_ignored(sig: signal.Signals, how: str) -> None:
    before = signal.getsignal(sig)
    cleaned = []
    with pytest.raises(Stopped) as stopped:
        with stop_signals():
            try:
                os.kill(os.getpid(), sig)
            finally:
                # Stopping: what a second (and third) signal must not cut short.
                os.kill(os.getpid(), sig)
                os.kill(os.getpid(), signal.SIGTERM)
                cleaned.append(True)
    assert stopped.value.how == how and isinstance(stopped.value, KeyboardInterrupt)
    assert cleaned == [True]
    assert signal.getsignal(sig) == before
