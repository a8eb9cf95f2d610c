"""The one way an importer reports bad input: ``TranscriptImportError(file, where, problem)``, where ``where`` is
the key path, line or row, so the user's error line names the exact place (docs/importers.md)."""

from __future__ import annotations

from typing import NoReturn

from harness.errors import TranscriptImportError

__all__ = ["Reader"]


class Reader:
    """Reads one file, naming the file and the place (key, line, row) in every error."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, where: str, problem: str) -> NoReturn:
        raise TranscriptImportError(self.file, where, problem)
