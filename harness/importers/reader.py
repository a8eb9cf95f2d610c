"""The one way an importer reads a file and reports bad input: ``TranscriptImportError(file, where, problem)``,
where ``where`` is the key path, line or row, so the user's error line names the exact place (docs/importers.md).
Every JSONL source (an OpenClaw session file, OpenCode's event stream, a Hermes export) is read by
``Reader.json_lines``, so a bad or cut line is named the same way whatever wrote it."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, TypeVar

from harness.core.nesting import loads_json
from harness.core.errors import TranscriptImportError

__all__ = ["typed", "Reader", "store_copy", "SQLITE_MAGIC"]

SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first bytes of every SQLite database: a session store rather than a text export."""


class Reader:
    """Reads one file, naming the file and the place (key, line, row) in every error."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, where: str, problem: str) -> NoReturn:
        raise TranscriptImportError(self.file, where, problem)

    def read_bytes(self, path: Path, expected: str) -> bytes:
        """The file's bytes; a missing file, a folder (``expected`` says what to give instead) or an unreadable
        file is one error line."""
        try:
            return path.read_bytes()
        except FileNotFoundError:
            self.fail("", "file not found")
        except IsADirectoryError:
            self.fail("", f"is a folder: give {expected}")
        except OSError as exc:
            self.fail("", f"cannot read: {exc.strerror or exc}")

    def json_lines(self, text: str, *, cut_line: str = "not valid JSON") -> list[tuple[str, str, object]]:
        """Every non-blank line of a JSONL text as (where, the line, its parsed value), where is "line 7". A line
        that is not JSON is one error naming it; the last line, when no newline follows it, is where a writer that
        stopped early cut the file, and the error says so. ``cut_line`` opens that line's problem (OpenClaw's
        session files have always said "incomplete last line"; every other line says "not valid JSON")."""
        lines = text.split("\n")  # not splitlines(): a JSON string may hold U+2028 or a form feed unescaped
        out: list[tuple[str, str, object]] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"line {number}"
            try:
                out.append((where, line, loads_json(line)))
            except json.JSONDecodeError as exc:
                if number == len(lines):  # no newline after it: the writer stopped in the middle of this line
                    self.fail(where, f"{cut_line} ({exc.msg}, column {exc.colno}); the file ends early: "
                                     "is it cut short?")
                self.fail(where, f"not valid JSON ({exc.msg}, column {exc.colno})")
        return out

    def decode_text(self, data: bytes) -> str:
        """A text export's contents: UTF-8, not empty."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.fail("", f"not UTF-8 text and not an SQLite session store (byte {exc.start})")
        if not text.strip():
            self.fail("", "empty file")
        return text


@contextmanager
def store_copy(path: Path, name: str = "store.db") -> Iterator[sqlite3.Connection]:
    """A connection to a copy of the SQLite store at ``path`` (with its ``-wal`` beside it, where committed rows
    may still be), rows as ``sqlite3.Row``: a store an agent is still writing is never opened, locked or changed.
    ``sqlite3.DatabaseError`` is the caller's to name."""
    with tempfile.TemporaryDirectory(prefix="fleet-store-") as tmp:
        copy = Path(tmp) / name
        shutil.copyfile(path, copy)
        wal = Path(f"{path}-wal")
        if wal.is_file():
            shutil.copyfile(wal, f"{copy}-wal")
        con = sqlite3.connect(copy)
        con.row_factory = sqlite3.Row
        try:
            yield con
        except UnicodeDecodeError as exc:
            # sqlite3 decodes TEXT as UTF-8 when a row is fetched and raises this, not a DatabaseError, for a
            # value that is not: the store is damaged like any other unreadable one, so it is named the same way.
            raise sqlite3.DatabaseError(f"a text value that is not UTF-8 (byte {exc.start})") from None
        finally:
            con.close()


_T = TypeVar("_T")
_D = TypeVar("_D")


def typed(value: object, kind: type[_T], default: _D) -> _T | _D:
    """``value`` when it is a ``kind``, else ``default``: a recorded field of another type reads as absent."""
    return value if isinstance(value, kind) else default
