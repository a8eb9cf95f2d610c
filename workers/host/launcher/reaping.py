"""What earlier deliveries left: ``kill`` ends one delivery's tree (the worker's timeout or revoke), ``reap`` ends
before a new attempt the deliveries it replaces or that nobody supervises (docs/launcher.md, "reap"), and
``_forget`` removes the delivery folders whose files the worker has taken.
"""

import time

from .delivery import _entry_path, _makedirs_private, delivery_dir
from .fileops import _rmtree
from .lean import os, signal
from .tree import LINUX, TERM_GRACE, _children_of, end_tree, launcher_alive, stopped
from .wire import _load_json, _say, _write_json


STALE_DELIVERY_S = 7 * 24 * 3600
"""A delivery folder left this long by a worker that never came back is removed by the next reap."""


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
