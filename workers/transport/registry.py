"""Which transport class reaches a host of which ``transport``: each class registers itself against its
declaration in ``harness.core.transports``, so a transport name is declared once."""

from __future__ import annotations

from typing import Callable, TypeVar

from harness.core.inventory import Host
from harness.core.transports import transport_kind
from workers.transport.base import Transport

__all__ = ["TRANSPORTS", "connect_for", "registered"]

T = TypeVar("T", bound=type[Transport])

TRANSPORTS: dict[str, type[Transport]] = {}
"""transport name -> class; filled as ``workers.transport`` imports each transport module."""


def registered(name: str) -> Callable[[T], T]:
    """Class decorator: ``cls`` reaches hosts whose ``transport`` is ``name`` (declared in ``harness.core.transports``)."""
    transport_kind(name)  # a transport nobody declared fails at import

    def register(cls: T) -> T:
        if name in TRANSPORTS and TRANSPORTS[name] is not cls:
            raise RuntimeError(f"transport {name!r} has two classes: {TRANSPORTS[name].__name__} and {cls.__name__}")
        cls.kind = name
        TRANSPORTS[name] = cls
        return cls

    return register


def connect_for(host: Host) -> Transport:
    """The transport the inventory asks for (not yet opened). The inventory accepts only declared names and
    a test keeps every declared name registered, so the lookup cannot miss once ``workers.transport`` is
    imported."""
    return TRANSPORTS[host.transport](host)
