"""Transports: one attempt lifecycle (workers.attempt) over small per-transport hooks."""

from workers.transport.base import ShellResult, Transport
from workers.transport.local import LocalTransport
from workers.transport.ssh import SSHTransport, connect_for

__all__ = ["ShellResult", "Transport", "LocalTransport", "SSHTransport", "connect_for"]
