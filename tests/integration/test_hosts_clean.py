"""`fleet hosts clean`: old releases and attempt folders removed from a host's work dir over the real transports
(local, and SSH to an sshd test host), never the current release, one being installed or in use, nor a running
attempt's folder; links never followed; a clean killed midway finished by the next; two at once safe."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.integration.conftest import write_inventory
from tests.integration.fleetkit import FLEET, REPO

pytestmark = pytest.mark.integration

OLD = time.time() - 30 * 86400


def _age(path: Path, when: float = OLD) -> None:
    """Make ``path`` and everything in it look untouched since ``when``."""
    for top, dirs, files in os.walk(path, topdown=False):
        for name in files + dirs:
            os.utime(os.path.join(top, name), (when, when), follow_symlinks=False)
    os.utime(path, (when, when), follow_symlinks=False)


def _tree(work: Path, outside: Path) -> dict[str, Path]:
    from workers.install import source_release

    p: dict[str, Path] = {}
    rel = work / "harness"
    for name in (source_release().id, "0ldc0mmit", "installing", "inuse"):
        (rel / name / "venv" / "bin").mkdir(parents=True)
        (rel / name / "venv" / "bin" / "python").write_bytes(b"x" * 100_000)
        p[name] = rel / name
    (rel / "installing.lock").mkdir()
    runs = work / "runs" / "20261101-020000-n" / "abc123" / "h" / "01-item" / "cmd" / "r1"
    for k in (1, 2, 3):
        (runs / f"attempt-{k}" / "workspace").mkdir(parents=True)
        (runs / f"attempt-{k}" / "workspace" / "big.bin").write_bytes(b"y" * 50_000)
        p[f"attempt-{k}"] = runs / f"attempt-{k}"
    # attempt-1 old, attempt-2 old but its delivery is live, attempt-3 recent.
    (outside / "precious.txt").write_text("keep")
    (runs / "attempt-1" / "workspace" / "link").symlink_to(outside / "precious.txt")
    _age(runs / "attempt-1")
    _age(runs / "attempt-2")
    (work / ".fleet" / "running").mkdir(parents=True)
    (work / ".fleet" / "running" / "tok.json").write_text('{"token": "tok", "root": "%s"}' % (runs / "attempt-2"))
    # An old sweep reached through a link: never followed.
    (outside / "elsewhere" / "attempt-1").mkdir(parents=True)
    _age(outside / "elsewhere")
    (work / "runs" / "linked").symlink_to(outside / "elsewhere")
    # An old sweep whose every attempt is old: its folders, left empty, go too.
    (work / "runs" / "20261001-020000-o" / "h" / "01-item" / "cmd" / "r1" / "attempt-1").mkdir(parents=True)
    p["old-sweep"] = work / "runs" / "20261001-020000-o"
    _age(p["old-sweep"])
    # What a clean killed after its rename left behind.
    (work / ".fleet" / "trash" / "1-1-attempt-9" / "w").mkdir(parents=True)
    (work / ".fleet" / "trash" / "1-1-attempt-9" / "w" / "f").write_bytes(b"z" * 7000)
    return p


def _local_inventory(path: Path, work: Path) -> Path:
    return write_inventory(path, [f"""[hosts.here]
transport = "local"
workdir = "{work}"
python = "{sys.executable}"
model = {{ base_url = "http://127.0.0.1:9/v1", id = "m", context = 4096, max_output = 512 }}
[hosts.here.agents.cmd]
kind = "command"
command = ["true"]
"""])


def _fleet(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(PYTHONPATH=str(REPO), COLUMNS="200")
    return subprocess.run(FLEET + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _check_clean(inv: Path, work: Path, outside: Path, p: dict[str, Path], tmp_path: Path, name: str) -> None:
    from workers.install import source_release

    user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(p["inuse"] / "venv/bin/python")])
    try:
        dry = _fleet(["hosts", "clean", "-i", str(inv), "--dry-run"], tmp_path)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert f"{name}: would remove release {p['0ldc0mmit']} (" in dry.stdout, dry.stdout
        assert f"{name}: would remove attempt folder {p['attempt-1']} (" in dry.stdout, dry.stdout
        assert f"{name}: would free 1 release(s) and 2 attempt folder(s)" in dry.stdout, dry.stdout
        assert p["0ldc0mmit"].is_dir() and p["attempt-1"].is_dir()
        assert (work / ".fleet" / "trash" / "1-1-attempt-9").is_dir()

        r = _fleet(["hosts", "clean", "-i", str(inv)], tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        user.kill()
        user.wait()
    out = r.stdout
    assert f"{name}: removed release {p['0ldc0mmit']} (100.0 kB)" in out, out
    assert f"{name}: removed attempt folder {p['attempt-1']} (" in out, out
    assert f"{name}: kept {p[source_release().id]}: the current release" in out
    assert f"{name}: kept {p['installing']}: being installed" in out
    assert f"{name}: kept {p['inuse']}: in use by a running process" in out
    assert f"{name}: kept {p['attempt-2']}: its attempt is running" in out
    assert f"{name}: finished an interrupted clean: 7.0 kB" in out
    assert f"{name}: cleaned 1 release(s) and 2 attempt folder(s), " in out and out.rstrip().endswith(
        f"current release {source_release().id}")
    assert not p["0ldc0mmit"].exists() and not p["attempt-1"].exists()
    for kept in (source_release().id, "installing", "inuse", "attempt-2", "attempt-3"):
        assert p[kept].is_dir(), kept
    assert (outside / "precious.txt").read_text() == "keep"
    assert (outside / "elsewhere" / "attempt-1").is_dir() and (work / "runs" / "linked").is_symlink()
    assert not any((work / ".fleet" / "trash").iterdir())
    assert not p["old-sweep"].exists() and (work / "runs").is_dir()
    assert p["attempt-3"].parent.is_dir()  # not empty, and new

    # With 0 days every attempt folder not running goes.
    again = _fleet(["hosts", "clean", "-i", str(inv), "--keep-attempts-days", "0"], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not p["attempt-3"].exists() and p["attempt-2"].is_dir()


def test_clean_over_the_local_transport(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    outside.mkdir()
    p = _tree(work, outside)
    _check_clean(_local_inventory(tmp_path / "inv.toml", work), work, outside, p, tmp_path, "here")


def test_clean_over_ssh(tmp_path, ssh_hosts, client_key):
    host = ssh_hosts["charlie"]
    work, outside = tmp_path / "work", tmp_path / "outside"
    outside.mkdir()
    p = _tree(work, outside)
    block = host.toml(client_key[0]).replace(f'workdir = "{host.workdir}"', f'workdir = "{work}"')
    assert f'workdir = "{work}"' in block
    inv = write_inventory(tmp_path / "inv.toml", [block])
    _check_clean(inv, work, outside, p, tmp_path, "charlie")


def test_bad_values_and_an_unreachable_host(tmp_path):
    work = tmp_path / "work"
    inv = _local_inventory(tmp_path / "inv.toml", work)
    for args, needle in ((["--keep-attempts-days", "-1"], "--keep-attempts-days"), (["--hosts", ","], "names nothing"),
                         (["--hosts", "nope"], "unknown host nope")):
        r = _fleet(["hosts", "clean", "-i", str(inv), *args], tmp_path)
        assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    # No work dir yet: nothing to clean, said, exit 0.
    r = _fleet(["hosts", "clean", "-i", str(inv)], tmp_path)
    assert r.returncode == 0 and "no work dir (nothing to clean)" in r.stdout, r.stdout + r.stderr


def test_two_cleans_at_once_remove_each_folder_once(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    outside.mkdir()
    p = _tree(work, outside)
    inv = _local_inventory(tmp_path / "inv.toml", work)
    outs: list[subprocess.CompletedProcess] = []
    threads = [threading.Thread(target=lambda: outs.append(_fleet(["hosts", "clean", "-i", str(inv)], tmp_path)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    text = "".join(o.stdout for o in outs)
    assert text.count(f"removed attempt folder {p['attempt-1']} ") == 1, text
    assert text.count(f"removed release {p['0ldc0mmit']} ") == 1, text
    assert not p["attempt-1"].exists() and p["attempt-2"].is_dir()


def test_a_real_running_attempt_keeps_its_folder_and_ends_normally(tmp_path):
    """A sweep on the embedded default whose agent runs for a while: `hosts clean --keep-attempts-days 0` while it
    runs finds its delivery in the launcher's registry, keeps its folder, and the attempt ends and is stored."""
    import json

    from tests.integration.conftest import write_prompts
    from tests.integration.fleetkit import run_embedded, start_embedded

    work = tmp_path / "work"
    inv = write_inventory(tmp_path / "inv.toml", [f"""[hosts.here]
transport = "local"
workdir = "{work}"
python = "{sys.executable}"
model = {{ base_url = "http://127.0.0.1:9/v1", id = "m", context = 4096, max_output = 512 }}
[hosts.here.agents.cmd]
kind = "command"
command = ["sh", "-c", "sleep 12; echo done > out.txt; echo finished"]
"""])
    prompts = write_prompts(tmp_path / "prompts", {"01-slow": "take your time\n"})
    proc = start_embedded(["sweep", "-i", str(inv), "--prompts", str(prompts), "--json"], tmp_path)
    try:
        running = work / ".fleet" / "running"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (running.is_dir() and any(running.glob("*.json"))):
            time.sleep(0.1)
        (entry,) = running.glob("*.json")
        root = Path(json.loads(entry.read_text())["root"])
        assert root.is_dir()
        r = _fleet(["hosts", "clean", "-i", str(inv), "--keep-attempts-days", "0"], tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"here: kept {root}: its attempt is running" in r.stdout, r.stdout
        assert "removed attempt folder" not in r.stdout and root.is_dir()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    (cell,) = json.loads(out)["cells"]
    assert (cell["status"], cell["exit_code"]) == ("finished", 0), cell
    # Once it ended, the folder is an old attempt like any other.
    _age(root)
    after = _fleet(["hosts", "clean", "-i", str(inv)], tmp_path)
    assert after.returncode == 0 and f"here: removed attempt folder {root} (" in after.stdout, after.stdout
    assert run_embedded(["status", "--json"], tmp_path).returncode == 0  # the coordinator's store is untouched


def test_a_trash_or_fleet_that_is_a_link_never_deletes_its_target(tmp_path):
    """An agent runs as the host's user and can write the work dir: a `.fleet/trash` (or `.fleet`) made a link to
    a folder elsewhere must not make a clean delete what is in that folder (the trash's contents are deleted)."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (outside / "precious").mkdir(parents=True)
    (outside / "precious" / "a.txt").write_text("keep")
    (work / ".fleet").mkdir(parents=True)
    (work / ".fleet" / "trash").symlink_to(outside / "precious")
    old = work / "runs" / "s" / "u" / "h" / "01-item" / "cmd" / "r1" / "attempt-1"
    old.mkdir(parents=True)
    _age(old)
    inv = _local_inventory(tmp_path / "inv.toml", work)
    r = _fleet(["hosts", "clean", "-i", str(inv)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (outside / "precious" / "a.txt").read_text() == "keep"
    assert f"here: removed attempt folder {old} (" in r.stdout and not old.exists(), r.stdout
    assert (work / ".fleet" / "trash").is_dir() and not (work / ".fleet" / "trash").is_symlink()

    # A .fleet that is a link: the host's clean fails, said in one line, and nothing is deleted.
    work2 = tmp_path / "work2"
    (work2 / "runs").mkdir(parents=True)
    (outside / "fleetdir" / "trash" / "x").mkdir(parents=True)
    (outside / "fleetdir" / "trash" / "x" / "b.txt").write_text("keep")
    (work2 / ".fleet").symlink_to(outside / "fleetdir")
    r = _fleet(["hosts", "clean", "-i", str(_local_inventory(tmp_path / "inv2.toml", work2))], tmp_path)
    assert r.returncode == 1 and "here: FAILED" in r.stdout and ".fleet is a symbolic link" in r.stdout, r.stdout
    assert (outside / "fleetdir" / "trash" / "x" / "b.txt").read_text() == "keep"


@pytest.mark.parametrize("days", ["nan", "NaN", "-inf"])
def test_keep_attempts_days_that_is_not_a_number_is_refused(tmp_path, days):
    """NaN passes click's range check (it compares false with 0) and no folder is younger than it: it must not
    mean "remove every attempt folder"."""
    work = tmp_path / "work"
    fresh = work / "runs" / "s" / "u" / "h" / "01-item" / "cmd" / "r1" / "attempt-1"
    fresh.mkdir(parents=True)
    inv = _local_inventory(tmp_path / "inv.toml", work)
    r = _fleet(["hosts", "clean", "-i", str(inv), "--keep-attempts-days", days], tmp_path)
    assert r.returncode == 2 and "--keep-attempts-days" in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert fresh.is_dir()


def test_the_host_side_refuses_nan_days_itself(tmp_path):
    """The host side checks the request too (a coordinator of another version may send it)."""
    from workers.host import clean as hostclean

    fresh = tmp_path / "runs" / "s" / "attempt-1"
    fresh.mkdir(parents=True)
    with pytest.raises(ValueError, match="keep_attempts_days"):
        hostclean.clean({"workdir": str(tmp_path), "keep_release": "x", "keep_attempts_days": float("nan")})
    assert fresh.is_dir()


def test_a_release_in_use_by_its_working_directory_or_with_a_newline_in_its_name_is_kept(tmp_path):
    """The in-use check read `ps` output: a process working inside a release without naming it in its arguments,
    and a release whose name holds a newline (ps shows it as '?'), were not seen, and the release was removed."""
    from workers.host import clean as hostclean

    rel = tmp_path / "harness"
    by_cwd, by_name, unused = rel / "cwdrelease", rel / "new\nline", rel / "unused"
    for folder in (by_cwd, by_name, unused):
        (folder / "venv" / "bin").mkdir(parents=True)
    users = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=by_cwd / "venv"),
             subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(by_name / "venv/bin/python")])]
    try:
        time.sleep(0.3)
        answer = hostclean.clean({"workdir": str(tmp_path), "keep_release": "current", "keep_attempts_days": 14,
                                  "dry_run": False})
    finally:
        for u in users:
            u.kill()
            u.wait()
    kept = {k["path"]: k["why"] for k in answer["kept"]}
    assert kept == {str(by_cwd): "in use by a running process", str(by_name): "in use by a running process"}, answer
    assert [r["path"] for r in answer["releases"]] == [str(unused)]
    assert by_cwd.is_dir() and by_name.is_dir() and not unused.exists()


def test_a_work_dir_that_is_a_link_is_said_to_be_one_and_left_alone(tmp_path):
    real = tmp_path / "real"
    old = real / "runs" / "s" / "attempt-1"
    old.mkdir(parents=True)
    _age(old)
    (tmp_path / "work").symlink_to(real)
    r = _fleet(["hosts", "clean", "-i", str(_local_inventory(tmp_path / "inv.toml", tmp_path / "work"))], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"here: {tmp_path / 'work'} is a symbolic link: not cleaned (set the host's workdir to {real})" in r.stdout
    assert "no work dir" not in r.stdout and old.is_dir()
