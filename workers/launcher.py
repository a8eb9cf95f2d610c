"""The launcher: uploaded to every attempt's folder on the host and run there with the host's Python.

It must run on any host (Linux, macOS, WSL) with nothing but a Python 3.8+ standard library, so it
imports nothing from the harness. Three verbs:

``run``  Reads ``.fleet/launch.json`` ({"argv", "env", "pass_env", "cwd", "deadline_s"}), starts the agent in
         its own process group (so the whole group can be killed on timeout or revoke) with the environment
         ``agent_env`` makes (never the launcher's own whole), writes
         ``.fleet/started.json`` once the process exists (or ``.fleet/start_error.json`` if it could not
         start), and ``.fleet/exit.json`` when it ends. The argv comes from a file, never from a shell
         command line, so no prompt or model text ever reaches a shell. ``deadline_s`` is a last guard
         for a worker that vanished: past it the launcher kills the group itself.
``kill`` Ends the agent's process group: what the worker calls on a timeout or a revoke.
``pack`` Writes ``.fleet/workspace.tar.gz`` with the workspace's files (size-capped, vendored folders
         skipped) and ``.fleet/manifest.json`` listing every file with its size and sha256; links are
         recorded with their target and never followed, FIFOs and devices never opened, names that are not
         UTF-8 escaped with their bytes kept. More arguments are outputs outside the workspace (the answer
         file, an adapter's session files and state folders): ``.fleet/outputs.tar.gz`` and
         ``.fleet/outputs.json``, by the same rules.

Files it writes are written to a temporary name and renamed, so the worker never reads half a file.
"""

import base64
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import time

# What the agent inherits of the launcher's environment: what a login gives every program, nothing more. The
# launcher runs under the worker's own environment on a local host (its broker URL and Redis password) and
# under the SSH session's elsewhere; neither is the agent's business (docs/environment.md).
AGENT_ENV_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR")
AGENT_ENV_PREFIXES = ("LC_",)

SKIP_DIRS = {"node_modules", ".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".cache"}
MAX_FILE = 8 * 1024 * 1024
MAX_TOTAL = 48 * 1024 * 1024
MAX_DEPTH = 200


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _kill_group(pgid, proc=None):
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.time() + wait
        while time.time() < end:
            if proc is not None:
                proc.poll()  # reap the agent itself: an unreaped zombie would keep its group "alive"
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


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


def run(base):
    # Leave the SSH session's process group, so a closed channel (SIGHUP) does not end the run.
    try:
        os.setsid()
    except OSError:
        pass
    fleet = os.path.join(base, ".fleet")
    with open(os.path.join(fleet, "launch.json")) as f:
        spec = json.load(f)
    env = agent_env(os.environ, spec)
    out = open(os.path.join(fleet, "agent.stdout"), "wb")
    err = open(os.path.join(fleet, "agent.stderr"), "wb")
    try:
        proc = subprocess.Popen(
            spec["argv"],
            cwd=spec["cwd"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    except OSError as exc:
        _write_json(os.path.join(fleet, "start_error.json"), {"error": "%s: %s" % (type(exc).__name__, exc)})
        return 127
    _write_json(
        os.path.join(fleet, "started.json"),
        {"pid": proc.pid, "pgid": proc.pid, "launcher_pid": os.getpid(), "time": time.time()},
    )
    deadline = time.time() + float(spec.get("deadline_s") or 86400)
    timed_out = False
    while proc.poll() is None:
        if time.time() > deadline:
            timed_out = True
            _kill_group(proc.pid, proc)
            break
        time.sleep(0.2)
    code = proc.wait()
    # The agent may have left children in its group (a dev server, a test watcher): end them too.
    _kill_group(proc.pid)
    out.close()
    err.close()
    _write_json(
        os.path.join(fleet, "exit.json"),
        {
            "exit_code": code if code >= 0 else None,
            "signal": -code if code < 0 else None,
            "timed_out_by_launcher": timed_out,
            "time": time.time(),
        },
    )
    return 0


def _text(name):
    """A host file name as JSON can hold it. A name of raw bytes (not UTF-8) reaches Python decoded with
    surrogates; each bad byte is written as a ``\\udcXX`` escape (the store uses the same form), and the exact
    bytes go beside it, base64-encoded, so nothing about the name is lost."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _named(entry, key, name):
    entry[key] = _text(name)
    if entry[key] != name:
        entry[key + "_b64"] = base64.b64encode(os.fsencode(name)).decode("ascii")
    return entry


def _entry(rel, why, size=None, sha256=None, packed=False):
    return _named({"path": None, "size": size, "sha256": sha256, "packed": packed, "why": why}, "path", rel)


class _Hashing(object):
    """Reads a file for the tar and hashes exactly the bytes the tar got."""

    def __init__(self, f):
        self.f = f
        self.h = hashlib.sha256()

    def read(self, n=-1):
        data = self.f.read(n)
        self.h.update(data)
        return data


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

    def __init__(self, tar, caps, skip):
        self.tar = tar
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
            if self.caps and (size > MAX_FILE or self.total + size > MAX_TOTAL):
                h = hashlib.sha256()
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
                self.manifest.append(_entry(rel, "over the size cap", os.fstat(f.fileno()).st_size, h.hexdigest()))
                return
            info = tarfile.TarInfo(rel)
            info.size = size
            info.mtime = int(st.st_mtime)
            info.mode = stat.S_IMODE(st.st_mode)
            reader = _Hashing(f)
            self.tar.addfile(info, reader)
            self.total += size
            self.manifest.append(_entry(rel, "", size, reader.h.hexdigest(), True))

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


def _pack_into(tar_path, top_fd, items, caps, skip):
    """Write ``tar_path`` from ``items`` ((path below top_fd, shown as) pairs; a path ending in '/' is a folder
    walked whole) and return the manifest."""
    tmp = tar_path + ".tmp"
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        packer = _Packer(tar, caps, skip)
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
    os.replace(tmp, tar_path)
    return packer.manifest


def pack(base, outputs=()):
    """The workspace into ``workspace.tar.gz`` + ``manifest.json``; the attempt's other outputs (relative to
    ``base``: the answer file, an adapter's transcripts and state folders, a folder ending in '/') into
    ``outputs.tar.gz`` + ``outputs.json``, by the same rules, so the worker never downloads through a link."""
    fleet = os.path.join(base, ".fleet")
    top = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        manifest = _pack_into(os.path.join(fleet, "workspace.tar.gz"), top, [("workspace/", "")], True, SKIP_DIRS)
        found = _pack_into(os.path.join(fleet, "outputs.tar.gz"), top, [(rel, rel) for rel in outputs], False, ())
    finally:
        os.close(top)
    _write_json(os.path.join(fleet, "outputs.json"), found)
    _write_json(os.path.join(fleet, "manifest.json"), manifest)
    return 0


def kill(base):
    """End the agent's process group (TERM, a grace, then KILL). Python, not the shell's ``kill``,
    because shells disagree on how to name a process group (dash rejects ``kill -- -PGID``)."""
    try:
        with open(os.path.join(base, ".fleet", "started.json")) as f:
            pgid = int(json.load(f)["pgid"])
    except (OSError, ValueError, KeyError):
        return 0
    if pgid > 1:
        _kill_group(pgid)
    return 0


VERBS = {"run": run, "pack": pack, "kill": kill}


def main(argv):
    if len(argv) < 3 or argv[1] not in VERBS or (argv[1] != "pack" and len(argv) != 3):
        sys.stderr.write("usage: launch.py run|pack|kill ATTEMPT_DIR (pack: then the outputs to collect)\n")
        return 2
    if argv[1] == "pack":
        return pack(argv[2], argv[3:])
    return VERBS[argv[1]](argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
