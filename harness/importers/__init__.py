"""Importers: other agents' recorded sessions as the harness's transcripts and attempt-like folders.

``IMPORTERS`` maps a format name to the module that reads it. Each module has ``FORMAT`` and
``import_to_folder(src, out_dir) -> list[Path]``: it reads the whole file (bad input raises
``TranscriptImportError`` naming the file and the key), then writes one folder per recorded run under
``out_dir``, which ``grade_folder`` grades like any attempt (docs/importers.md). Every format takes one
road: its reader and per-entry handlers fill a ``recorded.RecordedRun``, and ``events.to_events`` alone turns
that into transcript events. A new format is one module and one line here.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from harness.core.errors import UsageError

if TYPE_CHECKING:
    from harness.importers.folder import grade_folder

__all__ = ["IMPORTERS", "Importer", "importer", "import_to_folder", "grade_folder"]

IMPORTERS: dict[str, str] = {
    "pixel-fleet": "harness.importers.pixel_fleet",
    "openclaw-jsonl": "harness.importers.openclaw_jsonl",
    "openclaw-sqlite": "harness.importers.openclaw_sqlite",
    "opencode": "harness.importers.opencode",
    "hermes": "harness.importers.hermes",
}
"""Format name -> the module that imports it (imported only when asked for)."""


class Importer(Protocol):
    FORMAT: str

    def import_to_folder(self, src: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]: ...


def importer(name: str) -> Importer:
    """The importer of format ``name``; an unknown name is a ``UsageError`` listing the known ones."""
    if name not in IMPORTERS:
        raise UsageError(f"unknown import format {name!r}: expected one of {', '.join(sorted(IMPORTERS))}")
    return cast(Importer, importlib.import_module(IMPORTERS[name]))  # lazy: one format's reader, not all five


def __getattr__(name: str) -> Any:
    # ``grade_folder`` pulls in the grading code and the attempt records' models (tens of ms of a start);
    # `fleet replay` reads only IMPORTERS and a format's reader, so the grader is imported when first asked for.
    if name == "grade_folder":
        from harness.importers.folder import grade_folder  # lazy: the grader and records, not for `fleet replay`

        return grade_folder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def import_to_folder(name: str, src: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Import ``src`` in format ``name``: one folder per recorded run under ``out_dir``."""
    return importer(name).import_to_folder(src, out_dir)
