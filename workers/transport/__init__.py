"""Transports: one attempt lifecycle (workers.attempt) over small per-transport hooks.

Importing this package registers every transport an inventory can name (``connect_for``);
``MemoryTransport`` (in-memory files, scripted shell replies) is for tests and is chosen by no inventory.
"""

from workers.transport.base import ShellResult, Transport
from workers.transport.local import LocalTransport
from workers.transport.memory import MemoryTransport
from workers.transport.registry import TRANSPORTS, connect_for
from workers.transport.ssh import SSHTransport

__all__ = ["ShellResult", "Transport", "LocalTransport", "MemoryTransport", "SSHTransport", "TRANSPORTS", "connect_for"]
