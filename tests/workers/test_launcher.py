"""workers/launcher.py as the host runs it: a real subprocess in an attempt folder."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from tests.support import REPO

LAUNCHER = REPO / "workers" / "launcher.py"


def attempt_dir(tmp_path: Path, argv: list[str], deadline_s: float = 30, env: dict[str, str] | None = None) -> Path:
    base = tmp_path / "attempt-1"
    (base / "workspace").mkdir(parents=True)
    (base / ".fleet").mkdir()
    spec = {"argv": argv, "env": env or {}, "cwd": str(base / "workspace"), "deadline_s": deadline_s}
    (base / ".fleet" / "launch.json").write_text(json.dumps(spec), encoding="utf-8")
    return base


def launch(verb: str, base: Path, timeout: float = 20, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, str(LAUNCHER), verb, str(base)], capture_output=True, timeout=timeout,
                          env=env)


def read(base: Path, name: str) -> dict:
    return json.loads((base / ".fleet" / name).read_text(encoding="utf-8"))


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


def test_exit_code_and_output_are_recorded(tmp_path: Path) -> None:
    script = 'echo "out $FLEET_T"; echo err >&2; pwd > where.txt; exit 3'
    base = attempt_dir(tmp_path, ["sh", "-c", script], env={"FLEET_T": "v1"})
    proc = launch("run", base)
    assert proc.returncode == 0, proc.stderr
    started = read(base, "started.json")
    assert started["pid"] > 1 and started["pgid"] == started["pid"]
    ended = read(base, "exit.json")
    assert ended["exit_code"] == 3 and ended["signal"] is None and ended["timed_out_by_launcher"] is False
    assert (base / ".fleet" / "agent.stdout").read_bytes() == b"out v1\n"
    assert (base / ".fleet" / "agent.stderr").read_bytes() == b"err\n"
    assert (base / "workspace" / "where.txt").read_text().strip() == str(base / "workspace")
    assert not (base / ".fleet" / "start_error.json").exists()
    assert not list((base / ".fleet").glob("*.tmp"))


def test_the_agent_gets_the_allow_list_and_what_it_is_given_never_the_launchers_environment(tmp_path: Path) -> None:
    # The launcher under a worker's environment, as on a local host: the broker's password must not reach the agent.
    base = attempt_dir(tmp_path, ["env"], env={"OWN_CONFIG": "/attempt/conf", "LANG": "C"})
    spec = read(base, "launch.json")
    spec["pass_env"] = ["MODEL_KEY", "NOT_SET_ON_HOST"]
    (base / ".fleet" / "launch.json").write_text(json.dumps(spec), encoding="utf-8")
    host_env = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "USER": "qual", "LANG": "C.UTF-8", "LC_TIME": "C",
        "TZ": "UTC", "FLEET_BROKER_URL": "redis://:brokerpw@127.0.0.1:6379/0", "AWS_SECRET_ACCESS_KEY": "awspw",
        "MODEL_KEY": "modelpw", "PYTHONPATH": "/harness/src",
    }
    proc = launch("run", base, env=host_env)
    assert proc.returncode == 0, proc.stderr
    seen = dict(line.split("=", 1) for line in (base / ".fleet" / "agent.stdout").read_text().splitlines())
    assert seen == {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "USER": "qual", "LC_TIME": "C", "TZ": "UTC",
        "LANG": "C",  # what the adapter sets wins over the host's
        "MODEL_KEY": "modelpw",  # named in pass_env: copied on the host, its value never in launch.json
        "OWN_CONFIG": "/attempt/conf",
    }


def test_prompt_text_never_meets_a_shell(tmp_path: Path) -> None:
    evil = "$(touch pwned) `touch pwned2`; touch pwned3"
    base = attempt_dir(tmp_path, [sys.executable, "-c", "import sys; print(sys.argv[1])", evil])
    launch("run", base)
    assert read(base, "exit.json")["exit_code"] == 0
    assert (base / ".fleet" / "agent.stdout").read_text() == evil + "\n"
    assert not list((base / "workspace").glob("pwned*"))


def test_missing_binary_gives_start_error(tmp_path: Path) -> None:
    base = attempt_dir(tmp_path, ["/nonexistent/agent-binary", "--x"])
    proc = launch("run", base)
    assert proc.returncode == 127
    error = read(base, "start_error.json")["error"]
    assert "FileNotFoundError" in error and "agent-binary" in error
    assert not (base / ".fleet" / "started.json").exists()
    assert not (base / ".fleet" / "exit.json").exists()


def test_deadline_kills_the_whole_process_group(tmp_path: Path) -> None:
    script = "sleep 60 & echo $! > child.pid; sleep 60"
    base = attempt_dir(tmp_path, ["sh", "-c", script], deadline_s=1)
    t0 = time.monotonic()
    proc = launch("run", base, timeout=15)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert 0.9 < elapsed < 6
    ended = read(base, "exit.json")
    assert ended["timed_out_by_launcher"] is True
    assert ended["exit_code"] is None and ended["signal"] in (15, 9)
    agent_pid = read(base, "started.json")["pid"]
    child_pid = int((base / "workspace" / "child.pid").read_text())
    deadline = time.monotonic() + 3
    while not (gone(child_pid) and gone(agent_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(agent_pid)
    assert gone(child_pid), f"background child {child_pid} survived the launcher's kill"


def test_an_agent_that_ends_on_sigterm_is_not_waited_for(tmp_path: Path) -> None:
    # SIGTERM ends `sleep` at once: the launcher must notice (reap it) instead of sitting out the whole
    # grace period and sending SIGKILL to a group that is already dead.
    base = attempt_dir(tmp_path, ["sleep", "60"], deadline_s=0.5)
    t0 = time.monotonic()
    launch("run", base, timeout=15)
    elapsed = time.monotonic() - t0
    ended = read(base, "exit.json")
    assert ended["timed_out_by_launcher"] is True and ended["signal"] == 15
    assert elapsed < 2.5, f"took {elapsed:.1f} s"


def test_children_left_behind_are_ended_at_exit(tmp_path: Path) -> None:
    # The agent exits normally but leaves a server running in its group: the launcher ends it.
    script = "sleep 60 & echo $! > child.pid; exit 0"
    base = attempt_dir(tmp_path, ["sh", "-c", script])
    launch("run", base)
    ended = read(base, "exit.json")
    assert ended["exit_code"] == 0 and ended["timed_out_by_launcher"] is False
    child_pid = int((base / "workspace" / "child.pid").read_text())
    deadline = time.monotonic() + 3
    while not gone(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(child_pid)


def test_bad_usage(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(LAUNCHER), "fly", str(tmp_path)], capture_output=True, timeout=10)
    assert proc.returncode == 2 and b"usage" in proc.stderr


def test_pack_writes_tarball_and_manifest(tmp_path: Path) -> None:
    base = attempt_dir(tmp_path, ["true"])
    ws = base / "workspace"
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

    proc = launch("pack", base)
    assert proc.returncode == 0, proc.stderr
    manifest = read(base, "manifest.json")
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

    with tarfile.open(base / ".fleet" / "workspace.tar.gz", "r:gz") as tar:
        names = sorted(m.name for m in tar.getmembers())
        assert names == sorted(files)
        for rel, data in files.items():
            member = tar.extractfile(rel)
            assert member is not None and member.read() == data
    assert not list((base / ".fleet").glob("*.tmp"))


def test_launcher_needs_only_the_standard_library() -> None:
    source = LAUNCHER.read_text(encoding="utf-8")
    assert "import harness" not in source and "from harness" not in source and "from workers" not in source
