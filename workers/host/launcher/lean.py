"""What the launcher runs on: ``os`` on the built-in ``posix`` module, and the C modules under ``stat``, ``signal``,
``hashlib`` and ``hmac``.

A launcher start is on the path of every attempt (docs/launcher.md, "How the start is kept lean"), so it imports only
what is cheap: ``import os`` (with ``posixpath``, ``stat`` and ``_collections_abc``) was 1.2 ms of every start, and
``_Os`` and ``_Path`` give the few functions of ``os`` and ``os.path`` the launcher uses, as ``os`` has them, on
``posix`` alone. Apart because every other module of the launcher takes ``os``, ``stat``, ``signal``, ``_sha256`` and
``compare_digest`` from here, and because each stands in for a module of its own (tests/workers/host/
test_launcher_start.py checks them against it).
"""

import sys


try:
    import _stat as stat  # the C module under `stat`, built in: `stat` itself is a Python module to import
except ImportError:
    import stat  # type: ignore[no-redef]  # the same names


class _Path(object):
    """The functions of ``os.path`` the launcher uses, on ``posix`` alone, as ``posixpath`` has them. Any other name
    is ``posixpath``'s (imported then, with ``os``)."""

    # Each takes what os.fspath takes (str, bytes, a path object) and refuses anything else with TypeError, as
    # posixpath does.
    def join(self, a, *parts):
        a = _posix.fspath(a)
        sep = "/" if isinstance(a, str) else b"/"
        path = a
        for b in map(_posix.fspath, parts):
            # str with str, bytes with bytes; a mix raises TypeError here, as in posixpath.
            if b.startswith(sep):  # type: ignore[arg-type]
                path = b
            elif not path or path.endswith(sep):
                path += b
            else:
                path += sep + b  # type: ignore[operator]
        return path

    def dirname(self, p):
        return self.split(p)[0]

    def split(self, p):
        p = _posix.fspath(p)
        sep = "/" if isinstance(p, str) else b"/"
        i = p.rfind(sep) + 1
        head, tail = p[:i], p[i:]
        if head and head != sep * len(head):
            head = head.rstrip(sep)
        return head, tail

    def basename(self, p):
        p = _posix.fspath(p)
        return p[p.rfind("/" if isinstance(p, str) else b"/") + 1:]

    def _stat(self, p, follow=True):
        try:
            return _posix.stat(p) if follow else _posix.lstat(p)
        except (OSError, ValueError):
            return None

    def exists(self, p):
        return self._stat(p) is not None

    def lexists(self, p):
        return self._stat(p, follow=False) is not None

    def isdir(self, p):
        st = self._stat(p)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def getsize(self, p):
        return _posix.stat(p).st_size

    def getmtime(self, p):
        return _posix.stat(p).st_mtime

    def __getattr__(self, name):
        import posixpath

        value = getattr(posixpath, name)
        setattr(self, name, value)  # looked up once, as _Os does
        return value


class _Os(object):
    """``os`` as the launcher uses it, on the built-in ``posix`` module: ``import os`` (with ``posixpath``, ``stat``
    and ``_collections_abc``) was 1.2 ms of every start, the largest of its imports, before the agent. ``os`` gives
    ``posix``'s own functions; the few names of ``os`` itself that the launcher uses are here, as ``os`` has them;
    any other name (``execvpe``, where there is no ``posix_spawn``) is ``os``'s, imported then."""

    devnull, defpath, pathsep, sep = "/dev/null", "/bin:/usr/bin", ":", "/"

    def __init__(self):
        self.path = _Path()
        enc, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
        # As os.environ decodes posix.environ (nothing here sets a variable).
        self.environ = dict((k.decode(enc, errors), v.decode(enc, errors)) for k, v in _posix.environ.items())

    def fsencode(self, name):
        name = _posix.fspath(name)
        return name if isinstance(name, bytes) else name.encode(sys.getfilesystemencoding(),
                                                                 sys.getfilesystemencodeerrors())

    def fdopen(self, fd, mode="r"):
        if not isinstance(fd, int):
            raise TypeError("invalid fd type (%s, expected integer)" % type(fd))
        return open(fd, mode)

    def makedirs(self, name, mode=0o777, exist_ok=False):
        # os.makedirs, step for step.
        head, tail = self.path.split(name)
        if not tail:
            head, tail = self.path.split(head)
        if head and tail and not self.path.exists(head):
            try:
                self.makedirs(head, exist_ok=exist_ok)
            except FileExistsError:
                pass  # made meanwhile by another process
            if tail == ("." if isinstance(tail, str) else b"."):
                return
        try:
            _posix.mkdir(name, mode)
        except OSError:
            # Not only EEXIST: the system may say EACCES or EROFS first of a folder that is there.
            if not exist_ok or not self.path.isdir(name):
                raise

    def __getattr__(self, name):
        try:
            value = getattr(_posix, name)
        except AttributeError:
            import os

            value = getattr(os, name)
        setattr(self, name, value)  # looked up once
        return value


try:
    import posix as _posix
except ImportError:  # not POSIX: os itself
    import os
else:
    # A process that has os already (the worker, which imports this module for its records) uses it.
    os = sys.modules.get("os") or _Os()  # type: ignore[assignment]  # the same names, as far as used here


# A launcher start is on the path of every attempt, so it imports only what is cheap: `signal` wraps the C module in
# enums (5 ms a start), `json` and `subprocess` pull in `re` (9 and 14 ms), `shutil` 10 ms, `hashlib` loads OpenSSL
# (3 ms), `ctypes` 4 ms. The C modules underneath serve instead; the rest is imported where it is needed, if ever.
try:
    import _signal as signal
except ImportError:  # not CPython
    import signal
try:
    from _sha256 import sha256 as _sha256  # CPython 3.8 to 3.11
except ImportError:
    try:
        from _sha2 import sha256 as _sha256  # CPython 3.12 and later
    except ImportError:
        from hashlib import sha256 as _sha256
try:
    from _operator import _compare_digest as compare_digest
except ImportError:
    from hmac import compare_digest  # type: ignore[no-redef]
