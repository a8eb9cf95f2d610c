"""One attempt's whole life on a host, written once over the transport hooks.

:meth:`Attempt.run` names the stages in order, each a method of its own (a subclass or a test may override one):

    stage -> supervise (start, wait) -> stop (the item's timeout passed) -> judge -> await_pack -> pack_now
          -> run_checks -> free_host -> collect -> the result

stage (the attempt folder's paths, the agent's program, its launch) -> start (one launcher call: end what earlier
deliveries left that this one replaces, fresh folder, prompt as a file, the agent started in a session of its own and
supervised) -> wait (until its signed exit, with a signed heartbeat on every poll, or the item's timeout) -> kill the
agent's whole tree on timeout or revoke -> pack (the supervisor's, else the launcher's verb) -> checks -> the host's
slot given back -> collect (stdout, stderr, answer, workspace files, each with sha256) -> result.

Each call is one **delivery** with a random token, key and marker (docs/launcher.md): the launcher's records
live in ``WORKDIR/.fleet/deliveries/TOKEN/``, outside the attempt folder; its start and exit records are
signed with the key, which travels only on the launcher's stdin, and are refused when the signature or the
token is wrong, so a record the agent forged is never taken for the real one. How a stage talks to the launcher
(its calls, the poll's shell, its records, the bundle and the artifacts made of it) is ``workers.delivery``; every
stage's bound is read from the attempt's budget (``harness.core.timebudget``, docs/budget.md).

Infrastructure problems become a ``harness_failure`` result with a reason code; the model's own
failures (non-zero exit, timeout after the agent started) are ``finished`` / ``timeout`` and are never
retried. This function never raises for an ``InfrastructureError``: a failure is a record, not a crash.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from harness.core.timebudget import AttemptBudget
from harness.core.errors import (AgentMissing, AgentNotStarted, HostLost, HostUnreachable, InfrastructureError,
                                 SupervisionLost)
from harness.core.records import AttemptResult, utc_now
from harness.core.sweep import AttemptRequest
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.host import launcher
from workers.delivery import (ENDED_BY, MAX_FORGED, POLL_TICK_S, Delivered, Delivery, Forged, answer_lines, artifacts_of,
                              is_pid, parse_json, poll_script)
from workers.transport.base import Transport

__all__ = ["Attempt", "AttemptAborted", "LAUNCHER_SOURCE", "MAX_FORGED", "PACK_TIMEOUT_S", "REAP_ALLOWANCE_S", "Timing",
           "abort_running", "poll_script", "run_attempt"]

PACK_TIMEOUT_S = AttemptBudget.pack_s
"""How long packing the attempt folder on the host may take (a large workspace, a slow disk): the budget's pack_s."""
REAP_ALLOWANCE_S = AttemptBudget.reap_s  # the budget's reap_s
"""Added to the start's bound: the launcher's start first ends what earlier deliveries left, giving each earlier
supervisor its TERM grace (workers/host/launcher/ TERM_GRACE) to end its own tree."""

LAUNCHER_SOURCE = launcher.source()
"""Sent on stdin with every launcher request: the host never runs a launcher file the agent could rewrite."""


@dataclass(frozen=True)
class Timing:
    """How the lifecycle waits. Defaults suit a real fleet (they are the budget's, harness/core/timebudget.py); tests
    may shorten them."""

    start_timeout_s: float = AttemptBudget.start_s
    """The agent must have started by then, or the attempt is a harness failure (agent_not_started)."""
    poll_min_s: float = 0.2
    poll_max_s: float = 2.0
    launcher_grace_s: float = AttemptBudget.launcher_grace_s
    """The launcher kills the agent itself this long after the timeout, if no worker did."""
    heartbeat_s: float = 120.0
    """The launcher ends the agent's tree when no heartbeat came from this worker for this long (a dead worker,
    pool process or SSH link); the worker polls, and so beats, at least four times within it."""
    check_timeout_s: float = AttemptBudget.check_s
    """Each acceptance check's own time limit."""

    def budget(self, run_s: float, checks: int = 0) -> AttemptBudget:
        """The budget of an attempt whose agent may run ``run_s`` and that has ``checks`` checks, with these timings."""
        return AttemptBudget(run_s=run_s, checks=checks, start_s=self.start_timeout_s,
                             launcher_grace_s=self.launcher_grace_s, check_s=self.check_timeout_s)


class AttemptAborted(BaseException):
    """The process running this attempt is stopping it (the embedded coordinator was interrupted). A
    BaseException, as SystemExit from a revoke is: it unwinds through the kill, never into a record."""


_running: set["Attempt"] = set()
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


def _q(s: str) -> str:
    return shlex.quote(s)


def _under(root: str, path: str) -> str:
    """``path`` relative to the attempt's ``root`` (the answer file is one of the attempt's paths)."""
    return path[len(root.rstrip("/")) + 1:] if path.startswith(root.rstrip("/") + "/") else path


@dataclass
class Launch:
    """What the launcher's start is given, as :meth:`Attempt.stage` made it."""

    spec: dict = field(default_factory=dict)
    """argv, env, pass_env, cwd and deadline: it travels on the launcher's stdin, never as a file (no API key in env
    lands on disk)."""
    record: dict = field(default_factory=dict)
    """What is kept of the launch (harness/launch.json): environment names only, since values may be API keys."""
    files: dict[str, bytes] = field(default_factory=dict)
    """What the launcher's start writes into the fresh attempt folder: the prompt and the adapter's files."""
    look_for: str | None = None
    """The agent's program, when the launcher's start is to look for it (an agent without a version command)."""


@dataclass
class AgentRun:
    """What the launcher said of the agent's run."""

    started: dict = field(default_factory=dict)
    """The launcher's signed start record (pid, session, launcher pid)."""
    pgid: int | None = None
    exit_record: dict = field(default_factory=dict)
    """The launcher's signed exit record (verified), once the agent ended."""
    beats: int = 0
    """Heartbeats written so far (each poll writes the next)."""


@dataclass
class Pack:
    """Where the pack of the attempt folder stands."""

    packed: bool = False
    """The attempt folder is packed (by the supervisor when the agent ended, or by the pack verb)."""
    answered: bool = False
    """The supervisor's signed packed.json came: its pack is over, and its running entry removed."""
    bundle: dict | None = None
    """The delivery's bundle (workers/host/launcher/): its size and sha256 as the supervisor signed them in
    packed.json, or as the pack verb said; None when the pack wrote none (a full disk: the files are read one by
    one)."""


class Attempt:
    """One attempt of one cell on its host: :meth:`run` calls the stages in order; each is a method to override."""

    def __init__(self, transport: Transport, req: AttemptRequest, adapter: AgentAdapter, timing: Timing, worker: str,
                 slot: str | None = None, on_host_free: Callable[[], None] | None = None):
        self.t = transport
        self.req = req
        self.adapter = adapter
        self.timing = timing
        self.budget = timing.budget(req.item.timeout_s, len(req.checks))
        self.on_host_free = on_host_free
        """Gives the host's slot back early, once the supervisor's pack is over (the next agent starts meanwhile)."""
        self.result = _new_result(req, adapter, worker)
        self.delivery = Delivery(transport, req.host.python, LAUNCHER_SOURCE, slot=slot)
        self.paths: AttemptPaths | None = None
        self.launch = Launch()
        self.agent = AgentRun()
        self.pack = Pack()
        self.forged = Forged()
        self.checks_json: bytes | None = None
        self.aborted = ""
        """Set by abort_running(): the wait loop stops and the agent is killed."""

    # -- the whole life ------------------------------------------------------------------------------------------------
    def run(self) -> AttemptResult:
        """The attempt from its stage to its result: a harness failure on the way is the result's reason, not a raise."""
        t0 = time.monotonic()
        try:
            self.stage()
            ended = self.supervise()
            if ended is None:
                ended = self.stop()
            self.judge(ended)
            self.await_pack()
            self.pack_now()
            self.run_checks()
            self.free_host()
            self.collect()
        except InfrastructureError as exc:
            self.fail(exc)
        finally:
            self.finish(t0)
        return self.result

    # -- stage -----------------------------------------------------------------------------------------------------------
    def stage(self) -> None:
        """Everything the launcher's start needs, found and made here: the attempt folder's paths, the agent's program
        (probed, or left to the start to look for), its launch and the files the start writes."""
        self.t.open()
        home, workdir = self._workdir()
        # The sweep's uid keeps two sweeps of one id (two coordinators, one label, one second) out of each other's folders.
        sweep_folder = f"{self.req.sweep_id}/{self.req.sweep_uid}" if self.req.sweep_uid else self.req.sweep_id
        root = f"{workdir.rstrip('/')}/runs/{sweep_folder}/{self.req.cell.id}/attempt-{self.req.attempt}"
        self.paths = p = AttemptPaths(root)
        self.delivery.fleet = f"{workdir.rstrip('/')}/.fleet"
        self.result.workspace = p.workspace
        self.adapter.at_home(home)
        if self.adapter.needs_harness:
            from workers.install import ensure_harness, source_release  # lazy: 25 ms of imports, for few adapters

            self.adapter.harness_python = ensure_harness(self.t, self.req.host)
            self.result.host_facts["harness_release"] = source_release().id
        program = self.adapter.program()
        if self.adapter.version_argv() or (program and "/" in program and not program.startswith("/")):
            self.probe_agent()
        else:
            # Nothing to ask but whether it is there: the launcher's start looks for it first (agent_missing before
            # anything runs), instead of a command of its own.
            self.launch.look_for = program
        argv = self.adapter.argv(self.req.host, self.req.item, p)
        self.result.agent_command = argv
        env: dict[str, str] = self.adapter.env(self.req.host, p)
        spec = {
            "argv": argv,
            "env": env,
            "pass_env": self.adapter.pass_env(self.req.host),
            "cwd": p.workspace,
            "deadline_s": self.budget.agent_deadline_s,
        }
        # The launch travels on the launcher's stdin (start()), never as a file: no API key in env lands on disk.
        self.launch.spec = spec
        # What is kept of the launch: environment names only, since values may be API keys.
        self.launch.record = {**spec, "env": {k: "***" for k in env}}
        # The prompt travels as a file, byte for byte: it is never part of a command line. It and the adapter's
        # files are written by the launcher's start (start()), in the folder it has just made afresh.
        self.launch.files = {p.prompt_file: self.req.prompt.encode("utf-8")}
        for rel, data in self.adapter.files(self.req.host, self.req.item, p).items():
            self.launch.files[f"{root}/{rel}"] = data

    def _workdir(self) -> tuple[str, str]:
        """The host's $HOME (asked once per transport) and the inventory's workdir with ``~`` expanded to it."""
        memo = self.t.memo
        if "home" not in memo:
            found = self.t.shell('printf %s "$HOME"', timeout=self.budget.round_trip_s)
            if found.ok and found.stdout.strip():
                memo["home"] = found.stdout.strip()
        home = memo.get("home", "")
        workdir = self.req.host.workdir
        if workdir.startswith("~"):
            if not home:
                # "~/x" without a home became "/x": the attempt's folder was removed and made afresh under /.
                raise AgentNotStarted(f"cannot read $HOME on the host for its workdir {workdir}", host=self.req.host.name)
            workdir = home + workdir[1:]
        return home, workdir

    def probe_agent(self) -> None:
        """The agent's program must be on the host (else ``agent_missing``, before anything runs); its version
        goes into meta.json."""
        from workers.adapters.probe import probe_agent  # lazy: only adapters with a version command probe

        assert self.paths is not None
        probe = probe_agent(self.t, self.adapter, self.req.host, self.paths)
        if not probe.found:
            raise AgentMissing(f"agent {self.adapter.name!r}: {probe.program} is not installed (not found on PATH)",
                               host=self.req.host.name)
        self.result.agent_version = probe.version

    # -- start and wait --------------------------------------------------------------------------------------------------
    def supervise(self) -> dict | None:
        """Start the agent and wait for its signed exit record (None: the item's timeout came first). Whatever else ends
        the wait (a revoke, the worker shutting down, the host lost) kills the agent's tree on the way out."""
        try:
            self.start()
            return self.wait()
        except HostUnreachable as exc:
            # The connection dropped and cannot be made again while the agent runs: the host is lost.
            self._kill_quietly()
            raise HostLost(f"lost after the agent was launched: {exc}", host=self.req.host.name) from exc
        except BaseException:
            # Revoked, worker shutting down, or the host lost: never leave the agent running.
            self._kill_quietly()
            raise

    def entry(self) -> dict:
        """Who this delivery is, for the host's registry of running deliveries (``.fleet/running/``)."""
        return {"host": self.req.host.name, "sweep_id": self.req.sweep_id, "sweep_uid": self.req.sweep_uid,
                "cell": self.req.cell.id, "attempt": self.req.attempt, "slot": self.delivery.slot,
                "root": self.paths.root if self.paths else ""}

    def start(self) -> None:
        """One launcher call, one Python start on the host: it ends what earlier deliveries left that this one
        replaces (an earlier delivery of this attempt, an earlier holder of this slot, an agent nobody supervises
        any more must not run on beside this one), makes the attempt folder afresh (whatever an earlier delivery
        left is removed), writes the prompt and the adapter's files, says the host's facts, and starts the agent."""
        p = self.paths
        assert p is not None
        d, host = self.delivery, self.req.host.name
        prepare = {"root": p.root, "dirs": [p.workspace, p.fleet], "files": dict(self.launch.files),
                   "program": self.launch.look_for, "path": self.launch.spec["env"].get("PATH")}
        request = {"key": d.key, "marker": d.marker, "spec": self.launch.spec, "entry": self.entry(),
                   "deadline_s": self.launch.spec["deadline_s"], "heartbeat_s": self.timing.heartbeat_s,
                   "prepare": prepare,
                   # The supervisor's pack ends a little after this worker would stop waiting for it (await_pack).
                   "pack": {"root": p.root, "outputs": self.outputs(), "limit_s": self.budget.supervisor_pack_s}}
        # The bound covers the reap too: an earlier supervisor is given its TERM grace to end its own tree.
        bound = self.budget.start_bound_s
        try:
            r = d.call("run", request, timeout=bound)
        except HostLost as exc:
            raise AgentNotStarted(f"timeout before the agent started ({bound:.0f} s): {exc}", host=host) from exc
        answers = answer_lines(r.stdout)
        answer = answers[-1] if answers else {}
        if "agent_missing" in answer:
            raise AgentMissing(f"agent {self.adapter.name!r}: {self.launch.look_for} is not installed (not found on "
                               "PATH)", host=host)
        if "reap_error" in answer:
            raise AgentNotStarted(f"cannot end what earlier attempts left running: {answer['reap_error']}", host=host)
        if "prepare_error" in answer:
            raise AgentNotStarted(f"cannot prepare {p.root}: {answer['prepare_error']}", host=host)
        d.learn(answers)
        prepared = next((a["prepared"] for a in answers if isinstance(a.get("prepared"), dict)), None)
        if prepared is not None:
            self.result.host_facts = {
                "uname": str(prepared.get("uname", "")),
                "python": str(prepared.get("python", "")),
                "disk_free_mb": str(prepared["disk_free_mb"]) if isinstance(prepared.get("disk_free_mb"), int) else "",
                **self.result.host_facts,  # harness_release, found in stage()
            }
        if "start_error" in answer:
            raise AgentNotStarted(f"agent command could not start: {answer['start_error']}", host=host)
        started = answer.get("started")
        if not d.verify(started):
            raise AgentNotStarted(f"the launcher gave no signed start record: {r.tail()}", host=host)
        assert isinstance(started, dict)
        # The wait loop asks the host `kill -0 LAUNCHER_PID`: with 0 (a record without it) that names the shell's
        # own process group and is always true, so a launcher that died was never noticed before the item's
        # timeout; a negative pid names groups or every process. A real pid is above 1.
        if not all(is_pid(started.get(k)) for k in ("launcher_pid", "pgid")):
            raise AgentNotStarted(f"the launcher's start record names no usable pid (launcher_pid "
                                  f"{started.get('launcher_pid')!r}, pgid {started.get('pgid')!r})", host=host)
        self.agent.started = started
        self.agent.pgid = int(started["pgid"])
        self.result.agent_started_at = utc_now()

    def wait(self) -> dict | None:
        """Wait for the launcher's signed exit record; None when the item's timeout passed first. Every poll
        writes a signed heartbeat the launcher checks; a record with a wrong signature or token is ignored."""
        assert self.paths is not None
        d = _q(self.delivery.folder)
        launcher_pid = int(self.agent.started.get("launcher_pid") or 0)
        deadline = time.monotonic() + self.budget.run_s
        delay = self.timing.poll_min_s
        longest = min(self.timing.poll_max_s, self.timing.heartbeat_s / 4)
        while True:
            if self.aborted:
                raise AttemptAborted(self.aborted)
            self.agent.beats += 1
            beat = _q(self.delivery.heartbeat(self.agent.beats))
            # The host waits, not the worker: up to ``window`` seconds it looks for exit.json every 10-50 ms (and
            # stops looking when the launcher is gone), so an agent's end is seen within 50 ms and a round trip,
            # not after the rest of a sleep of up to 2 s (the gap between one agent and the next on a host).
            window = max(0.0, min(delay, deadline - time.monotonic()))
            looks = int(window / POLL_TICK_S)
            # exit.json is renamed into place before the launcher ends: read again after a failed liveness test,
            # so a launcher that just wrote it and ended is never taken for a lost one.
            asked = time.monotonic()
            out = self.t.shell(poll_script(d, beat, window, launcher_pid),
                               timeout=self.budget.round_trip_s + window).stdout.strip()
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
                record = parse_json(first)
                if self.delivery.verify(record):
                    assert isinstance(record, dict)
                    if rest.strip():
                        self._packed_record(rest.strip())
                    return record
                self.forged.keep(out)
            now = time.monotonic()
            if now >= deadline:
                return None
            if looks == 0:  # a window too short to wait in on the host (the deadline is near): wait here
                time.sleep(min(0.05, max(0.0, deadline - now)))
            else:
                self._wait_out(asked, window, deadline)
            delay = min(delay * 1.5, longest)

    def _wait_out(self, asked: float, window: float, until: float) -> None:
        """A poll that came back before its window without a record that was taken (a file an agent forged, or a folder
        in a record's place, ends the host's wait at once): wait the rest of the window here, so the host is asked at
        the poll's pace, not again at once (an agent's forged record made that hundreds of commands a second)."""
        rest = min(window - (time.monotonic() - asked), until - time.monotonic())
        if rest > 0:
            time.sleep(rest)

    # -- the run's end ---------------------------------------------------------------------------------------------------
    def stop(self) -> dict | None:
        """The item's timeout passed before a poll saw the exit record: end the tree, then read the record. It is the
        run's end (returned) only if the agent ended by itself within its time, after the last poll looked (its
        supervisor packing by then): the launcher's measure decides, as for a record read late; the kill found an
        ended tree. Else the run timed out (None), and the record is kept."""
        self.kill()
        after = self._exit_after_kill()
        ran = after.get("ran_s")
        if after.get("ended_by") == "exit" and isinstance(ran, (int, float)) and ran <= self.req.item.timeout_s:
            return after
        self.agent.exit_record = after
        return None

    def kill(self) -> None:
        """End the agent's whole tree (its session, its descendants, whatever carries its marker): TERM, a grace,
        then KILL, done by this worker's launcher source on the host."""
        if self.paths is None or not self.delivery.fleet:
            return
        started = self.agent.started
        pids = {"agent": started.get("pid"), "sid": started.get("sid"), "launcher": started.get("launcher_pid")}
        self.delivery.call("kill", {"marker": self.delivery.marker, "pids": pids}, timeout=self.budget.kill_s)

    def _exit_after_kill(self) -> dict:
        """The supervisor writes its signed exit record once the tree is gone: read it if it comes soon."""
        end = time.monotonic() + 2
        while time.monotonic() < end:
            out = self.t.shell(f"cat {_q(self.delivery.folder)}/exit.json 2>/dev/null",
                               timeout=self.budget.round_trip_s).stdout.strip()
            record = parse_json(out) if out else None
            if self.delivery.verify(record):
                assert isinstance(record, dict)
                return record
            time.sleep(0.2)
        return {}

    def _kill_quietly(self) -> None:
        try:
            self.kill()
        except Exception:  # noqa: BLE001 - the host may be gone; the launcher's deadline is the backstop
            pass

    def judge(self, ended: dict | None) -> None:
        """The run's verdict from its exit record (None: it ran out of time): finished, timeout, or, when the launcher
        ended the agent for want of its worker or for a later delivery, supervision lost."""
        res = self.result
        timeout_s = self.req.item.timeout_s
        ended_by = (ended or {}).get("ended_by", "exit")
        if ended_by in ("heartbeat", "superseded", "terminated"):
            raise SupervisionLost(ENDED_BY[ended_by], host=self.req.host.name)
        # An exit record read late (the host did not answer for a while) may tell of an agent that ran past its
        # timeout: the launcher measured how long it ran, and that decides, not when the worker saw the record.
        ran = (ended or {}).get("ran_s")
        late = ended_by == "exit" and isinstance(ran, (int, float)) and ran > timeout_s
        if ended is None or ended_by == "deadline" or late:
            if ended is not None:
                self.agent.exit_record = ended
            res.status = "timeout"
            res.error = (f"the agent ran {ran:.1f} s, past the item's timeout of {timeout_s} s (its end "
                         "was seen late: the host did not answer in time)" if late else
                         f"the agent ran past the item's timeout of {timeout_s} s and was stopped")
        else:
            self.agent.exit_record = ended
            res.status = "finished"
            res.exit_code = ended.get("exit_code")
            if ended.get("signal"):
                res.error = f"the agent ended by signal {ended['signal']}"

    # -- pack --------------------------------------------------------------------------------------------------------------
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
        if not self.agent.exit_record.get("packing") or not self.agent.started or self.pack.answered:
            return
        d = _q(self.delivery.folder)
        launcher_pid = int(self.agent.started.get("launcher_pid") or 0)
        end = time.monotonic() + self.budget.pack_s
        while time.monotonic() < end:
            if self.aborted:
                raise AttemptAborted(self.aborted)
            window = max(0.0, min(self.timing.poll_max_s, end - time.monotonic()))
            asked = time.monotonic()
            out = self.t.shell(poll_script(d, "''", window, launcher_pid, target="packed.json"),
                               timeout=self.budget.round_trip_s + window).stdout.strip()
            if out in ("GONE", "STOPPED"):
                return
            if out and self._packed_record(out):
                return
            self._wait_out(asked, window, end)
        raise InfrastructureError(f"packing the workspace failed: the supervisor did not end its pack within "
                                  f"{self.budget.pack_s:.0f} s", host=self.req.host.name)

    def pack_now(self) -> None:
        """Pack with the launcher's verb when the supervisor did not (the agent was stopped, or its pack failed), before
        any check runs, so the workspace stored is what the agent left. The verb refuses a folder a later delivery of
        this attempt has taken (made afresh, its own agent in it): nothing there is this delivery's result."""
        if self.pack.packed:
            return
        p = self.paths
        assert p is not None
        r = self.delivery.call("pack", {"root": p.root, "outputs": self.outputs()}, timeout=self.budget.pack_s)
        lines = r.stdout.strip().splitlines()
        answer = parse_json(lines[-1]) if lines else None
        if r.exit_code == 3 and isinstance(answer, dict) and isinstance(answer.get("superseded"), str):
            raise SupervisionLost(f"{ENDED_BY['superseded']} ({answer['superseded'][:300]})", host=self.req.host.name)
        if not r.ok or not isinstance(answer, dict) or "bundle" not in answer:
            raise InfrastructureError(f"packing the workspace failed: {r.tail()}", host=self.req.host.name)
        self.pack.bundle = answer["bundle"] if isinstance(answer["bundle"], dict) else None
        self.pack.packed = True

    def _packed_record(self, out: str) -> bool:
        """Take packed.json's text if the supervisor signed it; a record with a wrong signature is kept as evidence."""
        record = parse_json(out)
        if self.delivery.verify(record):
            assert isinstance(record, dict)
            self.pack.answered = True
            self.pack.packed = record.get("ok") is True
            self.pack.bundle = record.get("bundle") if isinstance(record.get("bundle"), dict) else None
            return True
        self.forged.keep(out)
        return False

    # -- checks, the slot, the result ----------------------------------------------------------------------------------
    def run_checks(self) -> None:
        """Run the item's acceptance checks on the host, in the workspace the agent left, each with its
        own time limit, from the harness release installed there; results go to ``checks.json``."""
        if not self.req.checks:
            return
        from workers.checks.runner import CheckPlace, run_check  # lazy: 30 ms of imports, for items with checks
        from workers.install import ensure_harness  # lazy: 25 ms of imports, for items with checks

        p = self.paths
        assert p is not None
        python = self.adapter.harness_python or ensure_harness(self.t, self.req.host)
        results: list[dict] = []
        for check in self.req.checks:
            place = CheckPlace(folder=f"{p.fleet}/checks/{check.name}", workspace=p.workspace, python=python,
                               timeout_s=self.budget.check_s,
                               hidden_env=tuple(self.adapter.pass_env(self.req.host)))
            res = run_check(self.t, check, place)
            # A check runs at most budget.check_runs times: the soft time limit counts on it.
            if res.status == "error" and not res.summary.startswith("timed out"):
                # The check itself broke (a browser driver that dropped its connection, pytest that left no
                # report): that says nothing of the work, so it runs once more before it counts.
                first = res.summary
                res = run_check(self.t, check, place)
                res = res.model_copy(update={"summary": f"{res.summary} (run twice; the first run: {first})"[:2000]})
            results.append(res.model_dump(mode="json"))
        self.checks_json = json.dumps(results, indent=2).encode()

    def free_host(self) -> None:
        """Give the host's slot back before the delivery is read: the agent's tree is gone and its workspace packed (and
        checked), so the host's next agent can start while this attempt is collected and its result stored."""
        if self.on_host_free is not None and self.pack.answered:
            # Only once the supervisor's signed packed.json came: it has ended its pack and removed its running
            # entry. Else (a timeout's kill, a stopped supervisor) it may still be packing, and the next start on
            # the slot would stop it mid-pack: the slot goes back when the task ends, as it did.
            self.on_host_free()

    def collect(self) -> None:
        """The attempt's artifacts, from the delivery's files as the launcher packed them."""
        # Everything the agent could have touched is read on the host by the launcher, which never follows a link
        # nor opens a FIFO or a device: an SFTP or local get would read through a symlinked answer.txt (to
        # /etc/passwd, to /dev/zero) and hang or keep what the link points at. The supervisor packed already when
        # the agent ended by itself (await_pack); else the pack verb does it now.
        p = self.paths
        assert p is not None
        self.pack_now()
        got = Delivered(self.t, self.delivery.folder, self.req.host.name, self.pack.bundle, self.agent.exit_record)
        self.result.artifacts, collected = artifacts_of(
            got, self.adapter, _under(p.root, p.answer_file), prompt=self.req.prompt, launch_record=self.launch.record,
            exit_record=self.agent.exit_record, forged=self.forged.evidence(), checks_json=self.checks_json)
        why = self.adapter.infrastructure_failure(self.result.exit_code, collected)
        if why:
            # Kept with every file it left, but it is the fleet's failure, not the model's answer.
            self.result.status = "harness_failure"
            self.result.reason = "model_endpoint"
            self.result.error = why

    def fail(self, exc: InfrastructureError) -> None:
        """A harness failure on the way: the result says which (its reason code), never a crash."""
        self.result.status = "harness_failure"
        self.result.reason = exc.reason
        self.result.error = str(exc)

    def finish(self, t0: float) -> None:
        """The result's end time and duration; the delivery's folder is left for the next launcher call to remove."""
        self.result.ended_at = utc_now()
        self.result.duration_s = round(time.monotonic() - t0, 3)
        if self.delivery.fleet and self.agent.started:
            self.delivery.forget()


def _new_result(req: AttemptRequest, adapter: AgentAdapter, worker: str) -> AttemptResult:
    """The attempt's result as it starts: a harness failure until a stage says otherwise."""
    return AttemptResult(
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


def run_attempt(
    transport: Transport, req: AttemptRequest, adapter: AgentAdapter, *, timing: Timing = Timing(), worker: str = "",
    slot: str | None = None, on_host_free: Callable[[], None] | None = None,
) -> AttemptResult:
    """Run one attempt to the end and return its result (a harness failure is a result, not an exception).

    ``slot`` names the host slot this worker holds, when its slots backend knows it (``Lease.slot``): the attempt then
    first ends whatever that slot's earlier holder left running on the host."""
    attempt = Attempt(transport, req, adapter, timing, worker, slot, on_host_free)
    with _running_lock:
        _running.add(attempt)
    try:
        return attempt.run()
    finally:
        with _running_lock:
            _running.discard(attempt)
