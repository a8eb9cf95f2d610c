"""Import OpenClaw's SQLite session store (``agents/<agent>/agent/openclaw-agent.sqlite``, docs/agents-openclaw.md).

OpenClaw 2026.8 and later keep each agent's sessions in one SQLite database. Table ``transcript_events``
holds one session entry per row (``session_id``, ``seq``), its JSON either as ``event_json`` text or, from
agent schema 23, as a zstd frame in ``event_zstd`` (events of 1 KiB or more; ``event_utf8_bytes`` is the
decompressed length). Sessions are version 4, or version 3 when ``openclaw doctor`` imported them from the
JSONL store. ``schema_meta`` names the agent and the OpenClaw version that wrote the database.

``PATH`` is the database file, or a folder (an OpenClaw state directory) searched for
``openclaw-agent.sqlite`` files. The database is copied with its ``-wal`` file (committed rows may still be
there) and the copy is read, so the source is never changed and a database another process has open reads
too. Every session in it is imported, one folder per session. A row that cannot be read (no JSON, bad zstd,
a length that does not match, JSON that is not an object) is an error naming the file, the session and seq.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import zstandard

from harness.core.nesting import loads_json
from harness.core.errors import TranscriptImportError
from harness.importers.events import to_events, write_runs
from harness.importers.openclaw import Entry, SessionSource, read_session
from harness.importers.reader import store_copy
from harness.importers.recorded import RecordedRun
from harness.core.transcript import Event

__all__ = ["FORMAT", "DATABASE_NAME", "databases", "read_database", "read_sessions", "read_runs", "import_to_folder"]

FORMAT = "openclaw-sqlite"
DATABASE_NAME = "openclaw-agent.sqlite"
_MAX_EVENT_BYTES = 4 * 1024 * 1024
"""OpenClaw's own bound on one stored event (the table's CHECK constraint)."""
_REQUIRED_COLUMNS = ("session_id", "seq", "event_json")


def databases(src: Path) -> list[Path]:
    """The databases ``src`` names: itself, or every ``openclaw-agent.sqlite`` under a folder."""
    if src.is_dir():
        found = sorted(p for p in src.rglob(DATABASE_NAME) if p.is_file())
        if not found:
            raise TranscriptImportError(str(src), "", f"no {DATABASE_NAME} under this folder")
        return found
    if not src.exists():
        raise TranscriptImportError(str(src), "", "file not found")
    return [src]


def _decode(row: sqlite3.Row, name: str, where: str) -> dict[str, Any]:
    text_json = row["event_json"]
    blob = row["event_zstd"]
    if text_json is not None and blob is not None:
        raise TranscriptImportError(name, where, "both event_json and event_zstd are set (one event, one form)")
    if blob is not None:
        if not isinstance(blob, bytes):
            raise TranscriptImportError(name, where, f"event_zstd: expected a blob, got {type(blob).__name__}")
        expected = row["event_utf8_bytes"]
        try:
            data = zstandard.ZstdDecompressor().decompress(
                blob, max_output_size=expected if isinstance(expected, int) and expected > 0 else _MAX_EVENT_BYTES)
        except zstandard.ZstdError as exc:
            raise TranscriptImportError(name, where, f"event_zstd: not a readable zstd frame ({exc})") from None
        if isinstance(expected, int) and len(data) != expected:
            raise TranscriptImportError(name, where, f"event_zstd: decompressed to {len(data)} bytes, the row says "
                                                     f"event_utf8_bytes {expected}")
        try:
            text_json = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TranscriptImportError(name, where, f"event_zstd: not UTF-8 text (byte {exc.start})") from None
    if text_json is None:
        raise TranscriptImportError(name, where, "neither event_json nor event_zstd holds the event")
    if not isinstance(text_json, str):
        raise TranscriptImportError(name, where, f"event_json: expected text, got {type(text_json).__name__}")
    column = "event_zstd" if blob is not None else "event_json"
    try:
        event = loads_json(text_json)
    except json.JSONDecodeError as exc:
        raise TranscriptImportError(name, where, f"{column}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(event, dict):
        raise TranscriptImportError(name, where, f"{column}: an event must be a JSON object, "
                                                 f"got {type(event).__name__}")
    return event


def _read(conn: sqlite3.Connection, name: str, sha: str) -> list[tuple[SessionSource, bytes]]:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "transcript_events" not in tables:
        raise TranscriptImportError(name, "", "no transcript_events table: not an OpenClaw agent database "
                                              f"(agents/<agent>/agent/{DATABASE_NAME})")
    columns = {r[1] for r in conn.execute("PRAGMA table_info(transcript_events)")}
    for column in _REQUIRED_COLUMNS:
        if column not in columns:
            raise TranscriptImportError(name, "transcript_events", f"no column {column}: not a transcript table "
                                                                   "this importer reads")
    has_zstd = "event_zstd" in columns  # older agent schemas keep every event as text
    select = ", ".join(["seq", "event_json",
                        "event_utf8_bytes" if "event_utf8_bytes" in columns else "NULL AS event_utf8_bytes",
                        "event_zstd" if has_zstd else "NULL AS event_zstd"])
    facts: dict[str, Any] = {"database": name}
    agent_version = ""
    if "schema_meta" in tables:
        meta = conn.execute("SELECT * FROM schema_meta WHERE role = 'agent'").fetchone()
        if meta is None:
            roles = sorted({r["role"] for r in conn.execute("SELECT role FROM schema_meta")})
            raise TranscriptImportError(name, "schema_meta", f"this database's role is {', '.join(roles) or 'none'}, "
                                                             "not agent: it holds no agent's sessions")
        facts.update({"agent_id": meta["agent_id"], "agent_schema": meta["schema_version"]})
        agent_version = meta["app_version"] or ""
    sessions = [r[0] for r in conn.execute(
        "SELECT session_id FROM transcript_events GROUP BY session_id ORDER BY min(rowid)")]
    if not sessions:
        raise TranscriptImportError(name, "transcript_events", "no session: the table is empty")
    out: list[tuple[SessionSource, bytes]] = []
    for session_id in sessions:
        entries: list[Entry] = []
        for row in conn.execute(f"SELECT {select} FROM transcript_events WHERE session_id = ? ORDER BY seq",
                                (session_id,)):
            where = f"transcript_events session {session_id} seq {row['seq']}"
            entries.append(Entry(where, _decode(row, name, where)))
        source = SessionSource(format=FORMAT, file=name, sha256=sha, entries=entries, facts=dict(facts),
                               agent_version=agent_version)
        kept = {"format": FORMAT, "file": name, "session_id": session_id, "entries": [e.data for e in entries]}
        out.append((source, json.dumps(kept, ensure_ascii=False, indent=1).encode("utf-8")))
    return out


def read_database(path: Path, name: str | None = None) -> list[RecordedRun]:
    """Every session of one database, each as a recorded run. ``name`` names the file in errors and records
    (default: ``path``)."""
    name = name or str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TranscriptImportError(name, "", f"cannot read: {exc.strerror or exc}") from None
    if not raw.startswith(b"SQLite format 3\x00"):
        raise TranscriptImportError(name, "", "not an SQLite database")
    try:
        with store_copy(path, DATABASE_NAME) as conn:
            sources = _read(conn, name, hashlib.sha256(raw).hexdigest())
    except sqlite3.DatabaseError as exc:
        raise TranscriptImportError(name, "", f"cannot read the database: {exc}") from None
    return [read_session(source, kept) for source, kept in sources]


def read_sessions(src: str | os.PathLike[str]) -> list[RecordedRun]:
    """Every session in the databases ``src`` names. Bad input raises ``TranscriptImportError``."""
    runs = [run for db in databases(Path(src)) for run in read_database(db)]
    seen: dict[str, str] = {}
    for run in runs:
        if run.label in seen:
            raise TranscriptImportError(run.file, "transcript_events",
                                        f"session {run.label} is also in {seen[run.label]}")
        seen[run.label] = run.file
    return runs


def read_runs(src: str | os.PathLike[str]) -> list[tuple[RecordedRun, list[Event]]]:
    """Every session in the databases ``src`` names with its transcript events."""
    return [(run, to_events(run)) for run in read_sessions(src)]


def import_to_folder(src: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Read every session ``src`` names, then write one attempt-like folder per session under ``out_dir``."""
    return write_runs(read_sessions(src), out_dir)
