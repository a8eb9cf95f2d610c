"""``fleet hosts clean`` on the host: old attempt folders and old harness releases under the host's work dir.

Like the launcher, this runs with the host's own Python 3.8+ and its standard library only, and is never run
from a file on the host: the worker sends this source on stdin with one JSON request line (the launcher's
``BOOT``), and it prints one JSON answer line.

What it removes (docs/retention.md):

- ``WORKDIR/harness/<release>/``: every release but the current one (the request's ``keep_release``), one being
  installed (``<release>.lock`` beside it) and one whose files a running process uses (its path in a command
  line: an agent or a check of an older worker still running from it);
- ``WORKDIR/runs/.../attempt-<k>/``: attempt folders untouched for ``keep_attempts_days``, except those of the
  deliveries the launcher lists as live (``WORKDIR/.fleet/running/*.json``, each with its attempt's ``root``);
  the folders left empty above them (sweep, cell) go too, once they are as old.

Each folder is first renamed into ``WORKDIR/.fleet/trash/`` (one atomic step: it is there whole or gone), then
deleted; a clean that was killed leaves its trash to the next one. Two cleans of one host take turns
(``WORKDIR/.fleet/clean.lock``). Symbolic links are never followed and never removed.
"""

import fcntl
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

ATTEMPT = re.compile(r"^attempt-\d+$")


def _size(path):
    total = 0
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                pass
    return total


def _age_s(path, now):
    """Seconds since anything directly in ``path`` (or the folder itself) last changed."""
    newest = os.lstat(path).st_mtime
    try:
        for name in os.listdir(path):
            try:
                newest = max(newest, os.lstat(os.path.join(path, name)).st_mtime)
            except OSError:
                pass
    except OSError:
        pass
    return now - newest


def _live_roots(fleet):
    roots = []
    running = os.path.join(fleet, "running")
    for name in os.listdir(running) if os.path.isdir(running) else ():
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(running, name)) as f:
                root = json.load(f).get("root") or ""
        except (OSError, ValueError, AttributeError):
            continue
        if root:
            roots.append(os.path.normpath(root))
    return roots


def _command_lines():
    """Every process's command line, as one text (a release in use appears in it by its path). Where there is a
    /proc, from it: the command lines byte for byte (ps shows a newline in a path as '?') and each process's
    working directory (an agent or check run from inside a release need not name it in its arguments)."""
    if os.path.isdir("/proc/self"):
        return _proc_lines()
    try:
        out = subprocess.run(["ps", "-axww", "-o", "command="], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=30)
        return out.stdout.decode(errors="replace")
    except (OSError, subprocess.SubprocessError):
        return None


def _proc_lines():
    parts = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                parts.append(f.read().replace(b"\0", b" ").decode("utf-8", "surrogateescape"))
        except OSError:
            pass
        try:
            parts.append(os.readlink("/proc/%s/cwd" % pid) + "/")
        except OSError:
            pass  # another user's process, or gone
    return "\n".join(parts)


def _trash_it(path, trash, n):
    target = os.path.join(trash, "%d-%d-%s" % (os.getpid(), n, os.path.basename(path)))
    os.rename(path, target)
    shutil.rmtree(target, ignore_errors=True)


def clean(req):
    workdir = os.path.normpath(req["workdir"])
    fleet = os.path.join(workdir, ".fleet")
    trash = os.path.join(fleet, "trash")
    dry = bool(req.get("dry_run"))
    keep_release = req["keep_release"]
    cutoff_s = float(req["keep_attempts_days"]) * 86400
    if math.isnan(cutoff_s) or cutoff_s < 0:
        # NaN compares false with every age, so "younger than NaN" would hold for none: every folder would go.
        raise ValueError("keep_attempts_days %r: not a number of days, 0 or more" % req["keep_attempts_days"])
    now = time.time()
    answer = {"releases": [], "attempts": [], "kept": [], "notes": [], "trash": 0}  # type: dict
    if os.path.islink(workdir):
        # Never followed (a link put there would aim the clean's removals at its target), but said as what it is:
        # "no work dir" sent the operator looking for a folder that is there.
        answer["notes"].append("%s is a symbolic link: not cleaned (set the host's workdir to %s)"
                               % (workdir, os.path.realpath(workdir)))
        return answer
    if not os.path.isdir(workdir):
        answer["notes"].append("%s: no work dir (nothing to clean)" % workdir)
        return answer
    lock_fd = None
    if not dry:
        # The trash's contents are deleted whole: a .fleet or trash that is a link (an agent runs as this user
        # and can write the work dir) would make this delete what the link points at.
        if os.path.islink(fleet):
            raise ValueError("%s is a symbolic link: not cleaned (its trash would be the link's target)" % fleet)
        if not os.path.isdir(fleet):
            os.makedirs(fleet, 0o700)
        lock_fd = os.open(os.path.join(fleet, "clean.lock"), os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        if os.path.islink(trash) or (os.path.lexists(trash) and not os.path.isdir(trash)):
            os.unlink(trash)  # the link (or file) itself, never its target
        if not os.path.isdir(trash):
            os.mkdir(trash, 0o700)
        for name in os.listdir(trash):  # what a clean that was killed had moved away
            path = os.path.join(trash, name)
            answer["trash"] += _size(path)
            if os.path.islink(path) or not os.path.isdir(path):
                os.unlink(path)
            else:
                shutil.rmtree(path, ignore_errors=True)
    n = 0
    try:
        releases = os.path.join(workdir, "harness")
        if os.path.islink(releases):
            answer["notes"].append("%s is a symbolic link: releases left alone" % releases)
        elif os.path.isdir(releases):
            procs = _command_lines()
            if procs is None:
                answer["notes"].append("cannot list the processes (ps): releases left alone")
            for name in sorted(os.listdir(releases)):
                path = os.path.join(releases, name)
                if name.endswith(".lock") or os.path.islink(path) or not os.path.isdir(path):
                    continue
                if name == keep_release:
                    answer["kept"].append({"path": path, "why": "the current release"})
                    continue
                if os.path.exists(path + ".lock"):
                    answer["kept"].append({"path": path, "why": "being installed"})
                    continue
                if procs is None:
                    continue
                if (path + "/") in procs:
                    answer["kept"].append({"path": path, "why": "in use by a running process"})
                    continue
                size = _size(path)
                if not dry:
                    n += 1
                    _trash_it(path, trash, n)
                answer["releases"].append({"path": path, "size": size})
        runs = os.path.join(workdir, "runs")
        live = _live_roots(fleet)
        if os.path.islink(runs):
            answer["notes"].append("%s is a symbolic link: attempt folders left alone" % runs)
        elif os.path.isdir(runs):
            # The folders above the attempts (a sweep's, a cell's) that were already old before anything was
            # removed (removing a child makes its parent look new): those left empty go at the end.
            old_dirs = []
            for top, dirs, _files in os.walk(runs, topdown=True, followlinks=False):
                if top != runs and _age_s(top, now) >= cutoff_s:
                    old_dirs.append(top)
                for d in sorted(dirs):
                    path = os.path.join(top, d)
                    if not ATTEMPT.match(d) or os.path.islink(path):
                        continue
                    if any(r == path or r.startswith(path + "/") for r in live):
                        answer["kept"].append({"path": path, "why": "its attempt is running"})
                        continue
                    if _age_s(path, now) < cutoff_s:
                        continue
                    size = _size(path)
                    if not dry:
                        n += 1
                        _trash_it(path, trash, n)
                    answer["attempts"].append({"path": path, "size": size})
                dirs[:] = [d for d in dirs if not ATTEMPT.match(d) and not os.path.islink(os.path.join(top, d))]
            if not dry:
                for top in sorted(old_dirs, key=len, reverse=True):  # deepest first
                    try:
                        os.rmdir(top)  # only when empty
                    except OSError:
                        pass
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    return answer


def serve(req):
    """The BOOT entry point: one request, one JSON answer line on stdout."""
    try:
        answer = clean(req)
    except (OSError, KeyError, ValueError) as exc:
        sys.stdout.write(json.dumps({"error": "%s: %s" % (type(exc).__name__, exc)}) + "\n")
        return 1
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0
