"""One delivery to a host's launcher, from the worker's side: its token, key and marker, its folder, and its calls.

Each ``run_attempt`` call is a delivery (docs/launcher.md): a random token names its folder and signs nothing, a key
(on the launcher's stdin only) signs its records, a marker tags the agent's environment so the tree walk finds every
process. Every launcher verb of the delivery goes through :meth:`Delivery.call`: the worker's own launcher source (or
the code the host compiled from it) and the request go on stdin, so no file on the host, which the agent could
rewrite, is ever run. Apart from the lifecycle because how the launcher is started on a host (the interpreter a start
named, the compiled code it gave back, the fallbacks when either stopped working) is its own concern, remembered per
transport across attempts.
"""

from __future__ import annotations

import base64
import secrets
import shlex
import zlib
from dataclasses import dataclass, field

from workers.host import launcher
from workers.transport.base import ShellResult, Transport

__all__ = ["Delivery"]


def _q(s: str) -> str:
    return shlex.quote(s)


@dataclass
class Delivery:
    """This delivery of an attempt to its host: who it is there, and the launcher calls made for it."""

    t: Transport
    python: str
    """The host's Python (``Host.python``): what runs the launcher until a start named the interpreter behind it."""
    source: bytes
    """The launcher's source, sent with every call (``workers.attempt.LAUNCHER_SOURCE``)."""
    slot: str | None = None
    """The host slot this worker holds, when its slots backend knows it: the start ends what its last holder left."""
    fleet: str = ""
    """``WORKDIR/.fleet`` on the host (deliveries/, running/), once the attempt is staged."""
    # The token names the delivery's folder on the host, the key signs its records (it travels only on the launcher's
    # stdin), the marker tags the agent's environment so the tree walk finds every process.
    token: str = field(default_factory=lambda: secrets.token_hex(12))
    key: str = field(default_factory=lambda: secrets.token_hex(32))
    marker: str = field(default_factory=lambda: secrets.token_hex(16))

    @property
    def folder(self) -> str:
        """This delivery's folder on the host: the launcher's records, outside the attempt folder."""
        return f"{self.fleet}/deliveries/{self.token}"

    def verify(self, record: object) -> bool:
        """Whether ``record`` is this delivery's, signed with its key (an agent can forge any file in the folder)."""
        return launcher.verify(self.key, record, self.token)

    def heartbeat(self, seq: int) -> str:
        """The signed heartbeat line a poll writes (the launcher ends the agent when none comes)."""
        return launcher.heartbeat_line(self.key, self.token, seq)

    def call(self, verb: str, request: dict, timeout: float) -> ShellResult:
        """Run one launcher verb on the host: this worker's own launcher source and the request go on stdin, so
        no file on the host (which the agent could rewrite) is ever run, and the key is in no argv or file."""
        # Delivery folders of earlier attempts whose files the worker has: this call removes them on the host.
        forget = list(self.t.leftovers)
        del self.t.leftovers[:]
        try:
            return self._call(verb, timeout, forget, request)
        except BaseException:
            self.t.leftovers[:0] = forget  # maybe not removed: the next call asks again (a missing folder is no error)
            raise

    def forget(self) -> None:
        """The delivery's folder is in the result (or nobody will read it any more): the next launcher call on this host
        removes it (``forget`` in its request), not a command of its own on the way to the result."""
        self.t.leftovers.append(self.folder)

    def learn(self, answers: list[dict]) -> None:
        """Remember, for this transport's later calls, what a start said of the host's interpreter: the launcher code it
        compiled (sent from then on instead of the source) and the executable behind the host's python."""
        py = self.python
        compiled = next((a["compiled"] for a in answers if isinstance(a.get("compiled"), dict)), None)
        if compiled is not None and isinstance(compiled.get("tag"), str) and isinstance(compiled.get("code"), str):
            try:
                # It comes compressed; it goes back as it loads, uncompressed (the host imports no zlib for it).
                code = zlib.decompress(base64.b64decode(compiled["code"], validate=True))
            except (ValueError, zlib.error):
                pass
            else:
                self.t.memo[f"launcher tag {py}"] = compiled["tag"]
                self.t.memo[f"launcher code {py}"] = base64.b64encode(code).decode("ascii")
        prepared = next((a["prepared"] for a in answers if isinstance(a.get("prepared"), dict)), None)
        executable = prepared.get("executable") if prepared is not None else None
        if (isinstance(executable, str) and executable.startswith("/") and "\n" not in executable
                and executable != self.t.memo.get(f"executable refused {py}")):
            self.t.memo[f"executable {py}"] = executable

    def _call(self, verb: str, timeout: float, forget: list[str], request: dict) -> ShellResult:
        body = {"verb": verb, "fleet": self.fleet, "token": self.token, "want_code": True, "forget": forget, **request}
        # The token in argv lets a later delivery tell this launcher's process from any other (launcher_alive).
        # -S: the launcher imports only the standard library, and the site module is a third of a Python start.
        # The interpreter the host's python named, once a start said which (a pyenv or asdf shim is a shell script
        # that costs 0.1 s and more on every start, before Python itself starts): _exec.
        # The launcher compiled by the host's own interpreter, once a start gave it back (its interpreter is not this
        # worker's): the next starts compile nothing.
        py = self.python
        tag, code = self.t.memo.get(f"launcher tag {py}"), self.t.memo.get(f"launcher code {py}")
        if tag and code:
            r = self._exec(verb, timeout, launcher.boot_stdin(self.source, body, (tag, base64.b64decode(code))))
            if r.exit_code == 0 or r.stdout.strip():
                return r
            # No answer line (every launcher error prints one): that code did not load here (the interpreter behind
            # the host's python changed since). The source again, compiled there.
            # pop, not del: another attempt on this transport (a thread of the same worker) may have dropped it already.
            self.t.memo.pop(f"launcher tag {py}", None)
            self.t.memo.pop(f"launcher code {py}", None)
        return self._exec(verb, timeout, launcher.boot_stdin(self.source, body))

    def _exec(self, verb: str, timeout: float, stdin: bytes) -> ShellResult:
        py = self.python
        named = self.t.memo.get(f"executable {py}")
        if named:
            r = self.t.shell(self._script(named, verb), timeout=timeout, stdin=stdin)
            if r.exit_code not in (126, 127) or r.stdout.strip():
                return r
            # The exec itself failed (126, 127, and no answer line: every launcher error prints one), so nothing ran:
            # that interpreter is gone (its version was removed or upgraded) or cannot start without what the host's
            # python gives it (a wrapper that sets the library path). The host's python again, and never that one.
            self.t.memo.pop(f"executable {py}", None)
            self.t.memo[f"executable refused {py}"] = named
        return self.t.shell(self._script(py, verb), timeout=timeout, stdin=stdin)

    def _script(self, python: str, verb: str) -> str:
        return f"cd / && exec {_q(python)} -S -c {_q(launcher.BOOT)} {verb} {self.token}"
