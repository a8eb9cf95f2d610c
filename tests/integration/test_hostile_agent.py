"""Agents that damage what the harness reads after them (found by adversarial review): the damage is recorded as
the agent's doing, the rest of the attempt is kept, nothing is read whole that an agent can make of any size."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import write_inventory
from tests.integration.fleetkit import free_port, run_embedded, tmpfs

pytestmark = pytest.mark.integration

REMOVES_ITS_FOLDER = r'''
import os, shutil, sys
print("done")
sys.stdout.flush()
root = os.path.dirname(os.getcwd())
os.chdir("/")
shutil.rmtree(root)
'''


def _sweep(tmp_path: Path, agent_source: str, *agent_args: str) -> tuple[dict, Path]:
    agent = tmp_path / "agent.py"
    agent.write_text(agent_source)
    inv = write_inventory(tmp_path / "inv.toml", [f'''[hosts.local]
transport = "local"
workdir = "{tmp_path / 'host'}"
[hosts.local.model]
base_url = "http://127.0.0.1:{free_port()}/v1"
id = "m"
context = 32768
max_output = 2048
[hosts.local.agents.a]
kind = "command"
command = {json.dumps([sys.executable, str(agent), "{prompt_file}", "{answer_file}", *agent_args])}
'''])
    d = tmp_path / "prompts" / "open" / "01-p"
    d.mkdir(parents=True)
    (d / "item.toml").write_text('schema_version = 1\ntitle = "p"\ntimeout_s = 60\n')
    (d / "prompt.md").write_text("do it\n")
    r = run_embedded(["sweep", "-i", str(inv), "--prompts", str(tmp_path / "prompts"), "--json", "--max-attempts", "1"],
                     tmp_path, timeout=180)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    (cell,) = summary["cells"]
    folder = tmp_path / "runs" / summary["sweep"] / cell["id"] / "attempt-1"
    return json.loads((folder / "meta.json").read_text()), folder


def test_an_agent_that_removes_its_own_attempt_folder_keeps_its_output_and_no_traceback(tmp_path: Path) -> None:
    """The agent ran and ended normally; only its workspace is gone. Its stdout (in the delivery folder, intact
    and signed) must be kept, and the record must not carry the launcher's Python traceback."""
    meta, folder = _sweep(tmp_path, REMOVES_ITS_FOLDER)
    assert "Traceback" not in (meta.get("error") or ""), meta.get("error")
    names = [a["name"] for a in meta["artifacts"]]
    assert "agent.stdout" in names, names
    assert "done" in (folder / "agent.stdout").read_text()


HUGE_OUTPUTS = r'''
import os, sys
print("done")
sys.stdout.flush()
os.ftruncate(1, 1024 ** 3)  # a 1 GiB stdout (sparse: cheap to make, as a runaway log is not)
with open(sys.argv[2], "wb") as f:
    f.write(b"the answer\n")
    f.truncate(512 * 1024 ** 2)
'''


def test_an_agent_with_a_huge_stdout_and_answer_is_kept_capped_and_finished(tmp_path: Path) -> None:
    """Whole, they would go through the queue and the coordinator's memory several times over (a 3 GB stdout
    took 12.7 GB and ended as worker_error): the first bytes are kept, the whole size and sha256 recorded."""
    meta, folder = _sweep(tmp_path, HUGE_OUTPUTS)
    assert meta["status"] == "finished" and meta["exit_code"] == 0, meta.get("error")
    stdout = (folder / "agent.stdout").read_bytes()
    assert stdout.startswith(b"done\n") and len(stdout) == 32 * 1024 * 1024
    capped = json.loads((folder / "harness" / "capped.json").read_text())
    zeros = hashlib.sha256()
    zeros.update(b"done\n")
    chunk = bytes(1 << 20)
    left = 1024 ** 3 - 5
    while left:
        zeros.update(chunk[:min(left, len(chunk))])
        left -= min(left, len(chunk))
    assert capped["agent.stdout"] == {"size": 1024 ** 3, "sha256": zeros.hexdigest(), "kept": 32 * 1024 * 1024}
    outputs = {e["path"]: e for e in json.loads((folder / "harness" / "outputs.json").read_text())}
    assert outputs["answer.txt"]["packed"] is False and outputs["answer.txt"]["why"] == "over the size cap"
    assert outputs["answer.txt"]["size"] == 512 * 1024 ** 2
    # No answer file was kept, so the answer is the agent's stdout (what the owner would have seen), capped too.
    assert (folder / "answer.txt").stat().st_size <= 32 * 1024 * 1024


STOPS_ITS_SUPERVISOR = r'''
import os, signal, sys
with open(sys.argv[2], "w") as f:
    f.write("an answer\n")
os.kill(os.getppid(), signal.SIGSTOP)  # its parent is the launcher's supervisor
'''


def test_an_agent_that_stops_its_supervisor_is_supervision_lost_and_leaves_nothing_running(tmp_path: Path) -> None:
    """A stopped supervisor writes no exit record: waiting for one ran to the item's timeout and recorded the model's
    `timeout` (never retried), and the stopped process stayed for ever. It is the harness's lost supervision."""
    t0 = time.monotonic()
    meta, folder = _sweep(tmp_path, STOPS_ITS_SUPERVISOR)
    assert (meta["status"], meta["reason"]) == ("harness_failure", "supervision_lost"), meta
    assert "stopped (SIGSTOP)" in meta["error"]
    assert time.monotonic() - t0 < 50  # the item's timeout is 60 s: the stop is seen, not waited out
    left = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True).stdout.splitlines()
    assert not [line for line in left if line.startswith("T") and "fleet_launcher" in line or
                line.startswith("T") and str(tmp_path) in line], left
    assert not list((tmp_path / "host" / ".fleet" / "running").glob("*.json"))


FILLS_THE_DISK = r'''
import os, sys
print("filling the disk")
sys.stdout.flush()
n = 0
try:
    while True:  # one big file, or many files of random bytes (a tarball of them needs as much room again)
        with open("filler.bin" if sys.argv[3] == "one" else "filler-%d.bin" % n, "ab") as f:
            f.write(os.urandom(1 << 20))
        n += 1
except OSError as exc:
    print("stopped:", exc.strerror)
'''


@pytest.fixture
def small_host_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The host's work folder on a 24 MB tmpfs of this test's own, unmounted at the end whatever happens."""
    with tmpfs(tmp_path / "host", "24m") as mnt:
        yield mnt


@pytest.mark.parametrize("files, why", [
    ("one", None),  # the reserve given back for the exit record is room enough: the big file is over the cap
    ("many", "not packed: the host's disk is full (No space left on device)"),
])
def test_an_agent_that_fills_the_hosts_disk_gets_its_exit_and_output_recorded(tmp_path: Path, small_host_disk,  # type: ignore[no-untyped-def]
                                                                             files: str, why: str | None) -> None:
    """Its exit record could not be written, so its run read as a supervisor that crashed (supervision_lost) and
    nothing was kept: the delivery's reserve is given back for the records, and the manifest says what it could."""
    meta, folder = _sweep(tmp_path, FILLS_THE_DISK, files)
    assert (meta["status"], meta["exit_code"]) == ("finished", 0), meta
    assert (folder / "agent.stdout").read_text().startswith("filling the disk\nstopped: No space left on device")
    manifest = json.loads((folder / "workspace.manifest.json").read_text())
    if why is None:
        (entry,) = manifest
        assert (entry["path"], entry["packed"], entry["why"]) == ("filler.bin", False, "over the size cap"), entry
    else:
        assert manifest == [{"path": "", "size": None, "sha256": None, "packed": False, "why": why}], manifest
