"""The transports a host can name (``hosts.<name>.transport``), each declared once: what the inventory
accepts, which host keys it needs, and whether it runs on the worker's own machine.

``harness.core.inventory`` validates hosts against this table; ``workers.transport`` registers one class per
entry (``connect_for`` picks it; a test keeps the two one to one). Import-light, like ``harness.core.agents``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TransportKind", "TRANSPORT_KINDS", "UnknownTransport", "transport_kind"]


@dataclass(frozen=True)
class TransportKind:
    """One way a worker reaches a host."""

    name: str
    """The inventory's ``transport`` value."""
    needs: tuple[str, ...]
    """Host keys that must not be empty for this transport."""
    local: bool
    """The host is the worker's own machine: the coordinator's scripted model server is reachable there."""
    summary: str


TRANSPORT_KINDS: dict[str, TransportKind] = {
    t.name: t
    for t in (
        TransportKind("ssh", ("address", "user", "host_key"), False, "Fabric over SSH, strict pinned host key"),
        TransportKind("local", (), True, "sh -c on the worker's own machine (the embedded default)"),
    )
}


class UnknownTransport(ValueError):
    """A transport no entry of :data:`TRANSPORT_KINDS` declares."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown transport {name!r} (known: {', '.join(sorted(TRANSPORT_KINDS))})")
        self.name = name


def transport_kind(name: str) -> TransportKind:
    """The declaration of ``name``; :class:`UnknownTransport` when there is none."""
    try:
        return TRANSPORT_KINDS[name]
    except KeyError:
        raise UnknownTransport(name) from None
