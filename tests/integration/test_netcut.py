"""A host that stops answering (its link cut silently: packets dropped, no reset) is lost within a bounded time.

Real parts only: an OpenSSH sshd in a network namespace made by the test, a veth pair whose namespace end is
taken down to cut the link, the real SSH transport, and for the lifecycle real `fleet worker` processes on a
real redis-server. Each bound asserted here is the documented one (docs/transport.md) plus a margin for a
loaded test machine; without the deadlines and keepalives each of these calls waited for minutes.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from harness.core.errors import HostLost, HostUnreachable
from harness.core.inventory import Host
from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.netcut import NetnsHost, netns_available
from tests.integration.fleetkit import run_fleet, start_fleet
from workers.transport.ssh import SSHTransport

pytestmark = pytest.mark.integration

MARGIN_S = 3.0
"""Slack on every bound for a busy 2-core test machine."""


@pytest.fixture
def cut_host(tmp_path: Path, client_key):
    """A fresh sshd host in its own namespace; the namespace and veth pair are removed however the test ends."""
    why = netns_available()
    if why:
        pytest.fail(f"network namespaces cannot be made here: {why}")
    host = NetnsHost("cutty", tmp_path / "cutty", client_key[1])
    try:
        host.setup()
        host.start()
        yield host
    finally:
        host.remove()


def _host(h: NetnsHost, identity: Path, **limits: float) -> Host:
    return Host(name=h.name, address=h.address, port=h.port, user="root", identity_file=str(identity),
                host_key=h.host_key_line, model={"base_url": "http://127.0.0.1:9/v1", "id": "m", "context": 4096,
                                                 "max_output": 512},
                agents={"cmd": {"command": ["true"]}}, **{"connect_timeout": 5.0, **limits})


def _timed(call, *args, give_up_s: float = 60.0):  # type: ignore[no-untyped-def]
    """Run ``call(*args)`` and return (the HostLost or HostUnreachable it raised or None, seconds it took). On a
    thread: a call that blocks past ``give_up_s`` (what these calls did before they had deadlines) makes the test
    fail, rather than hang; the fixture's cleanup then ends the blocked call."""
    outcome: list = []

    def run() -> None:
        t0 = time.monotonic()
        try:
            call(*args)
        except (HostLost, HostUnreachable) as exc:
            outcome.append((exc, time.monotonic() - t0))
        else:
            outcome.append((None, time.monotonic() - t0))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(give_up_s)
    assert outcome, f"{getattr(call, '__name__', call)} still blocked after {give_up_s:g} s"
    return outcome[0]


# -- the transport: each operation against a cut host ---------------------------------------------------------------

def test_a_command_on_a_cut_host_is_lost_by_the_keepalive(cut_host, client_key):
    """The command's own deadline is long (60 s); the keepalive (2 s x 3) notices the cut first."""
    t = SSHTransport(_host(cut_host, client_key[0], keepalive_interval=2, keepalive_count=3))
    try:
        assert t.shell("echo up", timeout=10).stdout == "up\n"
        cut_host.cut()
        exc, took = _timed(t.shell, "sleep 100", 60)
        assert isinstance(exc, HostLost), exc
        assert "keepalive" in str(exc)
        assert took <= 2 * (3 + 1) + MARGIN_S, took
    finally:
        cut_host.restore()
        t.close()


def test_a_command_on_a_cut_host_is_lost_at_its_deadline(cut_host, client_key):
    """Keepalives far apart (60 s): the command's deadline (5 s) alone bounds it."""
    t = SSHTransport(_host(cut_host, client_key[0], keepalive_interval=60))
    try:
        t.open()
        cut_host.cut()
        exc, took = _timed(t.shell, "echo never", 5)
        assert isinstance(exc, HostLost), exc
        assert "did not finish within 5 s" in str(exc)
        assert took <= 5 + MARGIN_S, took
        # Connecting again to the cut host waits no longer than connect_timeout for the whole handshake.
        exc, took = _timed(t.open)
        assert isinstance(exc, HostUnreachable), exc
        assert took <= 5 + MARGIN_S, took
    finally:
        cut_host.restore()
        t.close()
    # The link is back: the same transport connects again.
    assert t.shell("echo back", timeout=10).stdout == "back\n"
    t.close()


def test_a_download_from_a_cut_host_is_lost_when_no_data_moves(cut_host, client_key):
    t = SSHTransport(_host(cut_host, client_key[0], keepalive_interval=60, stall_timeout=4))
    big = cut_host.folder / "big.bin"
    big.write_bytes(b"x" * (8 << 20))
    try:
        assert len(t.get(str(big))) == 8 << 20  # the SFTP channel is open before the cut
        cut_host.cut()
        exc, took = _timed(t.get, str(big))
        assert isinstance(exc, HostLost), exc
        assert "moved no data for 4 s" in str(exc)
        assert took <= 4 + MARGIN_S, took
    finally:
        cut_host.restore()
        t.close()


def test_an_upload_to_a_cut_host_is_lost_when_no_data_moves(cut_host, client_key):
    t = SSHTransport(_host(cut_host, client_key[0], keepalive_interval=60, stall_timeout=4))
    target = str(cut_host.folder / "upload.bin")
    try:
        t.put(target, b"first")
        cut_host.cut()
        exc, took = _timed(t.put, target, b"y" * (16 << 20))
        assert isinstance(exc, HostLost), exc
        assert "moved no data for 4 s" in str(exc)
        assert took <= 4 + MARGIN_S, took
    finally:
        cut_host.restore()
        t.close()


def test_closing_a_connection_to_a_cut_host_does_not_wait(cut_host, client_key):
    t = SSHTransport(_host(cut_host, client_key[0], keepalive_interval=60))
    t.open()
    t.put(str(cut_host.folder / "f"), b"sftp channel open")
    cut_host.cut()
    try:
        t0 = time.monotonic()
        t.close()
        assert time.monotonic() - t0 <= 1.0
        assert not t.alive
    finally:
        cut_host.restore()


def test_a_host_that_accepts_and_never_speaks_is_unreachable_within_connect_timeout(tmp_path):
    """TCP connects, no SSH banner ever comes (a wedged sshd): the handshake's one deadline is connect_timeout,
    not paramiko's own 15 s banner and 30 s auth waits."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
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
    host = Host(name="mute", address="127.0.0.1", port=port, user="root", host_key="SHA256:" + "A" * 43,
                model={"base_url": "http://127.0.0.1:9/v1", "id": "m", "context": 4096, "max_output": 512},
                agents={"cmd": {"command": ["true"]}}, connect_timeout=3)
    try:
        exc, took = _timed(SSHTransport(host).open)
        assert isinstance(exc, HostUnreachable), exc
        assert "did not finish within 3 s" in str(exc)
        assert took <= 3 + MARGIN_S, took
    finally:
        stop.set()
        thread.join(5)
        for s in held:
            s.close()
        server.close()


def test_an_sshd_that_never_answers_the_login_is_unreachable_within_connect_timeout(tmp_path, client_key):
    """A real sshd whose key lookup hangs (AuthorizedKeysCommand sleeps): the login's answer never comes. The
    handshake's one deadline (connect_timeout = 3 s) ends it, not paramiko's own 30 s auth wait."""
    import shutil
    import uuid

    from tests.integration.fleetkit import SSHHost

    # sshd runs the command only from a folder tree that no one but root may write to: not under /tmp.
    folder = Path("/run") / f"fleet-test-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o755)
    slow = folder / "slow-keys"
    slow.write_text("#!/bin/sh\nsleep 60\n")
    slow.chmod(0o755)
    host = SSHHost("stuck", tmp_path / "stuck", client_key[1])
    host.setup()
    config = host.folder / "sshd_config"
    config.write_text(config.read_text().replace(f"AuthorizedKeysFile {host.folder / 'authorized_keys'}",
                                                 "AuthorizedKeysFile none")
                      + f"AuthorizedKeysCommand {slow} %u\nAuthorizedKeysCommandUser root\n")
    try:
        host.start()
        t = SSHTransport(Host(name="stuck", address="127.0.0.1", port=host.port, user="root",
                              identity_file=str(client_key[0]), host_key=host.host_key_line,
                              model={"base_url": "http://127.0.0.1:9/v1", "id": "m", "context": 4096, "max_output": 512},
                              agents={"cmd": {"command": ["true"]}}, connect_timeout=3))
        exc, took = _timed(t.open)
        assert isinstance(exc, HostUnreachable), exc
        assert "did not finish within 3 s" in str(exc)
        assert took <= 3 + MARGIN_S, took
    finally:
        host.stop()
        shutil.rmtree(folder, ignore_errors=True)


# -- the lifecycle: a sweep with one cut host and one healthy one -----------------------------------------------------

KEEPALIVE = """\
    keepalive_interval = 2
    keepalive_count = 3
    """
BOUND_S = 2 * (3 + 1) + 2 * 5
"""From the cut to the attempt's record: keepalive_interval x (keepalive_count + 1), then the lifecycle's two tries
to reach the host again (the kill, the removal of the delivery folder), each given up after connect_timeout (5 s in
the test inventory), as docs/transport.md gives it."""


def _utc(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _started(host: NetnsHost, timeout: float = 60.0) -> Path:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = list(host.workdir.glob("**/started.json"))  # the launcher's record that the agent runs
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"the agent on {host.name} never started")


def _first_record(runs: Path, host: str, within: float) -> Path:
    """meta.json of the first attempt of ``host`` the store records: with one slot, the one that was running."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        found = list(runs.glob(f"*/{host}/*/*/*/attempt-*/meta.json"))
        if found:
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no record of an attempt on {host} {within:g} s after the cut")


def test_a_sweep_loses_the_cut_host_within_the_bound_and_resume_completes_it(
        tmp_path, cut_host, ssh_hosts, client_key, redis_server, namespace, workers):
    import hashlib

    alpha = ssh_hosts["alpha"]
    # The first run sleeps 60 s (past the item's 30 s timeout): the link is cut while it sleeps. Runs after the
    # cut (resume's) are quick, so the test does not wait out another minute per cell.
    slow = tmp_path / "slow"
    slow.touch()
    sleeper = ["sh", "-c", f"if [ -e {slow} ]; then sleep 60; fi; echo woke"]
    inv = write_inventory(tmp_path / "inv.toml", [
        cut_host.toml(client_key[0], agent=sleeper, extra=KEEPALIVE),
        alpha.toml(client_key[0], agent=["sh", "-c", 'sleep 1; cp "$1" received.txt', "sh", "{prompt_file}"]),
    ])
    prompts = write_prompts(tmp_path / "prompts", {"01-nap": "nap\n", "02-nap": "nap again\n"}, timeout_s=30)
    workers(["cutty"], inv)
    workers(["alpha"], inv)
    runs = tmp_path / "runs"
    sweep = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                         "--broker", redis_server.url, "--max-attempts", "1", "--repeat", "2"], namespace)
    try:
        _started(cut_host)
        cut_host.cut()
        cut_at = time.time()
        slow.unlink()
        # The running attempt's record comes within the bound (a generous wait, so a failure says what happened).
        record = _first_record(runs, cut_host.name, within=BOUND_S + MARGIN_S + 20)
        out, err = sweep.communicate(timeout=240)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
        cut_host.restore()
    assert sweep.returncode == 0, err[-3000:]
    summary = json.loads(out)
    sweep_id = summary["sweep"]
    cells = {c["id"]: c for c in summary["cells"]}
    # The healthy host went on and finished all of its cells, every artifact stored whole.
    healthy = [c for c in cells.values() if c["host"] == "alpha"]
    assert len(healthy) == 4 and {c["status"] for c in healthy} == {"finished"}
    for c in healthy:
        meta = json.loads((runs / sweep_id / c["id"] / "attempt-1" / "meta.json").read_text())
        for art in meta["artifacts"]:
            assert hashlib.sha256((runs / sweep_id / c["id"] / "attempt-1" / art["name"]).read_bytes()).hexdigest() \
                == art["sha256"]
    # The cut host's running attempt was lost within the bound: never finished, never a model timeout.
    lost = [c for c in cells.values() if c["host"] == "cutty" and c["reason"] == "host_lost"]
    assert len(lost) == 1, [(c["id"], c["status"], c["reason"]) for c in cells.values() if c["host"] == "cutty"]
    assert record == runs / sweep_id / lost[0]["id"] / "attempt-1" / "meta.json"
    meta = json.loads(record.read_text())
    assert meta["status"] == "harness_failure" and meta["reason"] == "host_lost", meta
    took = _utc(meta["ended_at"]) - cut_at
    print(f"cut -> host_lost recorded by the worker: {took:.1f} s (bound {BOUND_S} s)")
    assert took <= BOUND_S + MARGIN_S, took
    # Every other cell of the cut host found it unreachable (the link was still cut): nothing ran there.
    for c in cells.values():
        if c["host"] == "cutty" and c is not lost[0]:
            assert c["status"] == "harness_failure" and c["reason"] in ("host_unreachable", "host_lost"), c

    # The link is back: resume runs the cut host's cells again and they finish.
    r = run_fleet(["resume", sweep_id, "--json", "--runs", str(runs), "--broker", redis_server.url,
                   "--max-attempts", "2"], namespace, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    after = {c["id"]: c for c in json.loads(r.stdout)["cells"]}
    assert {c["status"] for c in after.values()} == {"finished"}, [(c["id"], c["status"]) for c in after.values()]
    assert after[lost[0]["id"]]["attempts"] == 2
