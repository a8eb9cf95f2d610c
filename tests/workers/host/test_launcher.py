"""workers/host/launcher/ as the host runs it: a real subprocess, sent its source and request on stdin as the worker
sends them (``python3 -c BOOT VERB TOKEN``), in a work folder of the test's own."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from workers.host import launcher

SOURCE = launcher.source().decode("utf-8")


@dataclass
class Delivery:
    """One delivery as the worker makes it: a token, a key, a marker, and the attempt folder."""

    work: Path
    base: Path
    token: str = field(default_factory=lambda: secrets.token_hex(12))
    key: str = field(default_factory=lambda: secrets.token_hex(32))
    marker: str = field(default_factory=lambda: secrets.token_hex(16))
    entry: dict = field(default_factory=dict)

    @property
    def fleet(self) -> Path:
        return self.work / ".fleet"

    @property
    def folder(self) -> Path:
        return self.fleet / "deliveries" / self.token

    def call(self, verb: str, timeout: float = 30, host_env: dict[str, str] | None = None,
             **request: object) -> subprocess.CompletedProcess[bytes]:
        """One launcher verb; ``host_env`` is the launcher's own environment (the host's, or a local worker's)."""
        body = {"verb": verb, "fleet": str(self.fleet), "token": self.token, **request}
        return subprocess.run([sys.executable, "-c", launcher.BOOT, verb, self.token], capture_output=True,
                              input=launcher.boot_stdin(SOURCE, body), timeout=timeout, cwd="/", env=host_env)

    def run(self, argv: list[str], deadline_s: float = 30, env: dict[str, str] | None = None,
            heartbeat_s: float = 0, pass_env: list[str] | None = None,
            host_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        spec = {"argv": argv, "env": env or {}, "pass_env": pass_env or [], "cwd": str(self.base / "workspace")}
        return self.call("run", key=self.key, marker=self.marker, spec=spec, deadline_s=deadline_s,
                         heartbeat_s=heartbeat_s, entry=self.entry, host_env=host_env)

    def started(self, proc: subprocess.CompletedProcess[bytes]) -> dict:
        answer = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        assert launcher.verify(self.key, answer["started"], self.token), answer
        return answer["started"]

    def exit(self, timeout: float = 20) -> dict:
        path = self.folder / "exit.json"
        end = time.monotonic() + timeout
        while not path.exists():
            assert time.monotonic() < end, f"no exit.json after {timeout} s: {self.log()}"
            time.sleep(0.05)
        record = json.loads(path.read_text(encoding="utf-8"))
        assert launcher.verify(self.key, record, self.token), record
        return record

    def log(self) -> str:
        path = self.folder / "launcher.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def beat(self, seq: int) -> None:
        (self.folder / "heartbeat.tmp").write_text(launcher.heartbeat_line(self.key, self.token, seq))
        os.replace(self.folder / "heartbeat.tmp", self.folder / "heartbeat")


def delivery(tmp_path: Path, name: str = "attempt-1", **entry: object) -> Delivery:
    base = tmp_path / "work" / "runs" / name
    (base / "workspace").mkdir(parents=True)
    return Delivery(tmp_path / "work", base, entry=entry)


def gone(pid: int) -> bool:
    """The process no longer runs: no such pid, or only a zombie waiting for a reaper."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state in ("Z", "X")


def wait_gone(pids: list[int], timeout: float = 10) -> float:
    t0 = time.monotonic()
    while not all(gone(p) for p in pids) and time.monotonic() - t0 < timeout:
        time.sleep(0.05)
    return time.monotonic() - t0


def stopped(record: dict) -> bool:
    """Ended by our TERM or KILL: a signal, or a shell's exit status for one (sh may exit 143 on TERM)."""
    return record["signal"] in (15, 9) or record["exit_code"] in (143, 137)


def read_pids(path: Path, n: int, timeout: float = 10) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists():
            pids = [int(p) for p in path.read_text().split()]
            if len(pids) >= n:
                return pids
        time.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {n} pids")


def test_exit_code_and_output_are_recorded_in_the_delivery_folder_and_signed(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    script = 'echo "out $FLEET_T"; echo err >&2; pwd > where.txt; exit 3'
    proc = d.run(["sh", "-c", script], env={"FLEET_T": "v1"})
    assert proc.returncode == 0, proc.stderr
    started = d.started(proc)
    assert started["pid"] > 1 and started["pgid"] == started["pid"] == started["sid"]
    ended = d.exit()
    assert ended["exit_code"] == 3 and ended["signal"] is None and ended["timed_out_by_launcher"] is False
    assert ended["ended_by"] == "exit"
    assert 0 <= ended["ran_s"] < 5  # measured by the launcher: a late reader still knows whether it ran in time
    assert (d.folder / "agent.stdout").read_bytes() == b"out v1\n"
    assert (d.folder / "agent.stderr").read_bytes() == b"err\n"
    assert ended["agent.stdout"] == {"size": 7, "sha256": hashlib.sha256(b"out v1\n").hexdigest()}
    assert (d.base / "workspace" / "where.txt").read_text().strip() == str(d.base / "workspace")
    # The delivery folder is private, and nothing of the launcher is in the attempt folder.
    assert (d.folder.stat().st_mode & 0o777) == 0o700
    assert sorted(p.name for p in d.base.iterdir()) == ["workspace"]
    assert not list(d.folder.glob("*.tmp"))
    # Its registry entry is gone once the agent ended.
    end = time.monotonic() + 5
    while list((d.fleet / "running").iterdir()) and time.monotonic() < end:
        time.sleep(0.05)
    assert not list((d.fleet / "running").iterdir())


def test_a_changed_record_fails_its_signature(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    d.run(["true"])
    record = d.exit()
    assert launcher.verify(d.key, record, d.token)
    assert not launcher.verify(d.key, {**record, "exit_code": 0 if record["exit_code"] else 1}, d.token)
    assert not launcher.verify(d.key, record, "another-token")
    assert not launcher.verify(secrets.token_hex(32), record, d.token)


def test_the_agent_gets_the_allow_list_and_what_it_is_given_never_the_launchers_environment(tmp_path: Path) -> None:
    # The launcher under a worker's environment, as on a local host: the broker's password must not reach the agent.
    d = delivery(tmp_path)
    host_env = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "USER": "qual", "LANG": "C.UTF-8", "LC_TIME": "C",
        "TZ": "UTC", "FLEET_BROKER_URL": "redis://:brokerpw@127.0.0.1:6379/0", "AWS_SECRET_ACCESS_KEY": "awspw",
        "MODEL_KEY": "modelpw", "PYTHONPATH": "/harness/src",
    }
    proc = d.run(["env"], env={"OWN_CONFIG": "/attempt/conf", "LANG": "C"}, pass_env=["MODEL_KEY", "NOT_SET_ON_HOST"],
                 host_env=host_env)
    assert proc.returncode == 0, proc.stderr
    d.exit()
    seen = dict(line.split("=", 1) for line in (d.folder / "agent.stdout").read_text().splitlines())
    seen.pop(launcher.MARKER_VAR)  # the delivery's marker: how the tree walk finds the agent's processes
    assert seen == {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "USER": "qual", "LC_TIME": "C", "TZ": "UTC",
        "LANG": "C",  # what the adapter sets wins over the host's
        "MODEL_KEY": "modelpw",  # named in pass_env: copied on the host, its value never in launch.json
        "OWN_CONFIG": "/attempt/conf",
    }


def test_prompt_text_never_meets_a_shell(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    evil = "$(touch pwned) `touch pwned2`; touch pwned3"
    d.run([sys.executable, "-c", "import sys; print(sys.argv[1])", evil])
    assert d.exit()["exit_code"] == 0
    assert (d.folder / "agent.stdout").read_text() == evil + "\n"
    assert not list((d.base / "workspace").glob("pwned*"))


def test_the_agent_gets_its_marker_but_not_the_delivery_folder_or_key(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    d.run(["sh", "-c", "env; echo \"$0 $*\""])
    d.exit()
    out = (d.folder / "agent.stdout").read_text()
    assert f"{launcher.MARKER_VAR}={d.marker}" in out
    assert d.key not in out and d.token not in out and str(d.folder) not in out


def test_missing_binary_gives_start_error(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    proc = d.run(["/nonexistent/agent-binary", "--x"])
    # The supervisor answers itself, after the foreground process ended: the exit status only says that the start was
    # handed over (docs/launcher.md); the answer line says what came of it.
    assert proc.returncode == 0
    error = json.loads(proc.stdout)["start_error"]
    assert "FileNotFoundError" in error and "agent-binary" in error
    assert not (d.folder / "started.json").exists()
    assert not (d.folder / "exit.json").exists()


def test_a_delivery_folder_is_never_reused(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    d.folder.mkdir(parents=True)
    proc = d.run(["true"])
    assert proc.returncode == 127 and "exists already" in json.loads(proc.stdout)["start_error"]


def test_deadline_kills_the_whole_tree_even_a_child_that_called_setsid(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    pids = tmp_path / "pids"
    setsid = f"import os,time; os.setsid(); open({str(pids)!r},'a').write('%d\\n' % os.getpid()); time.sleep(999)"
    script = f"sleep 60 & echo $! >> {pids}; {sys.executable} -c \"{setsid}\" & echo $$ >> {pids}; sleep 60"
    t0 = time.monotonic()
    proc = d.run(["sh", "-c", script], deadline_s=1)
    assert proc.returncode == 0, proc.stderr
    ended = d.exit()
    elapsed = time.monotonic() - t0
    assert 0.9 < elapsed < 8
    assert ended["timed_out_by_launcher"] is True and ended["ended_by"] == "deadline"
    # Ended by the launcher's TERM or KILL: a signal, or the shell's own status for one (sh exits 143 when its
    # foreground child dies of the same TERM first).
    assert stopped(ended), ended
    started = read_pids(pids, 3)
    wait_gone(started, 5)
    assert [p for p in started if not gone(p)] == [], "a process of the agent's tree survived the deadline"


def test_an_orphan_that_left_the_session_is_found_and_ended(tmp_path: Path) -> None:
    """A double fork + setsid (a daemon): re-parented (to the supervisor on Linux), still carries the marker."""
    d = delivery(tmp_path)
    pids = tmp_path / "pids"
    # The agent ends only once its daemon is in place (the supervisor sees the agent's end at once: a daemon still
    # forking then is ended before it writes its pid).
    daemon = (f"import os,time\nif os.fork():\n    while not os.path.exists({str(pids)!r}): time.sleep(0.01)\n"
              f"    os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\n"
              f"open({str(pids)!r} + '.tmp','a').write('%d\\n' % os.getpid())\nos.rename({str(pids)!r} + '.tmp', {str(pids)!r})\n"
              f"time.sleep(999)\n")
    proc = d.run([sys.executable, "-c", daemon], deadline_s=30)
    assert proc.returncode == 0
    (orphan,) = read_pids(pids, 1)
    ended = d.exit()  # the agent itself exited at once: its leftovers are ended at its end
    assert ended["exit_code"] == 0
    assert wait_gone([orphan], 5) < 5, "a daemonized child of the agent survived its end"


def test_a_daemon_still_forking_when_the_agent_ends_is_ended_too(tmp_path: Path) -> None:
    """The supervisor sees the agent's end at once (SIGCHLD): its tree walk then ran while the agent's child was
    still on its way to becoming a daemon, found nothing, and the daemon lived on (4 of 12 tries). Each try: the
    daemon is either ended before it wrote its pid, or ended after."""
    for n in range(8):
        d = delivery(tmp_path, name=f"attempt-{n}")
        pids = tmp_path / f"pids-{n}"
        daemon = (f"import os,time\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\n"
                  f"open({str(pids)!r},'a').write('%d\\n' % os.getpid())\ntime.sleep(999)\n")
        assert d.run([sys.executable, "-c", daemon], deadline_s=30).returncode == 0
        assert d.exit()["exit_code"] == 0
        time.sleep(0.3)  # a daemon the walk missed has written its pid by now
        left = [int(p) for p in pids.read_text().split()] if pids.exists() else []
        assert wait_gone(left, 5) < 5, f"try {n}: a daemonized child of the agent survived its end"


def test_an_agent_that_ends_on_sigterm_is_not_waited_for(tmp_path: Path) -> None:
    # SIGTERM ends `sleep` at once: the launcher must notice (reap it) instead of sitting out the whole
    # grace period and sending SIGKILL to a tree that is already dead.
    d = delivery(tmp_path)
    t0 = time.monotonic()
    d.run(["sleep", "60"], deadline_s=0.5)
    ended = d.exit()
    elapsed = time.monotonic() - t0
    assert ended["timed_out_by_launcher"] is True and ended["signal"] == 15
    assert elapsed < 3, f"took {elapsed:.1f} s"


def test_children_left_behind_are_ended_at_exit(tmp_path: Path) -> None:
    # The agent exits normally but leaves a server running in its group: the launcher ends it.
    d = delivery(tmp_path)
    script = "sleep 60 & echo $! > child.pid; exit 0"
    d.run(["sh", "-c", script])
    ended = d.exit()
    assert ended["exit_code"] == 0 and ended["timed_out_by_launcher"] is False
    child_pid = int((d.base / "workspace" / "child.pid").read_text())
    assert wait_gone([child_pid], 3) < 3


def test_kill_ends_the_tree_and_the_supervisor_records_the_exit(tmp_path: Path) -> None:
    """What the worker does on a timeout or a revoke: even a child in a session of its own ends."""
    d = delivery(tmp_path)
    pids = tmp_path / "pids"
    setsid = f"import os,time; os.setsid(); open({str(pids)!r},'a').write('%d\\n' % os.getpid()); time.sleep(999)"
    script = f"{sys.executable} -c \"{setsid}\" & echo $$ >> {pids}; sleep 300"
    started = d.started(d.run(["sh", "-c", script], deadline_s=300))
    agent_pids = read_pids(pids, 2)
    killed = d.call("kill", marker=d.marker,
                    pids={"agent": started["pid"], "sid": started["sid"], "launcher": started["launcher_pid"]})
    assert killed.returncode == 0, killed.stderr
    ended_pids = set(json.loads(killed.stdout)["ended"])
    assert set(agent_pids) | {started["pid"]} <= ended_pids and started["launcher_pid"] not in ended_pids
    assert all(gone(p) for p in ended_pids)
    ended = d.exit()
    assert ended["ended_by"] == "exit" and stopped(ended)
    assert wait_gone([started["launcher_pid"]], 5) < 5


def test_no_heartbeat_ends_the_tree_within_the_bound(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    pids = tmp_path / "pids"
    setsid = f"import os,time; os.setsid(); open({str(pids)!r},'a').write('%d\\n' % os.getpid()); time.sleep(999)"
    t0 = time.monotonic()
    d.run(["sh", "-c", f"{sys.executable} -c \"{setsid}\" & echo $$ >> {pids}; sleep 300"], heartbeat_s=1.5)
    agent_pids = read_pids(pids, 2)
    ended = d.exit()
    assert ended["ended_by"] == "heartbeat" and stopped(ended)
    assert wait_gone(agent_pids, 5) < 5
    assert 1.5 <= time.monotonic() - t0 < 1.5 + 6


def test_valid_heartbeats_keep_it_running_and_forged_ones_do_not(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    d.run(["sleep", "300"], heartbeat_s=1.5)
    stop = threading.Event()

    def beats() -> None:
        seq = 0
        while not stop.wait(0.3):
            seq += 1
            d.beat(seq)

    beater = threading.Thread(target=beats)
    beater.start()
    try:
        time.sleep(3.5)  # more than twice the bound: only the heartbeats keep it alive
        assert not (d.folder / "exit.json").exists(), d.log()
    finally:
        stop.set()
        beater.join()
    # What an agent could write: the last line again (a replay), or a line with a made-up MAC.
    last = (d.folder / "heartbeat").read_text()
    t_forge = time.monotonic()
    end = t_forge + 6
    n = 10**6
    while not (d.folder / "exit.json").exists() and time.monotonic() < end:
        (d.folder / "heartbeat").write_text(last if n % 2 else f"{n} {'0' * 64}")
        n += 1
        time.sleep(0.2)
    assert d.exit()["ended_by"] == "heartbeat"
    assert time.monotonic() - t_forge < 1.5 + 2


def test_reap_ends_an_earlier_delivery_of_the_same_attempt_and_leaves_other_live_ones(tmp_path: Path) -> None:
    ident = {"host": "h", "sweep_id": "s", "sweep_uid": "u", "cell": "c1", "attempt": 1, "slot": None}
    first = delivery(tmp_path, "a1", **ident)
    other = delivery(tmp_path, "a2", **{**ident, "cell": "c2"})  # another cell on a two-slot host: alive
    s1 = first.started(first.run(["sleep", "300"], heartbeat_s=0))
    s2 = other.started(other.run(["sleep", "300"], heartbeat_s=0))
    again = Delivery(first.work, first.base, entry=ident)  # the same attempt delivered again
    reaped = again.call("reap", entry=ident)
    assert reaped.returncode == 0, reaped.stderr
    (report,) = json.loads(reaped.stdout)["reaped"]
    assert report["token"] == first.token and report["why"] == "the same attempt delivered again"
    assert gone(s1["pid"]) and gone(s1["launcher_pid"]) or wait_gone([s1["pid"], s1["launcher_pid"]]) < 10
    assert first.exit()["ended_by"] == "superseded"  # the old worker, were it alive, learns why
    assert not gone(s2["pid"]), "reap ended another live delivery"
    other.call("kill", marker=other.marker, pids={"agent": s2["pid"], "sid": s2["sid"], "launcher": s2["launcher_pid"]})


def _start(d: Delivery, argv: list[str], files: dict[str, bytes], program: str | None = None,
           path: str | None = None) -> subprocess.CompletedProcess[bytes]:
    """The worker's start: reap, the attempt folder made afresh with its files, then run (one Python start)."""
    prepare = {"root": str(d.base), "dirs": [str(d.base / "workspace"), str(d.base / ".fleet")],
               "files": {str(d.base / rel): data for rel, data in files.items()},
               "program": program, "path": path}
    spec = {"argv": argv, "env": {}, "pass_env": [], "cwd": str(d.base / "workspace")}
    return d.call("run", key=d.key, marker=d.marker, spec=spec, deadline_s=30, heartbeat_s=0, entry=d.entry,
                  prepare=prepare)


def test_the_start_ends_an_earlier_delivery_then_makes_the_folder_afresh_and_says_the_facts(tmp_path: Path) -> None:
    ident = {"host": "h", "sweep_id": "s", "sweep_uid": "u", "cell": "c1", "attempt": 1, "slot": None}
    first = delivery(tmp_path, "a1", **ident)
    s1 = first.started(first.run(["sleep", "300"], heartbeat_s=0))
    (first.base / "workspace" / "left-by-the-first.txt").write_text("old")
    again = Delivery(first.work, first.base, entry=ident)  # the same attempt delivered again
    proc = _start(again, ["sh", "-c", "cat ../prompt.md > seen.txt"], {"prompt.md": b"rename \xc3\xa9 photos"})
    assert proc.returncode == 0, proc.stderr
    prepared = json.loads(proc.stdout.decode().splitlines()[0])["prepared"]
    (reaped,) = prepared["reaped"]
    assert reaped["token"] == first.token and reaped["why"] == "the same attempt delivered again"
    assert wait_gone([s1["pid"]], 10) < 10 and first.exit()["ended_by"] == "superseded"
    u = os.uname()
    assert prepared["uname"] == f"{u.sysname} {u.release} {u.machine}" and prepared["python"] == platform.python_version()
    assert isinstance(prepared["disk_free_mb"], int) and prepared["disk_free_mb"] > 0
    again.started(proc)
    assert again.exit()["exit_code"] == 0
    assert sorted(p.name for p in (again.base / "workspace").iterdir()) == ["seen.txt"]
    assert (again.base / "workspace" / "seen.txt").read_bytes() == "rename é photos".encode()


def test_the_start_answers_on_one_line_its_facts_beside_the_signed_start_record(tmp_path: Path) -> None:
    """The facts of the start go on the supervisor's answer line: one write to the channel, not two. A start error
    carries them too."""
    d = delivery(tmp_path)
    proc = _start(d, ["true"], {"prompt.md": b"p"})
    (line,) = proc.stdout.decode().splitlines()
    answer = json.loads(line)
    assert set(answer) == {"started", "prepared"} and launcher.verify(d.key, answer["started"], d.token)
    assert answer["prepared"]["python"] == platform.python_version()
    failed = delivery(tmp_path, "a2")
    (line,) = _start(failed, ["./no-such-program"], {"prompt.md": b"p"}).stdout.decode().splitlines()
    assert set(json.loads(line)) == {"start_error", "prepared"}


def test_a_supervisor_that_fails_before_its_answer_still_sends_the_starts_facts(tmp_path: Path) -> None:
    """The facts go on the supervisor's answer; one that fails before it (here its running entry cannot be written: a
    folder is in its place) still sends them, on a line of their own, and says why on stderr."""
    d = delivery(tmp_path)
    (d.fleet / "running" / f"{d.token}.json").mkdir(parents=True)
    proc = _start(d, ["true"], {"prompt.md": b"p"})
    (line,) = proc.stdout.decode().splitlines()
    assert set(json.loads(line)) == {"prepared"} and json.loads(line)["prepared"]["python"] == platform.python_version()
    assert "supervisor: IsADirectoryError" in proc.stderr.decode()


def _python_for_nobody() -> str | None:
    """An interpreter the unprivileged user ``nobody`` can run (this one may live under /root), or None."""
    for python in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(python, os.X_OK) and subprocess.run(
                [python, "-S", "-c", "pass"], user="nobody", capture_output=True).returncode == 0:
            return python
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start the launcher as nobody with a process limit")
def test_a_start_whose_supervisor_cannot_be_forked_says_so_with_the_facts() -> None:
    """A fork that fails (the host's process limit, here a real one: the launcher runs as nobody with RLIMIT_NPROC 1)
    is a start error with the facts, not a traceback: the worker took a start with no answer line for launcher code
    that did not load there, and started it again."""
    import resource

    python = _python_for_nobody()
    if python is None:
        pytest.skip("no interpreter the user nobody can run")
    top = Path(tempfile.mkdtemp(prefix="fleet-nproc-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        d = delivery(top)
        for path in [top, *top.rglob("*")]:
            os.chown(path, 65534, 65534)

        def as_nobody_with_one_process() -> None:
            resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)

        prepare = {"root": str(d.base), "dirs": [str(d.base / "workspace")],
                   "files": {str(d.base / "prompt.md"): b"p"}, "program": None, "path": None}
        spec = {"argv": ["true"], "env": {}, "pass_env": [], "cwd": str(d.base / "workspace")}
        body = {"verb": "run", "fleet": str(d.fleet), "token": d.token, "key": d.key, "marker": d.marker, "spec": spec,
                "deadline_s": 30, "heartbeat_s": 0, "entry": {}, "prepare": prepare}
        proc = subprocess.run([python, "-S", "-c", launcher.BOOT, "run", d.token], capture_output=True, cwd="/",
                              input=launcher.boot_stdin(SOURCE, body), timeout=60, preexec_fn=as_nobody_with_one_process)
        (line,) = proc.stdout.decode().splitlines()
        answer = json.loads(line)
        assert proc.returncode == 127, proc.stderr
        assert answer["start_error"] == "cannot fork the supervisor: Resource temporarily unavailable"
        assert answer["prepared"]["python"] and answer["prepared"]["uname"]
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_start_whose_agent_is_not_there_says_so_and_touches_nothing(tmp_path: Path) -> None:
    ident = {"host": "h", "sweep_id": "s", "sweep_uid": "u", "cell": "c1", "attempt": 1, "slot": None}
    first = delivery(tmp_path, "a1", **ident)
    s1 = first.started(first.run(["sleep", "300"], heartbeat_s=0))
    (first.base / "workspace" / "kept.txt").write_text("old")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    again = Delivery(first.work, first.base, entry=ident)
    proc = _start(again, ["my-agent"], {"prompt.md": b"x"}, program="my-agent", path=str(bin_dir))
    assert proc.returncode == 127 and json.loads(proc.stdout) == {"agent_missing": "my-agent"}
    assert (first.base / "workspace" / "kept.txt").exists() and not gone(s1["pid"]) and not again.folder.exists()
    (bin_dir / "my-agent").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "my-agent").chmod(0o755)
    proc = _start(again, [str(bin_dir / "my-agent")], {"prompt.md": b"x"}, program="my-agent", path=str(bin_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert again.exit()["exit_code"] == 0 and wait_gone([s1["pid"]], 10) < 10


def test_a_start_whose_folder_cannot_be_made_says_why_and_starts_nothing(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    (d.base.parent / "runs-file").write_text("a file where a folder must be")
    d.base = d.base.parent / "runs-file" / "attempt-1"
    proc = _start(d, ["touch", str(tmp_path / "ran")], {"prompt.md": b"x"})
    assert proc.returncode == 127
    answer = json.loads(proc.stdout)
    assert answer["prepare_error"].endswith("Not a directory") and "runs-file" in answer["prepare_error"], answer
    assert not d.folder.exists() and not (tmp_path / "ran").exists()


def test_an_attempt_folder_that_is_a_link_is_removed_and_not_followed(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the user's")
    shutil.rmtree(d.base)
    d.base.symlink_to(outside)
    proc = _start(d, ["true"], {"prompt.md": b"x"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (outside / "keep.txt").read_text() == "the user's" and not (outside / "prompt.md").exists()
    assert not d.base.is_symlink() and (d.base / "prompt.md").read_bytes() == b"x"


def test_reap_ends_an_earlier_holder_of_the_same_slot(tmp_path: Path) -> None:
    ident = {"host": "h", "sweep_id": "s", "sweep_uid": "u", "cell": "c1", "attempt": 1, "slot": "redis:k#0"}
    first = delivery(tmp_path, "a1", **ident)
    s1 = first.started(first.run(["sleep", "300"]))
    newer = delivery(tmp_path, "b1", **{**ident, "cell": "c2"})
    (report,) = json.loads(newer.call("reap", entry=newer.entry).stdout)["reaped"]
    assert report["why"] == "an earlier holder of slot redis:k#0 of h"
    assert wait_gone([s1["pid"]]) < 10


def test_reap_ends_the_tree_of_a_delivery_whose_launcher_is_gone(tmp_path: Path) -> None:
    ident = {"host": "h", "sweep_id": "s", "sweep_uid": "u", "cell": "c1", "attempt": 1, "slot": None}
    first = delivery(tmp_path, "a1", **ident)
    pids = tmp_path / "pids"
    setsid = f"import os,time; os.setsid(); open({str(pids)!r},'a').write('%d\\n' % os.getpid()); time.sleep(999)"
    s1 = first.started(first.run(["sh", "-c", f"{sys.executable} -c \"{setsid}\" & echo $$ >> {pids}; sleep 300"]))
    agent_pids = read_pids(pids, 2)
    os.kill(s1["launcher_pid"], signal.SIGKILL)  # the supervisor dies: its agent runs on, unsupervised
    wait_gone([s1["launcher_pid"]])
    assert not any(gone(p) for p in agent_pids)
    newer = delivery(tmp_path, "b1", **{**ident, "cell": "c2"})
    (report,) = json.loads(newer.call("reap", entry=newer.entry).stdout)["reaped"]
    assert report["why"] == "its launcher is gone: nobody supervises it"
    assert wait_gone(agent_pids, 10) < 10
    assert not (first.fleet / "running" / f"{first.token}.json").exists()


def test_unknown_verb_and_bad_usage(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    proc = d.call("fly")
    assert proc.returncode == 2 and b"unknown verb" in proc.stderr
    script = tmp_path / "launch.py"
    script.write_bytes(launcher.source())
    proc = subprocess.run([sys.executable, str(script), "x"], capture_output=True, timeout=10)
    assert proc.returncode == 2 and b"usage" in proc.stderr


def bundle(folder: Path) -> dict[tuple[bytes, str], bytes]:
    """The delivery's bundle, {(kind, name): data}."""
    frames = launcher.read_bundle((folder / launcher.BUNDLE).read_bytes(), 1 << 30)
    return {(kind, name): data for kind, name, data in frames}


def test_pack_writes_its_bundle_with_the_manifest_into_the_delivery_folder(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    d.folder.mkdir(parents=True)
    ws = d.base / "workspace"
    files = {
        "main.py": b"print('hi')\n",
        "src/lib/util.py": b"X = 1\n",
        "README.md": "caf\u00e9\n".encode(),
    }
    for rel, data in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(data)
    (ws / "node_modules" / "left-pad").mkdir(parents=True)
    (ws / "node_modules" / "left-pad" / "index.js").write_bytes(b"module.exports = 1\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    big = ws / "data" / "big.bin"
    big.parent.mkdir()
    with open(big, "wb") as f:
        f.truncate(8 * 1024 * 1024 + 1)  # one byte over the per-file cap (sparse: quick to make)
    os.symlink("/etc/hostname", ws / "link")

    proc = d.call("pack", root=str(d.base))
    assert proc.returncode == 0, proc.stderr
    packed = bundle(d.folder)
    assert json.loads(proc.stdout)["bundle"]["size"] == (d.folder / launcher.BUNDLE).stat().st_size
    manifest = json.loads(packed[launcher.FILE, "manifest.json"])
    by_path = {e["path"]: e for e in manifest}
    for rel, data in files.items():
        e = by_path[rel]
        assert e["packed"] is True and e["size"] == len(data)
        assert e["sha256"] == hashlib.sha256(data).hexdigest() == hashlib.sha256((ws / rel).read_bytes()).hexdigest()
    assert by_path["node_modules/"]["packed"] is False and by_path["node_modules/"]["why"] == "skipped folder"
    assert by_path[".git/"]["packed"] is False
    assert not any(p.startswith("node_modules/") and p != "node_modules/" for p in by_path)
    e = by_path["data/big.bin"]
    assert e["packed"] is False and e["why"] == "over the size cap" and e["size"] == 8 * 1024 * 1024 + 1
    assert e["sha256"] == hashlib.sha256(big.read_bytes()).hexdigest()
    assert by_path["link"]["packed"] is False and by_path["link"]["why"] == "not a regular file"

    assert {name: data for (kind, name), data in packed.items() if kind == launcher.WORKSPACE} == files
    assert not list(d.folder.glob("*.tmp"))
    assert sorted(p.name for p in d.base.iterdir()) == ["workspace"]


def test_launcher_needs_only_the_standard_library() -> None:
    source = SOURCE
    assert "import harness" not in source and "from harness" not in source and "from workers" not in source


def test_two_starts_of_the_same_attempt_at_once_leave_one_agent_running(tmp_path: Path) -> None:
    """Two deliveries of one attempt started at the same moment (a redelivery while the first worker lives): each
    start's reap looked before the other had written its running entry, so both agents ran in one attempt folder,
    or one start failed as the other's removal of the folder ran under it."""
    ident = {"host": "h", "sweep_id": "s", "sweep_uid": "u", "cell": "c1", "attempt": 1, "slot": None}
    for round_ in range(3):
        base = tmp_path / "work" / "runs" / f"r{round_}"
        base.mkdir(parents=True)
        pair = [Delivery(tmp_path / "work", base, entry={**ident, "cell": f"c{round_}"}) for _ in range(2)]
        answers: list[subprocess.CompletedProcess[bytes] | None] = [None, None]

        def start(i: int) -> None:
            # A large prompt: the start's own work (decode, write) takes a while, as a real one on a slow disk does.
            answers[i] = _start(pair[i], ["sleep", "60"], {"prompt.md": b"x" * 3_000_000})

        threads = [threading.Thread(target=start, args=(i,)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        try:
            for proc in answers:
                assert proc is not None and proc.returncode == 0, proc and (proc.stdout[-500:], proc.stderr[-500:])
            pids = [pair[i].started(answers[i])["pid"] for i in range(2)]  # type: ignore[arg-type]
            end = time.monotonic() + 15  # the superseded one is given its TERM grace by the later start's reap
            while all(not gone(p) for p in pids) and time.monotonic() < end:
                time.sleep(0.05)
            running = [p for p in pids if not gone(p)]
            assert len(running) == 1, f"round {round_}: {len(running)} agents of one attempt run"
            ended = pair[pids.index(next(p for p in pids if gone(p)))]
            assert ended.exit()["ended_by"] == "superseded"
        finally:
            for d in pair:
                d.call("kill", marker=d.marker, pids={})


SPARSE = [sys.executable, "-c", "open('huge.img', 'wb').truncate(32 << 30)"]
"""An agent that leaves a 32 GiB sparse file: made at once, but its pack hashes 32 GiB of zeros (25 s and more)."""


def _packing(d: Delivery, argv: list[str], **pack: object) -> dict:
    """Start ``argv`` with the supervisor to pack when it ends; returns the exit record, which says it packs."""
    spec = {"argv": argv, "env": {}, "pass_env": [], "cwd": str(d.base / "workspace")}
    proc = d.call("run", key=d.key, marker=d.marker, spec=spec, deadline_s=30, heartbeat_s=0, entry=d.entry,
                  pack={"root": str(d.base), "outputs": [], **pack})
    d.started(proc)
    record = d.exit()
    assert record["packing"] is True, record
    return record


def test_a_later_start_ends_a_supervisor_still_packing_at_once(tmp_path: Path) -> None:
    """A redelivery after the worker died mid-pack: the supervisor packed on through the reap's SIGTERM (its handler
    only noted it), so the new start waited the reap's 13 s for it and then killed it."""
    ident = {"host": "h", "sweep_id": "s", "sweep_uid": "u", "cell": "c1", "attempt": 1, "slot": None}
    first = delivery(tmp_path, "a1", **ident)
    _packing(first, SPARSE)
    again = Delivery(first.work, first.base, entry=ident)
    t0 = time.monotonic()
    proc = _start(again, ["true"], {"prompt.md": b"x"})
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (reaped,) = json.loads(proc.stdout.decode().splitlines()[0])["prepared"]["reaped"]
    assert reaped["token"] == first.token
    assert took < 8, f"the start waited {took:.1f} s for a supervisor that was packing"
    packed = json.loads((first.folder / "packed.json").read_text())
    assert launcher.verify(first.key, packed, first.token) and packed["ok"] is False, packed
    assert "stopped while packing" in first.log(), first.log()


def test_the_supervisors_pack_ends_at_its_bound(tmp_path: Path) -> None:
    """The worker stops waiting for the pack after its bound (workers.attempt.PACK_TIMEOUT_S): a supervisor that packed
    on, unbounded, held its running entry and a core of the host long after nobody would take its pack."""
    d = delivery(tmp_path)
    t0 = time.monotonic()
    _packing(d, SPARSE, limit_s=1)
    path = d.folder / "packed.json"
    while not path.exists() and time.monotonic() - t0 < 20:
        time.sleep(0.05)
    took = time.monotonic() - t0
    packed = json.loads(path.read_text())
    assert launcher.verify(d.key, packed, d.token) and packed["ok"] is False, packed
    assert took < 6, f"a pack bound of 1 s ended after {took:.1f} s"
    assert "the pack took over 1 s" in d.log(), d.log()


def test_the_pack_verb_refuses_an_attempt_folder_a_later_delivery_took(tmp_path: Path) -> None:
    """The worker packs with the verb when its supervisor did not (it was superseded mid-pack, or the agent timed
    out): by then a later delivery of the attempt may have made the folder afresh and run its own agent there, and the
    earlier delivery's result carried the later one's files as its own."""
    ident = {"host": "h", "sweep_id": "s", "sweep_uid": "u", "cell": "c1", "attempt": 1, "slot": None}
    first = delivery(tmp_path, "a1", **ident)
    first.started(first.run(["true"]))
    first.exit()
    (first.base / "workspace" / "mine.txt").write_text("the first delivery's")
    again = Delivery(first.work, first.base, entry={**ident, "root": str(first.base)})
    s2 = again.started(_start(again, ["sh", "-c", "echo later > theirs.txt; sleep 30"], {"prompt.md": b"x"}))
    try:
        proc = first.call("pack", root=str(first.base))
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert json.loads(proc.stdout)["superseded"].startswith("a later delivery runs in "), proc.stdout
        assert not (first.folder / launcher.BUNDLE).exists()
        # Told to stop by that delivery's reap (stop.json), as a supervisor superseded mid-pack is.
        (first.folder / "stop.json").write_text(json.dumps({"why": "the same attempt delivered again", "by": "t2"}))
        again.call("kill", marker=again.marker, pids={"agent": s2["pid"], "sid": s2["sid"],
                                                       "launcher": s2["launcher_pid"]})
        again.exit()
        proc = first.call("pack", root=str(first.base))
        assert proc.returncode == 3 and "the same attempt delivered again" in json.loads(proc.stdout)["superseded"]
    finally:
        again.call("kill", marker=again.marker, pids={})
    own = delivery(tmp_path, "a2", **ident)
    own.started(own.run(["true"]))
    own.exit()
    assert own.call("pack", root=str(own.base)).returncode == 0, "a delivery that still owns its folder packs it"
