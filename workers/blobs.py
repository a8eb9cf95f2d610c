"""Large artifacts travel beside a task's result on Redis, as raw bytes, not base64 inside it.

A worker's result carried every artifact base64-encoded in its JSON: a 5 MB workspace sat in Redis as a 6.7 MB
string, and again in the message Celery publishes to the waiting coordinator (about 13 MB in all). Now each
artifact over ``INLINE_MAX`` is written by the worker to a key of its own, ``fleet:NAMESPACE:blob:TASK_ID:N``
(binary-safe, kept as long as results are, ``TTL_S``), and the result names the key instead of holding the bytes.
The coordinator reads each such key when it takes the result, checks its size and sha256 against the result, and
deletes the keys once the attempt's record is durable (as it forgets the result). Redis then holds each in-flight
artifact once, as its own bytes.

A result backend that is not Redis (the embedded default's SQLite) keeps every artifact inline, as before.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from harness.core.settings import is_redis_url

if TYPE_CHECKING:
    from harness.core.records import AttemptResult

__all__ = ["INLINE_MAX", "TTL_S", "BlobStore", "blob_prefix", "blobs_for", "MissingBlob"]

INLINE_MAX = 64 * 1024
"""An artifact up to this size stays in the result (one round trip less; most artifacts are this small)."""
CHUNK = 256 * 1024
"""A blob is written and read in pieces of this size (see offload and _read)."""
READ_AHEAD = 4
"""Pieces asked for in one round trip when a blob is read: at most this many wait in Redis's output buffer."""
TTL_S = 7 * 24 * 3600
"""As long as a result is kept (``result_expires`` in workers/app.py): a coordinator that comes back within it
(``fleet resume``) finds both."""


class MissingBlob(Exception):
    """A result names a blob that is not there, or whose bytes are not what the result says."""


def blob_prefix(namespace: str, task_id: str) -> str:
    return f"fleet:{namespace}:blob:{task_id}:"


class BlobStore:
    """The artifacts of results on one Redis."""

    def __init__(self, url: str) -> None:
        import redis  # lazy: redis-py (about 100 ms), for a Redis backend only; `fleet status` loads this module

        self.url = url
        self._client = redis.Redis.from_url(url, socket_connect_timeout=10, socket_timeout=60)

    def offload(self, result: "AttemptResult", namespace: str, task_id: str) -> "AttemptResult":
        """Move each artifact over INLINE_MAX out of ``result`` into a key of its own; returns the result naming them."""
        prefix = blob_prefix(namespace, task_id)
        big = [(i, a) for i, a in enumerate(result.artifacts) if a.size > INLINE_MAX and a.blob is None]
        if not big:
            return result
        artifacts = list(result.artifacts)
        pipe = self._client.pipeline(transaction=False)
        for i, art in big:
            key = f"{prefix}{i}"
            data = art.data()
            # In pieces: Redis holds a command's whole argument in its query buffer while it makes the value, so
            # one SET of N bytes peaked at 2N; appended piece by piece, the peak is the value and one piece.
            pipe.set(key, data[:CHUNK], ex=TTL_S)
            for at in range(CHUNK, len(data), CHUNK):
                pipe.append(key, data[at:at + CHUNK])
            artifacts[i] = art.model_copy(update={"data_b64": "", "blob": key})
        pipe.execute()
        return result.model_copy(update={"artifacts": artifacts})

    def resolve(self, result: "AttemptResult", namespace: str, task_id: str) -> None:
        """Read the bytes of every artifact ``result`` names a key for, checked against its size and sha256."""
        prefix = blob_prefix(namespace, task_id)
        named = [a for a in result.artifacts if a.blob is not None]
        for art in named:
            if not art.blob or not art.blob.startswith(prefix):
                raise MissingBlob(f"{art.name}: the result names a blob of another task ({art.blob!r})")
        if not named:
            return
        for art in named:
            data = self._read(str(art.blob), art.size)
            if not isinstance(data, bytes):
                raise MissingBlob(f"{art.name}: its bytes are no longer in the result backend (expired or removed)")
            if len(data) != art.size or hashlib.sha256(data).hexdigest() != art.sha256:
                raise MissingBlob(f"{art.name}: its bytes in the result backend are not what the result says "
                                  f"({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}...)")
            art.hold(data)

    def _read(self, key: str, size: int) -> bytes | None:
        """A blob's bytes, read in pieces (a reply waits whole in Redis's output buffer: one GET of N bytes was N
        more at the peak); None when the key is not there. Its length is checked by the caller."""
        pieces: list[bytes] = []
        at = 0
        while True:
            pipe = self._client.pipeline(transaction=False)
            pipe.exists(key)
            for n in range(READ_AHEAD):
                pipe.getrange(key, at + n * CHUNK, at + (n + 1) * CHUNK - 1)
            exists, *got = pipe.execute()
            if not exists:
                return None
            for piece in got:
                pieces.append(piece)
                at += len(piece)
                if len(piece) < CHUNK:
                    return b"".join(pieces)
            if at > size:  # more than the result says: the caller refuses it, no need to read on
                return b"".join(pieces)

    def forget(self, namespace: str, task_id: str, count: int) -> None:
        """Delete a task's blobs (keys N < count: an artifact's index in its result)."""
        if not count:
            return
        prefix = blob_prefix(namespace, task_id)
        try:
            self._client.delete(*[f"{prefix}{i}" for i in range(count)])
        except Exception:  # noqa: BLE001 - the record is durable; what is left expires with TTL_S
            pass


_stores: dict[str, BlobStore] = {}


def blobs_for(backend_url: str) -> BlobStore | None:
    """The blob store beside a result backend, or None when the backend is not Redis. One per URL and process."""
    if not backend_url or not is_redis_url(backend_url):
        return None
    store = _stores.get(backend_url)
    if store is None:
        store = _stores[backend_url] = BlobStore(backend_url)
    return store
