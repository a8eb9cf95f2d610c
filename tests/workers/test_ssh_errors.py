"""The SSH transport's one translation of paramiko's, socket's and the OS's errors (``_SSH_ERRORS`` under
``_map_ssh_errors``): every row is reached, gives its harness class chained to the library's error and naming the
host, and the texts a user reads are the ones the transport always gave."""

from __future__ import annotations

import paramiko
import pytest

from harness.core.errors import HostKeyMismatch, HostLost, HostUnreachable
from harness.core.inventory import AgentConfig, Host, ModelEndpoint
from workers.transport.ssh import (_SSH_ERRORS, SSHTransport, Step, _Deadline, _During, _map_ssh_errors, _row_for,
                                   key_fingerprint)

PINNED = paramiko.ECDSAKey.generate()
OFFERED = paramiko.ECDSAKey.generate()
HOST = Host(name="tower1", address="tower1.lan", port=2222, user="qual", connect_timeout=7, stall_timeout=4,
            host_key=f"{PINNED.get_name()} {PINNED.get_base64()}", agents={"a": AgentConfig(command=["true"])},
            model=ModelEndpoint(base_url="http://127.0.0.1:1/v1", id="m", context=1024, max_output=64))


class _Standing(SSHTransport):
    """A transport whose connection stands (the real one needs a host): its state is all the table reads."""

    alive = True


def _link(cut: bool, why_closed: str = "") -> SSHTransport:
    link = SSHTransport(HOST) if cut else _Standing(HOST)  # a transport never opened does not stand
    link._why_closed = why_closed
    return link


def _deadline(expired: bool) -> _Deadline:
    deadline = _Deadline(60.0, lambda: None)  # never entered: nothing watches it
    deadline.expired = expired
    return deadline


def _raise_in(link: SSHTransport, during: _During, deadline: _Deadline, exc: BaseException) -> BaseException:
    with pytest.raises(BaseException) as caught:
        with _map_ssh_errors(link, during, deadline):
            raise exc
    return caught.value


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, paramiko.BadHostKeyException):
        return cls("[tower1.lan]:2222", OFFERED, PINNED)
    return cls("from the library")


def _cases() -> list[tuple[int, Step, type[BaseException]]]:
    return [(n, row.steps[0], cls) for n, row in enumerate(_SSH_ERRORS)
            for cls in (row.error if isinstance(row.error, tuple) else (row.error,))]


@pytest.mark.parametrize(("n", "step", "cls"), _cases(), ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_row_is_reached_and_gives_its_class_chained_with_the_host(n: int, step: Step, cls: type[BaseException]) -> None:
    row = _SSH_ERRORS[n]
    cut = row.when == "cut"
    exc = _instance(cls)
    assert _row_for(exc, step, cut) is row, "an earlier row hides this one"
    link = _link(cut) if step != "connect" else _link(cut=False)
    raised = _raise_in(link, _During(step, "/w/f"), _deadline(expired=cut and step == "connect"), exc)
    if row.harness is None:
        assert raised is exc  # the library's own error, as it was
        return
    assert type(raised) is row.harness and raised.__cause__ is exc
    assert getattr(raised, "host") == "tower1" and str(raised).startswith("tower1: ")


def _fp(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key_fingerprint(key)}"


TIMED_OUT = ("tower1: SSH connect to tower1.lan:2222 did not finish within 7 s "
             "(TCP connect, banner, key exchange and authentication)")


@pytest.mark.parametrize(("step", "cut", "why_closed", "exc", "harness", "text"), [
    ("connect", False, "", paramiko.BadHostKeyException("h", OFFERED, PINNED), HostKeyMismatch,
     f"tower1: host key mismatch: tower1.lan:2222 offered {_fp(OFFERED)}, the inventory pins {_fp(PINNED)}"),
    ("connect", False, "", TimeoutError("timed out"), HostUnreachable, TIMED_OUT),
    ("connect", True, "", paramiko.AuthenticationException("closed"), HostUnreachable, TIMED_OUT),
    ("connect", True, "", EOFError(), HostUnreachable, TIMED_OUT),
    ("connect", False, "", paramiko.AuthenticationException("Authentication failed."), HostUnreachable,
     "tower1: SSH authentication failed for qual@tower1.lan:2222: Authentication failed."),
    ("connect", False, "", ConnectionRefusedError(111, "Connection refused"), HostUnreachable,
     "tower1: SSH connect to tower1.lan:2222 failed: [Errno 111] Connection refused"),
    ("connect", False, "", paramiko.SSHException("Error reading SSH protocol banner"), HostUnreachable,
     "tower1: SSH connect to tower1.lan:2222 failed: Error reading SSH protocol banner"),
    ("command", False, "", EOFError(), HostLost, "tower1: connection lost during a command: EOFError: "),
    ("command", False, "", TimeoutError("timed out"), HostLost, "tower1: connection lost during a command: TimeoutError: timed out"),
    ("command", True, "a command did not finish within 5 s", OSError("Socket is closed"), HostLost,
     "tower1: connection lost during a command: a command did not finish within 5 s"),
    ("upload", False, "", TimeoutError(), HostLost,
     "tower1: connection lost during upload of /w/f: upload of /w/f moved no data for 4 s"),
    ("upload", True, "the host answered no keepalive for 6 s", TimeoutError(), HostLost,
     "tower1: connection lost during upload of /w/f: the host answered no keepalive for 6 s"),
    ("upload", False, "", PermissionError(13, "Permission denied"), HostLost,
     "tower1: cannot write /w/f: [Errno 13] Permission denied"),
    ("upload", False, "", FileNotFoundError(2, "No such file"), HostLost, "tower1: cannot write /w/f: [Errno 2] No such file"),
    ("upload", True, "", PermissionError(13, "Permission denied"), HostLost,
     "tower1: connection lost during upload of /w/f: PermissionError: [Errno 13] Permission denied"),
    ("upload", False, "", paramiko.SSHException("the host refused the SFTP subsystem"), HostLost,
     "tower1: connection lost during upload of /w/f: SSHException: the host refused the SFTP subsystem"),
    ("download", True, "", FileNotFoundError(2, "No such file"), HostLost,
     "tower1: connection lost during download of /w/f: the connection closed"),
    ("download", False, "", FileNotFoundError(2, "No such file"), None, ""),
    ("download", False, "", OSError("Failure"), HostLost, "tower1: cannot read /w/f: Failure"),
    ("download", True, "download of /w/f moved no data for 4 s", EOFError(), HostLost,
     "tower1: connection lost during download of /w/f: download of /w/f moved no data for 4 s"),
])
def test_the_texts_are_the_ones_users_and_records_always_had(step: Step, cut: bool, why_closed: str, exc: BaseException,
                                                             harness: type | None, text: str) -> None:
    link = _link(cut=cut and step != "connect", why_closed=why_closed)
    raised = _raise_in(link, _During(step, "/w/f"), _deadline(expired=cut and step == "connect"), exc)
    if harness is None:
        assert raised is exc
    else:
        assert (type(raised), str(raised), raised.__cause__) == (harness, text, exc)


def test_what_the_table_does_not_name_passes_through_as_it_is() -> None:
    steps: tuple[Step, ...] = ("connect", "command", "upload", "download")
    for step in steps:
        for exc in (ValueError("not the link's"), HostKeyMismatch("the pin policy's", host="tower1"),
                    HostUnreachable("a reconnect's", host="tower1"), KeyboardInterrupt()):
            assert _raise_in(_link(cut=True), _During(step, "/w/f"), _deadline(False), exc) is exc


class _Counting(_Standing):
    """A standing connection that counts how often it is dropped."""

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


# (step, the library's error, the connection cut?) -> dropped? What the transport always did: a transfer that stalled
# or a link that died drops the connection (the next operation connects again); the host refusing a file over a
# connection that stands keeps it.
DROPS = [
    ("upload", TimeoutError("stalled"), False, True),
    ("download", TimeoutError("stalled"), False, True),
    ("command", EOFError("gone"), False, True),
    ("command", OSError("reset"), False, True),
    ("upload", paramiko.SSHException("channel closed"), False, True),
    ("download", FileNotFoundError(2, "no such file"), True, True),
    ("upload", PermissionError(13, "denied"), False, False),
    ("download", OSError(28, "no space"), False, False),
]


@pytest.mark.parametrize(("step", "exc", "cut", "dropped"), DROPS, ids=lambda v: str(v)[:20])
def test_a_dead_or_stalled_link_is_dropped_and_a_refused_file_keeps_it(step: Step, exc: BaseException, cut: bool,
                                                                         dropped: bool) -> None:
    link = _Counting(HOST)
    if cut:
        link.alive = False
    raised = _raise_in(link, _During(step, "/w/f"), _deadline(expired=False), exc)
    assert isinstance(raised, HostLost)
    assert link.closed == (1 if dropped else 0)
