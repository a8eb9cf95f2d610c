"""Signed records: HMAC-SHA256 with the delivery's key, which came on stdin and lives only in memory.

``started.json``, ``exit.json``, ``packed.json`` and the worker's heartbeats carry a MAC over their canonical JSON
(docs/launcher.md, "One delivery, one token"); the worker takes a record only if ``verify`` says it is this
delivery's. The HMAC is written out here on the interpreter's own sha256: the ``hmac`` module loads OpenSSL (3 ms of a
start).
"""

from .lean import _sha256, compare_digest
from .wire import dumps


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


def hmac_sha256(key, msg):
    """HMAC-SHA256 of ``msg`` (RFC 2104), hex: the ``hmac`` module's, without loading OpenSSL on every start."""
    if len(key) > 64:
        key = _sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = _sha256(key.translate(_IPAD))
    inner.update(msg)
    outer = _sha256(key.translate(_OPAD))
    outer.update(inner.digest())
    return outer.hexdigest()


def _canonical(body):
    return dumps({k: v for k, v in body.items() if k != "mac"}, canonical=True).encode()


def sign(key_hex, body):
    """``body`` with its ``mac``: HMAC-SHA256 over the canonical JSON of everything else."""
    out = dict(body)
    out["mac"] = hmac_sha256(bytes.fromhex(key_hex), _canonical(body))
    return out


def verify(key_hex, body, token):
    """Whether ``body`` was signed with ``key_hex`` and belongs to delivery ``token``."""
    mac = body.get("mac") if isinstance(body, dict) else None
    # compare_digest refuses a str with other than ASCII in it (TypeError): such a mac is simply not this key's.
    if not isinstance(mac, str) or not all(ord(c) < 128 for c in mac) or body.get("token") != token:
        return False
    return compare_digest(hmac_sha256(bytes.fromhex(key_hex), _canonical(body)), body["mac"])


def heartbeat_line(key_hex, token, seq):
    """What the worker writes into ``heartbeat`` on every poll: a sequence number and its MAC."""
    return "%d %s" % (seq, hmac_sha256(bytes.fromhex(key_hex), ("heartbeat:%s:%d" % (token, seq)).encode()))
