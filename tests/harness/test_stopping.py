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


def test_an_error_that_follows_a_stop_signal_is_reported_as_the_interrupt(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # Ctrl-C in the middle of an import: the library swallows the KeyboardInterrupt and the half-done import fails
    # later in its own words ("name 'coroutines' is not defined"), which must not read as a broken queue, exit 1.
    import os
    import signal

    import pytest

    import harness.cli
    from harness.errors import DispatchError

    def interrupted_mid_import(**_: object) -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # let the handler run here
        except KeyboardInterrupt:
            pass  # what a library's broad except does to it
        raise DispatchError("cannot set up the embedded queue under runs/.queue: name 'coroutines' is not defined")

    monkeypatch.setattr(harness.cli.cli, "main", interrupted_mid_import)
    monkeypatch.setattr("harness.stopping._received", [])
    with pytest.raises(SystemExit) as exc:
        harness.cli.main(["sweep"])
    assert exc.value.code == 130
    err = capsys.readouterr().err
    assert err.startswith("fleet: interrupted (Ctrl-C); while stopping: cannot set up the embedded queue") and \
        err.count("\n") == 1, err
