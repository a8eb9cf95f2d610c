"""The SSH transport's socket: TCP_NODELAY on every connection (paramiko never sets it, and each small command
then waited on Nagle's algorithm and the peer's delayed ACK: 48.8 ms for a `true` on loopback, 5.0 ms without;
bench/bench_ssh.py measures both)."""

from __future__ import annotations

import socket

import pytest

from harness.inventory import load_inventory
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
