"""The launcher's start as lean as the path of every attempt needs it (issue 14): no heavy module imported, code the
host need not compile, and the small standard-library parts that stand in for json, hmac, shutil and subprocess doing
exactly what those do. Each runs the launcher as the host does (tests/workers/host/test_launcher.py's Delivery)."""

from __future__ import annotations

import hmac
import json
import math
import os
import signal
import subprocess
import sys
import time
import zlib
from hashlib import sha256
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workers.host.test_launcher import SOURCE, Delivery, _start, delivery
from workers.host import launcher

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
    | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_dumps_and_loads_are_the_json_modules(value: object) -> None:
    assert launcher.dumps(value) == json.dumps(value)
    assert launcher.dumps(value, canonical=True) == json.dumps(value, sort_keys=True, separators=(",", ":"))
    assert launcher.loads(json.dumps(value)) == value
    assert launcher.loads(json.dumps(value, indent=2).encode()) == value


def test_loads_reads_the_constants_json_writes_and_refuses_what_json_refuses() -> None:
    assert math.isinf(launcher.loads("Infinity")) and math.isnan(launcher.loads(" NaN "))
    for bad in ("", "{", "[1,]", '{"a": 1} x', "'a'", "tru", '"\\x"', b"\xff"):
        with pytest.raises(ValueError):
            launcher.loads(bad)
        with pytest.raises(ValueError):
            json.loads(bad)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=300))
def test_hmac_sha256_is_the_hmac_modules(key: bytes, msg: bytes) -> None:
    assert launcher.hmac_sha256(key, msg) == hmac.new(key, msg, sha256).hexdigest()


def test_a_record_whose_mac_is_not_ascii_is_not_taken_and_raises_nothing() -> None:
    """compare_digest refuses a str with other than ASCII in it (TypeError): a record an agent forged with such a mac
    made the worker's check raise instead of saying no."""
    key, token = "ab" * 32, "0" * 24
    record = launcher.sign(key, {"token": token, "exit_code": 0})
    assert launcher.verify(key, record, token)
    assert not launcher.verify(key, {**record, "mac": "\u00e9" * 64}, token)
    assert not launcher.verify(key, {**record, "mac": record["mac"][:-1] + "\u00e9"}, token)


def _imports(proc: subprocess.CompletedProcess[bytes]) -> set[str]:
    """The modules a ``python -X importtime`` run imported, by the lines it wrote on stderr."""
    return {line.split("|")[-1].strip() for line in proc.stderr.decode(errors="replace").splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


def test_a_start_imports_none_of_the_heavy_modules(tmp_path: Path) -> None:
    """Each of these cost a start milliseconds on the path of every attempt (json and subprocess pull in re, signal
    enum, hashlib OpenSSL, ctypes its classes, tarfile most of them): a start needs none."""
    d = delivery(tmp_path)
    spec = {"argv": ["true"], "env": {}, "pass_env": [], "cwd": str(d.base / "workspace")}
    body = {"verb": "run", "fleet": str(d.fleet), "token": d.token, "key": d.key, "marker": d.marker, "spec": spec,
            "deadline_s": 30, "heartbeat_s": 0, "entry": {}, "pack": {"root": str(d.base), "outputs": []},
            "prepare": {"root": str(d.base), "dirs": [str(d.base / "workspace")], "files": {str(d.base / "p"): b"x"},
                        "program": None, "path": None}}
    proc = subprocess.run([sys.executable, "-S", "-X", "importtime", "-c", launcher.BOOT, "run", d.token],
                          input=launcher.boot_stdin(SOURCE, body), capture_output=True, timeout=30, cwd="/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    d.started(proc)
    heavy = {"json", "re", "enum", "subprocess", "shutil", "hashlib", "hmac", "signal", "ctypes", "tarfile", "gzip",
             "threading", "selectors", "base64", "struct"}
    # os (with posixpath and _collections_abc) was 1.2 ms of every start under -S: the launcher runs on posix.
    heavy |= {"os", "posixpath", "_collections_abc", "stat"}
    assert _imports(proc) & heavy == set()
    d.exit()
    assert launcher.verify(d.key, _packed(d), d.token)
    # ... and neither did the supervisor, which packed: its imports went to its log.
    assert _imports_in_log(d) & heavy == set()


def _packed(d: Delivery) -> dict:
    """The supervisor's packed.json, once it is there (it packs after exit.json)."""
    path = d.folder / "packed.json"
    end = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < end, f"no packed.json: {d.log()}"
        time.sleep(0.02)
    return json.loads(path.read_text())


def _imports_in_log(d: Delivery) -> set[str]:
    return {line.split("|")[-1].strip() for line in d.log().splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


def _run_answers(d: Delivery, compiled: tuple[str, bytes] | None) -> list[dict]:
    spec = {"argv": ["true"], "env": {}, "pass_env": [], "cwd": str(d.base / "workspace")}
    body = {"verb": "run", "fleet": str(d.fleet), "token": d.token, "key": d.key, "marker": d.marker, "spec": spec,
            "deadline_s": 30, "heartbeat_s": 0, "entry": {}, "want_code": True}
    proc = subprocess.run([sys.executable, "-S", "-c", launcher.BOOT, "run", d.token], capture_output=True, timeout=30,
                          input=launcher.boot_stdin(SOURCE, body, compiled), cwd="/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def test_a_host_of_another_interpreter_compiles_the_source_once_and_gives_its_code_back(tmp_path: Path) -> None:
    """Code compiled here loads only in an interpreter of this very version: a host of another one compiles the source
    (10 to 16 ms of a start), and its first start gives its own code back for the next ones."""
    import base64

    first = delivery(tmp_path, "a1")
    answers = _run_answers(first, ("Python 0.0 (another)", b"not code at all"))
    compiled = answers[0]["compiled"]
    assert compiled["tag"] == sys.version and launcher.verify(first.key, answers[-1]["started"], first.token)
    again = delivery(tmp_path, "a2")
    answers = _run_answers(again, (compiled["tag"], zlib.decompress(base64.b64decode(compiled["code"]))))
    assert [list(a) for a in answers] == [["started"]], "the code given back was compiled again"
    # This worker's own interpreter is the host's here: its own code runs, and nothing comes back.
    assert [list(a) for a in _run_answers(delivery(tmp_path, "a3"), None)] == [["started"]]


def test_boot_request_reads_back_what_boot_stdin_wrote() -> None:
    body = {"verb": "kill", "token": "t", "files": {"/a": b"\x00\xff"}, "n": [1, 2.5, None, True]}
    stdin = launcher.boot_stdin(SOURCE, body)
    assert launcher.boot_request(stdin) == body
    line, _, rest = stdin.partition(b"\n")
    assert len(rest) == int(line)


def test_rmtree_removes_links_never_what_they_point_at_and_any_depth(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious.txt").write_text("keep me")
    top = tmp_path / "top"
    deep = top
    for i in range(300):  # deeper than the interpreter's recursion would go with a frame per folder and room to spare
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    os.symlink(keep, top / "to-keep")
    os.symlink(keep / "precious.txt", deep / "to-file")
    os.mkfifo(top / "fifo")
    launcher._rmtree(str(top))
    assert not top.exists() and (keep / "precious.txt").read_text() == "keep me"
    link = tmp_path / "link"
    os.symlink(keep, link)
    launcher._rmtree(str(link))  # a link in the folder's place: the link goes, not its target's files
    assert not os.path.lexists(link) and (keep / "precious.txt").exists()
    launcher._rmtree(str(tmp_path / "never-there"))
    locked = tmp_path / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner" / "f").write_text("x")
    os.chmod(locked / "inner", 0o500)
    if os.geteuid() != 0:  # root removes it anyway
        with pytest.raises(OSError):
            launcher._rmtree(str(locked))
    os.chmod(locked / "inner", 0o700)


def test_which_finds_what_command_v_finds(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tool").write_text("#!/bin/sh\n")
    (bin_dir / "tool").chmod(0o755)
    (bin_dir / "plain").write_text("not executable\n")
    (bin_dir / "folder").mkdir()
    path = f"/nonexistent:{bin_dir}"
    assert launcher._which("tool", path) == str(bin_dir / "tool")
    assert launcher._which("plain", path) is None and launcher._which("folder", path) is None
    assert launcher._which(str(bin_dir / "tool"), "") == str(bin_dir / "tool")
    assert launcher._which("sh", os.defpath) is not None


AGENT_REPORT = ("import json,os,sys;json.dump({'fds':sorted(int(n) for n in os.listdir('/proc/self/fd')),"
                "'sid':os.getsid(0)==os.getpid(),'env':dict(os.environ),'cwd':os.getcwd()},sys.stdout)")
"""What the agent says of itself (a Python program: it sets SIGPIPE ignored for itself as it starts, so what it was
given is read by `cat` of its own status, before)."""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="Linux /proc")
def test_the_agent_is_started_as_popen_would_start_it(tmp_path: Path) -> None:
    """fork and exec by hand instead of subprocess (14 ms of imports a start): a session of its own, exactly the
    environment given, SIGPIPE default again, the cwd, and no fd beyond 0-2, not even one the launcher was given."""
    d = delivery(tmp_path)
    r, w = os.pipe()
    os.set_inheritable(w, True)
    try:
        argv = ["sh", "-c", 'cat /proc/self/status > ../status.txt; exec "$0" -S -c "$1"', sys.executable, AGENT_REPORT]
        spec = {"argv": argv, "env": {"ONLY": "this"}, "pass_env": [],
                "cwd": str(d.base / "workspace")}
        body = {"verb": "run", "fleet": str(d.fleet), "token": d.token, "key": d.key, "marker": d.marker,
                "spec": spec, "deadline_s": 30, "heartbeat_s": 0, "entry": {}}
        proc = subprocess.run([sys.executable, "-S", "-c", launcher.BOOT, "run", d.token], capture_output=True,
                              input=launcher.boot_stdin(SOURCE, body), timeout=30, cwd="/", pass_fds=(w,))
    finally:
        os.close(r)
        os.close(w)
    d.started(proc)
    assert d.exit()["exit_code"] == 0, d.log()
    seen = json.loads((d.folder / "agent.stdout").read_text())
    assert seen["fds"][:3] == [0, 1, 2] and len(seen["fds"]) == 4, seen["fds"]  # the fourth: the listing's own
    assert seen["sid"] and seen["cwd"] == str(d.base / "workspace")
    env = {k: v for k, v in seen["env"].items() if k not in (launcher.MARKER_VAR, "PWD")}  # sh sets PWD
    assert env == launcher.agent_env(dict(os.environ), spec) and env["ONLY"] == "this", env
    ignored = next(line for line in (d.base / "status.txt").read_text().splitlines() if line.startswith("SigIgn:"))
    assert int(ignored.split()[1], 16) & (1 << (signal.SIGPIPE - 1)) == 0, "SIGPIPE stayed ignored for the agent"
    assert seen["env"][launcher.MARKER_VAR] == d.marker


def test_an_agent_that_cannot_start_says_why_as_popen_did(tmp_path: Path) -> None:
    d2 = delivery(tmp_path, "a2")
    spec_missing_cwd = {"argv": ["true"], "env": {}, "pass_env": [], "cwd": str(tmp_path / "no-such-folder")}
    proc = d2.call("run", key=d2.key, marker=d2.marker, spec=spec_missing_cwd, deadline_s=30, heartbeat_s=0, entry={})
    assert proc.returncode == 0  # the start was the supervisor's, and its answer says what came of it
    error = json.loads(proc.stdout)["start_error"]
    assert error.startswith("FileNotFoundError: ") and "no-such-folder" in error, error
    d3 = delivery(tmp_path, "a3")
    proc = d3.run(["no-such-agent-program"], env={"PATH": str(tmp_path)})
    assert json.loads(proc.stdout)["start_error"] == ("FileNotFoundError: [Errno 2] No such file or directory: "
                                                      "'no-such-agent-program'")


def test_a_call_removes_the_delivery_folders_it_is_told_to_forget_and_nothing_else(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    deliveries = d.fleet / "deliveries"
    done, running, named = (deliveries / t for t in ("a" * 24, "b" * 24, "not-a-token"))
    for folder in (done, running, named):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "f").write_text("x")
    (d.fleet / "running").mkdir(parents=True)
    live = subprocess.Popen(["sh", "-c", "sleep 60", "launcher", "run", "b" * 24])  # its supervisor, as far as it tells
    (d.fleet / "running" / f"{'b' * 24}.json").write_text(json.dumps({"token": "b" * 24, "launcher_pid": live.pid}))
    outside = tmp_path / "outside"
    outside.mkdir()
    forget = [str(done), str(running), str(named), str(outside), str(deliveries / ".." / "deliveries" / ("c" * 24)),
              str(deliveries / d.token), 7]
    try:
        proc = d.call("kill", marker="", pids={}, forget=forget)
    finally:
        live.kill()
        live.wait()
    assert proc.returncode == 0, proc.stderr
    assert not done.exists() and running.exists() and named.exists() and outside.exists()


def _bundle(raw: bytes) -> bytes:
    return launcher.BUNDLE_MAGIC + zlib.compress(raw)


def test_read_bundle_takes_only_a_whole_bundle_within_its_limit() -> None:
    frame = launcher.WORKSPACE + (3).to_bytes(4, "big") + (2).to_bytes(8, "big") + b"a/b" + b"hi"
    assert launcher.read_bundle(_bundle(frame), 100) == [(launcher.WORKSPACE, "a/b", b"hi")]
    raw_name = launcher.OUTPUT + (1).to_bytes(4, "big") + (0).to_bytes(8, "big") + b"\xff"
    assert launcher.read_bundle(_bundle(raw_name), 100) == [(launcher.OUTPUT, "\udcff", b"")]
    bad = [
        b"not a bundle",
        _bundle(frame)[:-3],  # cut short
        _bundle(frame) + b"x",  # bytes after its end
        _bundle(frame[:-1]),  # a frame cut short
        _bundle(b"x" + frame[1:]),  # no such kind
        _bundle(frame[:5] + (10 ** 12).to_bytes(8, "big") + frame[13:]),  # a length past the end
        launcher.BUNDLE_MAGIC + b"\x00garbage",
    ]
    for data in bad:
        with pytest.raises(ValueError):
            launcher.read_bundle(data, 100)
    with pytest.raises(ValueError, match="over 10 bytes"):
        launcher.read_bundle(_bundle(frame + frame), 10)


def test_the_supervisors_bundle_is_what_packed_json_signs(tmp_path: Path) -> None:
    d = delivery(tmp_path)
    (d.base / "workspace" / "made.txt").write_text("made\n")
    spec = {"argv": ["sh", "-c", "echo out; echo err >&2"], "env": {}, "pass_env": [],
            "cwd": str(d.base / "workspace")}
    proc = d.call("run", key=d.key, marker=d.marker, spec=spec, deadline_s=30, heartbeat_s=0, entry={},
                  pack={"root": str(d.base), "outputs": ["answer.txt"]})
    d.started(proc)
    d.exit()
    packed = _packed(d)
    assert launcher.verify(d.key, packed, d.token) and packed["ok"] is True
    data = (d.folder / launcher.BUNDLE).read_bytes()
    assert packed["bundle"] == {"size": len(data), "sha256": sha256(data).hexdigest()}
    frames = {(kind, name): body for kind, name, body in launcher.read_bundle(data, 1 << 30)}
    assert frames[launcher.FILE, "agent.stdout"] == b"out\n" and frames[launcher.FILE, "agent.stderr"] == b"err\n"
    assert frames[launcher.WORKSPACE, "made.txt"] == b"made\n"
    manifest = json.loads(frames[launcher.FILE, "manifest.json"])
    assert manifest == [{"path": "made.txt", "size": 5, "sha256": sha256(b"made\n").hexdigest(), "packed": True,
                         "why": ""}]
    streams = json.loads(frames[launcher.FILE, "streams.json"])
    assert streams["agent.stdout"] == {"size": 4, "sha256": sha256(b"out\n").hexdigest(), "kept": 4}


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="Linux /proc")
@pytest.mark.parametrize("spawn", [launcher._posix_spawn, launcher._fork_exec])
def test_both_ways_of_starting_an_agent_give_it_the_same(spawn: object, tmp_path: Path) -> None:
    """posix_spawn where the host can make a session with it, fork and exec where not: the same agent either way."""
    assert callable(spawn)
    report = "ls /proc/self/fd > fds; grep SigIgn /proc/self/status > ignored; pwd > cwd; env > env; ps -o sid= -p $$ > sid"
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    r, w = os.pipe()
    os.set_inheritable(w, True)
    here = os.getcwd()
    try:
        pid = spawn(["sh", "-c", report], str(tmp_path), {"PATH": os.defpath, "ONLY": "this"}, out, out)
        _, status = os.waitpid(pid, 0)
    finally:
        os.chdir(here)
        for fd in (out, r, w):
            os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, (tmp_path / "out").read_text()
    assert (tmp_path / "cwd").read_text().strip() == str(tmp_path)
    fds = sorted(int(n) for n in (tmp_path / "fds").read_text().split())
    assert fds[:3] == [0, 1, 2] and len(fds) <= 4, fds  # the fourth: the listing's own
    assert int((tmp_path / "ignored").read_text().split()[1], 16) & (1 << (signal.SIGPIPE - 1)) == 0
    env = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    assert {k: v for k, v in env.items() if k not in ("PWD", "SHLVL", "_")} == {"PATH": os.defpath, "ONLY": "this"}
    assert int((tmp_path / "sid").read_text()) == pid
    try:
        with pytest.raises(launcher.StartError) as missing:
            spawn(["no-such-agent-program"], str(tmp_path), {"PATH": str(tmp_path)}, 1, 2)
        assert (missing.value.kind, str(missing.value)) == (
            "FileNotFoundError", "[Errno 2] No such file or directory: 'no-such-agent-program'")
        with pytest.raises(launcher.StartError) as no_cwd:
            spawn(["true"], str(tmp_path / "gone"), {"PATH": os.defpath}, 1, 2)
        assert no_cwd.value.kind == "FileNotFoundError" and str(tmp_path / "gone") in str(no_cwd.value)
    finally:
        os.chdir(here)  # the supervisor works from /, and the spawn leaves it there


def test_the_hosts_wait_blocks_on_the_wake_fifo_and_starts_no_process_at_intervals(tmp_path: Path) -> None:
    """The poll on the host waits for the supervisor's wake line (launcher.WAKE): it returns when the agent ended,
    with exit.json and packed.json, and in the meantime starts no `sleep` every 10 or 50 ms (as it did: a process a
    look, per waiting host); the only sleep is its timer's."""
    from workers.attempt import poll_script

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sleeps"
    (bin_dir / "sleep").write_text(f'#!/bin/sh\necho "$1" >> {calls}\nexec /bin/sleep "$1"\n')
    (bin_dir / "sleep").chmod(0o755)
    d = delivery(tmp_path)
    spec = {"argv": ["/bin/sleep", "0.6"], "env": {}, "pass_env": [], "cwd": str(d.base / "workspace")}
    started = d.started(d.call("run", key=d.key, marker=d.marker, spec=spec, deadline_s=30, heartbeat_s=0, entry={},
                               pack={"root": str(d.base), "outputs": []}))
    assert (d.folder / launcher.WAKE).is_fifo()
    script = poll_script(str(d.folder), "1-x", 8.0, started["launcher_pid"])
    t0 = time.monotonic()
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    took = time.monotonic() - t0
    exit_line, packed_line = out.stdout.strip().splitlines()
    assert launcher.verify(d.key, json.loads(exit_line), d.token) and json.loads(exit_line)["packing"] is True
    assert launcher.verify(d.key, json.loads(packed_line), d.token)
    assert took < 6, f"a poll of an 8 s window returned {took:.1f} s after it began, for an agent of 0.6 s"
    assert len(calls.read_text().split()) <= 2, calls.read_text()  # the timers of the two waits, at most


def _interpreters() -> list[str]:
    """Pythons 3.8+ of other versions on this machine (pyenv's, or on PATH): what a fleet's hosts run."""
    import glob
    import shutil

    found: dict[str, str] = {}
    for minor in range(8, 15):
        paths = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/python3.{minor}")))
        path = paths[-1] if paths else shutil.which(f"python3.{minor}")
        if path and f"{sys.version_info[0]}.{sys.version_info[1]}" != f"3.{minor}":
            found[f"3.{minor}"] = path
    return [found[k] for k in sorted(found)]


@pytest.mark.parametrize("python", _interpreters() or [pytest.param("", marks=pytest.mark.skip(
    reason="no Python of another version on this machine"))])
def test_a_host_of_any_python_from_3_8_starts_supervises_and_packs(python: str, tmp_path: Path) -> None:
    """The launcher on a host whose Python is not the worker's: the first start compiles the source and gives its code
    back, the next runs that code; each starts the agent, signs its records and packs its bundle."""
    import base64

    d = delivery(tmp_path, "a1")
    spec = {"argv": ["sh", "-c", "echo hi; echo made > made.txt"], "env": {}, "pass_env": [],
            "cwd": str(d.base / "workspace")}
    body = {"verb": "run", "fleet": str(d.fleet), "token": d.token, "key": d.key, "marker": d.marker, "spec": spec,
            "deadline_s": 30, "heartbeat_s": 0, "entry": {}, "want_code": True,
            "pack": {"root": str(d.base), "outputs": []}}
    proc = subprocess.run([python, "-S", "-c", launcher.BOOT, "run", d.token], input=launcher.boot_stdin(SOURCE, body),
                          capture_output=True, timeout=60, cwd="/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    compiled = answers[0]["compiled"]
    assert compiled["tag"] != sys.version and launcher.verify(d.key, answers[-1]["started"], d.token)
    assert d.exit()["exit_code"] == 0 and _packed(d)["ok"] is True
    frames = {(k, n): data for k, n, data in launcher.read_bundle((d.folder / launcher.BUNDLE).read_bytes(), 1 << 30)}
    assert (frames[launcher.FILE, "agent.stdout"], frames[launcher.WORKSPACE, "made.txt"]) == (b"hi\n", b"made\n")
    again = delivery(tmp_path, "a2")
    body.update(token=again.token, key=again.key, marker=again.marker, spec={**spec, "cwd": str(again.base / "workspace")},
                pack={"root": str(again.base), "outputs": []})
    proc = subprocess.run([python, "-S", "-c", launcher.BOOT, "run", again.token], capture_output=True, timeout=60,
                          cwd="/", input=launcher.boot_stdin(SOURCE, body, (compiled["tag"], zlib.decompress(
                              base64.b64decode(compiled["code"])))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [list(json.loads(line)) for line in proc.stdout.decode().splitlines()] == [["started"]]
    assert again.exit()["exit_code"] == 0 and _packed(again)["ok"] is True


def _poll(folder: Path, window: float, pid: int, shell: str = "sh") -> tuple[float, str]:
    from workers.attempt import poll_script

    t0 = time.monotonic()
    out = subprocess.run([shell, "-c", poll_script(str(folder), "1-x", window, pid)], capture_output=True, text=True,
                         timeout=30)
    return time.monotonic() - t0, out.stdout


@pytest.mark.parametrize("shell", ["sh", "bash"])  # sh: dash here; bash as bash reads on after a trap
@pytest.mark.parametrize("agent", ["half a line", "a reader", "a flood"])
def test_an_agent_at_the_wake_fifo_never_holds_the_hosts_wait_past_its_window(tmp_path: Path, shell: str,
                                                                              agent: str) -> None:
    """Half a line written into `wake` (the timer's line was glued to it), or a reader taking the lines out: each held
    the poll until the transport's deadline, which closed the SSH connection (every attempt on it lost), for an agent
    that then finished well. A flood kept a poll reading at a core's full speed. The window's end is a signal now, and
    a wait reads a bounded number of lines."""
    folder = tmp_path / "delivery"
    folder.mkdir()
    os.mkfifo(folder / launcher.WAKE)
    live = subprocess.Popen(["sleep", "60"])  # the supervisor, as far as the poll can tell
    keep = os.open(folder / launcher.WAKE, os.O_RDWR | os.O_NONBLOCK)
    other: subprocess.Popen[bytes] | None = None
    try:
        if agent == "half a line":
            os.write(keep, b"a")
        elif agent == "a reader":
            other = subprocess.Popen(["sh", "-c", f"exec cat < {folder / launcher.WAKE} > /dev/null"])
        else:
            other = subprocess.Popen(["sh", "-c", f"exec yes > {folder / launcher.WAKE}"])
        time.sleep(0.2)
        took, out = _poll(folder, 1.0, live.pid, shell)
        assert out == "" and took < 5, f"a 1 s window took {took:.1f} s with {agent} at the FIFO"
        (folder / "exit.json").write_text('{"token": "t"}')
        took, out = _poll(folder, 5.0, live.pid, shell)
        assert out == '{"token": "t"}\n' and took < 4, (took, out)
    finally:
        for p in (live, other):
            if p is not None:
                p.kill()
                p.wait()
        os.close(keep)


def test_a_delivery_whose_supervisor_died_is_forgotten_with_its_running_entry(tmp_path: Path) -> None:
    """A supervisor killed (the OOM killer, a person) leaves its running entry: the folder, its bundle with it, was
    kept until the weekly sweep, for the next call skipped every folder listed as running."""
    d = delivery(tmp_path)
    dead, alive = "d" * 24, "a" * 24
    for token in (dead, alive):
        (d.fleet / "deliveries" / token).mkdir(parents=True)
        (d.fleet / "deliveries" / token / "bundle").write_bytes(b"x" * 1000)
    (d.fleet / "running").mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (d.fleet / "running" / f"{dead}.json").write_text(json.dumps({"token": dead, "launcher_pid": gone.pid}))
    # A live supervisor of that token: its command line names " run TOKEN", as the launcher's does.
    live = subprocess.Popen(["sh", "-c", "sleep 60", "launcher", "run", alive])
    (d.fleet / "running" / f"{alive}.json").write_text(json.dumps({"token": alive, "launcher_pid": live.pid}))
    try:
        proc = d.call("kill", marker="", pids={}, forget=[str(d.fleet / "deliveries" / t) for t in (dead, alive)])
        assert proc.returncode == 0, proc.stderr
        assert not (d.fleet / "deliveries" / dead).exists() and not (d.fleet / "running" / f"{dead}.json").exists()
        assert (d.fleet / "deliveries" / alive).exists() and (d.fleet / "running" / f"{alive}.json").exists()
    finally:
        live.kill()
        live.wait()


def test_the_agent_is_looked_up_on_its_path_as_execvpe_looks(tmp_path: Path) -> None:
    """posix_spawn was given the first candidate only, looked up from / rather than the agent's cwd: a relative or
    empty PATH entry found nothing, and a stale shim first on PATH hid the real program after it (Popen finds each)."""
    cwd = tmp_path / "ws"
    (cwd / "bin").mkdir(parents=True)
    stale = tmp_path / "stale"
    stale.mkdir()
    for folder, body in ((cwd, "#!/bin/sh\necho here\n"), (cwd / "bin", "#!/bin/sh\necho bin\n"),
                         (stale, "#!/no/such/interpreter\n")):
        (folder / "tool").write_text(body)
        (folder / "tool").chmod(0o755)
    (tmp_path / "plain").write_text("#!/bin/sh\n")
    here = os.getcwd()
    try:
        for n, (path, said) in enumerate(((".:/usr/bin:/bin", "here"), ("/usr/bin:/bin:", "here"), ("bin:/bin", "bin"),
                                          (f"{stale}:{cwd}", "here"))):
            out = os.open(tmp_path / f"out{n}", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                pid = launcher._spawn(["tool"], str(cwd), {"PATH": path}, out, out)
                os.waitpid(pid, 0)
            finally:
                os.close(out)
            assert (tmp_path / f"out{n}").read_text().strip() == said, path
        with pytest.raises(launcher.StartError) as denied:
            launcher._spawn(["plain"], str(cwd), {"PATH": str(tmp_path)}, 1, 2)
        assert denied.value.kind == "PermissionError" and "'plain'" in str(denied.value)
    finally:
        os.chdir(here)


def test_a_tree_deeper_than_the_open_files_allowed_is_removed(tmp_path: Path) -> None:
    script = f"""
import os, resource, sys
sys.path.insert(0, {str(Path(launcher.__file__).parents[3])!r})
from workers.host import launcher
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
top = {str(tmp_path / 'deep')!r}
os.makedirs(top)
fd = os.open(top, os.O_RDONLY)
for _ in range(200):
    os.mkdir("d", dir_fd=fd)
    nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = nfd
os.close(fd)
launcher._rmtree(top)
print(os.path.exists(top))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-2000:]


def test_json_nested_too_deep_is_a_value_error_and_no_start_fails_on_one(tmp_path: Path) -> None:
    """An entry of .fleet/running/ nested 100,000 deep (anything can be written there) made every later start fail
    with a reap_error (RecursionError, which the reap did not expect)."""
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError):
        launcher.loads(deep)
    d = delivery(tmp_path)
    (d.fleet / "running").mkdir(parents=True)
    (d.fleet / "running" / f"{'e' * 24}.json").write_text(deep)
    proc = _start(d, ["true"], {"prompt.md": b"x"})
    assert proc.returncode == 0 and "reap_error" not in proc.stdout.decode(), proc.stdout[-500:]
    d.started(proc)


def _forget_request(tmp_path: Path) -> tuple[dict, Path]:
    fleet = tmp_path / ".fleet"
    earlier = Path(launcher.delivery_dir(str(fleet), "a" * 24))
    (earlier / "sub").mkdir(parents=True)
    (earlier / "sub" / "bundle").write_bytes(b"x" * 100)
    return {"verb": "run", "fleet": str(fleet), "token": "b" * 24, "forget": [str(earlier)],
            "prepare": {"root": str(tmp_path / "attempt")}}, earlier


def test_a_run_whose_start_lock_cannot_be_had_still_removes_what_it_was_told_to_forget(tmp_path: Path) -> None:
    req, earlier = _forget_request(tmp_path)
    (tmp_path / ".fleet" / "locks").write_text("")  # not a folder: the start lock cannot be made
    assert launcher.serve(req) == 127
    assert not earlier.exists()


@pytest.mark.parametrize("nearly_full", [True, False])
def test_a_run_removes_earlier_deliveries_before_its_start_only_on_a_nearly_full_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nearly_full: bool) -> None:
    req, earlier = _forget_request(tmp_path)
    seen: list[bool] = []

    def prepare(req: dict, prep: dict) -> dict:
        seen.append(earlier.exists())
        return {"prepare_error": "stop here"}

    monkeypatch.setattr("workers.host.launcher.start._disk_nearly_full", lambda fleet: nearly_full)
    monkeypatch.setattr("workers.host.launcher.start._prepare", prepare)
    assert launcher.serve(req) == 127
    # Their space may be what the start needs on a nearly full disk; elsewhere they go after the supervisor's fork.
    assert seen == [not nearly_full] and not earlier.exists()


def test_a_disk_with_room_is_not_nearly_full(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    assert launcher._disk_nearly_full(str(tmp_path)) == (st.f_bavail * st.f_frsize < launcher.NEARLY_FULL_BYTES)
    # A host's first start: its .fleet is not made yet, and the folder above it tells.
    assert launcher._disk_nearly_full(str(tmp_path / ".fleet")) == launcher._disk_nearly_full(str(tmp_path))


def test_the_launchers_os_does_what_os_does(tmp_path: Path) -> None:
    """The launcher runs on ``posix`` (see launcher._Os): each of the names it gives for ``os`` and ``os.path``
    answers as ``os`` and ``posixpath`` do, for str and bytes, on the cases the launcher meets."""
    import posixpath

    shim = launcher._Os()
    paths = ["", "/", "//", "a", "a/", "/a", "a/b", "a/b/", "/a/b//", "//a//b", "a/./b", ".", "..", "a/.."]
    for p in paths:
        for q in (p, p.encode()):
            assert shim.path.dirname(q) == posixpath.dirname(q), q
            assert shim.path.basename(q) == posixpath.basename(q), q
            assert shim.path.split(q) == posixpath.split(q), q
    for a in paths:
        for b in paths:
            assert shim.path.join(a, b) == posixpath.join(a, b), (a, b)
            assert shim.path.join(a, b, "c") == posixpath.join(a, b, "c"), (a, b)
            assert shim.path.join(a.encode(), b.encode()) == posixpath.join(a.encode(), b.encode()), (a, b)
    (tmp_path / "file").write_bytes(b"12345")
    (tmp_path / "dir").mkdir()
    (tmp_path / "to-dir").symlink_to(tmp_path / "dir")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("file", "dir", "to-dir", "dangling", "nowhere", "file/below", "dir\0nul"):
        p = str(tmp_path / name)
        for f in ("exists", "lexists", "isdir"):
            assert getattr(shim.path, f)(p) == getattr(posixpath, f)(p), (f, name)
    assert shim.path.getsize(str(tmp_path / "file")) == 5
    assert shim.path.getmtime(str(tmp_path / "file")) == os.path.getmtime(tmp_path / "file")
    assert shim.path.normpath("a//b/../c") == "a/c"  # any other name is posixpath's
    for f in ("dirname", "basename", "split"):
        assert getattr(shim.path, f)(tmp_path / "a" / "b") == getattr(posixpath, f)(tmp_path / "a" / "b")
        for wrong in (None, 3):
            with pytest.raises(TypeError):
                getattr(shim.path, f)(wrong)
    assert shim.path.join(tmp_path, Path("x")) == posixpath.join(tmp_path, Path("x"))
    for args in ((None,), ("a", None), ("a", 3), ("a", b"b"), (b"a", "b")):
        with pytest.raises(TypeError):
            shim.path.join(*args)
        with pytest.raises(TypeError):
            posixpath.join(*args)
    with pytest.raises(TypeError):
        shim.fsencode(None)
    assert shim.fsencode(Path("caf\u00e9")) == os.fsencode(Path("caf\u00e9"))
    assert (shim.devnull, shim.defpath, shim.pathsep, shim.sep) == (os.devnull, os.defpath, os.pathsep, os.sep)
    assert shim.environ == dict(os.environ)
    assert shim.fsencode("caf\u00e9\udcff") == os.fsencode("caf\u00e9\udcff") and shim.fsencode(b"x") == b"x"
    assert shim.getpid() == os.getpid() and shim.execvpe is os.execvpe
    with shim.fdopen(os.open(tmp_path / "file", os.O_RDONLY), "rb") as f:
        assert f.read() == b"12345"
    # makedirs: a folder and the missing ones above it, exist_ok, a file in the way, "." at the end.
    deep = str(tmp_path / "m" / "n" / "o")
    shim.makedirs(deep, 0o700)
    assert os.path.isdir(deep) and (os.stat(deep).st_mode & 0o777) == 0o700
    with pytest.raises(FileExistsError):
        shim.makedirs(deep)
    shim.makedirs(deep, exist_ok=True)
    shim.makedirs(str(tmp_path / "p" / "q" / "."), exist_ok=True)
    assert os.path.isdir(tmp_path / "p" / "q")
    with pytest.raises(FileExistsError):
        shim.makedirs(str(tmp_path / "file"), exist_ok=True)
    with pytest.raises(NotADirectoryError):
        shim.makedirs(str(tmp_path / "file" / "below"), exist_ok=True)
