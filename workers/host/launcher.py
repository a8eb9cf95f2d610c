"""The launcher: the harness's code on the host, run there with the host's Python.

It must run on any host (Linux, macOS, WSL) with nothing but a Python 3.8+ standard library, so it
imports nothing from the harness. The worker never runs a copy of it that lies on the host: every call
sends this source on stdin with one JSON request line (``BOOT`` reads it), so an agent that rewrites a
file it found cannot make the worker run its code. Nothing of it is written into the attempt folder.

Its records live in a per-delivery folder, ``WORKDIR/.fleet/deliveries/TOKEN/`` (mode 0700), outside the
attempt folder; the agent is not told that path. ``TOKEN`` is random per delivery (per ``run_attempt``
call): a launcher writes only into its own delivery's folder, so an old delivery can never write into a
new one. ``WORKDIR/.fleet/running/TOKEN.json`` lists the deliveries whose agent runs on this host.

Verbs (the request's ``verb``):

``run``   Starts the agent in a session of its own and supervises it: a background supervisor (it
          outlives the SSH session) writes ``started.json`` and ``exit.json``, both signed (HMAC-SHA256) with
          a key that came on stdin and lives only in memory, ends the whole agent tree at the item's
          deadline, at the end, when a later delivery supersedes it, and when no signed heartbeat came from
          the worker for ``heartbeat_s``. The supervisor prints the signed start record (or the start error)
          itself; the foreground process exits 0 once it forked it.
          With ``prepare`` it first does what comes before the agent, in the same Python start: the reap
          below, the attempt folder made afresh, the prompt and the adapter's files written into it, and the
          host's facts (uname, Python version, disk free) printed on a line of their own. With ``pack``, the
          supervisor packs (as the verb below) once the agent's tree ended by itself, after exit.json (which
          then says ``"packing": true``), and writes a signed ``packed.json`` when done.
``kill``  Ends the agent tree of one delivery (the worker's timeout or revoke).
``reap``  Before a new attempt: ends what earlier deliveries left running that this one replaces (the same
          cell and attempt delivered again, the same host slot) or that nobody supervises (launcher gone).
``pack``  Writes the workspace's tarball and manifest into the delivery folder (size-capped, vendored folders
          skipped); links are recorded with their target and never followed, FIFOs and devices never opened,
          names that are not UTF-8 escaped with their bytes kept. The request's ``outputs`` (the answer file,
          an adapter's session files and state folders) go into ``outputs.tar.gz`` and ``outputs.json`` by
          the same rules.

The agent's environment is what ``agent_env`` makes (an allow-list, the host variables ``pass_env`` names,
the adapter's values), never the launcher's own whole.

The agent tree is every process that carries the delivery's marker variable (Linux: /proc/PID/environ),
that is in the agent's session, or that descends from the agent or the supervisor (on Linux the
supervisor is a child subreaper, so a child that calls setsid and is orphaned is re-parented to it, not to
init). Kill: TERM, a grace, KILL, repeated until none is left.

Files are written to a temporary name and renamed, so the worker never reads half a file.
"""

import errno
import fcntl
import sys
import time

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

AGENT_ENV_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR")
AGENT_ENV_PREFIXES = ("LC_",)

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
MARKER_VAR = "FLEET_AGENT_MARK"
"""Each agent's environment holds this variable with a per-delivery random value: the tree walk finds a
descendant by it even after it left the session and was re-parented."""
TERM_GRACE = 3.0
STALE_DELIVERY_S = 7 * 24 * 3600
"""A delivery folder left this long by a worker that never came back is removed by the next reap."""

BOOT = ("import sys,marshal as M\n"
        "i=sys.stdin.buffer;m=M.loads(i.read(int(i.readline())));c=m.pop('code',b'');s=m.pop('source')\n"
        "if c and m.pop('tag','')==sys.version:c=M.loads(c);m['compiled']=b''\n"
        "else:import zlib as Z;c=compile(Z.decompress(s),'fleet-launcher','exec',optimize=2);"
        "m['compiled']=Z.compress(M.dumps(c))\n"
        "g={'__name__':'fleet_launcher'};exec(c,g);r=g['serve'](m);sys.stdout.flush();sys.stderr.flush()\n"
        "__import__('posix')._exit(r or 0)")
"""What the worker runs (``python3 -S -c BOOT VERB TOKEN``): the code and the request come on stdin, as
``boot_stdin`` writes them. Code compiled here is handed to ``serve`` (``compiled``), so that ``run`` can give it to
the worker, for the next starts on this host. It ends with ``posix._exit`` (``os`` is not imported, see ``_Os``) once
its output is flushed: the interpreter's own teardown is time on the worker's wait, and the launcher has nothing to
tear down."""

_COMPILED = {}  # type: dict


def boot_stdin(source, request, compiled=None):
    """What a BOOT start reads on stdin: a line with the length of what follows, then ``request`` marshalled (plain
    data, whose format is the same from Python 3.4 on) with ``source`` (zlib) and compiled code (marshalled, not
    compressed: zlib's import and the decompression were 0.6 ms of every start) for the interpreter whose
    ``sys.version`` is its ``tag``: ``compiled`` (tag, code) when the worker has the host's own (``run`` prints it
    once, zlib-compressed, see ``serve``), else what this process compiled. A host whose interpreter is the tag's runs
    that code and compiles nothing (10 to 16 ms of every start); any other compiles the source. No code ever comes
    from a file on the host."""
    import marshal
    import zlib

    if not isinstance(source, bytes):
        source = source.encode("utf-8")
    if source not in _COMPILED:
        code = compile(source, "fleet-launcher", "exec", optimize=2)
        _COMPILED[source] = (zlib.compress(source, 6), sys.version, marshal.dumps(code))
    source_z, tag, code = _COMPILED[source]
    if compiled is not None:
        tag, code = compiled
    body = dict(request)
    body.update(source=source_z, code=code, tag=tag)
    data = marshal.dumps(body, 4)
    return b"%d\n" % len(data) + data


def boot_request(data):
    """The request in what ``boot_stdin`` wrote, without the code and the source: for tests and people."""
    import marshal

    line, _, rest = bytes(data).partition(b"\n")
    body = marshal.loads(rest[:int(line)])
    for name in ("code", "source", "tag"):
        body.pop(name, None)
    return body


# -- records ---------------------------------------------------------------------------------------------------

def _no_default(obj):
    raise TypeError("not JSON: %r" % (obj,))


def _make_json():
    """``dumps`` and ``loads`` as the json module's, on its C parts (``_json``), which need no ``re``: the json module
    costs 9 ms of a start. Any interpreter without them gets the json module's."""
    try:
        import _json

        _json.make_encoder(None, _no_default, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True)
    except (ImportError, AttributeError, TypeError):
        import json

        def json_loads(text):
            try:
                return json.loads(text)
            except RecursionError:
                raise ValueError("JSON nested deeper than this interpreter reads")

        return (lambda obj, canonical=False: json.dumps(obj, sort_keys=canonical,
                                                        separators=(",", ":") if canonical else None)), json_loads
    constants = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}

    def dumps(obj, canonical=False):
        """As ``json.dumps(obj)``; ``canonical``: as ``json.dumps(obj, sort_keys=True, separators=(",", ":"))``."""
        key, item = (":", ",") if canonical else (": ", ", ")
        encode = _json.make_encoder(None, _no_default, _json.encode_basestring_ascii, None, key, item, canonical,
                                    False, True)
        return "".join(encode(obj, 0))

    class _Context(object):  # what json.decoder.JSONDecoder gives the C scanner
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = constants.__getitem__

    scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # what it reads of a JSONDecoder, no more
    space = " \t\n\r"

    def loads(text):
        """As ``json.loads(text)`` (str or UTF-8 bytes); a ValueError for anything that is not one JSON value."""
        if isinstance(text, (bytes, bytearray)):
            text = text.decode("utf-8")
        start = len(text) - len(text.lstrip(space))
        try:
            value, end = scan(text, start)
        except StopIteration as exc:
            raise ValueError("not JSON (at character %s)" % exc.value)
        except RecursionError:
            raise ValueError("JSON nested deeper than this interpreter reads")
        if text[end:].strip(space):
            raise ValueError("not JSON: extra data at character %d" % end)
        return value

    return dumps, loads


dumps, loads = _make_json()


def _load_json(path):
    with open(path, "rb") as f:
        return loads(f.read())


def _write_json(path, data, durable=True):
    """Written to a temporary name and renamed (a reader never sees half of it). ``durable``: synced to the disk
    first. A record that dies with the host's processes anyway (the start record, the running entry, what pack
    writes for the worker to read next) is not: a sync is milliseconds on the path to the agent's start."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(dumps(data))
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def _say(obj):
    """One answer line on stdout, for the worker."""
    sys.stdout.write(dumps(obj) + "\n")


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


def delivery_dir(fleet, token):
    return os.path.join(fleet, "deliveries", token)


def _entry_path(fleet, token):
    return os.path.join(fleet, "running", token + ".json")


def _makedirs_private(path):
    os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass


def agent_env(environ, spec):
    """The agent's environment: the allow-listed part of ``environ`` (``AGENT_ENV_NAMES``, ``LC_*``), then the
    variables ``spec["pass_env"]`` names, copied from ``environ`` when set there (the model's API key: its value
    lives only on the host, never in launch.json), then ``spec["env"]``, the values the adapter sets."""
    env = {k: v for k, v in environ.items() if k in AGENT_ENV_NAMES or k.startswith(AGENT_ENV_PREFIXES)}
    for name in spec.get("pass_env") or ():
        if name in environ:
            env[name] = environ[name]
    env.update(spec.get("env") or {})
    return env


RESERVE = "reserve"
RESERVE_BYTES = 1024 * 1024
"""Space the delivery holds from its start, given back when the host's disk is full, so that an agent that filled
it still gets its exit record and manifest written (else its run would read as a supervisor that crashed)."""


def _reserve(here):
    try:
        fd = os.open(os.path.join(here, RESERVE), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:
        return  # the records below fail as they would have
    try:
        # Allocated, not truncated: a sparse file would hold no space. fallocate takes the blocks without writing them
        # (a 1 MiB write was a millisecond on the path to the agent's start); where there is none, written. Not synced:
        # the space is charged when the bytes are written (tmpfs, and ext4's and XFS's delayed allocation reserve it
        # then).
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except (AttributeError, OSError) as exc:
            if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
                return  # no room even for this
            os.write(fd, b"\0" * RESERVE_BYTES)
    except OSError:
        pass  # no room even for this: the records below fail as they would have
    finally:
        os.close(fd)


def _with_reserve(here, write):
    """``write()``; if the disk is full, give the reserve back and try once more."""
    try:
        return write()
    except OSError as exc:
        path = os.path.join(here, RESERVE)
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not os.path.exists(path):
            raise
        os.unlink(path)
        return write()


# -- processes -------------------------------------------------------------------------------------------------

LINUX = os.path.isdir("/proc/self/task")


def _read_proc(pid, name):
    """The whole of ``/proc/PID/NAME``, through the descriptor alone: a file object per read was a third of a walk
    over every process's environment, which comes at the end of every attempt (``end_tree``)."""
    fd = os.open("/proc/%s/%s" % (pid, name), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        data = b""
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return data
            data += chunk
    finally:
        os.close(fd)


def _has_entry(pid, needle):
    """Whether ``needle`` (b"\\0NAME=VALUE\\0") is a whole entry of the process's environment; False when it cannot be
    read (gone, another user's)."""
    try:
        return needle in b"\0" + _read_proc(pid, "environ") + b"\0"
    except OSError:
        return False


def _snapshot(marker):
    """{pid: (ppid, sid, has_marker)} of every live (not zombie) process this user can see."""
    procs = {}
    if LINUX:
        needle = b"\0%s=%s\0" % (MARKER_VAR.encode(), marker.encode()) if marker else None
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                fields = _read_proc(name, "stat").rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] in (b"Z", b"X"):
                continue
            has = needle is not None and _has_entry(name, needle)
            # After the command's ")": state, ppid, pgrp, session, tty_nr, ... (fields[4] is the tty: the session
            # walk never matched when it was read there).
            procs[int(name)] = (int(fields[1]), int(fields[3]), has)
        return procs
    for line in _ps("-axo", "pid=,ppid=,stat=").splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit() or parts[2].startswith("Z"):
            continue
        pid = int(parts[0])
        try:
            sid = os.getsid(pid)
        except OSError:
            continue
        procs[pid] = (int(parts[1]), sid, False)
    return procs


def _marked(marker):
    """The live processes (Linux) whose environment holds the delivery's marker, but this one and its parent."""
    found = set()  # type: set
    if not marker:
        return found
    needle = b"\0%s=%s\0" % (MARKER_VAR.encode(), marker.encode())
    for name in os.listdir("/proc"):
        if name.isdigit() and _has_entry(name, needle):
            found.add(int(name))
    found.discard(os.getpid())
    found.discard(os.getppid())
    return found


def _ps(*args):
    """What ``ps ARGS`` prints ("" when it cannot run): where there is no /proc (macOS)."""
    import subprocess  # not at the top: Linux never needs it, and it costs a start 14 ms

    try:
        return subprocess.run(("ps",) + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=30).stdout.decode(errors="replace")
    except (OSError, subprocess.SubprocessError):
        return ""


def _members(marker, sid, roots):
    """The agent tree: marker holders, the session's members, the roots, and all their descendants."""
    procs = _snapshot(marker)
    me = os.getpid()
    found = set(p for p, (_, s, has) in procs.items() if has or (sid and s == sid))
    found |= set(r for r in roots if r in procs)
    children = {}  # type: dict
    for p, (pp, _, _) in procs.items():
        children.setdefault(pp, []).append(p)
    todo = list(found) + [r for r in roots if r == me]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in found:
                found.add(c)
                todo.append(c)
    found.discard(me)
    found.discard(os.getppid())
    return found


def _reap_children():
    """Reap any ended child (a subreaper inherits orphans); returns {pid: raw status}."""
    done = {}  # type: dict
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done[pid] = status


def _childless():
    """Whether this process has no child at all, running or ended (an ended one is left to be reaped)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    except (OSError, AttributeError):  # no waitid here: assume a child
        pass
    return False


def end_tree(marker, sid, roots=(), on_reap=None, subreaper=False):
    """TERM every member of the tree, wait a grace, KILL what is left; again until nothing is left.
    Returns the pids that were signalled. ``subreaper``: this process is the tree's child subreaper (the supervisor on
    Linux), so every process that descends from it is its child or below one."""
    signalled = set()  # type: set
    for sig, wait in ((signal.SIGTERM, TERM_GRACE), (signal.SIGKILL, 5.0)):
        end = time.time() + wait
        while True:
            if on_reap is not None:
                on_reap(_reap_children())
            alone = subreaper and LINUX and _childless()
            # A subreaper with no child left has no descendant at all (each would be its child, or below one), and no
            # process is in the agent's session but its descendants: only the marker can still name one (a process
            # something outside the tree started with the agent's environment). No walk of every process's stat.
            members = _marked(marker) if alone else _members(marker, sid, roots)
            if not members and not alone:
                # Looked at once more, a moment later: a walk made the instant the agent ended (the supervisor wakes
                # on its SIGCHLD) was seen to miss a child it had just forked, which then lived on. A subreaper with
                # no child left has no process in such a passage: it would be its child, or below one.
                time.sleep(0.01)
                members = _members(marker, sid, roots)
            if not members:
                return signalled
            for pid in members:
                if sig == signal.SIGKILL or pid not in signalled:
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
                    signalled.add(pid)
            if time.time() > end:
                break
            time.sleep(0.1)
    return signalled


def _cmdline(pid):
    if LINUX:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""
    return _ps("-p", str(pid), "-o", "command=")


def launcher_alive(pid, token):
    """Whether ``pid`` is still the supervisor of delivery ``token`` (its command line names the token)."""
    if not pid or pid <= 1:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    state = ""
    if LINUX:
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0].decode()
        except (OSError, IndexError):
            return False
    return state not in ("Z", "X") and (" run %s" % token) in _cmdline(pid)


def stopped(pid):
    """Whether ``pid`` is stopped (SIGSTOP, SIGTSTP, a tracer): alive, but supervising nothing."""
    if LINUX:
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
        except (OSError, IndexError):
            return False
    return _ps("-o", "stat=", "-p", str(pid)).strip().startswith("T")


def _children_of(pid):
    return [p for p, (pp, _, _) in _snapshot("").items() if pp == pid]


# -- run: start and supervise ------------------------------------------------------------------------------------

def _subreaper_call():
    """Linux: how to make this process a child subreaper (orphans of the agent tree are re-parented to the
    supervisor, not to init, so the tree walk still finds a child that called setsid and whose parent died), as a
    function that says whether it worked; None elsewhere. prctl through ``_ctypes``, the C module under ``ctypes``
    (whose own import is 3.5 ms of the start, against 0.6 ms). Made by the foreground process before it forks the
    supervisor, which only calls it: made in the supervisor it took 1.2 ms of every start, as each page the import
    writes is copied after the fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import _ctypes

        class _Int(_ctypes._SimpleCData):
            _type_ = "i"

        class _Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = _Int

        class _Process(object):
            _handle = _ctypes.dlopen(None, 0)  # type: ignore[arg-type]  # None: this process's own symbols

        prctl = _Function(("prctl", _Process()))  # type: ignore[arg-type]  # what ctypes.CDLL gives it, no more
    except Exception:  # noqa - not CPython, no libc symbol: the marker and the session still find the tree
        return None

    def set_subreaper():
        try:
            return prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
        except Exception:  # noqa - as above
            return False

    return set_subreaper


def _which(program, path):
    """``program``'s path as ``command -v`` (and ``shutil.which``) finds it: a name with a '/' as it is, else the
    first executable file of that name in a folder of ``path``; None when there is none."""
    def runnable(candidate):
        return os.path.exists(candidate) and os.access(candidate, os.F_OK | os.X_OK) and not os.path.isdir(candidate)

    if os.path.dirname(program):
        return program if runnable(program) else None
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder, program)
        if runnable(candidate):
            return candidate
    return None


def _rmtree(path):
    """Remove ``path`` whole, never following a link (a link in its place, or inside, is removed itself): as
    ``rm -rf`` does, and ``shutil.rmtree`` (10 ms of imports a start). Raises OSError as it would."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    try:
        _rmtree_fds(path)
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
        # Deeper than the fds this process may hold, even at its hard limit: the host's own `rm -rf` (which walks with
        # a bounded number) removes it, as it would have before.
        import subprocess

        subprocess.run(["rm", "-rf", "--", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if os.path.lexists(path):
            raise
        return
    os.rmdir(path)


def _rmtree_fds(path):
    """What is in the folder ``path``. Each folder's fd is held while its entries go (a path longer than PATH_MAX is no
    matter), deepest first, with no recursion; a tree deeper than the fds a process may hold (1,024 by default) first
    raises the limit to its hard bound. A folder is listed whole before anything in it is removed."""
    top = os.open(path, _DIR_FLAGS)
    stack = [(top, "", iter(_listing(top)))]
    try:
        while stack:
            fd, name, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if stack:
                    os.close(fd)
                    os.rmdir(name, dir_fd=stack[-1][0])
            elif entry.is_dir(follow_symlinks=False):
                try:
                    sub = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno != errno.EMFILE or not _more_fds():
                        raise
                    sub = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                stack.append((sub, entry.name, iter(_listing(sub))))
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        for fd, _, _ in stack[1:]:
            os.close(fd)
        os.close(top)


def _more_fds():
    """Raise this process's limit of open files to its hard bound; whether that gave it more."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and soft >= hard:
            return False
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return True
    except (ImportError, ValueError, OSError):
        return False


def _listing(fd):
    with os.scandir(fd) as entries:
        return list(entries)


class StartError(OSError):
    """The agent could not be started: ``kind`` is the exception the start met (FileNotFoundError ...)."""

    def __init__(self, kind, text):
        OSError.__init__(self, text)
        self.kind = kind
        self.text = text

    def __str__(self):
        return self.text


_RESET_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name))
"""Default again for the agent, as Popen makes them: Python ignores them for itself."""


def _spawn(argv, cwd, env, stdout, stderr):
    """Start ``argv`` in a session of its own, in ``cwd``, with exactly ``env``, stdin from /dev/null and the open
    files ``stdout`` and ``stderr``; return its pid. As ``subprocess.Popen(..., start_new_session=True)`` would (14 ms
    of imports a start, before the agent): the program is looked up on ``env``'s PATH, SIGPIPE and SIGXFSZ are
    default again, only fds 0-2 are passed on, and a failure to start (no such program, a cwd that is not there)
    raises ``StartError`` here. ``posix_spawn`` where it can make a session (a fork of this process copies its page
    tables first: 1.3 ms against 0.1 ms), else fork and exec."""
    try:
        return _posix_spawn(argv, cwd, env, stdout, stderr)
    except NotImplementedError:  # no POSIX_SPAWN_SETSID here (glibc before 2.26, macOS before 10.15)
        return _fork_exec(argv, cwd, env, stdout, stderr)


def _posix_spawn(argv, cwd, env, stdout, stderr):
    if not hasattr(os, "posix_spawn") or not argv or not all(isinstance(a, str) for a in argv):
        raise NotImplementedError
    program = argv[0]
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_DUP2, stdout, 1),
               (os.POSIX_SPAWN_DUP2, stderr, 2)]
    try:
        # fds whoever started this process left open and inheritable: not the agent's (its own are close-on-exec).
        actions += [(os.POSIX_SPAWN_CLOSE, int(n)) for n in os.listdir("/dev/fd") if n.isdigit() and int(n) > 2
                    and int(n) not in (stdout, stderr) and _inheritable(int(n))]
    except OSError:
        pass
    try:
        # The agent starts in its cwd, so this process goes there first: a relative PATH entry (or an empty one, the
        # cwd) is looked up from there, as the child of a fork would.
        os.chdir(cwd)
    except OSError as exc:
        raise StartError(type(exc).__name__, str(exc))
    try:
        # As execvpe looks: each folder of env's PATH (os.defpath without one; os.get_exec_path imports warnings), in
        # order; one that is not there is passed over, one that cannot run (no x bit, a broken #! line) too, and if
        # none starts, the first such error is the one said, else that there is no such program.
        if os.path.dirname(program):
            candidates = [program]
        else:
            candidates = [os.path.join(folder, program) for folder in (env.get("PATH") or os.defpath).split(os.pathsep)]
        saved = last = None
        for candidate in candidates:
            try:
                os.stat(candidate)
            except OSError as exc:
                last = exc
                if not isinstance(exc, (FileNotFoundError, NotADirectoryError)) and saved is None:
                    saved = exc
                continue
            try:
                return os.posix_spawn(candidate, argv, env, file_actions=actions, setsid=True,
                                      setsigdef=_RESET_SIGNALS)
            except (FileNotFoundError, NotADirectoryError) as exc:
                last = exc
            except OSError as exc:
                last = exc
                if saved is None:
                    saved = exc
            except (ValueError, TypeError) as exc:
                raise StartError(type(exc).__name__, str(exc))
        error = saved or last or FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
        error.filename = program  # as Popen says it: the program as it was named
        raise StartError(type(error).__name__, str(error))
    finally:
        os.chdir("/")


def _inheritable(fd):
    try:
        return os.get_inheritable(fd)
    except OSError:
        return False


def _fork_exec(argv, cwd, env, stdout, stderr):
    r, w = os.pipe()  # close-on-exec: the exec closes it, so an end of file with nothing in it means started
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setsid()
            for name in ("SIGPIPE", "SIGXFSZ"):
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            os.chdir(cwd)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(stdout, 1)
            os.dup2(stderr, 2)
            try:
                # fds that whoever started this process left open and inheritable: not the agent's.
                for name in os.listdir("/dev/fd"):
                    if name.isdigit() and int(name) > 2 and int(name) != w:
                        try:
                            os.close(int(name))
                        except OSError:
                            pass
            except OSError:
                pass
            try:
                os.execvpe(argv[0], argv, env)
            except OSError as exc:
                # As Popen says it: the program as it was named, not the last folder of PATH tried.
                exc.filename = argv[0]
                raise
        except BaseException as exc:  # noqa - whatever stopped the start goes to the parent, nothing else
            try:
                os.write(w, ("%s\0%s" % (type(exc).__name__, exc)).encode("utf-8", "replace"))
            finally:
                os._exit(127)
    os.close(w)
    chunks = []
    while True:
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    if chunks:
        os.waitpid(pid, 0)
        kind, _, text = b"".join(chunks).decode("utf-8", "replace").partition("\0")
        raise StartError(kind, text)
    return pid


class _Stop(Exception):
    pass


WAKE = "wake"
"""A FIFO in the delivery folder: the supervisor writes a line into it when exit.json, then packed.json, is there, and
the worker's poll on the host blocks reading it (workers.attempt.poll_script), so the agent's end is seen at once
and no host process wakes at intervals to look."""


def _waker(here):
    """What writes the wake line: the FIFO held open for reading and writing, so a write never blocks nor fails for want
    of a reader (the line waits in it for the next poll), and a poll's open never waits for a writer."""
    try:
        fd = os.open(os.path.join(here, WAKE), os.O_RDWR | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError("not a FIFO")
    except OSError:
        return lambda: None

    def wake():
        try:
            os.write(fd, b"x\n")
        except OSError:
            pass  # full of lines nobody read (an agent's): a poll that waits wakes anyway

    return wake


def _prepare(req, prep):
    """What comes before the agent, in the same Python start (each is 10-150 ms on a host): end what earlier
    deliveries left that this one replaces, make the attempt folder afresh, write the prompt and the adapter's
    files, and say the host's facts. Returns the facts, or a dict with ``agent_missing``, ``reap_error`` or
    ``prepare_error``."""
    program = prep.get("program")
    # As `command -v` would: a path, or a name looked up on the agent's PATH (the host's when the agent sets none).
    if program and _which(program, prep.get("path") or os.environ.get("PATH") or os.defpath) is None:
        return {"agent_missing": program}
    try:
        reaped = _reap(req)
    except Exception as exc:  # noqa - any failure here is one line to the worker, never a traceback
        return {"reap_error": "%s: %s" % (type(exc).__name__, exc)}
    root = prep["root"]
    try:
        _rmtree(root)  # rm -rf: a link in the attempt folder's place is removed, never followed
        for folder in prep.get("dirs") or ():
            os.makedirs(folder, exist_ok=True)
        for path, data in sorted((prep.get("files") or {}).items()):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not isinstance(data, bytes):  # a request in JSON (main): the bytes base64-encoded
                import binascii

                data = binascii.a2b_base64(data)
            with open(path, "wb") as f:
                f.write(data)
        vfs = os.statvfs(root)
    except OSError as exc:
        return {"prepare_error": "%s: %s" % (exc.filename or root, exc.strerror or exc)}
    u = os.uname()
    return {"uname": "%s %s %s" % (u.sysname, u.release, u.machine), "python": sys.version.split()[0],
            "executable": sys.executable or "", "disk_free_mb": vfs.f_bavail * vfs.f_frsize // (1024 * 1024),
            "reaped": reaped}


START_LOCK_S = 45.0
"""How long a start waits for another start of the same attempt folder (whose reap may give an earlier supervisor its
TERM grace and more, 13 s) before it gives up with a prepare error."""


def _start_lock(fleet, root):
    """An exclusive lock on the starts of the attempt folder ``root``, held from before the reap until the new
    delivery's running entry is written (the supervisor reports after it): two starts of one attempt at once (a
    redelivery while the first worker lives) each reaped before the other had an entry, and both agents ran in one
    folder. One of 256 files under ``.fleet/locks/`` by the folder's hash, so their number stays bounded. Returns the
    locked fd, or a reason why there is none."""
    try:
        folder = os.path.join(fleet, "locks")
        _makedirs_private(folder)
        name = "start-%s.lock" % _sha256(root.encode("utf-8", "surrogatepass")).hexdigest()[:2]
        fd = os.open(os.path.join(folder, name),
                     os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o600)
    except OSError as exc:
        return "%s: %s" % (exc.filename or fleet, exc.strerror or exc)
    end = time.time() + START_LOCK_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.time() > end:
                os.close(fd)
                return "%s: another start of this attempt held its start lock for %.0f s" % (root, START_LOCK_S)
        except OSError as exc:
            os.close(fd)
            return "%s: cannot lock the start: %s" % (root, exc.strerror or exc)
        time.sleep(0.02)


def run(req):
    if req.get("compiled") and req.get("want_code"):
        # This host's interpreter is not the worker's, so BOOT compiled the source: the code goes back once, and the
        # worker's next starts here send it (no compile on the path of each attempt).
        import binascii

        _say({"compiled": {"tag": sys.version, "code": binascii.b2a_base64(req["compiled"], newline=False).decode()}})
    # The earlier deliveries' folders are removed once the supervisor is forked, while it starts the agent on the
    # other core, not before the start (0.3 ms and more of it); but first where the host's disk is nearly full, since
    # their space may be what this start needs.
    forget_first = _disk_nearly_full(req.get("fleet") or "")
    if forget_first:
        _forget(req)
    lock = None
    try:
        if req.get("prepare") is not None:
            lock = _start_lock(req["fleet"], req["prepare"]["root"])
            if not isinstance(lock, int):
                _say({"prepare_error": lock})
                return 127
        return _run(req, lock)
    finally:
        if isinstance(lock, int):
            os.close(lock)  # the supervisor holds its own copy until its running entry is written
        # Only this process gets here (the supervisor ends with os._exit).
        if not forget_first:
            _forget(req)


NEARLY_FULL_BYTES = 256 * 1024 * 1024
"""Under this much free space on the host's ``.fleet`` file system, a ``run`` removes the earlier deliveries' folders
before the start, not after it."""


def _disk_nearly_full(fleet):
    try:
        st = os.statvfs(fleet if os.path.isdir(fleet) else os.path.dirname(fleet.rstrip("/")) or "/")
    except (OSError, AttributeError):
        return True  # cannot tell: the order that never needs the space
    return st.f_bavail * st.f_frsize < NEARLY_FULL_BYTES


def _run(req, lock):
    fleet, token = req["fleet"], req["token"]
    prepared = None
    if req.get("prepare") is not None:
        prepared = _prepare(req, req["prepare"])
        if "agent_missing" in prepared or "reap_error" in prepared or "prepare_error" in prepared:
            _say(prepared)
            return 127
    _makedirs_private(os.path.join(fleet, "deliveries"))
    _makedirs_private(os.path.join(fleet, "running"))
    here = delivery_dir(fleet, token)
    try:
        os.mkdir(here, 0o700)
    except FileExistsError:
        _say({"start_error": "delivery folder %s exists already" % here})
        return 127
    _reserve(here)
    try:
        os.mkfifo(os.path.join(here, WAKE), 0o600)
    except (OSError, AttributeError):
        pass  # a file system without FIFOs: the worker's polls look at intervals instead
    subreaper = _subreaper_call()
    # Out before the fork: the supervisor must have none of these lines in its copy of the buffer.
    sys.stdout.flush()
    try:
        pid = os.fork()
    except OSError as exc:  # the host's process limit: an answer, not a traceback the worker would take for code
        # that did not load here (and start again)
        _say(_with_facts({"start_error": "cannot fork the supervisor: %s" % (exc.strerror or exc)}, prepared))
        return 127
    if pid == 0:  # the supervisor
        code = 1
        answered = []  # type: list
        try:
            code = _supervise(req, here, lock, subreaper, prepared, answered)
        except BaseException as exc:  # noqa - one line, never a traceback: on the channel (the worker shows it with
            # its start error) before the supervisor answered, in launcher.log after
            try:
                if not answered and prepared is not None:
                    # The start's facts still reach the worker (they go on the answer, which never came).
                    os.write(1, (dumps({"prepared": prepared}) + "\n").encode())
                os.write(2, ("supervisor: %s: %s\n" % (type(exc).__name__, exc)).encode())
            except OSError:
                pass
        finally:
            os._exit(code)
    # The supervisor answers the worker on the channel itself (the signed start record, or the start error), and the
    # command ends when it has let go of it: this process is done, and its exit status says only that the start is
    # the supervisor's now. Its report relayed through here (this process woken, the line printed, its exit waited
    # for) was a millisecond of every start; a fork beside the prepare cost more than it saved (both processes then
    # copy the pages they write).
    return 0


def _child_waker():
    """A sleep that a child's end cuts short: the agent's end is seen at once, not up to a whole poll interval
    later (the host would wait on the harness, between one agent and the next, for nothing). SIGCHLD writes a
    byte into a pipe (``signal.set_wakeup_fd``), and ``select`` on that pipe is the sleep; a signal that came
    before the sleep left its byte there already, so none is missed."""
    import select  # the supervisor's alone, after its answer: not on the path of a start

    try:
        r, w = os.pipe()
        for fd in (r, w):
            os.set_blocking(fd, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, so the wakeup fd is written
        signal.set_wakeup_fd(w)
    except (OSError, ValueError, AttributeError):
        return time.sleep

    def nap(seconds):
        try:
            select.select([r], [], [], seconds)
            while os.read(r, 512):
                pass
        except (OSError, ValueError):
            pass

    return nap


def _with_facts(answer, prepared):
    """A start's answer with the start's facts (``_prepare``) on its line, when there are some."""
    return answer if prepared is None else dict(answer, prepared=prepared)


def _supervise(req, here, lock, set_subreaper=None, prepared=None, answered=None):
    """The supervisor: it starts the agent, answers the worker on the channel (``_run``), and supervises the agent to
    its end. ``prepared``: the start's facts (``_prepare``), which go on its answer's line; ``answered`` gets an
    item once the answer is written (a supervisor that fails before it still sends the facts, see ``_run``)."""
    key, token, marker = req["key"], req["token"], req["marker"]
    spec = req["spec"]
    os.setsid()  # leave the SSH session: a closed channel does not end the run
    null = os.open(os.devnull, os.O_RDWR)
    log = os.open(os.path.join(here, "launcher.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    subreaper = bool(set_subreaper and set_subreaper())
    stop = {"why": "", "packing": False}

    def _term(signum, frame):
        stop["why"] = stop["why"] or "terminated"
        if stop["packing"]:
            # A later delivery's reap (or a person) asks it to end: the pack is nobody's any more, and the reap would
            # wait its 13 s for it, then kill it.
            raise _Stop("stopped while packing (SIGTERM)")

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    env = agent_env(os.environ, spec)
    env[MARKER_VAR] = marker
    out = open(os.path.join(here, "agent.stdout"), "wb")
    err = open(os.path.join(here, "agent.stderr"), "wb")

    def report(obj):
        # The answer line, on the channel this process still holds (the foreground process wrote its lines before the
        # fork); then its output goes to launcher.log, and the worker's command ends. The start lock's copy goes with
        # it: the running entry is written.
        # The facts on the answer's line, not a line of their own before the fork: one write to the channel, which
        # sshd forwards and the worker reads once (a fifth of a millisecond of every start on this 2-core machine).
        line = (dumps(_with_facts(obj, prepared)) + "\n").encode()
        if answered is not None:
            answered.append(True)
        try:
            while line:
                line = line[os.write(1, line):]
        except OSError:
            pass  # the worker is gone: the heartbeat bound ends this run
        if lock is not None:
            os.close(lock)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)

    try:
        agent = _spawn(spec["argv"], spec["cwd"], env, out.fileno(), err.fileno())
    except StartError as exc:
        report({"start_error": "%s: %s" % (exc.kind, exc)})
        return 127
    except (OSError, TypeError, ValueError) as exc:  # the fork itself, or an argv that is no list of strings
        report({"start_error": "%s: %s" % (type(exc).__name__, exc)})
        return 127
    born = time.monotonic()
    started = sign(key, {"token": token, "pid": agent, "pgid": agent, "sid": agent, "launcher_pid": os.getpid(),
                         "time": time.time()})
    _write_json(os.path.join(here, "started.json"), started, durable=False)
    entry = dict(req.get("entry") or {})
    entry.update(token=token, launcher_pid=os.getpid(), agent_pid=agent, sid=agent, marker=marker,
                 heartbeat_s=req.get("heartbeat_s"), started=time.time())
    entry_path = _entry_path(req["fleet"], token)
    _write_json(entry_path, entry, durable=False)
    report({"started": started})
    # After the answer, not on its path: an agent that ended before the wakeup fd was there is reaped by the loop's
    # first look, which comes before its first sleep.
    nap = _child_waker()
    if req.get("pack"):
        try:
            import zlib  # noqa: F401 - the pack's: loaded while the agent runs, not after its end
        except ImportError:
            pass  # the pack fails on it then, and says so (the worker packs with the pack verb)

    wake = _waker(here)

    status = {}

    def note(done):
        if agent in done:
            status["raw"] = done[agent]
            status["ran_s"] = time.monotonic() - born

    deadline = time.time() + float(req.get("deadline_s") or 86400)
    beat_s = float(req.get("heartbeat_s") or 0)
    last_beat = time.monotonic()
    last_seq = -1
    beat_path = os.path.join(here, "heartbeat")
    ended_by = "exit"
    while "raw" not in status:
        note(_reap_children())
        if "raw" in status:
            break
        if stop["why"]:
            ended_by = "superseded" if os.path.exists(os.path.join(here, "stop.json")) else "terminated"
        elif time.time() > deadline:
            ended_by = "deadline"
        elif beat_s:
            try:
                with open(beat_path) as f:
                    seq_text, _, mac = f.read().strip().partition(" ")
                seq = int(seq_text)
                if seq > last_seq and compare_digest(heartbeat_line(key, token, seq), "%d %s" % (seq, mac)):
                    last_seq, last_beat = seq, time.monotonic()
            except (OSError, ValueError, TypeError):
                pass
            if time.monotonic() - last_beat > beat_s:
                ended_by = "heartbeat"
        if ended_by != "exit":
            sys.stderr.write("supervisor: ending the agent tree (%s)\n" % ended_by)
            end_tree(marker, agent, [agent, os.getpid()], note, subreaper)
            break
        nap(0.2)
    # The agent may have left children (a dev server, a test watcher, a child that called setsid): end them too.
    end_tree(marker, agent, [agent, os.getpid()], note, subreaper)
    while "raw" not in status:
        try:
            pid, raw = os.waitpid(agent, 0)
            status["raw"] = raw
            status["ran_s"] = time.monotonic() - born
        except ChildProcessError:
            status["raw"] = None
    raw = status["raw"]
    out.close()
    err.close()
    if raw is None:
        code, sig = None, None
    elif os.WIFSIGNALED(raw):
        code, sig = None, os.WTERMSIG(raw)
    else:
        code, sig = os.WEXITSTATUS(raw), None
    record = {
        "token": token,
        "exit_code": code,
        "signal": sig,
        "timed_out_by_launcher": ended_by == "deadline",
        "ended_by": ended_by,
        # How long the agent itself ran, measured here: the worker may read this record late (a host that did
        # not answer for a while), and must still tell an agent that ended in time from one that ran past it.
        "ran_s": round(status.get("ran_s", time.monotonic() - born), 3),
        "time": time.time(),
    }
    for name in ("agent.stdout", "agent.stderr"):
        path = os.path.join(here, name)
        try:
            record[name] = {"size": os.path.getsize(path), "sha256": _sha256_file(path)}
        except OSError:
            record[name] = None
    # The agent's tree is gone: its folder is what it left, and this process packs it now, instead of a Python start
    # of the worker's pack later. exit.json comes first (the agent's end is seen at once, and its time is its own);
    # "packing" tells the worker to wait for packed.json before it runs checks or reads the tarballs.
    to_pack = req.get("pack") if ended_by == "exit" else None
    if to_pack:
        record["packing"] = True
    try:
        # Not synced: the worker reads it within a poll, and a host that goes down loses the attempt with it anyway.
        _with_reserve(here, lambda: _write_json(os.path.join(here, "exit.json"), sign(key, record), durable=False))
        wake()
    except OSError:
        to_pack = None  # the worker removed the folder already (it stopped the agent and collected)
    if to_pack:
        packed = {"token": token, "ok": False}
        limit = float(to_pack.get("limit_s") or 0)

        def _too_long(signum, frame):
            if stop["packing"]:
                raise _Stop("the pack took over %g s: the worker waits no longer for it" % limit)

        try:
            # Bounded as the worker's wait for it is (a sparse file of terabytes is made at once, and its hash takes
            # hours): past it nobody takes this pack, and it would hold a core and its running entry on.
            if limit > 0 and hasattr(signal, "setitimer"):
                signal.signal(signal.SIGALRM, _too_long)
                signal.setitimer(signal.ITIMER_REAL, limit)
            stop["packing"] = True
            if stop["why"]:
                raise _Stop("stopped while packing (SIGTERM)")
            try:
                # The bundle's size and sha256 are signed with the rest: the worker takes the bundle only if it is
                # the one this supervisor wrote. None: the host's disk is full (see pack).
                packed["bundle"] = pack(to_pack["root"], here, to_pack.get("outputs") or ())
                packed["ok"] = True
            finally:
                stop["packing"] = False
                if limit > 0 and hasattr(signal, "setitimer"):
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except Exception as exc:  # noqa - the worker packs again itself; the reason stays in launcher.log
            sys.stderr.write("supervisor: pack failed: %s: %s\n" % (type(exc).__name__, exc))
    # The running entry goes before packed.json: a worker that read packed.json gives the slot to the host's next
    # attempt, whose start must not find this supervisor there (it would stop it and wait for it, in steps of 0.1 s).
    try:
        os.unlink(entry_path)
    except OSError:
        pass
    if to_pack:
        try:
            _with_reserve(here, lambda: _write_json(os.path.join(here, "packed.json"), sign(key, packed), durable=False))
            wake()
        except OSError:
            pass
    return 0


# -- kill and reap ---------------------------------------------------------------------------------------------

def kill(req):
    """End one delivery's agent tree: the worker's timeout or revoke. The supervisor stays to write exit.json."""
    token, marker = req["token"], req.get("marker") or ""
    pids = req.get("pids") or {}
    roots = [int(pids["agent"])] if pids.get("agent") else []
    launcher = int(pids.get("launcher") or 0)
    if launcher_alive(launcher, token):
        roots += _children_of(launcher)  # the agent and every orphan re-parented to the supervisor
    ended = end_tree(marker, int(pids.get("sid") or 0), roots)
    if launcher_alive(launcher, token) and stopped(launcher):
        # A stopped supervisor (the agent sent it SIGSTOP) would never write exit.json nor leave: it is ended too,
        # with its entry in running/, so nothing of the delivery stays behind.
        try:
            os.kill(launcher, signal.SIGKILL)
            ended.add(launcher)
        except OSError:
            pass
        try:
            os.unlink(_entry_path(req["fleet"], token))
        except OSError:
            pass
    _say({"ended": sorted(ended)})
    return 0


def _why_end(entry, me):
    """Why the new delivery ``me`` must end the earlier delivery ``entry`` ("" if it must not)."""
    same = ("sweep_id", "sweep_uid", "cell", "attempt")
    if all(entry.get(k) == me.get(k) for k in same):
        return "the same attempt delivered again"
    if entry.get("host") == me.get("host") and me.get("slot") is not None and entry.get("slot") == me.get("slot"):
        return "an earlier holder of slot %s of %s" % (me.get("slot"), me.get("host"))
    if not launcher_alive(int(entry.get("launcher_pid") or 0), str(entry.get("token") or "")):
        return "its launcher is gone: nobody supervises it"
    return ""


def reap(req):
    _say({"reaped": _reap(req)})
    return 0


def _reap(req):
    fleet, me = req["fleet"], req.get("entry") or {}
    _makedirs_private(os.path.join(fleet, "running"))
    running = os.path.join(fleet, "running")
    report = []
    for name in sorted(os.listdir(running)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(running, name)
        try:
            entry = _load_json(path)
        except (OSError, ValueError):
            continue
        if not isinstance(entry, dict):
            continue
        token = str(entry.get("token") or "")
        if token == req.get("token") or not token:
            continue
        why = _why_end(entry, me)
        if not why:
            continue
        launcher = int(entry.get("launcher_pid") or 0)
        if launcher_alive(launcher, token):
            # Ask its supervisor to end its own tree and to record why (exit.json, ended_by "superseded").
            try:
                _write_json(os.path.join(delivery_dir(fleet, token), "stop.json"), {"why": why, "by": req.get("token")})
                os.kill(launcher, signal.SIGTERM)
            except OSError:
                pass
            end = time.time() + TERM_GRACE + 10
            while launcher_alive(launcher, token) and time.time() < end:
                time.sleep(0.1)
            if launcher_alive(launcher, token):
                try:
                    os.kill(launcher, signal.SIGKILL)
                except OSError:
                    pass
        # Whatever is left: on Linux by the marker only (an old session id may name someone else's session now).
        sid = 0 if LINUX else int(entry.get("sid") or 0)
        ended = end_tree(str(entry.get("marker") or ""), sid)
        try:
            os.unlink(path)
        except OSError:
            pass
        report.append({"token": token, "cell": entry.get("cell"), "attempt": entry.get("attempt"), "why": why,
                       "ended": sorted(ended)})
    # Folders of deliveries that ended long ago and whose worker never came back to remove them.
    deliveries = os.path.join(fleet, "deliveries")
    live = set(n[:-5] for n in os.listdir(running) if n.endswith(".json"))
    for name in os.listdir(deliveries) if os.path.isdir(deliveries) else ():
        path = os.path.join(deliveries, name)
        try:
            old = time.time() - os.path.getmtime(path) > STALE_DELIVERY_S
        except OSError:
            continue
        if old and name not in live and name != req.get("token"):
            try:
                _rmtree(path)
            except OSError:
                pass
    return report


def _hasher(size=0):
    """A sha256 object: the interpreter's own for what is small (no OpenSSL to load on the path of every attempt),
    hashlib's (OpenSSL, several times faster) for a file over 1 MiB."""
    if size > (1 << 20):
        import hashlib

        return hashlib.sha256()
    return _sha256()


def _sha256_file(path):
    h = _hasher(os.path.getsize(path))
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _text(name):
    """A host file name as JSON can hold it. A name of raw bytes (not UTF-8) reaches Python decoded with
    surrogates; each bad byte is written as a ``\\udcXX`` escape (the store uses the same form), and the exact
    bytes go beside it, base64-encoded, so nothing about the name is lost."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


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


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


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


VERBS = {"run": run, "pack": _pack, "kill": kill, "reap": reap}


def _forget(req):
    """Remove the delivery folders the request names under ``forget``: earlier deliveries whose files the worker has
    taken (it asks here instead of with a command of its own). Only a folder of ``fleet/deliveries/`` named by a token,
    never this delivery's, never one whose agent is still listed as running."""
    fleet = req.get("fleet") or ""
    for path in req.get("forget") or ():
        token = os.path.basename(path) if isinstance(path, str) else ""
        if (not token or path != delivery_dir(fleet, token) or token == req.get("token")
                or not all(c in "0123456789abcdef" for c in token)):
            continue
        entry = _entry_path(fleet, token)
        if os.path.lexists(entry):
            # Listed as running: only a supervisor that is gone (killed, the host's OOM killer) leaves its entry
            # behind, and then nobody will remove it but this; a live one keeps its folder.
            try:
                live = launcher_alive(int(_load_json(entry).get("launcher_pid") or 0), token)
            except (OSError, ValueError, AttributeError, TypeError):
                live = False
            if live:
                continue
            try:
                os.unlink(entry)
            except OSError:
                pass
        try:
            _rmtree(path)
        except OSError:
            pass  # the weekly sweep of the reap takes it later


def serve(req):
    """Run one request (a dict with ``verb``; the worker sends it on stdin, see ``BOOT``)."""
    verb = VERBS.get(req.get("verb"))
    if verb is None:
        sys.stderr.write("launcher: unknown verb %r (run|pack|kill|reap)\n" % (req.get("verb"),))
        return 2
    if verb is not run:
        _forget(req)  # run's own comes after the supervisor's fork, off the path of the start
    return verb(req)


def main(argv):
    """``python3 launch.py`` reads one request line from stdin: for people and tests, the worker uses BOOT."""
    if len(argv) != 1:
        sys.stderr.write("usage: launch.py < REQUEST.json (one JSON line with verb, fleet, token, ...)\n")
        return 2
    try:
        req = loads(sys.stdin.readline())
    except ValueError as exc:
        sys.stderr.write("launcher: the request is not JSON: %s\n" % exc)
        return 2
    return serve(req)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
