"""The ``run`` verb up to the supervisor's fork: the start lock on the attempt folder, what comes before the agent
(``prepare``: the reap, the folder made afresh, the prompt and the adapter's files, the host's facts), the delivery's
folder, and the fork; the supervisor's answer is the start's.
"""

import fcntl
import sys
import time

from .delivery import WAKE, _makedirs_private, _reserve, delivery_dir
from .fileops import _rmtree, _which
from .lean import _sha256, os
from .reaping import _forget, _reap
from .spawn import _subreaper_call
from .supervisor import _supervise, _with_facts
from .wire import _say, dumps


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
