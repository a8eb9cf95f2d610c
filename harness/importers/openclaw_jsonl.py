"""Import OpenClaw's JSONL session files (``~/.openclaw/agents/<agent>/sessions/<id>.jsonl``, docs/agents-openclaw.md).

The file-backed store of OpenClaw before 2026.8 (session version 3): one entry per line, the session header
first. ``PATH`` is one session file, or a ``sessions/`` folder: every ``*.jsonl`` in it except the
``*.trajectory.jsonl`` sidecars (run telemetry, not sessions) is imported, one folder per session. The lines
are read as ``harness.importers.openclaw`` describes; a line that is not a JSON object, a file cut in the
middle of its last line, or an unsupported session version is an error naming the file and the line.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from harness.core.errors import TranscriptImportError
from harness.importers.events import to_events, write_runs
from harness.importers.openclaw import Entry, SessionSource, read_session
from harness.importers.reader import Reader
from harness.importers.recorded import RecordedRun
from harness.core.transcript import Event

__all__ = ["FORMAT", "session_files", "read_file", "read_sessions", "read_runs", "import_to_folder"]

FORMAT = "openclaw-jsonl"
SIDECAR = ".trajectory.jsonl"


def session_files(src: Path) -> list[Path]:
    """The session files ``src`` names: itself, or the ``*.jsonl`` session files of a folder."""
    if src.is_dir():
        files = sorted(p for p in src.glob("*.jsonl") if p.is_file() and not p.name.endswith(SIDECAR))
        if not files:
            raise TranscriptImportError(str(src), "", "no *.jsonl session file in this folder")
        return files
    if not src.exists():
        raise TranscriptImportError(str(src), "", "file not found")
    return [src]


def read_entries(path: Path, name: str) -> tuple[list[Entry], bytes]:
    """The file's entries, each with its line number, and the file's bytes."""
    reader = Reader(name)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        reader.fail("", f"cannot read: {exc.strerror or exc}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reader.fail("", f"not UTF-8 text (byte {exc.start})")
    entries: list[Entry] = []
    for where, _, data in reader.json_lines(text, cut_line="incomplete last line"):
        if not isinstance(data, dict):
            reader.fail(where, f"an entry must be a JSON object, got {type(data).__name__}")
        entries.append(Entry(where, data))
    if not entries:
        reader.fail("", "empty: no session entries")
    return entries, raw


def read_file(path: Path, name: str | None = None) -> RecordedRun:
    """One session file as a recorded run."""
    name = name or str(path)
    entries, raw = read_entries(path, name)
    source = SessionSource(format=FORMAT, file=name, sha256=hashlib.sha256(raw).hexdigest(), entries=entries)
    kept = {"format": FORMAT, "file": name, "entries": [e.data for e in entries]}
    return read_session(source, json.dumps(kept, ensure_ascii=False, indent=1).encode("utf-8"))


def read_sessions(src: str | os.PathLike[str]) -> list[RecordedRun]:
    """Every session ``src`` names, each read whole. Bad input raises ``TranscriptImportError``."""
    runs = [read_file(path) for path in session_files(Path(src))]
    seen: dict[str, str] = {}
    for run in runs:
        if run.label in seen:
            raise TranscriptImportError(run.file, "line 1", f"session {run.label} is also in {seen[run.label]}")
        seen[run.label] = run.file
    return runs


def read_runs(src: str | os.PathLike[str]) -> list[tuple[RecordedRun, list[Event]]]:
    """Every session ``src`` names with its transcript events."""
    return [(run, to_events(run)) for run in read_sessions(src)]


def import_to_folder(src: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Read every session ``src`` names, then write one attempt-like folder per session under ``out_dir``."""
    return write_runs(read_sessions(src), out_dir)
