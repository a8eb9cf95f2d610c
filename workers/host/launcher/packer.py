"""The pack: the agent's streams, the workspace and the attempt's outputs into the delivery's bundle, with their
manifests, and the ``pack`` verb, which refuses an attempt folder a later delivery has taken. Folders are walked
through their file descriptors; links are recorded and never followed, FIFOs and devices never opened, and each file
and the whole are size-capped.
"""

import errno
import sys

from .bundle import BUNDLE, FILE, MAX_LOG, OUTPUT, WORKSPACE, _Bundle
from .delivery import RESERVE, delivery_dir
from .fileops import _DIR_FLAGS, _hasher, _sha256_file, _text
from .lean import os, stat
from .tree import launcher_alive
from .wire import _load_json, _say, _write_json, dumps


SKIP_DIRS = {"node_modules", ".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".cache"}
MAX_FILE = 8 * 1024 * 1024
MAX_TOTAL = 48 * 1024 * 1024
WORKSPACE_CAPS = (MAX_FILE, MAX_TOTAL)
OUTPUT_CAPS = (32 * 1024 * 1024, 128 * 1024 * 1024)
"""The answer file and an adapter's session files and state folders: per file, and all together. Larger than the
workspace's (a long session's store), but bounded: every byte kept travels through the queue and the
coordinator's memory, and an agent can make a file of any size."""
MAX_STREAM = 32 * 1024 * 1024
"""How much of the agent's stdout and of its stderr is kept: the first bytes; the whole stream's size and sha256
are recorded in ``streams.json``."""
MAX_DEPTH = 200


def _named(entry, key, name):
    entry[key] = _text(name)
    if entry[key] != name:
        import binascii

        entry[key + "_b64"] = binascii.b2a_base64(os.fsencode(name), newline=False).decode("ascii")
    return entry


def _entry(rel, why, size=None, sha256=None, packed=False):
    return _named({"path": None, "size": size, "sha256": sha256, "packed": packed, "why": why}, "path", rel)


def _open_regular(name, dir_fd):
    """Open ``name`` in the folder ``dir_fd`` only if it is a regular file, never through a symbolic link
    (O_NOFOLLOW) and never blocking (O_NONBLOCK: opening a FIFO with no writer would wait forever); the type is
    checked on the open file itself, so a name swapped after the walk looked at it cannot fool it."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(name, flags, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None, st
    return os.fdopen(fd, "rb"), st


class _Packer(object):
    """Walks folders through directory file descriptors, so a path longer than PATH_MAX is still read, and
    never follows a symbolic link: a link is recorded with its target text, a FIFO, socket or device as not a
    regular file, and neither is ever opened for reading."""

    def __init__(self, bundle, kind, caps, skip):
        self.bundle = bundle
        self.kind = kind
        self.caps = caps
        self.skip = skip
        self.total = 0
        self.manifest = []

    def add_file(self, name, dir_fd, rel, st):
        if stat.S_ISLNK(st.st_mode):
            entry = _entry(rel, "not a regular file")
            try:
                _named(entry, "link", os.readlink(name, dir_fd=dir_fd))
            except OSError as exc:
                entry["why"] = "not a regular file (cannot read the link: %s)" % (exc.strerror or exc)
            self.manifest.append(entry)
            return
        if not stat.S_ISREG(st.st_mode):
            self.manifest.append(_entry(rel, "not a regular file"))
            return
        try:
            f, st = _open_regular(name, dir_fd)
        except OSError as exc:
            self.manifest.append(_entry(rel, "cannot read: %s" % (exc.strerror or exc)))
            return
        if f is None:
            self.manifest.append(_entry(rel, "not a regular file"))
            return
        with f:
            size = st.st_size
            if self.caps and (size > self.caps[0] or self.total + size > self.caps[1]):
                h = _hasher(size)
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
                self.manifest.append(_entry(rel, "over the size cap", os.fstat(f.fileno()).st_size, h.hexdigest()))
                return
            sha256 = self.bundle.copy(self.kind, rel, f, size)
            self.total += size
            self.manifest.append(_entry(rel, "", size, sha256, True))

    def walk(self, dir_fd, prefix, depth=0):
        """Every entry of the open folder ``dir_fd`` (shown as ``prefix``), folders last, in name order."""
        try:
            names = sorted(os.listdir(dir_fd))
        except OSError as exc:
            self.manifest.append(_entry(prefix, "cannot read the folder: %s" % (exc.strerror or exc)))
            return
        folders = []
        for name in names:
            rel = prefix + name
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as exc:
                self.manifest.append(_entry(rel, "cannot read: %s" % (exc.strerror or exc)))
                continue
            if not stat.S_ISDIR(st.st_mode):
                self.add_file(name, dir_fd, rel, st)
            elif name in self.skip:
                self.manifest.append(_entry(rel + "/", "skipped folder"))
            else:
                folders.append(name)
        for name in folders:
            rel = prefix + name + "/"
            if depth >= MAX_DEPTH:
                self.manifest.append(_entry(rel, "folder nested too deep (over %d levels)" % MAX_DEPTH))
                continue
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                self.manifest.append(_entry(rel, "cannot read the folder: %s" % (exc.strerror or exc)))
                continue
            try:
                self.walk(fd, rel, depth + 1)
            finally:
                os.close(fd)


def _open_folder(top_fd, parts):
    """The folder ``parts`` below ``top_fd``, each step opened without following a link: an output such as
    ``state/agents/`` must not be read through a ``state`` the agent made a link to ``/etc``."""
    fd = os.dup(top_fd)
    for part in parts:
        try:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


def _pack_into(bundle, kind, top_fd, items, caps, skip):
    """Put ``items`` ((path below top_fd, shown as) pairs; a path ending in '/' is a folder walked whole) into
    ``bundle`` as frames of ``kind`` and return their manifest."""
    packer = _Packer(bundle, kind, caps, skip)
    for name, shown in items:
        folder = name.endswith("/")
        parts = [p for p in name.split("/") if p]
        if not parts:
            continue
        try:
            parent = _open_folder(top_fd, parts[:-1])
        except FileNotFoundError:
            continue
        except OSError as exc:
            packer.manifest.append(_entry(shown, "cannot read: a folder on its way is a link or unreadable "
                                                 "(%s)" % (exc.strerror or exc)))
            continue
        try:
            leaf = parts[-1]
            try:
                st = os.stat(leaf, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                packer.manifest.append(_entry(shown, "cannot read: %s" % (exc.strerror or exc)))
                continue
            if folder and stat.S_ISDIR(st.st_mode):
                fd = os.open(leaf, _DIR_FLAGS, dir_fd=parent)
                try:
                    packer.walk(fd, shown)
                finally:
                    os.close(fd)
            elif stat.S_ISDIR(st.st_mode):
                packer.manifest.append(_entry(shown + "/", "a folder, not a file"))
            else:
                packer.add_file(leaf, parent, shown.rstrip("/"), st)
        finally:
            os.close(parent)
    return packer.manifest


def _streams(out, room=True):
    """Each of the agent's output streams with its size, sha256 and how much of it is kept (``kept``): its first
    ``MAX_STREAM`` bytes, which is what the worker takes (a runaway log, or a file truncated to 3 GB, must not go whole
    through the queue). ``room`` false (a full disk): a stream over the cap keeps nothing."""
    streams = {}
    for name in ("agent.stdout", "agent.stderr"):
        path = os.path.join(out, name)
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        streams[name] = {"size": size, "sha256": _sha256_file(path),
                         "kept": min(size, MAX_STREAM) if room or size <= MAX_STREAM else 0}
    return streams


def pack(base, out, outputs=()):
    """Pack the delivery into its bundle (``out``/bundle, never into the attempt folder the agent wrote): the agent's
    streams (what is kept of each) and ``streams.json``; ``base/workspace``, each file a frame, with its manifest
    (``manifest.json``); the attempt's other outputs (relative to ``base``: the answer file, an adapter's transcripts
    and state folders, a folder ending in '/'), by the same rules, with ``outputs.json``; and launcher.log. Links are
    recorded and never followed, FIFOs and devices never opened. Returns the bundle's size and sha256; None when the
    host's disk is full: then streams.json, manifest.json (saying so) and outputs.json are files of their own, and the
    worker takes those and the streams one by one."""
    bundle = None
    try:
        streams = _streams(out)
        bundle = _Bundle(os.path.join(out, BUNDLE))
        for name in ("agent.stdout", "agent.stderr"):
            if name in streams:
                with open(os.path.join(out, name), "rb") as f:
                    bundle.copy(FILE, name, f, streams[name]["kept"])
        bundle.add(FILE, "streams.json", dumps(streams).encode())
        try:
            top = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as exc:
            # The agent removed (or replaced) its own attempt folder: that is its doing, and a record of it, not a
            # failure of the harness; its output in the delivery folder is intact and is still collected.
            manifest = [_entry("", "the attempt folder is gone or unreadable (%s): the agent removed or replaced it"
                               % (exc.strerror or exc))]
            found = []
        else:
            try:
                manifest = _pack_into(bundle, WORKSPACE, top, [("workspace/", "")], WORKSPACE_CAPS, SKIP_DIRS)
                found = _pack_into(bundle, OUTPUT, top, [(rel, rel) for rel in outputs], OUTPUT_CAPS, ())
            finally:
                os.close(top)
        bundle.add(FILE, "outputs.json", dumps(found).encode())
        bundle.add(FILE, "manifest.json", dumps(manifest).encode())
        bundle.add(FILE, "launcher.log", _log_head(out))
        return bundle.close()
    except OSError as exc:
        if bundle is not None:
            bundle.discard()
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # The host's disk is full (the agent filled it, or something else did): what was half-written goes, the
        # reserve is given back, and the record says so; the agent's output streams, written already, are kept.
        try:
            os.unlink(os.path.join(out, RESERVE))
        except OSError:
            pass
        _write_json(os.path.join(out, "streams.json"), _streams(out, room=False), durable=False)
        _write_json(os.path.join(out, "outputs.json"), [], durable=False)
        _write_json(os.path.join(out, "manifest.json"),
                    [_entry("", "not packed: the host's disk is full (%s)" % (exc.strerror or exc))], durable=False)
        return None


def _log_head(out):
    try:
        with open(os.path.join(out, "launcher.log"), "rb") as f:
            data = f.read(MAX_LOG + 1)
    except OSError:
        return b""
    if len(data) > MAX_LOG:
        data = data[:MAX_LOG] + b"\n[launcher.log cut at %d bytes]\n" % MAX_LOG
    return data


def _taken(fleet, token, root):
    """Why the attempt folder ``root`` is no longer delivery ``token``'s ("" while it is): a later delivery told it to
    stop (its reap wrote ``stop.json``), or another delivery's agent runs in that folder now (its running entry)."""
    try:
        stop = _load_json(os.path.join(delivery_dir(fleet, token), "stop.json"))
        return "a later delivery stopped this one: %s" % (stop.get("why") if isinstance(stop, dict) else stop)
    except (OSError, ValueError):
        pass
    running = os.path.join(fleet, "running")
    for name in sorted(os.listdir(running)) if os.path.isdir(running) else ():
        try:
            entry = _load_json(os.path.join(running, name))
        except (OSError, ValueError):
            continue
        other = str(entry.get("token") or "") if isinstance(entry, dict) else ""
        if other and other != token and entry.get("root") == root \
                and launcher_alive(int(entry.get("launcher_pid") or 0), other):
            return "a later delivery runs in %s (%s)" % (root, other)
    return ""


def _pack(req):
    here = delivery_dir(req["fleet"], req["token"])
    if not os.path.isdir(here):
        sys.stderr.write("no delivery folder %s\n" % here)
        return 1
    # The worker packs with this verb after its agent ended (a supervisor that did not pack): a later delivery of the
    # attempt may have made the folder afresh meanwhile, and its files are not this delivery's to keep.
    taken = _taken(req["fleet"], req["token"], req["root"])
    if taken:
        _say({"superseded": taken})
        return 3
    _say({"bundle": pack(req["root"], here, req.get("outputs") or ())})
    return 0
