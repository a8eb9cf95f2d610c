"""The SSH transport: Fabric ``Connection`` with the host key checked strictly against the inventory's pin.

Fabric's default is to trust a new host key (``AutoAddPolicy``). Here no key is ever added: the
connection knows only the pinned key, and any other key ends the handshake before authentication,
so not one command runs on a host that is not the one the inventory names.

A host that stops answering (a cut link drops packets and sends no reset) must never hold a worker: TCP
alone would retransmit for a quarter of an hour, and paramiko waits without limit for a channel to open,
an SFTP reply or a command's output. So every operation runs against a deadline that starts before its
channel opens, watched by a thread that closes the whole connection when it passes (every call blocked on
the connection then returns at once), and a keepalive asks the host for a reply every
``keepalive_interval`` seconds: ``keepalive_count`` intervals without one and the connection is closed the
same way. Either ends as ``HostLost``. The bounds are documented in docs/transport.md.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import io
import itertools
import os
import select
import shlex
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Callable, Iterator, Literal, NamedTuple

import paramiko
from fabric import Config, Connection

from harness.core.errors import HostKeyMismatch, HostLost, HostUnreachable, InfrastructureError
from harness.core.inventory import Host
from workers.transport.base import ShellResult, Transport
from workers.transport.registry import registered

__all__ = ["SSHTransport", "key_fingerprint"]


def key_fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a public key."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


class _PinnedKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Called for any key paramiko does not already know: accept only the pinned fingerprint."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        pin = self.host.host_key
        if pin.startswith("SHA256:") and key_fingerprint(key) == pin.rstrip("="):
            return
        raise HostKeyMismatch(_KEY_MISMATCH.format(where=hostname, offered=_describe_key(key), pin=_describe_pin(pin)),
                              host=self.host.name)


def _describe_key(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key_fingerprint(key)}"


def _describe_pin(pin: str) -> str:
    if pin.startswith("SHA256:"):
        return pin
    kind, b64 = pin.split()[:2]
    return f"{kind} {key_fingerprint(paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))}"


def _no_delay(transport: paramiko.Transport) -> None:
    """Send each SSH packet at once. paramiko never sets TCP_NODELAY: a command's small packets then wait on
    Nagle's algorithm and the peer's delayed ACK, 40 ms a round trip; a `true` over loopback took 48.8 ms
    (median of 30) as is and 5.0 ms with it."""
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # a socket that refuses the option still works, only slower


def _known_name(host: Host) -> str:
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


class _Watchdog:
    """One thread per process that ends the operations whose deadline passed (``_Deadline``). A thread of their own
    per command or transfer was started and ended three times an attempt, each start waiting for the new thread to
    run (0.2 ms each on the path of every attempt, more on a loaded machine); a deadline is now an entry in a heap.
    A forked process (a Celery pool child) starts its own thread on its first deadline."""

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: "_Deadline") -> None:
        with self._cond:
            heapq.heappush(self._heap, (deadline.until, next(self._seq), deadline))
            if self._thread is None or not self._thread.is_alive():
                # The first deadline of this process, or the thread ended (it never returns; an error in it would
                # otherwise leave every later deadline unwatched). Its failure to start fails this operation.
                self._thread = threading.Thread(target=self._run, name="ssh-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is deadline:
                self._cond.notify()  # sooner than what the thread sleeps for

    def _run(self) -> None:
        while True:
            deadline = self._next_due()
            # Outside the lock, and on a thread of its own: closing a connection may take a while, and must not hold
            # up the other deadlines (nor their registration). A thread that cannot be started (the process is at
            # its limit) does not end the watch: the deadline fires here instead.
            try:
                threading.Thread(target=deadline.fire, name="ssh-deadline-expired", daemon=True).start()
            except RuntimeError:
                deadline.fire()

    def _next_due(self) -> "_Deadline":
        """Wait for the next deadline that passed without progress, and take it off the heap."""
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                until, _, deadline = self._heap[0]
                now = time.monotonic()
                if until > now:
                    self._cond.wait(until - now)
                    continue
                heapq.heappop(self._heap)
                if deadline.until <= now:
                    return deadline
                # It made progress since: watched again at its new time.
                heapq.heappush(self._heap, (deadline.until, next(self._seq), deadline))


class _Deadline:
    """A watchdog for one operation: once ``seconds`` pass it calls ``expire`` (which closes the connection, so
    whatever is blocked on it returns). ``progress()`` starts the time again: a no-progress limit for transfers,
    whose total time depends on their size and the link."""

    def __init__(self, seconds: float, expire: Callable[[], None]) -> None:
        self.seconds = seconds
        self.expired = False
        self.done = False
        self._expire = expire
        self.until = time.monotonic() + seconds

    def progress(self) -> None:
        self.until = time.monotonic() + self.seconds

    def fire(self) -> None:
        if self.done:
            return
        self.expired = True
        try:
            self._expire()
        except Exception:  # noqa: BLE001 - closing a dead connection may fail; it is closed either way
            pass

    def __enter__(self) -> "_Deadline":
        self.until = time.monotonic() + self.seconds
        _WATCHDOG.watch(self)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.done = True
        self._expire = _nothing  # the watchdog's heap may hold this a while: not the connection with it


def _nothing() -> None:
    return None


_WATCHDOG = _Watchdog()


class _KeepAlive(threading.Thread):
    """Asks the host for a reply every ``interval`` seconds; when one has not come within ``interval * count``
    seconds, calls ``dead`` (which closes the connection). paramiko's own ``set_keepalive`` sends requests that
    want no reply, so it keeps NAT tables warm but can never notice a host that stopped answering."""

    def __init__(self, transport: paramiko.Transport, interval: float, count: int, dead: Callable[[str], None]) -> None:
        super().__init__(name="ssh-keepalive", daemon=True)
        self.transport = transport
        self.interval = interval
        self.count = count
        self._dead = dead
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        t = self.transport
        while not self._stop.wait(self.interval):
            if not t.is_active():
                return
            answered = threading.Event()

            def ping() -> None:
                try:
                    # OpenSSH answers an unknown global request with a failure: any answer proves the host alive.
                    t.global_request("keepalive@openssh.com", wait=True)
                except Exception:  # noqa: BLE001 - a closed connection: the next round sees it inactive
                    pass
                finally:
                    answered.set()

            threading.Thread(target=ping, name="ssh-keepalive-ping", daemon=True).start()
            if not answered.wait(self.interval * self.count) and not self._stop.is_set():
                self._dead(f"the host answered no keepalive for {self.interval * self.count:g} s")
                return


# -- the one translation of paramiko's, socket's and the OS's errors into the harness's -----------------------------

Step = Literal["connect", "command", "upload", "download"]
"""What the transport was doing when a library error came."""


class _Step(NamedTuple):
    what: str
    """What was being done, in the texts ("connection lost during {what}")."""
    verb: str
    """The verb of "cannot {verb} {path}" (transfers)."""
    connected: bool
    """A connection stood when it began. While connecting there is none yet whose life to ask about: only the deadline
    can say the connection was cut."""


_STEPS: dict[Step, _Step] = {
    "connect": _Step("the connect", "", connected=False),
    "command": _Step("a command", "", connected=True),
    "upload": _Step("upload of {path}", "write", connected=True),
    "download": _Step("download of {path}", "read", connected=True),
}


@dataclass(frozen=True)
class _During:
    """What the transport was doing (``_map_ssh_errors``'s ``during``): which rows apply, and the words of their texts."""

    step: Step
    path: str = ""

    @property
    def what(self) -> str:
        return _STEPS[self.step].what.format(path=self.path)

    @property
    def verb(self) -> str:
        return _STEPS[self.step].verb


class _Row(NamedTuple):
    """A library ``error`` met during one of ``steps`` with the connection in the state ``when`` becomes ``harness``
    with ``text``; ``harness`` None: the library's error passes through as it is (the caller's to judge)."""

    steps: tuple[Step, ...]
    error: type[BaseException] | tuple[type[BaseException], ...]
    harness: type[InfrastructureError] | None
    text: str
    when: Literal["any", "cut", "standing"] = "any"
    """``cut``: this side's deadline passed, or (once connected) the connection no longer stands; ``standing``: not cut."""
    ends: bool = False
    """The connection is dropped as well: the next operation connects again."""


_KEY_MISMATCH = "host key mismatch: {where} offered {offered}, the inventory pins {pin}"
_CONNECT_TIMED_OUT = ("SSH connect to {address}:{port} did not finish within {connect_timeout:g} s "
                      "(TCP connect, banner, key exchange and authentication)")
_LOST = "connection lost during {what}: {why}"

_LINK_ERRORS = (OSError, EOFError, paramiko.SSHException)
"""What a failed or dying connection raises: the socket's errors (``socket.timeout`` is ``TimeoutError``, paramiko's
``NoValidConnectionsError`` an ``OSError``), a read on a closed one (``EOFError``), and paramiko's own."""
_TRANSFER: tuple[Step, ...] = ("upload", "download")
_CONNECTED: tuple[Step, ...] = ("command", "upload", "download")

_SSH_ERRORS: tuple[_Row, ...] = (
    # Connecting: nothing ran on the host yet. The most specific first: the first row that fits decides.
    _Row(("connect",), paramiko.BadHostKeyException, HostKeyMismatch, _KEY_MISMATCH),
    _Row(("connect",), TimeoutError, HostUnreachable, _CONNECT_TIMED_OUT),
    # Once the connect deadline passed, what the library says is the echo of the socket it closed: time is the reason.
    _Row(("connect",), _LINK_ERRORS, HostUnreachable, _CONNECT_TIMED_OUT, when="cut"),
    _Row(("connect",), paramiko.AuthenticationException, HostUnreachable,
         "SSH authentication failed for {user}@{address}:{port}: {exc}"),
    _Row(("connect",), _LINK_ERRORS, HostUnreachable, "SSH connect to {address}:{port} failed: {exc}"),
    # Connected: the host is lost to this operation. The SFTP channel's own timeout (stall_timeout) coming before
    # the watchdog is the same stall.
    _Row(_TRANSFER, TimeoutError, HostLost, "connection lost during {what}: {stalled}", ends=True),
    # A file missing on a cut connection is the loss speaking, not the host; on one that stands it is the host's
    # answer, which the attempt reads (a record not written yet).
    _Row(("download",), FileNotFoundError, HostLost, "connection lost during {what}: {why_closed}", when="cut", ends=True),
    _Row(("download",), FileNotFoundError, None, "", when="standing"),
    # The host refused the file (no such folder, no permission, its disk full) over a connection that stands: kept.
    _Row(_TRANSFER, OSError, HostLost, "cannot {verb} {path}: {exc}", when="standing"),
    _Row(_CONNECTED, _LINK_ERRORS, HostLost, _LOST, ends=True),
)
"""The one table from the libraries' errors to the harness's (docs/transport.md)."""


def _row_for(exc: BaseException, step: Step, cut: bool) -> _Row | None:
    state = "cut" if cut else "standing"
    return next((row for row in _SSH_ERRORS
                 if step in row.steps and isinstance(exc, row.error) and row.when in ("any", state)), None)


class _Words(dict[str, object]):
    """The words a row's text may name, each worked out only when the text names it (the pin is described for a
    key mismatch alone)."""

    def __init__(self, link: SSHTransport, during: _During, exc: BaseException) -> None:
        super().__init__()
        h, closed = link.host, link._why_closed
        error = f"{type(exc).__name__}: {exc}"
        self._make: dict[str, Callable[[], object]] = {
            "address": lambda: h.address, "port": lambda: h.port, "user": lambda: h.user,
            "connect_timeout": lambda: h.connect_timeout,
            "where": lambda: f"{h.address}:{h.port}",
            "offered": lambda: _describe_key(getattr(exc, "key")),  # BadHostKeyException's
            "pin": lambda: _describe_pin(h.host_key),
            "exc": lambda: exc,
            "what": lambda: during.what, "verb": lambda: during.verb, "path": lambda: during.path,
            # Why the connection is gone: this side's reason for closing it (a deadline, unanswered keepalives)
            # first, else the library's error, or what is known without it.
            "why": lambda: closed or error,
            "why_closed": lambda: closed or "the connection closed",
            "stalled": lambda: closed or f"{during.what} moved no data for {h.stall_timeout:g} s",
        }

    def __missing__(self, key: str) -> object:
        return self._make[key]()


@contextmanager
def _map_ssh_errors(link: SSHTransport, during: _During, deadline: _Deadline) -> Iterator[None]:
    """Raise the harness's error for a paramiko, socket or OS error raised in the block (``_SSH_ERRORS``), chained to
    it, naming the host and what was being done. Harness errors raised in the block (the pin policy's
    HostKeyMismatch, a reconnect's HostUnreachable) and errors the table does not name pass through as they are."""
    try:
        yield
    except Exception as exc:
        cut = deadline.expired or (_STEPS[during.step].connected and not link.alive)
        row = _row_for(exc, during.step, cut)
        if row is None or row.harness is None:
            raise
        error = row.harness(row.text.format_map(_Words(link, during, exc)), host=link.host.name)
        if row.ends:
            link.close()
        raise error from exc


@registered("ssh")
class SSHTransport(Transport):
    """One reusable SSH connection to one host, every operation under a deadline (see the module's docstring)."""

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self._conn: Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._keepalive: _KeepAlive | None = None
        self._lock = threading.Lock()
        self._why_closed = ""
        """Why this side closed the connection (a deadline passed, keepalives went unanswered): the HostLost text."""

    # -- connection ----------------------------------------------------------------------------
    def open(self) -> None:
        if self._conn is not None and self.alive:
            return
        self.close()
        self._why_closed = ""
        h = self.host
        limit = h.connect_timeout
        connect_kwargs: dict = {
            "look_for_keys": False,
            "allow_agent": False,
            # Each phase is also bounded by paramiko itself; the deadline below bounds them together.
            "banner_timeout": limit,
            "auth_timeout": limit,
            # How long a channel (a command's, SFTP's) may take to be confirmed once connected.
            "channel_timeout": limit,
        }
        if h.identity_file:
            connect_kwargs["key_filename"] = str(Path(h.identity_file).expanduser())
        conn = Connection(
            host=h.address,
            user=h.user,
            port=h.port,
            connect_timeout=limit,
            connect_kwargs=connect_kwargs,
            config=Config(overrides={"load_ssh_configs": False}),
        )
        client = paramiko.SSHClient()
        if not h.host_key.startswith("SHA256:"):
            kind, b64 = h.host_key.split()[:2]
            # Knowing the pinned key makes paramiko ask the server for that key type first.
            client.get_host_keys().add(_known_name(h), kind, paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))
        client.set_missing_host_key_policy(_PinnedKeyPolicy(h))
        conn.client = client
        deadline = _Deadline(limit, client.close)
        try:
            with _map_ssh_errors(self, _During("connect"), deadline), deadline:
                conn.open()
        except BaseException:
            client.close()
            raise
        transport = client.get_transport()
        if transport is None or not transport.is_active():  # closed by the deadline just as the handshake ended
            client.close()
            raise HostUnreachable(self._connect_timed_out(), host=h.name)
        _no_delay(transport)
        self._conn = conn
        self._keepalive = _KeepAlive(transport, h.keepalive_interval, h.keepalive_count,
                                     lambda why: self._abort(why, transport))
        self._keepalive.start()

    def _connect_timed_out(self) -> str:
        h = self.host
        return _CONNECT_TIMED_OUT.format(address=h.address, port=h.port, connect_timeout=h.connect_timeout)

    def _abort(self, why: str, t: paramiko.Transport | None = None) -> None:
        """Close the connection ``t`` (by default the current one) under whatever is using it, from a watchdog
        thread: each blocked call returns, and the operation reports ``why``. Closing a paramiko Transport never
        waits on the network."""
        conn = self._conn
        current = conn.client.get_transport() if conn is not None else None
        if t is None or t is current:
            if not self._why_closed:
                self._why_closed = why
            t = current
        if t is not None:
            t.close()

    def close(self) -> None:
        keepalive, self._keepalive = self._keepalive, None
        if keepalive is not None:
            keepalive.stop()
        conn, sftp = self._conn, self._sftp
        self._conn = None
        self._sftp = None
        # The connection first: closing the SFTP channel of a live connection sends a message, which on a dead
        # link could wait for buffer space forever; on a closed connection it returns at once.
        if conn is not None:
            try:
                conn.client.close()
            except Exception:  # noqa: BLE001 - closing a dead connection may fail; nothing to keep
                pass
        if sftp is not None:
            try:
                sftp.close()
            except Exception:  # noqa: BLE001
                pass

    @property
    def alive(self) -> bool:
        t = self._conn.client.get_transport() if self._conn is not None else None
        return bool(t and t.is_active()) and not self._why_closed

    def _transport(self) -> paramiko.Transport:
        self.open()
        assert self._conn is not None
        t = self._conn.client.get_transport()
        if t is None:  # closed between open() and here (a keepalive gave up): the host is gone
            raise HostLost(f"connection lost: {self._why_closed or 'closed'}", host=self.host.name)
        return t

    def _lost(self, what: str) -> HostLost:
        """The connection ended under ``what`` with no library error to translate (a channel closed, a deadline
        passed just as the operation finished): dropped, and the host lost."""
        why = self._why_closed or "the connection closed"
        self.close()
        return HostLost(_LOST.format(what=what, why=why), host=self.host.name)

    # -- hooks -----------------------------------------------------------------------------------
    def shell(self, script: str, timeout: float = 60.0, stdin: bytes | None = None) -> ShellResult:
        """Run ``script`` with ``timeout`` as the deadline of everything after the connection: opening the
        channel, sending ``stdin`` (whole, then end of file), the command and reading all of its output. Past
        it the host is lost (the connection is closed; the launcher's own deadline ends an agent nobody can
        reach). Not Fabric's ``run``: it cannot be given a deadline for the channel's opening nor be cut
        short, and its ``in_stream`` copies a byte per 10 ms, which is minutes for the launcher's source."""
        t = self._transport()
        deadline = _Deadline(timeout, lambda: self._abort(f"a command did not finish within {timeout:g} s", t))
        out, err = bytearray(), bytearray()
        # A reconnect's HostKeyMismatch (open() above) is not translated: a host that changed its key is not lost.
        with _map_ssh_errors(self, _During("command"), deadline), deadline:
            chan = t.open_session(timeout=timeout)
            try:
                chan.exec_command("sh -c " + shlex.quote(script))
                if stdin is not None:
                    chan.sendall(stdin)
                chan.shutdown_write()  # a command that reads stdin sees its end
                while True:
                    while chan.recv_ready():
                        out += chan.recv(65536)
                    while chan.recv_stderr_ready():
                        err += chan.recv_stderr(65536)
                    # Done once the exit status and the end of the output are both in: sshd may send the
                    # exit status before the last of the output (RFC 4254 allows data until EOF), and
                    # stopping at the status alone lost it (an empty `command -v` answer: agent_missing).
                    if (chan.exit_status_ready() and (chan.eof_received or chan.closed)
                            and not chan.recv_ready() and not chan.recv_stderr_ready()):
                        break
                    if chan.eof_received:
                        # All output is in; the exit status follows (the channel stays readable after EOF,
                        # so waiting on it would spin).
                        chan.status_event.wait(0.2)
                    else:
                        # Readable when output arrives or the channel closes; the exit status wakes no one.
                        select.select([chan], [], [], 0.2)
                code = chan.recv_exit_status()
            finally:
                chan.close()
        if code < 0 and (deadline.expired or self._why_closed or not t.is_active()):
            # The channel ended because the connection did, not with the command's exit status.
            raise self._lost("a command")
        return ShellResult(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def _sftp_client(self) -> paramiko.SFTPClient:
        t = self._transport()
        with self._lock:
            if self._sftp is None:
                self._sftp = paramiko.SFTPClient.from_transport(t)
                if self._sftp is None:
                    raise paramiko.SSHException("the host refused the SFTP subsystem")
                # A reply that does not come within the no-progress limit ends the transfer.
                self._sftp.get_channel().settimeout(self.host.stall_timeout)
            return self._sftp

    def _transfer(self, what: str) -> _Deadline:
        """A transfer's deadline: no data moved for ``stall_timeout`` seconds. Its whole time depends on the
        file's size and the link, so there is no total limit; a dead link is caught by the keepalive too."""
        return _Deadline(self.host.stall_timeout, lambda: self._stalled(what))

    def _stalled(self, what: str) -> None:
        self._abort(f"{what} moved no data for {self.host.stall_timeout:g} s")

    def put(self, path: str, data: bytes) -> None:
        self.open()
        during = _During("upload", path)
        deadline = self._transfer(during.what)
        with _map_ssh_errors(self, during, deadline), deadline:
            self._sftp_client().putfo(io.BytesIO(data), path, callback=lambda done, total: deadline.progress())
        if deadline.expired:
            raise self._lost(during.what)

    def get(self, path: str) -> bytes:
        self.open()
        during = _During("download", path)
        deadline = self._transfer(during.what)
        buf = io.BytesIO()
        with _map_ssh_errors(self, during, deadline), deadline:
            self._sftp_client().getfo(path, buf, callback=lambda done, total: deadline.progress())
        if deadline.expired:
            raise self._lost(during.what)
        return buf.getvalue()
