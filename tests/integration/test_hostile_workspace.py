"""A hostile workspace on the embedded default and on an sshd host: the agent leaves a 250-byte name, names of raw
bytes (one that is 1,200 bytes once escaped), a file literally named like an escape, a path past PATH_MAX,
links (to a file, a folder, /etc/passwd, nowhere), a FIFO and a device, and makes answer.txt a link to
/etc/passwd. The sweep finishes in one attempt; every regular file is stored exactly once with its sha256, links
are recorded with their target and never followed; `fleet resume` with nothing left marks the sweep finished.
The prompt (CR, CRLF, a lone trailing CR, non-ASCII) reaches the agent byte for byte."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import write_inventory
from tests.integration.fleetkit import free_port, run_embedded, run_fleet

pytestmark = pytest.mark.integration

PROMPT = "make a mess\r\nof the workspace\rplease \u00e9\u2713\n\r\n\r".encode()

AGENT = r'''
import os, shutil, stat, sys
prompt, answer = sys.argv[1], sys.argv[2]
shutil.copyfile(prompt, "received-prompt.md")
open("L" * 250, "w").write("long\n")
open(b"raw\xff\xfe.txt", "wb").write(b"raw bytes\n")
open(b"\xff" * 200, "wb").write(b"escaped past 255\n")
open("lit\\udcff", "w").write("literal escape\n")
open(b"lit\xff", "wb").write(b"raw twin\n")
os.mkdir(b"dir\xff")
open(b"dir\xff/in.txt", "wb").write(b"inside\n")
os.symlink("/etc/passwd", "passwd")
os.symlink("/etc", "etc")
os.symlink("nowhere", "dangling")
os.symlink("received-prompt.md", "to-file")
os.mkfifo("fifo")
os.mknod("zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
os.symlink("/etc/passwd", answer)
here = os.open(".", os.O_RDONLY)
for i in range(20):
    name = "D%02d" % i + "d" * 240
    os.mkdir(name, dir_fd=here)
    nxt = os.open(name, os.O_RDONLY, dir_fd=here)
    os.close(here)
    here = nxt
with os.fdopen(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, dir_fd=here), "w") as f:
    f.write("deep\n")
print("done")
'''


def _prompts(root: Path) -> Path:
    d = root / "open" / "01-mess"
    d.mkdir(parents=True)
    (d / "item.toml").write_text('schema_version = 1\ntitle = "mess"\ntimeout_s = 120\n')
    (d / "prompt.md").write_bytes(PROMPT)
    return root


def _check_attempt(folder: Path) -> dict[str, int]:
    """Every regular workspace file is stored exactly once with its sha256; links are recorded, never followed."""
    meta = json.loads((folder / "meta.json").read_bytes())
    stored: dict[bytes, dict] = {}
    for a in meta["artifacts"]:
        raw = base64.b64decode(a["original_b64"]) if "original_b64" in a else a["name"].encode()
        assert raw not in stored, raw
        stored[raw] = a
        data = (folder / a["name"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (a["size"], a["sha256"]), a["name"]
    manifest = json.loads((folder / "workspace.manifest.json").read_bytes())
    regular = [e for e in manifest if e["packed"]]
    for e in regular:
        raw = base64.b64decode(e["path_b64"]) if "path_b64" in e else e["path"].encode()
        art = stored[b"workspace/" + raw]
        assert (art["size"], art["sha256"]) == (e["size"], e["sha256"])
    links = {e["path"]: e["link"] for e in manifest if "link" in e}
    assert links == {"passwd": "/etc/passwd", "etc": "/etc", "dangling": "nowhere", "to-file": "received-prompt.md"}
    others = {e["path"] for e in manifest if not e["packed"] and "link" not in e}
    assert others == {"fifo", "zero"}
    assert len(regular) == 8  # 250 bytes, 2 raw, 1,200 escaped, literal, twin, dir/in.txt, deep, the prompt copy
    assert any(e["path"].endswith("/deep.txt") for e in regular)
    outputs = json.loads((folder / "harness" / "outputs.json").read_bytes())
    assert outputs == [{"path": "answer.txt", "size": None, "sha256": None, "packed": False,
                        "why": "not a regular file", "link": "/etc/passwd"}]
    passwd = Path("/etc/passwd").read_bytes()
    assert passwd[:20] not in (folder / "answer.txt").read_bytes()
    received = (folder / "workspace" / "received-prompt.md").read_bytes()
    assert hashlib.sha256(received).hexdigest() == hashlib.sha256(PROMPT).hexdigest()
    assert (folder / "prompt.md").read_bytes() == PROMPT
    return {"regular": len(regular), "links": len(links), "other": len(others)}


def _inventory_local(tmp_path: Path, agent: Path) -> Path:
    return write_inventory(tmp_path / "inv.toml", [f'''[hosts.local]
transport = "local"
workdir = "{tmp_path / 'host'}"
[hosts.local.model]
base_url = "http://127.0.0.1:{free_port()}/v1"
id = "m"
context = 32768
max_output = 2048
[hosts.local.agents.mess]
kind = "command"
command = ["{sys.executable}", "{agent}", "{{prompt_file}}", "{{answer_file}}"]
'''])


def test_a_hostile_workspace_on_the_embedded_default_is_kept_whole_and_resume_finishes(tmp_path: Path) -> None:
    agent = tmp_path / "mess.py"
    agent.write_text(AGENT)
    inv = _inventory_local(tmp_path, agent)
    prompts = _prompts(tmp_path / "prompts")
    r = run_embedded(["sweep", "-i", str(inv), "--prompts", str(prompts), "--json"], tmp_path, timeout=240)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    (cell,) = summary["cells"]
    assert (summary["status"], cell["status"], cell["attempts"]) == ("finished", "finished", 1), cell
    _check_attempt(tmp_path / "runs" / summary["sweep"] / cell["id"] / "attempt-1")
    show = run_embedded(["show", summary["sweep"], "local", "01"], tmp_path, timeout=60)
    assert show.returncode == 0 and "root:x:0:0" not in show.stdout, show.stdout + show.stderr
    # A coordinator that died after the last record leaves the sweep "interrupted"; resume has nothing to run.
    journal = tmp_path / "runs" / summary["sweep"] / "journal.jsonl"
    with open(journal, "a") as f:
        f.write(json.dumps({"t": "status", "status": "interrupted", "finished_at": ""}) + "\n")
    again = run_embedded(["resume", summary["sweep"], "--json"], tmp_path, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    out = json.loads(again.stdout)
    assert out["status"] == "finished" and out["cells"][0]["attempts"] == 1


def test_a_hostile_workspace_on_an_sshd_host_travels_through_the_manifest_and_the_tar(
        tmp_path, ssh_hosts, client_key, redis_server, namespace, workers) -> None:  # type: ignore[no-untyped-def]
    host = ssh_hosts["charlie"]
    agent = tmp_path / "mess.py"
    agent.write_text(AGENT)
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=[
        sys.executable, str(agent), "{prompt_file}", "{answer_file}"])])
    prompts = _prompts(tmp_path / "prompts")
    workers(["charlie"], inv)
    runs = tmp_path / "runs"
    r = run_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                   "--broker", redis_server.url], namespace)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    (cell,) = summary["cells"]
    assert (cell["status"], cell["attempts"]) == ("finished", 1), cell
    _check_attempt(runs / summary["sweep"] / cell["id"] / "attempt-1")
