"""The inputs of a replay: a sweep id (every transcript in it), a folder of sessions, or one session file in any
format the harness reads. Each becomes ``ReplaySession``s through the one transcript reader, with the input's
sha256, checked against the sha256 the sweep or the imported folder recorded for it.

Formats are told apart by their content (``sniff``), never by a name alone: our ``transcript.jsonl``; the
pixel-fleet recordings; OpenClaw's JSONL session files and SQLite store; OpenCode's store, export and event
stream; Hermes's store and export. An input that is none of these is one error line naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import ReplayError, StoreError, TranscriptError, one_line
from harness.importers import IMPORTERS, importer
from harness.importers.events import to_events
from harness.importers.reader import SQLITE_MAGIC
from harness.core.nesting import loads_json
from harness.replay.session import ReplaySession, session_from_events
from harness.core.transcript import parse_transcript

__all__ = ["TRANSCRIPT", "Input", "sniff", "read_source"]

TRANSCRIPT = "transcript"
"""The format name of our own transcripts (besides the importers' names)."""
_OPENCODE_EVENTS = frozenset({"step_start", "step_finish", "text", "reasoning", "tool_use", "error"})
_SESSION_SUFFIXES = (".json", ".jsonl", ".db", ".sqlite", ".sqlite3")
_MAX_DOCUMENT = 256 * 1024 * 1024


@dataclass(frozen=True)
class Input:
    """One input file and what was read from it."""

    path: str
    format: str
    sha256: str
    recorded_sha256: str | None
    """What the sweep or the imported folder recorded for this file (None: nothing recorded)."""
    sessions: tuple[ReplaySession, ...]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise ReplayError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    return digest.hexdigest()


def _tables(path: Path) -> dict[str, set[str]]:
    """Each table of an SQLite file with its columns."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            names = [row[0] for row in con.execute("select name from sqlite_master where type = 'table'")]
            return {name: {row[0] for row in con.execute("select name from pragma_table_info(?)", (name,))}
                    for name in names}
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise ReplayError(str(path), "", f"an SQLite file that cannot be read: {exc}") from None


def sniff(path: Path) -> str | None:
    """The format of ``path`` by its content; None when it is no session format the harness reads."""
    try:
        with path.open("rb") as f:
            head = f.read(1 << 16)
    except OSError as exc:
        raise ReplayError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    if head.startswith(SQLITE_MAGIC):
        # By the tables and the columns each store's reader needs: an application's own `sessions` and `messages`
        # tables are not a Hermes store.
        tables = _tables(path)

        def has(table: str, *columns: str) -> bool:
            return table in tables and set(columns) <= tables[table]

        if has("transcript_events", "session_id", "seq"):
            return "openclaw-sqlite"
        if has("session", "id", "directory") and has("message", "session_id", "data") and has(
                "part", "message_id", "session_id", "data"):
            return "opencode"
        if has("sessions", "id", "source", "model") and has("messages", "session_id", "role", "tool_call_id",
                                                            "tool_calls"):
            return "hermes"
        return None
    text = head.decode("utf-8", errors="replace").lstrip()
    if not text.startswith("{"):
        return None
    first = text.split("\n", 1)[0]
    try:
        line: Any = loads_json(first)  # depth-limited: a deeply nested line is not JSON we read
    except json.JSONDecodeError:
        line = None  # a JSON document over several lines (pixel-fleet, an OpenCode export)
    if isinstance(line, dict):
        found = _by_keys(line)
        if found is not None:
            return found
    return _by_keys(_document(path)) if line is None else None


def _by_keys(obj: dict[str, Any]) -> str | None:
    """The format a JSON object (a JSONL file's first line, or a whole JSON document) belongs to, by its keys and
    their kinds (an app's ``{"name": "app", "sessions": 3}`` is no recording)."""
    if obj.get("event") == "run_start" and "schema_version" in obj:
        return TRANSCRIPT
    if obj.get("type") == "session" and isinstance(obj.get("id"), str) and isinstance(obj.get("version"), int) \
            and isinstance(obj.get("timestamp"), str):
        return "openclaw-jsonl"
    if obj.get("type") in _OPENCODE_EVENTS and isinstance(obj.get("sessionID"), str):
        return "opencode"  # the event stream of `opencode run --format json`
    if isinstance(obj.get("info"), dict) and isinstance(obj.get("messages"), list):
        return "opencode"  # `opencode export`
    if isinstance(obj.get("messages"), list) and {"id", "source", "model", "started_at"} <= set(obj):
        return "hermes"  # `hermes sessions export`
    if _pixel_calls(obj.get("calls")):
        return "pixel-fleet"
    sessions = obj.get("sessions")
    if isinstance(sessions, list) and sessions and all(
            isinstance(x, dict) and isinstance(x.get("label"), str) and _pixel_calls(x.get("calls")) for x in sessions):
        return "pixel-fleet"
    return None


def _pixel_calls(calls: object) -> bool:
    """A pixel-fleet recording's calls: a list of objects, each with its id and its tool."""
    return isinstance(calls, list) and bool(calls) and all(
        isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("tool", c.get("name")), str)
        for c in calls)


def _document(path: Path) -> dict[str, Any]:
    """A file that is one JSON object (a pixel-fleet recording, an OpenCode export); {} for anything else."""
    try:
        if path.stat().st_size > _MAX_DOCUMENT:
            return {}  # larger than any recording: not sniffed (give --format)
        value = loads_json(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _recorded_sha(folder: Path, name: str) -> str | None:
    """The sha256 an attempt's or an imported run's ``meta.json`` recorded for ``name`` beside it."""
    # Here, not at the top: the records' models (and the catalog and inventory they hold) cost a one-session
    # replay of a file a good part of its start, and only a sweep's or an imported folder's files need them.
    from harness.core.records import AttemptMeta, ImportedMeta, read_meta  # lazy: a sweep's or imported folder only

    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = read_meta(meta_path)
    except StoreError as exc:
        # The record that would vouch for the file cannot be read: nothing can be checked, so nothing is replayed.
        raise ReplayError(str(folder / name), "sha256", f"cannot be checked: meta.json beside it cannot be read "
                          f"({one_line(str(exc))[:200]})") from None
    artifacts = meta.artifacts if isinstance(meta, (AttemptMeta, ImportedMeta)) else []
    return next((a.sha256 for a in artifacts if a.name == name), None)


def _transcript_input(path: Path, name: str, source: str | None = None) -> Input:
    try:
        data = path.read_bytes()  # once: hashed, then parsed
    except OSError as exc:
        raise ReplayError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    sha = hashlib.sha256(data).hexdigest()
    try:
        events = parse_transcript(data, str(path))
    except TranscriptError as exc:
        raise ReplayError(str(path), exc.key, exc.problem) from None
    session = session_from_events(events, source=source or str(path), name=name, sha256=sha)
    return Input(str(path), TRANSCRIPT, sha, _recorded_sha(path.parent, path.name), (session,))


def _imported_input(path: Path, fmt: str, prefix: str) -> Input:
    sha = _sha256(path)
    module: Any = importer(fmt)
    reader = getattr(module, "read_sessions", None) or module.read_runs
    runs = reader(path)
    sessions = []
    for item in runs:
        run = item[0] if isinstance(item, tuple) else item
        events = item[1] if isinstance(item, tuple) else to_events(run)
        name = f"{prefix}{run.label}" if prefix or len(runs) > 1 or run.label else path.name
        sessions.append(session_from_events(events, source=str(path), name=name or path.name, sha256=sha,
                                            label=run.label))
    return Input(str(path), fmt, sha, None, tuple(sessions))


def _file(path: Path, fmt: str | None, prefix: str = "") -> Input:
    found = fmt or sniff(path)
    if found is None:
        known = ", ".join([TRANSCRIPT, *sorted(IMPORTERS)])
        raise ReplayError(str(path), "", f"not a session in a format replay reads ({known}); give --format")
    if found == TRANSCRIPT:
        return _transcript_input(path, f"{prefix}{path.stem}" if prefix else path.name)
    return _imported_input(path, found, prefix)


def _folder(root: Path, fmt: str | None) -> Iterator[Input]:
    """Every session under ``root``, in name order: an attempt's or an imported run's folder (``meta.json`` beside
    ``transcript.jsonl``) gives its transcript only, and what is inside it (its workspace) is not walked; other
    files are read when their content is a session format, and anything else is left alone."""
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        here = Path(folder)
        rel = here.relative_to(root).as_posix()
        if "transcript.jsonl" in files and "meta.json" in files:
            dirs.clear()
            yield _transcript_input(here / "transcript.jsonl", rel if rel != "." else "transcript.jsonl")
            continue
        for name in sorted(files):
            path = here / name
            if not name.endswith(_SESSION_SUFFIXES) or name.endswith(".trajectory.jsonl") or not path.is_file():
                continue
            found = fmt or sniff(path)
            if found is not None:
                yield _file(path, found, path.relative_to(root).as_posix() + "#")


def _sweep(store_root: Path, sweep_id: str) -> Iterator[Input]:
    from harness.store import Store  # lazy: the store (50 ms), for a sweep's attempts only

    store = Store(store_root)
    sweep = store.load_sweep(sweep_id)
    for cell in sweep.cells:
        for summary in sweep.attempts.get(cell.id, []):
            folder = store.attempt_dir(sweep_id, cell.id, summary.attempt)
            transcript = folder / "transcript.jsonl"
            if transcript.is_file():
                yield _transcript_input(transcript, f"{cell.id}/attempt-{summary.attempt}",
                                        source=f"{sweep_id}/{cell.id}/attempt-{summary.attempt}")


def read_source(source: str, store_root: Path, fmt: str | None = None) -> list[Input]:
    """The inputs ``source`` names: a path (file or folder) when one exists, else a sweep id in ``store_root``."""
    path = Path(source)
    if os.path.islink(path) and not path.exists():
        raise ReplayError(source, "", "a link that cannot be followed (it points nowhere, or round in a loop)")
    if path.exists() and not path.is_dir() and not path.is_file():
        raise ReplayError(source, "", "not a regular file or folder (a FIFO, a device or a socket): not read")
    if path.is_dir():
        inputs = list(_folder(path, fmt))
        if not inputs:
            raise ReplayError(source, "", "the folder holds no session replay can read")
        return inputs
    if path.exists():
        return [_file(path, fmt)]
    if "/" not in source and (store_root / source / "sweep.json").is_file():
        inputs = list(_sweep(store_root, source))
        if not inputs:
            raise ReplayError(source, "", "the sweep holds no transcript yet")
        return inputs
    raise ReplayError(source, "", f"no such file or folder, and no sweep of that id under {store_root}")
