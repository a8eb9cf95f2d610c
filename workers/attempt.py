"""One attempt's whole life on a host, written once over the transport hooks.

stage (end what earlier deliveries left that this one replaces, fresh folder, prompt as a file) -> start
(the launcher starts the agent in a session of its own and supervises it) -> wait (until its signed exit,
with a signed heartbeat on every poll, or the item's timeout) -> kill the agent's whole tree on timeout or
revoke -> collect (stdout, stderr, answer, workspace files, each with sha256) -> result.

Each call is one **delivery** with a random token, key and marker (docs/launcher.md): the launcher's records
live in ``WORKDIR/.fleet/deliveries/TOKEN/``, outside the attempt folder; its start and exit records are
signed with the key, which travels only on the launcher's stdin, and are refused when the signature or the
token is wrong, so a record the agent forged is never taken for the real one.

Infrastructure problems become a ``harness_failure`` result with a reason code; the model's own
failures (non-zero exit, timeout after the agent started) are ``finished`` / ``timeout`` and are never
retried. This function never raises for an ``InfrastructureError``: a failure is a record, not a crash.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import posixpath
import secrets
import shlex
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.core.errors import (AgentMissing, AgentNotStarted, ArtifactCorrupt, HostLost, HostUnreachable,
                            InfrastructureError, SupervisionLost)
from harness.core.records import Artifact, AttemptResult, utc_now
from harness.core.sweep import AttemptRequest
from workers.host import launcher
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.transport.base import ShellResult, Transport

__all__ = ["Timing", "run_attempt", "abort_running", "AttemptAborted", "LAUNCHER_SOURCE"]

PACK_TIMEOUT_S = 300.0
"""How long packing the attempt folder on the host may take (a large workspace, a slow disk)."""
REAP_ALLOWANCE_S = 60.0
"""Added to the start's bound: the launcher's start first ends what earlier deliveries left, giving each earlier
supervisor its TERM grace (workers/host/launcher.py TERM_GRACE) to end its own tree."""

LAUNCHER_SOURCE = launcher.source()
"""Sent on stdin with every launcher request: the host never runs a launcher file the agent could rewrite."""


@dataclass(frozen=True)
class Timing:
    """How the lifecycle waits. Defaults suit a real fleet; tests may shorten them."""

    start_timeout_s: float = 30.0
    """The agent must have started by then, or the attempt is a harness failure (agent_not_started)."""
    poll_min_s: float = 0.2
    poll_max_s: float = 2.0
    launcher_grace_s: float = 120.0
    """The launcher kills the agent itself this long after the timeout, if no worker did."""
    heartbeat_s: float = 120.0
    """The launcher ends the agent's tree when no heartbeat came from this worker for this long (a dead worker,
    pool process or SSH link); the worker polls, and so beats, at least four times within it."""
    check_timeout_s: float = 120.0
    """Each acceptance check's own time limit."""


def _q(s: str) -> str:
    return shlex.quote(s)


def safe_member(name: str) -> bool:
    """Whether a tar member's name stays inside the folder it is read into: relative, no ``..`` part. A tar
    from the host is refused member by member otherwise, whoever made it (defence in depth)."""
    # A backslash is an ordinary character of a POSIX file name (the store keeps such names), not a separator.
    if not name or name.startswith("/") or "\0" in name:
        return False
    return ".." not in posixpath.normpath(name).split("/") and ".." not in name.split("/")


_ENDED_BY = {
    "heartbeat": "the launcher ended the agent: no heartbeat came from the worker within the bound "
                 "(FLEET_HEARTBEAT_TIMEOUT); the run was not observed to its end",
    "superseded": "a later delivery of this attempt, or of its host slot, ended the agent before it finished",
    "terminated": "the launcher on the host was told to stop (SIGTERM) before the agent finished",
}


def _under(root: str, path: str) -> str:
    """``path`` relative to the attempt's ``root`` (the answer file is one of the attempt's paths)."""
    return path[len(root.rstrip("/")) + 1:] if path.startswith(root.rstrip("/") + "/") else path


BUNDLE_LIMIT = 2 * launcher.MAX_STREAM + launcher.MAX_TOTAL + launcher.OUTPUT_CAPS[1] + 256 * 1024 * 1024
"""The most a delivery's bundle may unpack to: both streams, the workspace and the outputs at their caps, and room
for the manifests of a workspace of many files."""


class AttemptAborted(BaseException):
    """The process running this attempt is stopping it (the embedded coordinator was interrupted). A
    BaseException, as SystemExit from a revoke is: it unwinds through the kill, never into a record."""


_running: set["_Attempt"] = set()
_running_lock = threading.Lock()


def abort_running(why: str) -> int:
    """Stop every attempt running on a thread of this process: each kills its agent's process group and
    unwinds. A revoke cannot stop a thread (Celery terminates only pool processes), so the embedded
    default's coordinator calls this when it is stopped. Returns how many were asked to stop."""
    with _running_lock:
        attempts = list(_running)
    for a in attempts:
        a.aborted = why
    return len(attempts)


MAX_FORGED = 20
"""How many different records that were not taken (a wrong signature or token) are kept as evidence per delivery."""

WAKE_LINES = 20
"""The most lines one wait on the wake FIFO reads (the supervisor writes two per delivery; more are an agent's)."""

POLL_TICK_S = 0.01
"""The host-side wait counts in these: the first looks for exit.json come every tick, the later ones every five."""


def poll_script(delivery: str, beat: str, window_s: float, launcher_pid: int, target: str = "exit.json") -> str:
    """One poll on the host: write the heartbeat, then wait for exit.json while the launcher lives, for up to
    ``window_s``; print exit.json, STOPPED, GONE or nothing. ``delivery`` and ``beat`` come quoted.

    The wait blocks on the delivery's wake FIFO (workers/host/launcher.py WAKE): the supervisor writes a line into it once
    exit.json (then packed.json) is there, so the end is seen at once, and nothing on the host wakes at intervals to
    look. A timer in the background signals the poll (USR1) at the window's end, which ends its read; any line only
    makes the poll look again, and after ``WAKE_LINES`` of them it stops reading (the worker waits the rest of the
    window). The FIFO is opened for reading and writing, so the open never waits for a writer. Where there is no FIFO
    (a file system without them, or an agent removed it) the poll looks every 10 ms for the first 0.1 s, then every
    50 ms.

    A ``sleep`` that takes whole seconds only (POSIX asks no more) sleeps 1 s instead: that look counts as 1 s, so
    the window stays ``window_s``. Counted as one look, a 2 s window took 40 s: past the poll's own 30 s + window
    timeout (the attempt was lost), and far past the heartbeats the launcher waits for."""
    ticks = int(window_s / POLL_TICK_S)
    # Written in place, not renamed: one write of a line, and a half-written line the supervisor might read fails its
    # MAC and is ignored (the next poll beats again, well within the bound). A rename was a process (mv) per poll.
    beat_part = f"printf %s {beat} > heartbeat; " if target == "exit.json" else ""  # once the agent ended, no beat
    # Records are read with the shell's own `read` (a record is one line), never by a process of their own: a cat, a
    # grep and another cat were 4 ms of each poll. r FILE sets x to FILE's line if FILE is a regular file (a FIFO in a
    # record's place would hold a reader for ever) that has one.
    read_fn = 'r() { x=; [ -f "$1" ] || return 1; IFS= read -r x < "$1"; [ -n "$x" ]; }; '
    # w FILE SECONDS WHOLE TICKS: wait until FILE is there, the launcher is gone or SECONDS passed (WHOLE where sleep
    # takes whole seconds only; TICKS of 10 ms where there is no wake FIFO). The window's end is a signal from a timer
    # in the background (USR1, trapped: it ends a `read` that waits in dash and in bash as sh), not a line in the FIFO
    # alone: an agent can write half a line into it, or read lines out of it, and either held a wait on a line for
    # ever. A shell whose read goes on after a trap (bash as bash) gets an empty line as well, and one still waiting a
    # second later is ended (TERM; the worker polls again). A wait reads at most
    # WAKE_LINES lines (an agent that floods the FIFO would keep it reading), then leaves the rest of the window to
    # the worker. A timer's signal that comes late (the wait ended as its window did) meets a trap that does nothing:
    # USR1's own action would end the poll. `command exec`: a redirection that fails (the FIFO went) must not end the
    # shell, as it would for the special built-in exec. The timer's output goes to /dev/null: its sleep outlives the
    # poll, and would hold the command's output open (and the worker) until it ends. A record already there starts no
    # timer (a subshell and a sleep: most of a short attempt's poll).
    wait_fn = (
        "w() { if [ -e \"$1\" ]; then return; elif [ -p wake ] && { command exec 3<>wake; } 2>/dev/null; then "
        "e=0; c=0; trap 'e=1' USR1; (sleep $2 2>/dev/null || sleep $3; kill -USR1 $$; echo >&3; sleep 1; kill $$) "
        ">/dev/null 2>&1 & t=$!; "
        f"while [ $e = 0 ] && [ $c -lt {WAKE_LINES} ] && [ ! -e \"$1\" ] && kill -0 {launcher_pid} 2>/dev/null && "
        "IFS= read -r y <&3; do c=$((c+1)); done; kill $t 2>/dev/null; trap : USR1; exec 3>&-; "
        f"else n=0; while [ ! -e \"$1\" ] && [ $n -lt $4 ] && kill -0 {launcher_pid} 2>/dev/null; do "
        "if [ $n -lt 10 ]; then s=0.01; k=1; else s=0.05; k=5; fi; "
        "if sleep $s 2>/dev/null; then n=$((n+k)); else sleep 1; n=$((n+100)); fi; done; fi; }; ")
    whole = max(1, math.ceil(window_s))
    # An exit record that says the supervisor is packing: wait for packed.json too (up to 2 s more), and print it on
    # the next line, so the end of a short attempt costs one round trip, not two.
    then_packed = ("printf '%s\\n' \"$x\"; case $x in *'\"packing\": true'*) w packed.json 2 2 200; "
                   "r packed.json && printf '%s\\n' \"$x\";; esac; true"
                   if target == "exit.json" else "printf '%s\\n' \"$x\"")
    # Stopped (SIGSTOP): the state field of /proc/PID/stat, read by the shell; `ps` where there is no /proc (macOS).
    stopped = (f"if [ -r /proc/{launcher_pid}/stat ]; then IFS= read -r x < /proc/{launcher_pid}/stat; "
               f"case ${{x##*) }} in [Tt]*) echo STOPPED;; esac; else ps -o stat= -p {launcher_pid} 2>/dev/null | "
               f"grep -q '^[Tt]' && echo STOPPED; fi; true")
    return (
        f"cd {delivery} 2>/dev/null || {{ echo GONE; exit 0; }}; {beat_part}{read_fn}{wait_fn}"
        f"{'w ' + target + ' ' + format(window_s, '.3f') + ' ' + str(whole) + ' ' + str(ticks) + '; ' if ticks else ''}"
        f"if r {target}; then {then_packed}; "
        f"elif kill -0 {launcher_pid} 2>/dev/null; then {stopped}; "
        f"elif r {target}; then {then_packed}; else echo GONE; fi"
    )


def _json(text: str | bytes) -> object:
    """What a host sent as JSON, or None when it is not JSON (or nests deeper than the parser goes: an agent can forge
    any record it likes in its delivery folder)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _is_pid(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 1


class _Attempt:
    def __init__(self, transport: Transport, req: AttemptRequest, adapter: AgentAdapter, timing: Timing, worker: str,
                 slot: str | None = None, on_host_free: Callable[[], None] | None = None):
        self.t = transport
        self.req = req
        self.adapter = adapter
        self.timing = timing
        self.py = req.host.python
        self.result = AttemptResult(
            sweep_id=req.sweep_id,
            cell_id=req.cell.id,
            attempt=req.attempt,
            status="harness_failure",
            host=req.host.name,
            agent=adapter.name,
            agent_kind=adapter.config.kind,
            item=req.item.id,
            model={
                "id": req.host.model.id,
                "base_url": req.host.model.base_url,
                "context": req.host.model.context,
                "max_output": req.host.model.max_output,
            },
            harness_commit=req.harness_commit,
            worker=worker,
            values=req.cell.values,
            seed=req.cell.seed,
            started_at=utc_now(),
        )
        self.paths: AttemptPaths | None = None
        self.root = ""
        self.look_for: str | None = None
        """The agent's program, when the launcher's start is to look for it (an agent without a version command)."""
        self.files: dict[str, bytes] = {}
        """What the launcher's start writes into the fresh attempt folder: the prompt and the adapter's files."""
        self.aborted = ""
        """Set by abort_running(): the wait loop stops and the agent is killed."""
        self.pgid: int | None = None
        self.started: dict = {}
        """The launcher's signed start record (pid, session, launcher pid)."""
        self.launch: dict = {}
        self.launch_record: dict = {}
        self.checks_json: bytes | None = None
        # This delivery: the token names its folder on the host, the key signs its records (it travels only on
        # the launcher's stdin), the marker tags the agent's environment so the tree walk finds every process.
        self.token = secrets.token_hex(12)
        self.key = secrets.token_hex(32)
        self.marker = secrets.token_hex(16)
        self.slot = slot
        self.on_host_free = on_host_free
        self.fleet = ""
        """``WORKDIR/.fleet`` on the host (deliveries/, running/)."""
        self.beats = 0
        self.forged: list[str] = []
        """Records in the delivery folder whose signature or token was wrong (ignored, kept as evidence)."""
        self.forged_more = 0
        """How many more such records came after the first ``MAX_FORGED`` (counted, not kept)."""
        self.exit_record: dict = {}
        self.streams: dict | None = None
        """streams.json as the launcher's pack wrote it: each output stream's size, sha256 and kept bytes."""
        self.bundle: dict | None = None
        """The delivery's bundle (workers/host/launcher.py): its size and sha256 as the supervisor signed them in packed.json,
        or as the pack verb said; None when the pack wrote none (a full disk: the files are read one by one)."""
        self.delivered: dict[str, bytes] | None = None
        """The delivery folder's files the worker takes (streams, streams.json, manifest.json, outputs.json,
        launcher.log), once read."""
        self.workspace_files: list[tuple[str, bytes]] = []
        self.output_files: dict[str, bytes] = {}
        self.capped: dict[str, dict] = {}
        """The launcher's signed exit record (verified), once the agent ended."""
        self.refused: list[str] = []
        """Tar member names refused because they point outside the folder they were read into."""
        self.packed = False
        self.pack_answered = False
        """The supervisor packed the attempt folder when the agent ended (its signed packed.json said so)."""

    # -- stages ------------------------------------------------------------------------------------
    def stage(self) -> None:
        self.t.open()
        memo = self.t.memo
        if "home" not in memo:
            found = self.t.shell('printf %s "$HOME"', timeout=30)
            if found.ok and found.stdout.strip():
                memo["home"] = found.stdout.strip()
        home = memo.get("home", "")
        workdir = self.req.host.workdir
        if workdir.startswith("~"):
            if not home:
                # "~/x" without a home became "/x": the attempt's folder was removed and made afresh under /.
                raise AgentNotStarted(f"cannot read $HOME on the host for its workdir {workdir}", host=self.req.host.name)
            workdir = home + workdir[1:]
        # The sweep's uid keeps two sweeps of one id (two coordinators, one label, one second) out of each other's folders.
        sweep_folder = f"{self.req.sweep_id}/{self.req.sweep_uid}" if self.req.sweep_uid else self.req.sweep_id
        root = f"{workdir.rstrip('/')}/runs/{sweep_folder}/{self.req.cell.id}/attempt-{self.req.attempt}"
        self.paths = p = AttemptPaths(root)
        self.fleet = f"{workdir.rstrip('/')}/.fleet"
        self.result.workspace = p.workspace
        self.root = root
        self.adapter.at_home(home)
        if self.adapter.needs_harness:
            from workers.install import ensure_harness, source_release

            self.adapter.harness_python = ensure_harness(self.t, self.req.host)
            self.result.host_facts["harness_release"] = source_release().id
        program = self.adapter.program()
        if self.adapter.version_argv() or (program and "/" in program and not program.startswith("/")):
            self.probe_agent()
        else:
            # Nothing to ask but whether it is there: the launcher's start looks for it first (agent_missing before
            # anything runs), instead of a command of its own.
            self.look_for = program
        argv = self.adapter.argv(self.req.host, self.req.item, p)
        self.result.agent_command = argv
        env: dict[str, str] = self.adapter.env(self.req.host, p)
        launch = {
            "argv": argv,
            "env": env,
            "pass_env": self.adapter.pass_env(self.req.host),
            "cwd": p.workspace,
            "deadline_s": self.req.item.timeout_s + self.timing.launcher_grace_s,
        }
        # The launch travels on the launcher's stdin (start()), never as a file: no API key in env lands on disk.
        self.launch = launch
        # What is kept of the launch: environment names only, since values may be API keys.
        self.launch_record = {**launch, "env": {k: "***" for k in env}}
        # The prompt travels as a file, byte for byte: it is never part of a command line. It and the adapter's
        # files are written by the launcher's start (start()), in the folder it has just made afresh.
        self.files = {p.prompt_file: self.req.prompt.encode("utf-8")}
        for rel, data in self.adapter.files(self.req.host, self.req.item, p).items():
            self.files[f"{root}/{rel}"] = data

    def probe_agent(self) -> None:
        """The agent's program must be on the host (else ``agent_missing``, before anything runs); its version
        goes into meta.json."""
        from workers.adapters.probe import probe_agent

        assert self.paths is not None
        probe = probe_agent(self.t, self.adapter, self.req.host, self.paths)
        if not probe.found:
            raise AgentMissing(f"agent {self.adapter.name!r}: {probe.program} is not installed (not found on PATH)",
                               host=self.req.host.name)
        self.result.agent_version = probe.version

    # -- the launcher ------------------------------------------------------------------------------------
    @property
    def delivery(self) -> str:
        """This delivery's folder on the host: the launcher's records, outside the attempt folder."""
        return f"{self.fleet}/deliveries/{self.token}"

    def entry(self) -> dict:
        """Who this delivery is, for the host's registry of running deliveries (``.fleet/running/``)."""
        return {"host": self.req.host.name, "sweep_id": self.req.sweep_id, "sweep_uid": self.req.sweep_uid,
                "cell": self.req.cell.id, "attempt": self.req.attempt, "slot": self.slot,
                "root": self.paths.root if self.paths else ""}

    def call_launcher(self, verb: str, request: dict, timeout: float) -> ShellResult:
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

    def _call(self, verb: str, timeout: float, forget: list[str], request: dict) -> ShellResult:
        body = {"verb": verb, "fleet": self.fleet, "token": self.token, "want_code": True, "forget": forget, **request}
        # The token in argv lets a later delivery tell this launcher's process from any other (launcher_alive).
        # -S: the launcher imports only the standard library, and the site module is a third of a Python start.
        # The interpreter the host's python named, once a start said which (a pyenv or asdf shim is a shell script
        # that costs 0.1 s and more on every start, before Python itself starts): _exec.
        # The launcher compiled by the host's own interpreter, once a start gave it back (its interpreter is not this
        # worker's): the next starts compile nothing.
        tag, code = self.t.memo.get(f"launcher tag {self.py}"), self.t.memo.get(f"launcher code {self.py}")
        if tag and code:
            r = self._exec(verb, timeout, launcher.boot_stdin(LAUNCHER_SOURCE, body, (tag, base64.b64decode(code))))
            if r.exit_code == 0 or r.stdout.strip():
                return r
            # No answer line (every launcher error prints one): that code did not load here (the interpreter behind
            # the host's python changed since). The source again, compiled there.
            # pop, not del: another attempt on this transport (a thread of the same worker) may have dropped it already.
            self.t.memo.pop(f"launcher tag {self.py}", None)
            self.t.memo.pop(f"launcher code {self.py}", None)
        return self._exec(verb, timeout, launcher.boot_stdin(LAUNCHER_SOURCE, body))

    def _exec(self, verb: str, timeout: float, stdin: bytes) -> ShellResult:
        named = self.t.memo.get(f"executable {self.py}")
        if named:
            r = self.t.shell(self._launcher_script(named, verb), timeout=timeout, stdin=stdin)
            if r.exit_code not in (126, 127) or r.stdout.strip():
                return r
            # The exec itself failed (126, 127, and no answer line: every launcher error prints one), so nothing ran:
            # that interpreter is gone (its version was removed or upgraded) or cannot start without what the host's
            # python gives it (a wrapper that sets the library path). The host's python again, and never that one.
            self.t.memo.pop(f"executable {self.py}", None)
            self.t.memo[f"executable refused {self.py}"] = named
        return self.t.shell(self._launcher_script(self.py, verb), timeout=timeout, stdin=stdin)

    def _launcher_script(self, python: str, verb: str) -> str:
        return f"cd / && exec {_q(python)} -S -c {_q(launcher.BOOT)} {verb} {self.token}"

    def start(self) -> None:
        """One launcher call, one Python start on the host: it ends what earlier deliveries left that this one
        replaces (an earlier delivery of this attempt, an earlier holder of this slot, an agent nobody supervises
        any more must not run on beside this one), makes the attempt folder afresh (whatever an earlier delivery
        left is removed), writes the prompt and the adapter's files, says the host's facts, and starts the agent."""
        p = self.paths
        assert p is not None
        prepare = {"root": self.root, "dirs": [p.workspace, p.fleet], "files": dict(self.files),
                   "program": self.look_for, "path": self.launch["env"].get("PATH")}
        request = {"key": self.key, "marker": self.marker, "spec": self.launch, "entry": self.entry(),
                   "deadline_s": self.launch["deadline_s"], "heartbeat_s": self.timing.heartbeat_s,
                   "prepare": prepare,
                   # The supervisor's pack ends a little after this worker would stop waiting for it (await_pack).
                   "pack": {"root": p.root, "outputs": self.outputs(), "limit_s": PACK_TIMEOUT_S + 30}}
        # The bound covers the reap too: an earlier supervisor is given its TERM grace to end its own tree.
        bound = self.timing.start_timeout_s + REAP_ALLOWANCE_S
        try:
            r = self.call_launcher("run", request, timeout=bound)
        except HostLost as exc:
            raise AgentNotStarted(f"timeout before the agent started ({bound:.0f} s): {exc}",
                                  host=self.req.host.name) from exc
        answers: list[dict] = []
        for line in r.stdout.strip().splitlines():
            parsed = _json(line)
            if isinstance(parsed, dict):
                answers.append(parsed)
        answer = answers[-1] if answers else {}
        if "agent_missing" in answer:
            raise AgentMissing(f"agent {self.adapter.name!r}: {self.look_for} is not installed (not found on PATH)",
                               host=self.req.host.name)
        if "reap_error" in answer:
            raise AgentNotStarted(f"cannot end what earlier attempts left running: {answer['reap_error']}",
                                  host=self.req.host.name)
        if "prepare_error" in answer:
            raise AgentNotStarted(f"cannot prepare {self.root}: {answer['prepare_error']}", host=self.req.host.name)
        compiled = next((a["compiled"] for a in answers if isinstance(a.get("compiled"), dict)), None)
        if compiled is not None and isinstance(compiled.get("tag"), str) and isinstance(compiled.get("code"), str):
            try:
                # It comes compressed; it goes back as it loads, uncompressed (the host imports no zlib for it).
                code = zlib.decompress(base64.b64decode(compiled["code"], validate=True))
            except (ValueError, zlib.error):
                pass
            else:
                self.t.memo[f"launcher tag {self.py}"] = compiled["tag"]
                self.t.memo[f"launcher code {self.py}"] = base64.b64encode(code).decode("ascii")
        prepared = next((a["prepared"] for a in answers if isinstance(a.get("prepared"), dict)), None)
        executable = prepared.get("executable") if prepared is not None else None
        if (isinstance(executable, str) and executable.startswith("/") and "\n" not in executable
                and executable != self.t.memo.get(f"executable refused {self.py}")):
            self.t.memo[f"executable {self.py}"] = executable
        if prepared is not None:
            self.result.host_facts = {
                "uname": str(prepared.get("uname", "")),
                "python": str(prepared.get("python", "")),
                "disk_free_mb": str(prepared["disk_free_mb"]) if isinstance(prepared.get("disk_free_mb"), int) else "",
                **self.result.host_facts,  # harness_release, found in stage()
            }
        if "start_error" in answer:
            raise AgentNotStarted(f"agent command could not start: {answer['start_error']}", host=self.req.host.name)
        started = answer.get("started")
        if not launcher.verify(self.key, started, self.token):
            raise AgentNotStarted(f"the launcher gave no signed start record: {r.tail()}", host=self.req.host.name)
        assert isinstance(started, dict)
        # The wait loop asks the host `kill -0 LAUNCHER_PID`: with 0 (a record without it) that names the shell's
        # own process group and is always true, so a launcher that died was never noticed before the item's
        # timeout; a negative pid names groups or every process. A real pid is above 1.
        if not all(_is_pid(started.get(k)) for k in ("launcher_pid", "pgid")):
            raise AgentNotStarted(f"the launcher's start record names no usable pid (launcher_pid "
                                  f"{started.get('launcher_pid')!r}, pgid {started.get('pgid')!r})",
                                  host=self.req.host.name)
        self.started = started
        self.pgid = int(started["pgid"])
        self.result.agent_started_at = utc_now()

    def wait(self) -> dict | None:
        """Wait for the launcher's signed exit record; None when the item's timeout passed first. Every poll
        writes a signed heartbeat the launcher checks; a record with a wrong signature or token is ignored."""
        p = self.paths
        assert p is not None
        d = _q(self.delivery)
        launcher_pid = int(self.started.get("launcher_pid") or 0)
        deadline = time.monotonic() + self.req.item.timeout_s
        delay = self.timing.poll_min_s
        longest = min(self.timing.poll_max_s, self.timing.heartbeat_s / 4)
        while True:
            if self.aborted:
                raise AttemptAborted(self.aborted)
            self.beats += 1
            beat = _q(launcher.heartbeat_line(self.key, self.token, self.beats))
            # The host waits, not the worker: up to ``window`` seconds it looks for exit.json every 10-50 ms (and
            # stops looking when the launcher is gone), so an agent's end is seen within 50 ms and a round trip,
            # not after the rest of a sleep of up to 2 s (the gap between one agent and the next on a host).
            window = max(0.0, min(delay, deadline - time.monotonic()))
            looks = int(window / POLL_TICK_S)
            # exit.json is renamed into place before the launcher ends: read again after a failed liveness test,
            # so a launcher that just wrote it and ended is never taken for a lost one.
            asked = time.monotonic()
            out = self.t.shell(poll_script(d, beat, window, launcher_pid), timeout=30 + window).stdout.strip()
            if out == "STOPPED":
                # Alive but stopped (the agent sent it SIGSTOP): it supervises nothing and will write no exit record.
                raise SupervisionLost("the launcher on the host was stopped (SIGSTOP) while the agent ran: the run was "
                                      "not observed to its end and its agent was stopped", host=self.req.host.name)
            if out == "GONE":
                # run() kills the tree on the way out (the marker still finds it).
                raise SupervisionLost("the launcher on the host ended before the agent did (killed or crashed): the "
                                      "run was not observed to its end and its agent was stopped",
                                      host=self.req.host.name)
            if out:
                # exit.json's one line, then packed.json's when the supervisor packed within the poll.
                first, _, rest = out.partition("\n")
                record = _json(first)
                if launcher.verify(self.key, record, self.token):
                    assert isinstance(record, dict)
                    if rest.strip():
                        self._packed_record(rest.strip())
                    return record
                self._keep_forged(out)
            now = time.monotonic()
            if now >= deadline:
                return None
            if looks == 0:  # a window too short to wait in on the host (the deadline is near): wait here
                time.sleep(min(0.05, max(0.0, deadline - now)))
            else:
                self._wait_out(asked, window, deadline)
            delay = min(delay * 1.5, longest)

    def kill(self) -> None:
        """End the agent's whole tree (its session, its descendants, whatever carries its marker): TERM, a grace,
        then KILL, done by this worker's launcher source on the host."""
        if self.paths is None or not self.fleet:
            return
        pids = {"agent": self.started.get("pid"), "sid": self.started.get("sid"),
                "launcher": self.started.get("launcher_pid")}
        self.call_launcher("kill", {"marker": self.marker, "pids": pids}, timeout=60)

    def run_checks(self) -> None:
        """Run the item's acceptance checks on the host, in the workspace the agent left, each with its
        own time limit, from the harness release installed there; results go to ``checks.json``."""
        from workers.checks.runner import CheckPlace, run_check
        from workers.install import ensure_harness

        p = self.paths
        assert p is not None
        python = self.adapter.harness_python or ensure_harness(self.t, self.req.host)
        results: list[dict] = []
        for check in self.req.checks:
            place = CheckPlace(folder=f"{p.fleet}/checks/{check.name}", workspace=p.workspace, python=python,
                               timeout_s=self.timing.check_timeout_s,
                               hidden_env=tuple(self.adapter.pass_env(self.req.host)))
            res = run_check(self.t, check, place)
            if res.status == "error" and not res.summary.startswith("timed out"):
                # The check itself broke (a browser driver that dropped its connection, pytest that left no
                # report): that says nothing of the work, so it runs once more before it counts.
                first = res.summary
                res = run_check(self.t, check, place)
                res = res.model_copy(update={"summary": f"{res.summary} (run twice; the first run: {first})"[:2000]})
            results.append(res.model_dump(mode="json"))
        self.checks_json = json.dumps(results, indent=2).encode()

    def outputs(self) -> list[str]:
        """What pack puts beside the workspace, relative to the attempt folder: the answer file first, then the
        adapter's session files and state folders."""
        p = self.paths
        assert p is not None
        answer_rel = _under(p.root, p.answer_file)
        return [answer_rel, *(rel for rel in self.adapter.collect() if rel != answer_rel)]

    def await_pack(self) -> None:
        """When the supervisor packs (its exit record says ``packing``), wait for its signed packed.json, as the wait
        loop waits for exit.json, before checks run in the workspace or the tarballs are read. A supervisor that
        ended without it, or says its pack failed, leaves the pack to collect()."""
        if not self.exit_record.get("packing") or not self.started or self.pack_answered:
            return
        d = _q(self.delivery)
        launcher_pid = int(self.started.get("launcher_pid") or 0)
        end = time.monotonic() + PACK_TIMEOUT_S
        while time.monotonic() < end:
            if self.aborted:
                raise AttemptAborted(self.aborted)
            window = max(0.0, min(self.timing.poll_max_s, end - time.monotonic()))
            asked = time.monotonic()
            out = self.t.shell(poll_script(d, "''", window, launcher_pid, target="packed.json"),
                               timeout=30 + window).stdout.strip()
            if out in ("GONE", "STOPPED"):
                return
            if out and self._packed_record(out):
                return
            self._wait_out(asked, window, end)
        raise InfrastructureError(f"packing the workspace failed: the supervisor did not end its pack within "
                                  f"{PACK_TIMEOUT_S:.0f} s", host=self.req.host.name)

    def pack_now(self) -> None:
        """Pack with the launcher's verb when the supervisor did not (the agent was stopped, or its pack failed), before
        any check runs, so the workspace stored is what the agent left. The verb refuses a folder a later delivery of
        this attempt has taken (made afresh, its own agent in it): nothing there is this delivery's result."""
        if self.packed:
            return
        p = self.paths
        assert p is not None
        r = self.call_launcher("pack", {"root": p.root, "outputs": self.outputs()}, timeout=PACK_TIMEOUT_S)
        lines = r.stdout.strip().splitlines()
        answer = _json(lines[-1]) if lines else None
        if r.exit_code == 3 and isinstance(answer, dict) and isinstance(answer.get("superseded"), str):
            raise SupervisionLost(f"{_ENDED_BY['superseded']} ({answer['superseded'][:300]})", host=self.req.host.name)
        if not r.ok or not isinstance(answer, dict) or "bundle" not in answer:
            raise InfrastructureError(f"packing the workspace failed: {r.tail()}", host=self.req.host.name)
        self.bundle = answer["bundle"] if isinstance(answer["bundle"], dict) else None
        self.packed = True

    def _packed_record(self, out: str) -> bool:
        """Take packed.json's text if the supervisor signed it; a record with a wrong signature is kept as evidence."""
        record = _json(out)
        if launcher.verify(self.key, record, self.token):
            assert isinstance(record, dict)
            self.pack_answered = True
            self.packed = record.get("ok") is True
            self.bundle = record.get("bundle") if isinstance(record.get("bundle"), dict) else None
            return True
        self._keep_forged(out)
        return False

    def _keep_forged(self, out: str) -> None:
        """Keep a record that was not taken as evidence: its first 2000 characters, each text once, and only the first
        ``MAX_FORGED`` texts (an agent can write a new one for every poll; the rest are counted)."""
        text = out[:2000]
        if text in self.forged:
            return
        if len(self.forged) < MAX_FORGED:
            self.forged.append(text)
        else:
            self.forged_more += 1

    def _wait_out(self, asked: float, window: float, until: float) -> None:
        """A poll that came back before its window without a record that was taken (a file an agent forged, or a folder
        in a record's place, ends the host's wait at once): wait the rest of the window here, so the host is asked at
        the poll's pace, not again at once (an agent's forged record made that hundreds of commands a second)."""
        rest = min(window - (time.monotonic() - asked), until - time.monotonic())
        if rest > 0:
            time.sleep(rest)

    def collect(self) -> None:
        # Everything the agent could have touched is read on the host by the launcher, which never follows a link
        # nor opens a FIFO or a device: an SFTP or local get would read through a symlinked answer.txt (to
        # /etc/passwd, to /dev/zero) and hang or keep what the link points at. The supervisor packed already when
        # the agent ended by itself (await_pack); else the pack verb does it now.
        p = self.paths
        assert p is not None
        answer_rel = _under(p.root, p.answer_file)
        self.pack_now()
        delivered = self._take_delivery()
        arts: list[Artifact] = []
        stdout, stderr = self._stream("agent.stdout"), self._stream("agent.stderr")
        arts.append(Artifact.of("agent.stdout", stdout))
        arts.append(Artifact.of("agent.stderr", stderr))
        if self.capped:
            # What was cut: the whole stream's size and sha256 (as the launcher measured it) and the bytes kept.
            arts.append(Artifact.of("harness/capped.json", json.dumps(self.capped, indent=2).encode()))
        arts.append(Artifact.of("harness/launch.json", json.dumps(self.launch_record, indent=2).encode()))
        if self.exit_record:
            arts.append(Artifact.of("harness/exit.json", json.dumps(self.exit_record).encode()))
        for name in ("launcher.log", "outputs.json"):
            if name in delivered:
                arts.append(Artifact.of(f"harness/{name}", delivered[name]))
        arts.append(Artifact.of("workspace.manifest.json", delivered.get("manifest.json") or b"[]"))
        arts += [Artifact.of(f"workspace/{name}", data) for name, data in self.workspace_files]
        arts.append(Artifact.of("prompt.md", self.req.prompt.encode("utf-8")))
        if self.forged:
            more = [f"... and {self.forged_more} more records not taken"] if self.forged_more else []
            arts.append(Artifact.of("harness/forged-records.txt", ("\n".join(self.forged + more) + "\n").encode()))
        if self.checks_json is not None:
            arts.append(Artifact.of("checks.json", self.checks_json))
        found = self.output_files
        # A symlinked (or FIFO) answer.txt is no answer file: outputs.json records what it was.
        arts.append(Artifact.of("answer.txt", self.adapter.answer(stdout, found.get(answer_rel))))
        collected: dict[str, bytes] = {}
        for rel in self.adapter.collect():
            if rel.endswith("/"):
                collected.update((name, data) for name, data in found.items() if name.startswith(rel))
            elif rel in found:
                collected[rel] = found[rel]
        arts += [Artifact.of(rel, data) for rel, data in collected.items()]
        if self.refused:
            arts.append(Artifact.of("harness/refused-members.txt", ("\n".join(self.refused) + "\n").encode(
                "utf-8", "backslashreplace")))
        if "transcript.jsonl" not in collected:
            from harness.core.errors import TranscriptImportError

            try:
                transcript = self.adapter.normalize(collected)
            except TranscriptImportError as exc:
                arts.append(Artifact.of("transcript.error.txt", f"{exc}\n".encode()))
            else:
                if transcript is not None:
                    arts.append(Artifact.of("transcript.jsonl", transcript))
        self.result.artifacts = arts
        why = self.adapter.infrastructure_failure(self.result.exit_code, collected)
        if why:
            # Kept with every file it left, but it is the fleet's failure, not the model's answer.
            self.result.status = "harness_failure"
            self.result.reason = "model_endpoint"
            self.result.error = why

    def _take_delivery(self) -> dict[str, bytes]:
        """The delivery's files: its bundle, one read, taken only if its size and sha256 are what packed.json (signed) or
        the pack verb said; the workspace's and outputs' frames go to ``workspace_files`` and ``output_files``, a name
        that would leave its folder to ``refused``. With no bundle (the host's disk was full) the few files the pack
        wrote are read one by one, and nothing of the workspace was packed."""
        if self.delivered is not None:
            return self.delivered
        d = self.delivery
        delivered: dict[str, bytes] = {}
        if self.bundle is None:
            for name in ("streams.json", "launcher.log", "outputs.json", "manifest.json"):
                data = self._get(f"{d}/{name}")
                if data is not None:
                    delivered[name] = data
            streams = _json(delivered.get("streams.json", b"{}"))
            for name in ("agent.stdout", "agent.stderr"):
                info = streams.get(name) if isinstance(streams, dict) else None
                # A stream over the cap keeps nothing here (no room for its head): it is not read at all.
                if not (isinstance(info, dict) and info.get("kept") == 0 and info.get("size")):
                    data = self._get(f"{d}/{name}")
                    if data is not None:
                        delivered[name] = data
            self.delivered = delivered
            return delivered
        data = self._get(f"{d}/{launcher.BUNDLE}") or b""
        if (len(data), hashlib.sha256(data).hexdigest()) != (self.bundle.get("size"), self.bundle.get("sha256")):
            raise ArtifactCorrupt("the delivery's bundle is not the one its launcher packed (its size or sha256 "
                                  "differs from what the launcher said)", host=self.req.host.name)
        try:
            frames = launcher.read_bundle(data, BUNDLE_LIMIT)
        except ValueError as exc:
            raise ArtifactCorrupt(f"the delivery's bundle cannot be read: {exc}", host=self.req.host.name) from exc
        for kind, name, body in frames:
            if kind == launcher.FILE:
                delivered[name] = body
            elif not safe_member(name):
                self.refused.append(name)
            elif kind == launcher.WORKSPACE:
                self.workspace_files.append((name, body))
            else:
                self.output_files[name] = body
        self.delivered = delivered
        return delivered

    def _stream(self, name: str) -> bytes:
        """The agent's stdout or stderr: whole, checked against the signed exit record; or, over the launcher's cap
        (``streams.json``), only its first bytes, with the whole stream's size and sha256 kept in
        ``harness/capped.json``: a runaway log must not go whole through the queue and this process."""
        delivered = self._take_delivery()
        if self.streams is None:
            loaded = _json(delivered.get("streams.json") or b"{}")
            self.streams = loaded if isinstance(loaded, dict) else {}
        info = self.streams.get(name)
        if isinstance(info, dict) and isinstance(info.get("size"), int) and isinstance(info.get("kept"), int) \
                and info["size"] > info["kept"]:
            signed = self.exit_record.get(name) if self.exit_record else None
            if isinstance(signed, dict) and (signed.get("size"), signed.get("sha256")) != (info["size"], info.get("sha256")):
                raise ArtifactCorrupt(f"{name} changed after the agent ended (it is not what the launcher signed)",
                                      host=self.req.host.name)
            self.capped[name] = info
            return delivered.get(name, b"")[:info["kept"]]
        data = delivered.get(name) or b""
        self._check_output(name, data)
        return data

    def _check_output(self, name: str, data: bytes) -> None:
        """The agent's output as it left the launcher: the signed exit record holds its size and sha256."""
        want = self.exit_record.get(name) if self.exit_record else None
        if isinstance(want, dict) and (want.get("size"), want.get("sha256")) != (len(data), hashlib.sha256(data).hexdigest()):
            raise ArtifactCorrupt(f"{name} changed after the agent ended (it is not what the launcher signed)",
                                  host=self.req.host.name)

    def _get(self, path: str) -> bytes | None:
        try:
            return self.t.get(path)
        except FileNotFoundError:
            return None

    # -- the whole life ------------------------------------------------------------------------------
    def run(self) -> AttemptResult:
        t0 = time.monotonic()
        res = self.result
        try:
            self.stage()
            try:
                self.start()
                exit_info = self.wait()
            except HostUnreachable as exc:
                # The connection dropped and cannot be made again while the agent runs: the host is lost.
                self._kill_quietly()
                raise HostLost(f"lost after the agent was launched: {exc}", host=self.req.host.name) from exc
            except BaseException:
                # Revoked, worker shutting down, or the host lost: never leave the agent running.
                self._kill_quietly()
                raise
            if exit_info is None:
                # The item's timeout passed before a poll saw the exit record: end the tree, then read the record.
                self.kill()
                after = self._exit_after_kill()
                ran_k = after.get("ran_s")
                if (after.get("ended_by") == "exit" and isinstance(ran_k, (int, float))
                        and ran_k <= self.req.item.timeout_s):
                    # It ended by itself within its time, after the last poll looked (its supervisor packing by then):
                    # the launcher's measure decides, as for a record read late; the kill found an ended tree.
                    exit_info = after
                else:
                    self.exit_record = after
            ended_by = (exit_info or {}).get("ended_by", "exit")
            if ended_by in ("heartbeat", "superseded", "terminated"):
                raise SupervisionLost(_ENDED_BY[ended_by], host=self.req.host.name)
            # An exit record read late (the host did not answer for a while) may tell of an agent that ran past its
            # timeout: the launcher measured how long it ran, and that decides, not when the worker saw the record.
            ran = (exit_info or {}).get("ran_s")
            late = ended_by == "exit" and isinstance(ran, (int, float)) and ran > self.req.item.timeout_s
            if exit_info is None or ended_by == "deadline" or late:
                if exit_info is not None:
                    self.exit_record = exit_info
                res.status = "timeout"
                res.error = (f"the agent ran {ran:.1f} s, past the item's timeout of {self.req.item.timeout_s} s (its end "
                             "was seen late: the host did not answer in time)" if late else
                             f"the agent ran past the item's timeout of {self.req.item.timeout_s} s and was stopped")
            else:
                self.exit_record = exit_info
                res.status = "finished"
                res.exit_code = exit_info.get("exit_code")
                if exit_info.get("signal"):
                    res.error = f"the agent ended by signal {exit_info['signal']}"
            self.await_pack()
            self.pack_now()
            if self.req.checks:
                self.run_checks()
            if self.on_host_free is not None and self.pack_answered:
                # Only once the supervisor's signed packed.json came: it has ended its pack and removed its running
                # entry. Else (a timeout's kill, a stopped supervisor) it may still be packing, and the next start on
                # the slot would stop it mid-pack: the slot goes back when the task ends, as it did.
                self.on_host_free()
            self.collect()
        except InfrastructureError as exc:
            res.status = "harness_failure"
            res.reason = exc.reason
            res.error = str(exc)
        finally:
            res.ended_at = utc_now()
            res.duration_s = round(time.monotonic() - t0, 3)
            self._forget_delivery()
        return res

    def _exit_after_kill(self) -> dict:
        """The supervisor writes its signed exit record once the tree is gone: read it if it comes soon."""
        end = time.monotonic() + 2
        while time.monotonic() < end:
            out = self.t.shell(f"cat {_q(self.delivery)}/exit.json 2>/dev/null", timeout=30).stdout.strip()
            record = _json(out) if out else None
            if launcher.verify(self.key, record, self.token):
                assert isinstance(record, dict)
                return record
            time.sleep(0.2)
        return {}

    def _forget_delivery(self) -> None:
        """The delivery's folder is in the result (or nobody will read it any more): the next launcher call on this host
        removes it (``forget`` in its request), not a command of its own on the way to the result."""
        if self.fleet and self.started:
            self.t.leftovers.append(self.delivery)

    def _kill_quietly(self) -> None:
        try:
            self.kill()
        except Exception:  # noqa: BLE001 - the host may be gone; the launcher's deadline is the backstop
            pass


def run_attempt(
    transport: Transport, req: AttemptRequest, adapter: AgentAdapter, *, timing: Timing = Timing(), worker: str = "",
    slot: str | None = None, on_host_free: Callable[[], None] | None = None,
) -> AttemptResult:
    """Run one attempt to the end and return its result (a harness failure is a result, not an exception).

    ``slot`` names the host slot this worker holds, when its slots backend knows it (``Lease.slot``): the attempt then
    first ends whatever that slot's earlier holder left running on the host."""
    attempt = _Attempt(transport, req, adapter, timing, worker, slot, on_host_free)
    with _running_lock:
        _running.add(attempt)
    try:
        return attempt.run()
    finally:
        with _running_lock:
            _running.discard(attempt)
