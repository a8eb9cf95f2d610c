"""A broker URL is checked before anything is planned: one line naming the URL, password hidden, within 5 s."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from harness.coordinator.brokercheck import check_broker_url
from harness.core.errors import DispatchError
from tests.support import run_fleet


@pytest.fixture
def black_hole():
    """A loopback port that accepts connections and never answers: what a hung Redis or a proxy looks like."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_broker_that_accepts_and_never_answers_is_one_error_within_the_bound(black_hole: int) -> None:
    started = time.monotonic()
    with pytest.raises(DispatchError) as caught:
        check_broker_url(f"redis://:hunter2@127.0.0.1:{black_hole}/0", timeout_s=1.0)
    assert time.monotonic() - started < 2.0
    assert f"redis://:***@127.0.0.1:{black_hole}/0" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_closed_port_is_one_error_naming_the_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    with pytest.raises(DispatchError, match=f"cannot reach the broker at redis://127.0.0.1:{port}/0"):
        check_broker_url(f"redis://127.0.0.1:{port}/0", timeout_s=1.0)


def test_sweep_against_a_silent_broker_says_so_in_one_line_within_5_s_and_stores_nothing(
        black_hole: int, tmp_path: Path) -> None:
    started = time.monotonic()
    proc = run_fleet("sweep", "--items", "04", "--runs", str(tmp_path / "runs"),
                     "--broker", f"redis://:hunter2@127.0.0.1:{black_hole}/0", cwd=tmp_path)
    took = time.monotonic() - started
    assert took < 5.0, took
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    # The bracket is redis-py's own words, which differ between its versions ("from socket", "from HOST:PORT").
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"fleet: error: cannot reach the broker at redis://:***@127.0.0.1:{black_hole}/0: "
                           "no answer within the timeout (Timeout reading from "), line
    assert "hunter2" not in proc.stderr
    assert not list((tmp_path / "runs").glob("2*"))  # no sweep planned or stored


def test_a_result_backend_that_cannot_be_reached_is_one_line_naming_it(tmp_path: Path) -> None:
    # The broker answered, so the sweep was planned and stored, then waited out a "broker" outage (300 s)
    # reading results from FLEET_RESULT_BACKEND.
    import shutil
    import subprocess

    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server")
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    broker, closed = ports
    server = subprocess.Popen(["redis-server", "--port", str(broker), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", broker), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        started = time.monotonic()
        proc = run_fleet("sweep", "--items", "04", "--runs", str(tmp_path / "runs"),
                         "--broker", f"redis://127.0.0.1:{broker}/0", cwd=tmp_path,
                         FLEET_RESULT_BACKEND=f"redis://:hunter2@127.0.0.1:{closed}/0")
        assert time.monotonic() - started < 10
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert proc.stderr.splitlines() == [
            f"fleet: error: cannot reach the result backend at redis://:***@127.0.0.1:{closed}/0: "
            f"Error 111 connecting to 127.0.0.1:{closed}. Connection refused."], proc.stderr
        assert not list((tmp_path / "runs").glob("2*"))  # no sweep planned or stored
    finally:
        server.terminate()
        server.wait()
