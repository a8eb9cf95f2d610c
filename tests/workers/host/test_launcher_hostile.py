"""The launcher's pack on a hostile workspace, as the host runs it (a real subprocess): links are recorded with
their target and never followed, FIFOs and devices never opened (pack would hang on a FIFO), names that are not
UTF-8 keep their bytes, paths past PATH_MAX are still read, and the outputs beside the workspace (the answer
file, an adapter's files and state folders) are packed by the same rules."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from workers.host import launcher

TOKEN = "0123456789abcdef01234567"


def fleet_of(base: Path) -> Path:
    """The host's ``WORKDIR/.fleet`` for an attempt folder made by ``attempt()``."""
    return base.parent / ".fleet"


def out(base: Path) -> Path:
    """The delivery folder pack writes into (never the attempt folder the agent wrote)."""
    return fleet_of(base) / "deliveries" / TOKEN


def pack(base: Path, *outputs: str) -> subprocess.CompletedProcess[bytes]:
    """The launcher's pack as the worker calls it: the source and the request on stdin."""
    body = {"verb": "pack", "fleet": str(fleet_of(base)), "token": TOKEN, "root": str(base), "outputs": list(outputs)}
    return subprocess.run([sys.executable, "-c", launcher.BOOT, "pack", TOKEN], capture_output=True, timeout=60,
                          input=launcher.boot_stdin(launcher.source(), body), cwd="/")


def attempt(tmp_path: Path) -> tuple[Path, Path]:
    base = tmp_path / "attempt-1"
    (base / "workspace").mkdir(parents=True)
    out(base).mkdir(parents=True)
    return base, base / "workspace"


def frames(base: Path) -> list[tuple[bytes, str, bytes]]:
    return launcher.read_bundle((out(base) / launcher.BUNDLE).read_bytes(), 1 << 30)


def delivered(base: Path, name: str) -> bytes:
    """A file of the delivery as the worker takes it: from the bundle, or on its own when the pack wrote none (a full
    disk)."""
    if (out(base) / launcher.BUNDLE).exists():
        return next(data for kind, n, data in frames(base) if (kind, n) == (launcher.FILE, name))
    return (out(base) / name).read_bytes()


def manifest(base: Path, name: str = "manifest.json") -> list[dict]:
    return json.loads(delivered(base, name))


def members(base: Path, kind: bytes = launcher.WORKSPACE) -> dict[str, bytes]:
    """The workspace's (or the outputs') files in the bundle."""
    return {n: data for k, n, data in frames(base) if k == kind}


def test_links_fifos_and_devices_are_recorded_never_followed_or_opened(tmp_path: Path) -> None:
    base, ws = attempt(tmp_path)
    secret = tmp_path / "outside.txt"
    secret.write_bytes(b"CANARY-outside\n")
    (tmp_path / "outside-dir").mkdir()
    (tmp_path / "outside-dir" / "inner.txt").write_bytes(b"CANARY-inner\n")
    os.symlink(secret, ws / "to-file")
    os.symlink(tmp_path / "outside-dir", ws / "to-folder")
    os.symlink("/etc/passwd", ws / "passwd")
    os.symlink("nowhere/at/all", ws / "dangling")
    os.mkfifo(ws / "fifo")
    os.mknod(ws / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers: read, it never ends
    (ws / "real.txt").write_bytes(b"real\n")

    proc = pack(base)
    assert proc.returncode == 0, proc.stderr
    by_path = {e["path"]: e for e in manifest(base)}
    assert by_path["to-file"]["link"] == str(secret)
    assert by_path["to-folder"]["link"] == str(tmp_path / "outside-dir")
    assert by_path["passwd"]["link"] == "/etc/passwd" and by_path["dangling"]["link"] == "nowhere/at/all"
    for name in ("to-file", "to-folder", "passwd", "dangling", "fifo", "zero"):
        e = by_path[name]
        assert (e["packed"], e["size"], e["sha256"], e["why"]) == (False, None, None, "not a regular file"), e
    assert "link" not in by_path["fifo"] and "link" not in by_path["zero"]
    assert not any(p.startswith("to-folder/") for p in by_path)
    assert members(base) == {"real.txt": b"real\n"}
    assert not any(b"CANARY" in data for _, _, data in frames(base))


def test_names_that_are_not_utf8_keep_their_bytes(tmp_path: Path) -> None:
    base, ws = attempt(tmp_path)
    os.mkdir(os.fsencode(ws) + b"/dir\xff")
    Path(os.fsdecode(os.fsencode(ws) + b"/dir\xff/in.txt")).write_bytes(b"in\n")
    Path(os.fsdecode(os.fsencode(ws) + b"/\xfe" * 1)).write_bytes(b"fe\n")
    os.symlink(b"target\xfd", os.fsencode(ws) + b"/link")
    proc = pack(base)
    assert proc.returncode == 0, proc.stderr
    raw = delivered(base, "manifest.json")
    raw.decode("ascii")  # plain JSON: no raw byte, no surrogate a strict reader would refuse
    by_path = {e["path"]: e for e in json.loads(raw)}
    e = by_path["dir\\udcff/in.txt"]
    assert base64.b64decode(e["path_b64"]) == b"dir\xff/in.txt" and e["packed"] and e["size"] == 3
    assert base64.b64decode(by_path["\\udcfe"]["path_b64"]) == b"\xfe"
    assert by_path["link"]["link"] == "target\\udcfd" and base64.b64decode(by_path["link"]["link_b64"]) == b"target\xfd"
    assert "path_b64" not in by_path["link"]
    got = members(base)
    assert {os.fsencode(n) for n in got} == {b"dir\xff/in.txt", b"\xfe"}


def test_a_path_longer_than_path_max_is_packed(tmp_path: Path) -> None:
    base, ws = attempt(tmp_path)
    fd = os.open(ws, os.O_RDONLY)
    try:
        for i in range(20):  # 20 x 244 bytes: past Linux's PATH_MAX of 4096, which an os.walk cannot open
            name = f"D{i:02d}" + "d" * 240
            os.mkdir(name, dir_fd=fd)
            new = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
        with os.fdopen(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "wb") as f:
            f.write(b"deep\n")
    finally:
        os.close(fd)
    proc = pack(base)
    assert proc.returncode == 0, proc.stderr
    (entry,) = manifest(base)
    assert entry["path"].endswith("/deep.txt") and len(entry["path"]) > 4096 and entry["packed"]
    assert entry["sha256"] == hashlib.sha256(b"deep\n").hexdigest()
    assert list(members(base).values()) == [b"deep\n"]


def test_outputs_beside_the_workspace_are_packed_without_following_links(tmp_path: Path) -> None:
    base, _ = attempt(tmp_path)
    os.symlink("/etc/passwd", base / "answer.txt")
    os.mkfifo(base / "session.json")
    (base / "transcript.jsonl").write_bytes(b'{"event": "run_start"}\n')
    (base / "state" / "agents").mkdir(parents=True)
    (base / "state" / "agents" / "db.sqlite").write_bytes(b"db")
    os.symlink("/etc", base / "state" / "agents" / "etc")
    os.symlink("/etc", base / "linked-state")
    proc = pack(base, "answer.txt", "session.json", "transcript.jsonl", "state/agents/", "linked-state/", "absent.txt")
    assert proc.returncode == 0, proc.stderr
    by_path = {e["path"]: e for e in manifest(base, "outputs.json")}
    assert set(by_path) == {"answer.txt", "session.json", "transcript.jsonl", "state/agents/db.sqlite",
                            "state/agents/etc", "linked-state"}
    assert by_path["answer.txt"]["link"] == "/etc/passwd" and not by_path["answer.txt"]["packed"]
    assert by_path["linked-state"]["link"] == "/etc" and by_path["state/agents/etc"]["link"] == "/etc"
    assert by_path["session.json"]["why"] == "not a regular file"
    assert members(base, launcher.OUTPUT) == {"transcript.jsonl": b'{"event": "run_start"}\n',
                                               "state/agents/db.sqlite": b"db"}


def test_an_output_below_a_linked_folder_is_not_read_through_the_link(tmp_path: Path) -> None:
    base, _ = attempt(tmp_path)
    (tmp_path / "elsewhere" / "agents").mkdir(parents=True)
    (tmp_path / "elsewhere" / "agents" / "db.sqlite").write_bytes(b"CANARY")
    (tmp_path / "elsewhere" / "session.json").write_bytes(b"CANARY")
    os.symlink(tmp_path / "elsewhere", base / "state")
    proc = pack(base, "state/agents/", "state/session.json")
    assert proc.returncode == 0, proc.stderr
    entries = manifest(base, "outputs.json")
    assert [e["path"] for e in entries] == ["state/agents/", "state/session.json"]
    assert all(e["why"].startswith("cannot read: a folder on its way is a link") for e in entries), entries
    assert members(base, launcher.OUTPUT) == {}
