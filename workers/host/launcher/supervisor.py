"""The supervisor: the process ``run`` forks. It leaves the SSH session, starts the agent, answers the worker, and
supervises the agent to its end (by itself, the deadline, the heartbeat bound, a later delivery's stop); then it ends
what the agent left, signs ``exit.json`` and packs. docs/launcher.md, "run: start and supervise".
"""

import sys
import time

from .delivery import _entry_path, _waker, _with_reserve
from .fileops import _sha256_file
from .lean import compare_digest, os, signal
from .packer import pack
from .signing import heartbeat_line, sign
from .spawn import StartError, _spawn, agent_env
from .tree import MARKER_VAR, _reap_children, end_tree
from .wire import _write_json, dumps


class _Stop(Exception):
    pass


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
