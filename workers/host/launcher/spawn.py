"""Starting the agent: its environment (an allow-list, the host variables named on purpose, the adapter's values), its
start in a session of its own as ``subprocess.Popen(..., start_new_session=True)`` would (``subprocess`` is 14 ms of
imports a start), and the call that makes the supervisor a child subreaper on Linux (``prctl`` through ``_ctypes``).
"""

import errno
import sys

from .lean import os, signal


AGENT_ENV_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR")
AGENT_ENV_PREFIXES = ("LC_",)


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
