"""Real servers for integration tests: redis-server, OpenSSH sshd test hosts, Celery worker processes.

Each server listens on a free loopback port and is started once per test session (per xdist worker).
Hosts are separate ``sshd`` instances, each with its own generated ed25519 host key, pinned in the
inventory the tests write.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[2]
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
FLEET = [sys.executable, "-m", "harness.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def keygen(path: Path) -> str:
    """Generate an ed25519 key pair; return the public key line ('ssh-ed25519 AAAA...')."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2]) if path.suffix else " ".join(
        Path(str(path) + ".pub").read_text().split()[:2]
    )


class RedisServer:
    """A redis-server on a free loopback port; with ``password``, one that requires it (``--requirepass``).
    ``persistent``: an append-only file synced on every write, so a server killed and started again (same port,
    same folder) comes back with all its data, as a production Redis with AOF does after a crash or a restart."""

    def __init__(self, folder: Path, password: str | None = None, persistent: bool = False) -> None:
        self.folder = folder
        self.persistent = persistent
        self.port = free_port()
        self.password = password
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        # The password goes in a config file read on start, not on the command line, where `ps` shows it.
        conf = self.folder / "redis.conf"
        conf.write_text(f"requirepass {self.password}\n" if self.password else "")
        self.proc = subprocess.Popen(
            ["redis-server", str(conf), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             *(["--appendonly", "yes", "--appendfsync", "always"] if self.persistent else ["--appendonly", "no"]),
             "--dir", str(self.folder)],
            stdout=open(self.folder / "redis.log", "ab"), stderr=subprocess.STDOUT,
        )
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def kill(self) -> None:
        """Gone at once, as in a crash or a cut cable: clients see refused connections until ``start()``."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


@dataclass
class SSHHost:
    """One sshd on loopback: its own host key, root login with the test client key."""

    name: str
    folder: Path
    client_pub: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def workdir(self) -> Path:
        return self.folder / "work"

    @property
    def log(self) -> Path:
        return self.folder / "sshd.log"

    def setup(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.host_key_line = keygen(self.folder / "host_ed25519")
        (self.folder / "authorized_keys").write_text(self.client_pub + "\n")
        (self.folder / "sshd_config").write_text(textwrap.dedent(f"""\
            Port {self.port}
            ListenAddress 127.0.0.1
            HostKey {self.folder / 'host_ed25519'}
            PidFile {self.folder / 'sshd.pid'}
            AuthorizedKeysFile {self.folder / 'authorized_keys'}
            StrictModes no
            UsePAM no
            PermitRootLogin prohibit-password
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            Subsystem sftp internal-sftp
            MaxStartups 100
            MaxSessions 100
            LogLevel VERBOSE
            # Each host has a home of its own: `~` means something per host, and no login runs the
            # test machine's own shell start-up files (root's bashrc may be slow or hold locks).
            SetEnv HOME={self.folder / 'home'}
            """))
        (self.folder / "home").mkdir(exist_ok=True)

    def start(self) -> None:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-f", str(self.folder / "sshd_config"), "-E", str(self.log)], start_new_session=True
        )
        wait_port(self.port)

    def stop(self) -> None:
        """Stop the listener and every session it started (the host is gone)."""
        if self.proc is None:
            return
        kill_tree(self.proc.pid)
        self.proc.wait(10)
        self.proc = None

    def toml(self, identity: Path, *, host_key: str | None = None, slots: int = 1, agent: list[str] | None = None,
             port: int | None = None) -> str:
        agent = agent or ["sh", "-c", 'cp "$1" received.txt; echo done', "sh", "{prompt_file}"]
        argv = ", ".join(_toml_str(a) for a in agent)
        return textwrap.dedent(f"""\
            [hosts.{self.name}]
            address = "127.0.0.1"
            port = {port or self.port}
            user = "root"
            identity_file = {_toml_str(str(identity))}
            host_key = {_toml_str(host_key or self.host_key_line)}
            workdir = {_toml_str(str(self.workdir))}
            python = {_toml_str(sys.executable)}
            slots = {slots}
            connect_timeout = 5
            model = {{ base_url = "http://127.0.0.1:9/v1", id = "scripted-model", context = 32768, max_output = 8192 }}
            [hosts.{self.name}.agents.cmd]
            kind = "command"
            command = [{argv}]
            """)


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def children_of(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(p.name))
    return out


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    for child in children_of(pid):
        kill_tree(child, sig)
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Worker:
    """A real `fleet worker` process (Celery, prefork pool) consuming some hosts' queues."""

    def __init__(self, folder: Path, broker: str, namespace: str, hosts: list[str], inventory: Path,
                 concurrency: int | None = None, env: dict[str, str] | None = None) -> None:
        self.name = f"w{uuid.uuid4().hex[:6]}"
        self.log = folder / f"{self.name}.log"
        # broker "": the worker takes it from its environment's FLEET_BROKER_URL (given in ``env``).
        args = FLEET + ["worker", "--inventory", str(inventory), "--hosts", ",".join(hosts),
                        *(["--broker", broker] if broker else []), "--loglevel", "INFO", "--name", self.name]
        if concurrency:
            args += ["--concurrency", str(concurrency)]
        self.proc = subprocess.Popen(
            args, cwd=REPO, env=fleet_env(namespace, env), stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if " ready." in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"worker not ready: {self.log.read_text()[-2000:]}")

    def pool_children(self) -> list[int]:
        return children_of(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def fleet_env(namespace: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        FLEET_NAMESPACE=namespace,
        FLEET_RETRY_BACKOFF="0.5,1",
        FLEET_START_TIMEOUT="20",
        PYTHONPATH=str(REPO),
        COLUMNS="200",
    )
    env.pop("FLEET_BROKER_URL", None)
    env.update(extra or {})
    return env


def start_fleet(args: list[str], namespace: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a `fleet` command in the background (for tests that act while it runs)."""
    return subprocess.Popen(FLEET + args, cwd=REPO, env=fleet_env(namespace, env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run_fleet(args: list[str], namespace: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(FLEET + args, cwd=REPO, env=fleet_env(namespace, env), capture_output=True, text=True,
                          timeout=timeout)


def run_embedded(args: list[str], cwd: Path, home: Path | None = None, timeout: float = 900,
                 **extra: str) -> subprocess.CompletedProcess:
    """A `fleet` command as a user runs it on the embedded default: in ``cwd`` (so results go to
    ``cwd/runs``), with its own ``$HOME`` (the local host's workdir) and no FLEET_* settings but ``extra``."""
    return subprocess.run(FLEET + args, cwd=cwd, env=embedded_env(cwd, home, **extra), capture_output=True, text=True,
                          timeout=timeout)


def embedded_env(cwd: Path, home: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a `fleet` command on the embedded default (no FLEET_* settings but ``extra``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(HOME=str(home or cwd / "home"), PYTHONPATH=str(REPO), COLUMNS="200", **extra)
    return env


def start_embedded(args: list[str], cwd: Path, home: Path | None = None, **extra: str) -> subprocess.Popen:
    """A `fleet` command on the embedded default, left running (for tests that stop it)."""
    return subprocess.Popen(FLEET + args, cwd=cwd, env=embedded_env(cwd, home, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def assert_stored_once(runs: Path, sweep_id: str, cells: int) -> int:
    """Every cell's last attempt finished; every finished attempt is stored once (one folder, one index row per
    artifact) with each artifact's sha256 matching meta.json. Returns the number of finished attempts."""
    sweep = json.loads((runs / sweep_id / "sweep.json").read_text())
    assert len(sweep["cells"]) == cells
    db = sqlite3.connect(runs / "index.sqlite")
    finished = 0
    for cell in sweep["cells"]:
        attempts = sweep["attempts"][cell["id"]]
        assert len({a["attempt"] for a in attempts}) == len(attempts), attempts
        assert attempts[-1]["status"] == "finished", (cell["id"], attempts)
        for a in attempts:
            if a["status"] != "finished":
                continue
            finished += 1
            folder = runs / sweep_id / cell["id"] / f"attempt-{a['attempt']}"
            meta = json.loads((folder / "meta.json").read_text())
            assert meta["artifacts"], meta
            for art in meta["artifacts"]:
                assert hashlib.sha256((folder / art["name"]).read_bytes()).hexdigest() == art["sha256"], art["name"]
            rows = db.execute("SELECT count(*) FROM attempts WHERE sweep_id=? AND cell_id=? AND attempt=?",
                              (sweep_id, cell["id"], a["attempt"])).fetchone()[0]
            assert rows == 1
            (stdout,) = [x for x in meta["artifacts"] if x["name"] == "agent.stdout"]
            assert "done" in (folder / stdout["name"]).read_text()
    db.close()
    return finished


@contextmanager
def tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (e.g. "8m") mounted at ``mnt`` for the block, unmounted at the end whatever happens."""
    mnt.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
