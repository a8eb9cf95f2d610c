"""The agent tree and how it ends: every process that carries the delivery's marker, is in the agent's session, or
descends from the agent or the supervisor, ended with TERM, a grace and KILL, again until none is left
(``end_tree``); and whether a delivery's supervisor still lives (``launcher_alive``). On Linux from /proc, elsewhere
(macOS) from ``ps``. docs/launcher.md, "The agent tree and how it ends".
"""

import time

from .lean import os, signal


MARKER_VAR = "FLEET_AGENT_MARK"
"""Each agent's environment holds this variable with a per-delivery random value: the tree walk finds a
descendant by it even after it left the session and was re-parented."""
TERM_GRACE = 3.0


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
