"""An sshd test host in a network namespace of its own, whose link a test can cut silently and restore.

The namespace is joined to this machine by a veth pair with addresses from a /30 of 10.231.0.0/16 that no
other namespace of this machine uses (picked under a file lock, so parallel test processes never share one).
``cut()`` takes the namespace's end of the pair down: packets to the host are dropped and nothing answers,
not even with a reset, which is what a pulled cable or a dead switch looks like to the worker. Traffic goes
only to the namespace: its address is on the veth's own /30, never routed elsewhere.
"""

from __future__ import annotations

import fcntl
import ipaddress
import random
import shutil
import subprocess
import textwrap
import uuid
from pathlib import Path

from tests.integration.fleetkit import SSHD, SSHHost, kill_tree

__all__ = ["NetnsHost", "netns_available"]

_POOL = ipaddress.ip_network("10.231.0.0/16")
_LOCK = Path("/tmp/fleet-netcut.lock")


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns, "ip"] if ns else ["ip"]) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")


def netns_available() -> str:
    """Why netns hosts cannot work here, or "" when they can."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"fleet-probe-{uuid.uuid4().hex[:8]}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()} (needs root)"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


class NetnsHost(SSHHost):
    """An SSHHost listening on the namespace's address; ``cut()`` / ``restore()`` its link."""

    def __init__(self, name: str, folder: Path, client_pub: str) -> None:
        super().__init__(name, folder, client_pub, port=22)
        tag = uuid.uuid4().hex[:8]
        self.ns = f"fleet-cut-{tag}"
        self.veth_host = f"fc{tag[:6]}h"  # interface names: at most 15 characters
        self.veth_ns = f"fc{tag[:6]}n"
        self.address = ""
        self.made = False

    def setup(self) -> None:
        super().setup()
        _LOCK.touch(exist_ok=True)
        with open(_LOCK) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
            nets = list(_POOL.subnets(new_prefix=30))
            random.shuffle(nets)
            net = next(n for n in nets if not any(f" {a}/" in used for a in n.hosts()))
            host_addr, ns_addr = list(net.hosts())
            subprocess.run(["ip", "netns", "add", self.ns], check=True, capture_output=True)
            self.made = True
            _ip("link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_ns)
            _ip("link", "set", self.veth_ns, "netns", self.ns)
            _ip("addr", "add", f"{host_addr}/30", "dev", self.veth_host)
            _ip("link", "set", self.veth_host, "up")
        _ip("link", "set", "lo", "up", ns=self.ns)
        _ip("addr", "add", f"{ns_addr}/30", "dev", self.veth_ns, ns=self.ns)
        _ip("link", "set", self.veth_ns, "up", ns=self.ns)
        self.address = str(ns_addr)
        # The host's MAC is known for good, as a router's would be: with the link cut, packets are sent and
        # dropped, rather than failing fast at the local ARP lookup ("no route to host").
        mac = subprocess.run(["ip", "netns", "exec", self.ns, "cat", f"/sys/class/net/{self.veth_ns}/address"],
                             capture_output=True, text=True, check=True).stdout.strip()
        _ip("neigh", "replace", self.address, "lladdr", mac, "dev", self.veth_host, "nud", "permanent")
        config = self.folder / "sshd_config"
        config.write_text(config.read_text().replace("ListenAddress 127.0.0.1", f"ListenAddress {self.address}"))

    def start(self) -> None:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, SSHD, "-D", "-f", str(self.folder / "sshd_config"), "-E", str(self.log)],
            start_new_session=True,
        )
        self._wait_listening()

    def _wait_listening(self, timeout: float = 15.0) -> None:
        import socket
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                with socket.create_connection((self.address, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nothing listens on {self.address}:{self.port} after {timeout} s")

    def cut(self) -> None:
        """Drop every packet to and from the host, silently."""
        _ip("link", "set", self.veth_ns, "down", ns=self.ns)
        # Still routed into the (now dead) veth, never out through this machine's default route.
        route = subprocess.run(["ip", "route", "get", self.address], capture_output=True, text=True).stdout
        if f" dev {self.veth_host} " not in route:
            self.restore()
            raise RuntimeError(f"after the cut {self.address} is routed elsewhere: {route.strip()}")

    def restore(self) -> None:
        _ip("link", "set", self.veth_ns, "up", ns=self.ns)

    def toml(self, identity: Path, *, host_key: str | None = None, slots: int = 1, agent: list[str] | None = None,
             port: int | None = None, extra: str = "") -> str:
        text = super().toml(identity, host_key=host_key, slots=slots, agent=agent, port=port)
        text = text.replace('address = "127.0.0.1"', f'address = "{self.address}"')
        if extra:
            text = text.replace("connect_timeout = 5\n", "connect_timeout = 5\n" + textwrap.dedent(extra))
        return text

    def remove(self) -> None:
        """Stop sshd and everything it started, and remove the namespace and the veth pair."""
        if self.proc is not None:
            kill_tree(self.proc.pid)
            self.proc.wait(10)
            self.proc = None
        if self.made:
            # Processes still in the namespace (a launcher that outlived its session) end with it.
            pids = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                kill_tree(int(pid))
            subprocess.run(["ip", "link", "del", self.veth_host], capture_output=True)
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
            self.made = False
