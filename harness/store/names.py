"""What the store accepts as a name, and what it keeps a file under.

Two rules about names, apart from the writing because every reader needs them too (``fleet show``, reports, the
dashboard, ``fleet prune``):

- **Stored ids stay one part of a path.** A sweep's id, and each cell's host, item and agent, are folder names;
  a cell's id is HOST/ITEM/AGENT/rREP. ``check_stored_ids`` checks every one read from a sweep.json, so no folder
  made from them leaves the sweep's folder (a crafted store is one line naming the file and the key).
- **Artifact names become file names.** A worker's artifact name must stay inside its attempt folder and never
  replace the records (``safe_relpath``); a name a file system cannot hold as it is (raw bytes, a part over 255
  bytes, a whole over NAME_BUDGET) is kept under an escaped or shortened one that says what it was
  (``storable_names``), so a rename never costs a file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath

from harness.core.errors import ArtifactRefused, UnsafeStoredPath
from harness.core.paths import name_problem, relpath_problem
from harness.core.records import Cell
from harness.core.sweep import SweepRecord

__all__ = ["storable_name", "storable_names", "name_bytes", "NAME_MAX", "NAME_BUDGET", "RENAMED", "RECORD_FILES",
           "check_stored_ids", "safe_relpath"]


def storable_name(name: str) -> str:
    """An artifact name as the store can keep it: a name that is not valid Unicode (a file name of raw bytes on
    the host, decoded with surrogates) gets its bad bytes written as ``\\udcff`` escapes, so it can be a file
    name, a JSON string and an index row; the file is kept, under a name that says what it was."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


NAME_MAX = 255
"""Bytes of one file name part on the file systems a results directory lives on (ext4, APFS, XFS)."""
NAME_BUDGET = 1024
"""Bytes of an artifact's whole name under its attempt folder: well inside Linux's PATH_MAX (4096) with the
results directory's own path in front, and inside macOS's (1024) for a copy read there with a short prefix."""
RENAMED = "renamed"
"""The attempt folder's folder for files whose path, even with shortened parts, is longer than NAME_BUDGET
(or whose new name clashed): ``renamed/<hash of the original name>~<the name's tail>``."""


def name_bytes(name: str) -> bytes:
    """The exact bytes of a host file name that reached Python decoded with surrogates (surrogateescape); a lone
    surrogate no file system gives (from crafted JSON) is kept as its UTF-8-like encoding."""
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogatepass")


def _digest(raw: bytes, n: int) -> str:
    return hashlib.sha256(raw).hexdigest()[:n]


def _cut(text: str, limit: int, tail: bool = False) -> str:
    """At most ``limit`` UTF-8 bytes of ``text`` (its start, or its end), never cutting a character in two."""
    data = text.encode("utf-8")
    part = data[-limit:] if tail else data[:limit]
    return part.decode("utf-8", "ignore")


def _flat_name(name: str, n: int = 1) -> str:
    tail = _cut(storable_name(name).rsplit("/", 1)[-1], 80, tail=True).lstrip(".")
    return f"{RENAMED}/{_digest(name_bytes(name), 32)}~{tail}" + (f"~{n}" if n > 1 else "")


def _fitting_name(name: str) -> str:
    """``name`` escaped (storable_name), each part over NAME_MAX bytes cut to its start and a hash of the whole
    part, and, when the whole is still over NAME_BUDGET bytes, moved to the RENAMED folder."""
    parts = storable_name(name).split("/")
    for i, part in enumerate(parts):
        if len(part.encode("utf-8")) > NAME_MAX:
            parts[i] = f"{_cut(part, NAME_MAX - 24)}~{_digest(name_bytes(name.split('/')[i]), 16)}"
    fitted = "/".join(parts)
    return fitted if len(fitted.encode("utf-8")) <= NAME_BUDGET else _flat_name(name)


def storable_names(names: list[str]) -> list[str]:
    """The names ``names`` are stored under, in order. A name the store can keep as it is keeps it; any other is
    renamed (``_fitting_name``), and a new name that would clash with another name or folder of the attempt (a
    file literally named ``a\\udcff`` beside one named by the bytes ``a\\xff``) moves to the RENAMED folder, so a
    rename never costs a file. Names given twice are left alone, for the caller to refuse."""
    fitted = [_fitting_name(n) for n in names]
    taken: set[str] = set()
    folders: set[str] = set()

    def take(name: str) -> None:
        taken.add(name)
        folders.update(str(p) for p in PurePosixPath(name).parents)

    def clashes(name: str) -> bool:
        return name in taken or name in folders or any(str(p) in taken for p in PurePosixPath(name).parents)

    for n, f in zip(names, fitted):
        if n == f:
            take(n)
    out = []
    for n, f in zip(names, fitted):
        if n != f:
            k = 1
            while clashes(f):
                k += 1
                if k > 1000:
                    raise ArtifactRefused(f"artifact name {storable_name(n)!r}: no free name to store it under")
                f = _flat_name(n, k - 1)
            take(f)
        out.append(f)
    return out


RECORD_FILES = ("meta.json", "grade.json", "grades.jsonl", "answer.txt", "workspace.manifest.json", "receipt.json",
                "checks.json", "transcript.jsonl")
"""The files of an attempt folder the harness itself reads or appends to: none may be a link (the store never
writes one), so a crafted store cannot make `fleet show`, `grade` or `report` read or write through one."""


def check_stored_ids(sweep: SweepRecord, file: Path, folder_id: str) -> None:
    """Every id of ``sweep`` (read from ``file``) that a path is built from stays one safe part of a path, so
    no folder made from them leaves the sweep's folder: the sweep's own id is its folder's name, each cell's
    host, item and agent are plain names and its id is HOST/ITEM/AGENT/rREP, and attempts are listed only for
    planned cells. The first that is not is an ``UnsafeStoredPath`` naming the file and the key."""
    where = str(file)
    if sweep.id != folder_id:
        raise UnsafeStoredPath(where, "id", f"{sweep.id!r} is not the id of the folder it is in ({folder_id!r})")
    planned = set()
    for i, c in enumerate(sweep.cells):
        for key in ("host", "item", "agent"):
            why = name_problem(getattr(c, key))
            if why:
                raise UnsafeStoredPath(where, f"cells[{i}].{key}", why)
        if c.id != Cell.make_id(c.host, c.item, c.agent, c.rep):
            raise UnsafeStoredPath(where, f"cells[{i}].id", f"{c.id!r} is not the cell's HOST/ITEM/AGENT/rREP "
                                   f"({Cell.make_id(c.host, c.item, c.agent, c.rep)!r})")
        if c.id in planned:
            # One cell twice would be counted twice (two repetitions of one, a rate over more cells than ran).
            raise UnsafeStoredPath(where, f"cells[{i}].id", f"{c.id!r} is listed twice")
        planned.add(c.id)
    for cell_id in sweep.attempts:
        if cell_id not in planned:
            raise UnsafeStoredPath(where, f"attempts.{cell_id}", "not a planned cell")


def safe_relpath(name: str) -> PurePosixPath:
    """An artifact name from a worker must stay inside the attempt folder, and never replace the records: it is a
    stored path (``harness.core.paths.relpath_problem``), so the file is kept under exactly the name read back."""
    if relpath_problem(name) or name.split("/", 1)[0] in ("meta.json", "grade.json", "grades.jsonl"):
        raise ArtifactRefused(f"refusing artifact name {name!r}: it points outside the attempt folder or at its record")
    return PurePosixPath(name)

