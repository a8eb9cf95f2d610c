"""The SSH transport: Fabric ``Connection`` with the host key checked strictly against the inventory's pin.

Fabric's default is to trust a new host key (``AutoAddPolicy``). Here no key is ever added: the
connection knows only the pinned key, and any other key ends the handshake before authentication,
so not one command runs on a host that is not the one the inventory names.
"""

from __future__ import annotations

import base64
import hashlib
import io
import shlex
import socket
import threading
import time

import paramiko
from fabric import Config, Connection
from invoke.exceptions import CommandTimedOut

from harness.errors import HostKeyMismatch, HostLost, HostUnreachable
from harness.inventory import Host
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
        raise HostKeyMismatch(
            f"host key mismatch: {hostname} offered {key.get_name()} {key_fingerprint(key)}, "
            f"the inventory pins {_describe_pin(pin)}",
            host=self.host.name,
        )


def _describe_pin(pin: str) -> str:
    if pin.startswith("SHA256:"):
        return pin
    kind, b64 = pin.split()[:2]
    return f"{kind} {key_fingerprint(paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))}"


def _known_name(host: Host) -> str:
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


@registered("ssh")
class SSHTransport(Transport):
    """One reusable SSH connection to one host."""

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self._conn: Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.Lock()

    # -- connection ----------------------------------------------------------------------------
    def open(self) -> None:
        if self._conn is not None and self.alive:
            return
        self.close()
        h = self.host
        connect_kwargs: dict = {"look_for_keys": False, "allow_agent": False}
        if h.identity_file:
            from pathlib import Path

            connect_kwargs["key_filename"] = str(Path(h.identity_file).expanduser())
        conn = Connection(
            host=h.address,
            user=h.user,
            port=h.port,
            connect_timeout=int(h.connect_timeout),
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
        try:
            self._handshake(conn)
        except BaseException:
            client.close()
            raise
        self._conn = conn

    def _handshake(self, conn: Connection) -> None:
        h = self.host
        try:
            # The pin policy's HostKeyMismatch is none of the classes below: it passes through as it is.
            conn.open()
        except paramiko.BadHostKeyException as exc:
            raise HostKeyMismatch(
                f"host key mismatch: {h.address}:{h.port} offered {exc.key.get_name()} {key_fingerprint(exc.key)}, "
                f"the inventory pins {_describe_pin(h.host_key)}",
                host=h.name,
            ) from exc
        except paramiko.AuthenticationException as exc:
            raise HostUnreachable(f"SSH authentication failed for {h.user}@{h.address}:{h.port}: {exc}", host=h.name) from exc
        except (socket.timeout, TimeoutError) as exc:
            raise HostUnreachable(f"SSH connect to {h.address}:{h.port} timed out", host=h.name) from exc
        except (OSError, paramiko.SSHException, EOFError) as exc:
            raise HostUnreachable(f"SSH connect to {h.address}:{h.port} failed: {exc}", host=h.name) from exc

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # noqa: BLE001 - closing a dead channel may fail; nothing to keep
                pass
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001
                pass
        self._conn = None
        self._sftp = None

    @property
    def alive(self) -> bool:
        t = self._conn.client.get_transport() if self._conn is not None else None
        return bool(t and t.is_active())

    def _lost(self, what: str, exc: BaseException) -> HostLost:
        self.close()
        return HostLost(f"connection lost during {what}: {type(exc).__name__}: {exc}", host=self.host.name)

    # -- hooks -----------------------------------------------------------------------------------
    def shell(self, script: str, timeout: float = 60.0, stdin: bytes | None = None) -> ShellResult:
        self.open()
        assert self._conn is not None
        if stdin is not None:
            return self._shell_with_stdin(script, timeout, stdin)
        try:
            r = self._conn.run(
                "sh -c " + shlex.quote(script), hide=True, warn=True, timeout=timeout, in_stream=False
            )
        except CommandTimedOut as exc:
            raise self._lost(f"a command that did not answer within {timeout:.0f} s", exc) from exc
        except (OSError, EOFError, paramiko.SSHException) as exc:
            # A reconnect's HostKeyMismatch (Fabric reopens a dropped connection) is not caught here: a host
            # that changed its key is not a lost host.
            raise self._lost("a command", exc) from exc
        return ShellResult(r.exited if r.exited is not None else -1, r.stdout, r.stderr)

    def _shell_with_stdin(self, script: str, timeout: float, stdin: bytes) -> ShellResult:
        """One command on a channel of its own, ``stdin`` sent whole and then closed. Not Fabric's ``in_stream``:
        it copies a byte per 10 ms, which is minutes for the launcher's source."""
        assert self._conn is not None
        end = time.monotonic() + timeout
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            transport = self._conn.client.get_transport()
            if transport is None:
                raise EOFError("no SSH transport")
            chan = transport.open_session(timeout=timeout)
            try:
                chan.settimeout(max(1.0, timeout))
                chan.exec_command("sh -c " + shlex.quote(script))
                chan.sendall(stdin)
                chan.shutdown_write()
                chan.settimeout(0.0)
                while True:
                    busy = False
                    while chan.recv_ready():
                        out.append(chan.recv(65536))
                        busy = True
                    while chan.recv_stderr_ready():
                        err.append(chan.recv_stderr(65536))
                        busy = True
                    if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                        break
                    if time.monotonic() > end:
                        raise socket.timeout(f"no answer within {timeout:.0f} s")
                    if not busy:
                        time.sleep(0.005)
                code = chan.recv_exit_status()
            finally:
                chan.close()
        except (socket.timeout, TimeoutError) as exc:
            raise self._lost(f"a command that did not answer within {timeout:.0f} s", exc) from exc
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._lost("a command", exc) from exc
        return ShellResult(code, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace"))

    def _sftp_client(self) -> paramiko.SFTPClient:
        self.open()
        assert self._conn is not None
        with self._lock:
            if self._sftp is None:
                self._sftp = self._conn.client.open_sftp()
            return self._sftp

    def put(self, path: str, data: bytes) -> None:
        try:
            self._sftp_client().putfo(io.BytesIO(data), path)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if isinstance(exc, IOError) and self.alive:
                raise HostLost(f"cannot write {path}: {exc}", host=self.host.name) from exc
            raise self._lost(f"upload of {path}", exc) from exc

    def get(self, path: str) -> bytes:
        buf = io.BytesIO()
        try:
            self._sftp_client().getfo(path, buf)
        except FileNotFoundError:
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if isinstance(exc, IOError) and self.alive:
                raise HostLost(f"cannot read {path}: {exc}", host=self.host.name) from exc
            raise self._lost(f"download of {path}", exc) from exc
        return buf.getvalue()

