"""The first stop signal raises Stopped; the ones after it are ignored until the command is done stopping."""

from __future__ import annotations

import os
import signal

import pytest

from harness.coordinator.stopping import Stopped, stop_signals


@pytest.fixture(autouse=True)
def _library_log_levels():  # type: ignore[no-untyped-def]
    """A stop signal quiets every library's logging for the rest of the process: this test process goes on."""
    import logging

    loggers = [logging.getLogger(), *(v for v in logging.root.manager.loggerDict.values() if isinstance(v, logging.Logger))]
    levels = [(logger, logger.level) for logger in loggers]
    yield
    for logger, level in levels:
        logger.setLevel(level)


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
    from harness.core.errors import DispatchError

    def interrupted_mid_import(**_: object) -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            signal.pthread_sigmask(signal.SIG_BLOCK, [])  # let the handler run here
        except KeyboardInterrupt:
            pass  # what a library's broad except does to it
        raise DispatchError("cannot set up the embedded queue under runs/.queue: name 'coroutines' is not defined")

    monkeypatch.setattr(harness.cli.cli, "main", interrupted_mid_import)
    monkeypatch.setattr("harness.coordinator.stopping._received", [])
    with pytest.raises(SystemExit) as exc:
        harness.cli.main(["sweep"])
    assert exc.value.code == 130
    err = capsys.readouterr().err
    assert err.startswith("fleet: interrupted (Ctrl-C); while stopping: cannot set up the embedded queue") and \
        err.count("\n") == 1, err


def test_a_library_that_logs_what_the_stop_cut_short_prints_nothing() -> None:
    # The signal lands while SQLAlchemy's pool closes the embedded broker's connection: the pool logs the
    # KeyboardInterrupt with a traceback (on stderr, through logging's last resort) and re-raises it.
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import logging, os, signal, sys
        from harness.coordinator.stopping import Stopped, stop_signals
        fleet = logging.getLogger("fleet")
        fleet.propagate = False
        fleet.setLevel(logging.INFO)
        fleet.addHandler(logging.StreamHandler(sys.stdout))
        logging.getLogger("kombu").setLevel(logging.WARNING)
        pool = logging.getLogger("sqlalchemy.pool.impl.QueuePool")
        pool.error("before the stop")
        try:
            with stop_signals():
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                except Stopped:
                    pool.error("Exception closing connection", exc_info=True)
                    logging.getLogger("kombu.transport").error("kombu after the stop")
                    logging.getLogger("celery").warning("celery after the stop")
                    raise
        except Stopped:
            fleet.info("fleet's own log goes on")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "before the stop\n"
    assert r.stdout == "fleet's own log goes on\n"


def test_a_signal_that_stopped_an_earlier_block_is_forgotten_by_the_next() -> None:
    # Commands run one after another in one process (tests, scripts): the second is not told it was interrupted.
    from harness.coordinator.stopping import received

    with pytest.raises(Stopped):
        with stop_signals():
            os.kill(os.getpid(), signal.SIGTERM)
    assert received() is not None
    with stop_signals():
        assert received() is None
    assert received() is None
