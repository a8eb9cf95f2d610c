"""The bundle: everything the worker takes of a packed delivery, in one file, so that it costs one read over the
transport (docs/launcher.md, "The bundle"). ``_Bundle`` writes it on the host; ``read_bundle`` reads it on the
worker, whole or not at all.
"""

import errno

from .fileops import _hasher, _sha256_file, _text
from .lean import _sha256, os


BUNDLE = "bundle"
BUNDLE_MAGIC = b"FLEET-BUNDLE 1\n"
FILE, WORKSPACE, OUTPUT = b"f", b"w", b"o"
"""A bundle frame's kind: a file of the delivery folder (the streams, streams.json, manifest.json, outputs.json,
launcher.log), a file of the workspace (named below it), an output (named below the attempt folder)."""
MAX_LOG = 1024 * 1024
"""How much of launcher.log goes into the bundle: the supervisor writes a few lines; more is not its own."""
HASH_INLINE = 1024 * 1024
"""A bundle up to this size is hashed as it is written (the interpreter's own sha256); a larger one after, by
hashlib (OpenSSL is several times faster, and loading it costs a start 3 ms)."""


class _Bundle(object):
    """Writes the delivery's bundle: everything the worker takes from a packed delivery, in one file, so it costs one
    read over the transport (docs/launcher.md, "The bundle"): ``BUNDLE_MAGIC``, then one zlib stream (level 1: fast,
    and a workspace of text still shrinks to a third) of frames: kind (1 byte), the name's length (4 bytes, big
    endian), the data's length (8 bytes), the name (the file system's bytes), the data. Written to a temporary name
    and renamed."""

    def __init__(self, path):
        import zlib

        self.path = path
        self.f = open(path + ".tmp", "wb")
        self.z = zlib.compressobj(1)
        self.h = _sha256()
        self.size = 0
        self._put(BUNDLE_MAGIC)

    def _put(self, data):
        if data:
            self.f.write(data)
            self.size += len(data)
            if self.h is not None:
                self.h.update(data)
                if self.size > HASH_INLINE:
                    self.h = None  # hashed whole once written (close)

    def frame(self, kind, name, size):
        raw = os.fsencode(name)
        self._put(self.z.compress(kind + len(raw).to_bytes(4, "big") + size.to_bytes(8, "big") + raw))

    def add(self, kind, name, data):
        self.frame(kind, name, len(data))
        self._put(self.z.compress(data))

    def copy(self, kind, name, f, size):
        """The first ``size`` bytes of the open file ``f`` as one frame; returns their sha256. A file that ends before
        (it shrank since it was looked at) fails the pack, as a tar's would."""
        self.frame(kind, name, size)
        h = _hasher(size)
        left = size
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                raise OSError(errno.EIO, "unexpected end of data: %s shrank while it was packed" % _text(name))
            h.update(chunk)
            self._put(self.z.compress(chunk))
            left -= len(chunk)
        return h.hexdigest()

    def close(self):
        """Finish the file; returns its size and sha256, for packed.json."""
        self._put(self.z.flush())
        self.f.close()
        os.replace(self.path + ".tmp", self.path)
        return {"size": self.size, "sha256": self.h.hexdigest() if self.h is not None else _sha256_file(self.path)}

    def discard(self):
        self.f.close()
        for path in (self.path + ".tmp", self.path):
            try:
                os.unlink(path)
            except OSError:
                pass


def read_bundle(data, limit):
    """The frames of a bundle, [(kind, name, data)] in order; names decoded as the file system's bytes (a name that is
    not UTF-8 keeps its bytes as surrogates). ValueError for anything that is not a whole bundle, or that holds more
    than ``limit`` bytes of frames."""
    import zlib

    if not data.startswith(BUNDLE_MAGIC):
        raise ValueError("not a bundle (no %r at its start)" % BUNDLE_MAGIC.strip())
    z = zlib.decompressobj()
    try:
        raw = z.decompress(data[len(BUNDLE_MAGIC):], limit + 1)
    except zlib.error as exc:
        raise ValueError("a bundle whose frames do not decompress: %s" % exc)
    if len(raw) > limit or z.unconsumed_tail:
        raise ValueError("a bundle of over %d bytes" % limit)
    if not z.eof or z.unused_data:
        raise ValueError("a bundle cut short, or with bytes after its end")
    frames, i, view = [], 0, memoryview(raw)
    while i < len(raw):
        if len(raw) - i < 13:
            raise ValueError("a bundle frame cut short at byte %d" % i)
        kind, n, size = raw[i:i + 1], int.from_bytes(raw[i + 1:i + 5], "big"), int.from_bytes(raw[i + 5:i + 13], "big")
        i += 13
        if kind not in (FILE, WORKSPACE, OUTPUT) or i + n + size > len(raw):
            raise ValueError("a bundle frame that is not whole at byte %d" % (i - 13))
        frames.append((kind, bytes(view[i:i + n]).decode("utf-8", "surrogateescape"), bytes(view[i + n:i + n + size])))
        i += n + size
    return frames
