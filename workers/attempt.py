"""One attempt's whole life on a host, written once over the transport hooks.

stage (fresh folder, prompt as a file, launcher) -> start (agent in its own process group) -> wait
(until exit or the item's timeout) -> kill the group on timeout or revoke -> collect (stdout, stderr,
answer, workspace files, each with sha256) -> result.

Infrastructure problems become a ``harness_failure`` result with a reason code; the model's own
failures (non-zero exit, timeout after the agent started) are ``finished`` / ``timeout`` and are never
retried. This function never raises for an ``InfrastructureError``: a failure is a record, not a crash.
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.errors import AgentMissing, AgentNotStarted, HostLost, HostUnreachable, InfrastructureError
from harness.records import Artifact, AttemptRequest, AttemptResult, utc_now
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.transport.base import Transport

__all__ = ["Timing", "run_attempt", "abort_running", "AttemptAborted", "LAUNCHER_SOURCE"]

LAUNCHER_SOURCE = (Path(__file__).parent / "launcher.py").read_bytes()


@dataclass(frozen=True)
class Timing:
    """How the lifecycle waits. Defaults suit a real fleet; tests may shorten them."""

    start_timeout_s: float = 30.0
    """The agent must have started by then, or the attempt is a harness failure (agent_not_started)."""
    poll_min_s: float = 0.2
    poll_max_s: float = 2.0
    launcher_grace_s: float = 120.0
    """The launcher kills the agent itself this long after the timeout, if no worker did."""
    check_timeout_s: float = 120.0
    """Each acceptance check's own time limit."""


def _q(s: str) -> str:
    return shlex.quote(s)


def _under(root: str, path: str) -> str:
    """``path`` relative to the attempt's ``root`` (the answer file is one of the attempt's paths)."""
    return path[len(root.rstrip("/")) + 1:] if path.startswith(root.rstrip("/") + "/") else path


def _files_of(tar: bytes | None) -> list[tuple[str, bytes]]:
    """The regular files of a tar the launcher packed, by their names (links and other members are only in its
    manifest). A name of raw bytes comes back decoded with surrogates, as the host's file system gave it."""
    out: list[tuple[str, bytes]] = []
    if tar:
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:gz") as tf:
            for member in tf.getmembers():
                f = tf.extractfile(member) if member.isfile() else None
                if f is not None:
                    out.append((member.name, f.read()))
    return out


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


class _Attempt:
    def __init__(self, transport: Transport, req: AttemptRequest, adapter: AgentAdapter, timing: Timing, worker: str):
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
        self.aborted = ""
        """Set by abort_running(): the wait loop stops and the agent is killed."""
        self.pgid: int | None = None
        self.launch_record: dict = {}
        self.checks_json: bytes | None = None

    # -- stages ------------------------------------------------------------------------------------
    def stage(self) -> None:
        self.t.open()
        home = self.t.shell('printf %s "$HOME"', timeout=30)
        workdir = self.req.host.workdir
        if workdir.startswith("~"):
            workdir = home.stdout.strip() + workdir[1:]
        # The sweep's uid keeps two sweeps of one id (two coordinators, one label, one second) out of each other's folders.
        sweep_folder = f"{self.req.sweep_id}/{self.req.sweep_uid}" if self.req.sweep_uid else self.req.sweep_id
        root = f"{workdir.rstrip('/')}/runs/{sweep_folder}/{self.req.cell.id}/attempt-{self.req.attempt}"
        self.paths = p = AttemptPaths(root)
        self.result.workspace = p.workspace
        # A fresh folder per attempt: whatever an earlier delivery of this task left is removed.
        r = self.t.shell(
            f"set -e; rm -rf {_q(root)}; mkdir -p {_q(p.workspace)} {_q(p.fleet)}; "
            f"uname -srm; {_q(self.py)} -c 'import sys; print(sys.version.split()[0])'; "
            f"df -Pk {_q(root)} | tail -n 1",
            timeout=60,
        )
        if not r.ok:
            raise AgentNotStarted(f"cannot prepare {root}: {r.tail()}", host=self.req.host.name)
        lines = r.stdout.strip().splitlines()
        if len(lines) >= 3:
            df = lines[-1].split()
            self.result.host_facts = {
                "uname": lines[0],
                "python": lines[1],
                "disk_free_mb": str(int(df[3]) // 1024) if len(df) > 3 and df[3].isdigit() else "",
            }
        self.adapter.at_home(home.stdout.strip())
        if self.adapter.needs_harness:
            from workers.install import ensure_harness, source_release

            self.adapter.harness_python = ensure_harness(self.t, self.req.host)
            self.result.host_facts["harness_release"] = source_release().id
        self.probe_agent()
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
        self.t.put(f"{p.fleet}/launch.py", LAUNCHER_SOURCE)
        self.t.put(f"{p.fleet}/launch.json", json.dumps(launch).encode())
        # What is kept of the launch: environment names only, since values may be API keys.
        self.launch_record = {**launch, "env": {k: "***" for k in env}}
        # The prompt travels as a file, byte for byte: it is never part of a command line.
        self.t.put(p.prompt_file, self.req.prompt.encode("utf-8"))
        for rel, data in self.adapter.files(self.req.host, self.req.item, p).items():
            self.t.put(f"{root}/{rel}", data)

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

    def start(self) -> None:
        p = self.paths
        assert p is not None
        r = self.t.shell(
            f"cd {_q(p.root)} && nohup {_q(self.py)} .fleet/launch.py run {_q(p.root)} "
            f"> .fleet/launcher.log 2>&1 < /dev/null &",
            timeout=30,
        )
        if not r.ok:
            raise AgentNotStarted(f"launcher did not start: {r.tail()}", host=self.req.host.name)
        deadline = time.monotonic() + self.timing.start_timeout_s
        check = f"cd {_q(p.fleet)} && (cat started.json 2>/dev/null || (cat start_error.json 2>/dev/null | sed 's/^/ERR/'))"
        while True:
            out = self.t.shell(check, timeout=30).stdout.strip()
            if out.startswith("ERR"):
                err = json.loads(out[3:]).get("error", "unknown error")
                raise AgentNotStarted(f"agent command could not start: {err}", host=self.req.host.name)
            if out:
                info = json.loads(out)
                self.pgid = int(info["pgid"])
                self.result.agent_started_at = utc_now()
                return
            if time.monotonic() > deadline:
                log = self.t.shell(f"tail -c 400 {_q(p.fleet)}/launcher.log 2>/dev/null", timeout=30).stdout.strip()
                raise AgentNotStarted(
                    f"timeout before the agent started ({self.timing.start_timeout_s:.0f} s)"
                    + (f": {log}" if log else ""),
                    host=self.req.host.name,
                )
            time.sleep(self.timing.poll_min_s)

    def wait(self) -> dict | None:
        """Wait for exit.json; None when the item's timeout passed first."""
        p = self.paths
        assert p is not None
        deadline = time.monotonic() + self.req.item.timeout_s
        delay = self.timing.poll_min_s
        while True:
            if self.aborted:
                raise AttemptAborted(self.aborted)
            out = self.t.shell(f"cat {_q(p.fleet)}/exit.json 2>/dev/null", timeout=30).stdout.strip()
            if out:
                return json.loads(out)
            now = time.monotonic()
            if now >= deadline:
                return None
            time.sleep(min(delay, max(0.05, deadline - now)))
            delay = min(delay * 1.5, self.timing.poll_max_s)

    def kill(self) -> None:
        """End the agent's process group: TERM, a grace, then KILL (done by the launcher on the host)."""
        if self.pgid is None or self.paths is None:
            return
        p = self.paths
        self.t.shell(f"cd {_q(p.root)} && {_q(self.py)} .fleet/launch.py kill {_q(p.root)}", timeout=60)

    def run_checks(self) -> None:
        """Run the item's acceptance checks on the host, in the workspace the agent left, each with its
        own time limit, from the harness release installed there; results go to ``checks.json``."""
        from harness.checks.runner import CheckPlace, run_check
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

    def collect(self) -> None:
        p = self.paths
        assert p is not None
        # Everything the agent could have touched is read on the host by the launcher, which never follows a link
        # nor opens a FIFO or a device: an SFTP or local get would read through a symlinked answer.txt (to
        # /etc/passwd, to /dev/zero) and hang or keep what the link points at.
        answer_rel = _under(p.root, p.answer_file)
        outputs = [answer_rel, *(rel for rel in self.adapter.collect() if rel != answer_rel)]
        r = self.t.shell(f"cd {_q(p.root)} && {_q(self.py)} {_q(p.fleet + '/launch.py')} pack {_q(p.root)} "
                         + " ".join(_q(rel) for rel in outputs), timeout=300)
        if not r.ok:
            raise InfrastructureError(f"packing the workspace failed: {r.tail()}", host=self.req.host.name)
        arts: list[Artifact] = []
        stdout = self._get(f"{p.fleet}/agent.stdout") or b""
        arts.append(Artifact.of("agent.stdout", stdout))
        arts.append(Artifact.of("agent.stderr", self._get(f"{p.fleet}/agent.stderr") or b""))
        arts.append(Artifact.of("harness/launch.json", json.dumps(self.launch_record, indent=2).encode()))
        for name in ("exit.json", "launcher.log", "outputs.json"):
            data = self._get(f"{p.fleet}/{name}")
            if data is not None:
                arts.append(Artifact.of(f"harness/{name}", data))
        manifest = self._get(f"{p.fleet}/manifest.json") or b"[]"
        arts.append(Artifact.of("workspace.manifest.json", manifest))
        arts += [Artifact.of(f"workspace/{name}", data) for name, data in _files_of(self._get(f"{p.fleet}/workspace.tar.gz"))]
        arts.append(Artifact.of("prompt.md", self.req.prompt.encode("utf-8")))
        if self.checks_json is not None:
            arts.append(Artifact.of("checks.json", self.checks_json))
        found = dict(_files_of(self._get(f"{p.fleet}/outputs.tar.gz")))
        # A symlinked (or FIFO) answer.txt is no answer file: outputs.json records what it was.
        arts.append(Artifact.of("answer.txt", self.adapter.answer(stdout, found.get(answer_rel))))
        collected: dict[str, bytes] = {}
        for rel in self.adapter.collect():
            if rel.endswith("/"):
                collected.update((name, data) for name, data in found.items() if name.startswith(rel))
            elif rel in found:
                collected[rel] = found[rel]
        arts += [Artifact.of(rel, data) for rel, data in collected.items()]
        if "transcript.jsonl" not in collected:
            from harness.errors import TranscriptImportError

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
                self.kill()
                res.status = "timeout"
                res.error = f"the agent ran past the item's timeout of {self.req.item.timeout_s} s and was stopped"
            else:
                res.status = "finished"
                res.exit_code = exit_info.get("exit_code")
                if exit_info.get("signal"):
                    res.error = f"the agent ended by signal {exit_info['signal']}"
            if self.req.checks:
                self.run_checks()
            self.collect()
        except InfrastructureError as exc:
            res.status = "harness_failure"
            res.reason = exc.reason
            res.error = str(exc)
        finally:
            res.ended_at = utc_now()
            res.duration_s = round(time.monotonic() - t0, 3)
        return res

    def _kill_quietly(self) -> None:
        try:
            self.kill()
        except Exception:  # noqa: BLE001 - the host may be gone; the launcher's deadline is the backstop
            pass


def run_attempt(
    transport: Transport, req: AttemptRequest, adapter: AgentAdapter, *, timing: Timing = Timing(), worker: str = ""
) -> AttemptResult:
    """Run one attempt to the end and return its result (a harness failure is a result, not an exception)."""
    attempt = _Attempt(transport, req, adapter, timing, worker)
    with _running_lock:
        _running.add(attempt)
    try:
        return attempt.run()
    finally:
        with _running_lock:
            _running.discard(attempt)
