"""The SSH transport's socket: TCP_NODELAY on every connection (paramiko never sets it, and each small command
then waited on Nagle's algorithm and the peer's delayed ACK: 48.8 ms for a `true` on loopback, 5.0 ms without;
bench/bench_ssh.py measures both)."""

from __future__ import annotations

import socket

import pytest

from harness.core.inventory import load_inventory
from tests.integration.conftest import write_inventory
from workers.transport import connect_for

pytestmark = pytest.mark.integration


def test_every_ssh_connection_sends_without_delay(tmp_path, ssh_hosts, client_key) -> None:
    inv = write_inventory(tmp_path / "inv.toml", [ssh_hosts["alpha"].toml(client_key[0])])
    t = connect_for(load_inventory(str(inv)).hosts["alpha"])
    try:
        for _ in range(2):  # the first connection, and one opened again after it was closed
            t.open()
            sock = t._transport().sock
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            assert t.shell("echo ok", timeout=10).stdout.strip() == "ok"
            t.close()
    finally:
        t.close()


def test_output_that_comes_after_the_exit_status_is_kept(tmp_path, ssh_hosts, client_key) -> None:
    """sshd sends a command's exit status when its process ends; output still held by a child comes after it, up
    to the channel's EOF. Reading stopped at the status lost that output (under load, an empty `command -v`
    answer made an installed agent agent_missing)."""
    inv = write_inventory(tmp_path / "inv.toml", [ssh_hosts["alpha"].toml(client_key[0])])
    t = connect_for(load_inventory(str(inv)).hosts["alpha"])
    try:
        r = t.shell("(sleep 0.5; echo late) & echo early; exit 3", timeout=20)
        assert (r.exit_code, r.stdout.split()) == (3, ["early", "late"])
    finally:
        t.close()
