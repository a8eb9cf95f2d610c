"""Acceptance checks for 07-photo-renamer: "write a python script that renames all photos in a folder by
date taken, and test it". Run by the harness on a copy of the workspace (docs/checks-pytest.md).

The renamer is found as a Python file in the workspace (preferably Playground/*/*.py, not a test
file) that looks like it renames files, and is run as ``python SCRIPT FOLDER`` on a folder of small
JPEGs: some with an EXIF DateTimeOriginal, some without, and one non-photo file. Tolerant of the
naming format (the date as YYYY-MM-DD, YYYYMMDD, YYYY_MM_DD ..., anywhere in the new relative path,
so sorting into date folders is fine too); strict that no file is lost or changed.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

RUN_TIMEOUT_S = 60
SKIP_DIRS = {".git", ".venv", "venv", "env", "node_modules", "__pycache__", "site-packages", ".tox", ".mypy_cache"}
RENAME_HINT = re.compile(r"\b(os\.rename|os\.replace|shutil\.move|\.rename\(|\.replace\(|rename)", re.I)

# (file name, EXIF date taken) -- days > 12 so no date reads two ways.
EXIF_PHOTOS = [
    ("IMG_0001.jpg", datetime(2021, 5, 16, 7, 8, 9)),
    ("DSC0042.JPG", datetime(2019, 11, 23, 18, 30, 0)),
    ("holiday.jpeg", datetime(2018, 7, 28, 12, 0, 1)),
]
PLAIN_PHOTOS = ["scan_a.jpg", "scan_b.jpg"]  # no EXIF: the script may use the file time or leave them
OTHER_FILES = ["notes.txt"]


# --- a minimal, valid baseline JPEG (1x1 gray) with an optional APP1 Exif segment, built by hand ---

def _segment(marker: int, payload: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(payload) + 2) + payload


def _exif_app1(taken: datetime) -> bytes:
    """APP1 "Exif": IFD0 {DateTime, ExifIFD pointer} -> Exif IFD {DateTimeOriginal}, little-endian TIFF."""
    date = taken.strftime("%Y:%m:%d %H:%M:%S").encode() + b"\x00"  # 20 bytes, ASCII with NUL
    ifd0_at, exif_at = 8, 8 + 2 + 2 * 12 + 4
    date1_at = exif_at + 2 + 12 + 4
    date2_at = date1_at + len(date)
    tiff = b"II*\x00" + struct.pack("<I", ifd0_at)
    tiff += struct.pack("<H", 2)
    tiff += struct.pack("<HHII", 0x0132, 2, len(date), date1_at)  # DateTime
    tiff += struct.pack("<HHII", 0x8769, 4, 1, exif_at)  # ExifIFDPointer
    tiff += struct.pack("<I", 0)
    tiff += struct.pack("<H", 1)
    tiff += struct.pack("<HHII", 0x9003, 2, len(date), date2_at)  # DateTimeOriginal
    tiff += struct.pack("<I", 0)
    tiff += date + date
    return _segment(0xE1, b"Exif\x00\x00" + tiff)


def make_jpeg(taken: datetime | None, comment: str) -> bytes:
    """A decodable 1x1 JPEG; ``comment`` (a COM segment) makes every file's bytes distinct."""
    dqt = _segment(0xDB, b"\x00" + b"\x01" * 64)
    sof = _segment(0xC0, b"\x08" + struct.pack(">HH", 1, 1) + b"\x01" + b"\x01\x11\x00")
    one_code = bytes([1] + [0] * 15)  # one code of length 1 ...
    dht = _segment(0xC4, b"\x00" + one_code + b"\x00" + b"\x10" + one_code + b"\x00")  # ... DC cat 0, AC EOB
    sos = _segment(0xDA, b"\x01" + b"\x01\x00" + b"\x00\x3f\x00")
    scan = b"\x3f"  # DC '0', EOB '0', padded with ones
    exif = _exif_app1(taken) if taken else b""
    return b"\xff\xd8" + exif + _segment(0xFE, comment.encode()) + dqt + sof + dht + sos + scan + b"\xff\xd9"


# --- finding the renamer ---

def _python_files(root: Path):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for f in sorted(filenames):
            if f.endswith(".py"):
                yield Path(dirpath) / f


def _is_test_file(path: Path) -> bool:
    n = path.name
    return n.startswith("test_") or n.endswith("_test.py") or n in ("conftest.py", "setup.py", "__init__.py") or "tests" in path.parts[:-1]


def find_renamer_candidates(ws: Path) -> list[Path]:
    """Non-test Python files that look like renamers, most likely first."""
    playground = ws / "Playground"
    found = []
    for f in _python_files(ws):
        if _is_test_file(f.relative_to(ws)):
            continue
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if not RENAME_HINT.search(text):
            continue
        rank = (
            0 if f.parent.parent == playground else 1 if playground in f.parents else 2,
            0 if "rename" in f.name.lower() else 1,
            0 if "__main__" in text or "sys.argv" in text or "argparse" in text else 1,
            str(f),
        )
        found.append((rank, f))
    return [f for _, f in sorted(found)]


# --- running it ---

def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_photo_folder(folder: Path) -> dict[str, datetime | None]:
    """Fill ``folder``; return {sha256: date taken or None} of every file in it."""
    folder.mkdir(parents=True)
    made = {}
    for name, taken in EXIF_PHOTOS:
        (folder / name).write_bytes(make_jpeg(taken, f"photo {name}"))
    for name in PLAIN_PHOTOS:
        (folder / name).write_bytes(make_jpeg(None, f"plain {name}"))
        t = datetime(2020, 2, 14, 10, 0, 0).timestamp()
        os.utime(folder / name, (t, t))
    for name in OTHER_FILES:
        (folder / name).write_text("not a photo\n")
    for name, taken in EXIF_PHOTOS:
        made[_digest(folder / name)] = taken
    for name in PLAIN_PHOTOS + OTHER_FILES:
        made[_digest(folder / name)] = None
    return made


def files_under(folder: Path) -> dict[str, list[str]]:
    """{sha256: [relative paths]} of every file under ``folder``, recursively."""
    out: dict[str, list[str]] = {}
    for dirpath, _, filenames in os.walk(folder):
        for f in filenames:
            p = Path(dirpath) / f
            out.setdefault(_digest(p), []).append(p.relative_to(folder).as_posix())
    return out


def has_date(relpath: str, taken: datetime) -> bool:
    digits = re.sub(r"\D", "", relpath)
    return taken.strftime("%Y%m%d") in digits


def run_renamer(script: Path, folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), str(folder)], cwd=script.parent, input="y\n", capture_output=True,
        text=True, timeout=RUN_TIMEOUT_S, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


def test_renamer_renames_photos_by_date_taken_and_loses_nothing(workspace: Path, tmp_path: Path):
    candidates = find_renamer_candidates(workspace)
    assert candidates, "no Python script that renames files was found in the workspace (outside test files)"
    tried = []
    for script in candidates[:5]:
        folder = tmp_path / f"photos-{len(tried)}"
        before = make_photo_folder(folder)
        try:
            proc = run_renamer(script, folder)
        except subprocess.TimeoutExpired:
            tried.append(f"{script.relative_to(workspace)}: still running after {RUN_TIMEOUT_S} s")
            continue
        after = files_under(folder)
        # Strict: every original file is still there, byte for byte, and nothing is duplicated.
        lost = [h for h in before if h not in after]
        n_before, n_after = len(before), sum(len(v) for v in after.values())
        assert not lost and n_after == n_before, (
            f"{script.relative_to(workspace)} lost files: {n_before} before, {n_after} after, "
            f"{len(lost)} originals missing; now: {sorted(p for v in after.values() for p in v)}; "
            f"exit {proc.returncode}, stderr: {proc.stderr[-500:]}"
        )
        renamed = {h: after[h][0] for h, taken in before.items() if taken}
        dated = [p for h, p in renamed.items() if has_date(p, before[h])]
        if len(dated) == len(renamed):
            return
        tried.append(
            f"{script.relative_to(workspace)}: exit {proc.returncode}, photos with EXIF dates now named "
            f"{sorted(renamed.values())}; stderr: {proc.stderr.strip()[-300:]!r}"
        )
    pytest.fail("no script renamed the photos to names with their EXIF dates taken "
                f"(2021-05-16, 2019-11-23, 2018-07-28) when run as `python SCRIPT FOLDER`:\n" + "\n".join(tried))


def test_the_agent_wrote_tests(workspace: Path):
    candidates = find_renamer_candidates(workspace)
    assert candidates, "no Python script that renames files was found in the workspace"
    project = candidates[0].parent
    if project.name == "src" or project.name == candidates[0].stem:
        project = project.parent
    tests = [
        f for f in _python_files(project)
        if (f.name.startswith("test_") or f.name.endswith("_test.py")) and "def test" in f.read_text(errors="replace")
    ]
    assert tests, f"no test file (test_*.py or *_test.py with a test in it) in the project folder {project.relative_to(workspace) or '.'}"
