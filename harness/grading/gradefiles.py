"""An attempt's grade files, owned here: ``grade.json`` (its latest automatic grade) and ``grades.jsonl`` (every grade
it was ever given, automatic grades and reviewers' overrides, oldest first).

Written, appended, read back and taken back here, and nowhere else: the store calls these when it records an
attempt or a grade (``harness.store``), ``fleet import`` when it grades an imported session's folder (which is no
sweep's and loads no store), reports and the dashboard when they show an override. Grading imports nothing of the
store.

Writing is durable and in order: a history line is on disk before the grade it records has its name, and a grade
that did not take leaves no line (``write_grade_files_batch``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from harness.core.errors import StoreError
from harness.core.files import FileSystems, WriteFailed, open_own, temp_beside
from harness.grading.model import Grade
from harness.grading.override import GradeHistory, GradeOverride

__all__ = ["write_grade_files", "write_grade_files_batch", "append_grade_line", "undo_grade_files",
           "read_grade_history", "latest_override"]


def write_grade_files(folder: Path, grade: Grade) -> list[tuple[Path, int]]:
    """``grade.json`` (the latest grade, replaced atomically) and one more line of ``grades.jsonl`` (history), with one
    disk flush for both (``write_grade_files_batch``). Returns what ``undo_grade_files`` needs to take them back."""
    return write_grade_files_batch([(folder, grade)])


def append_grade_line(folder: Path, record: Grade | GradeOverride) -> None:
    """One more line of the attempt's ``grades.jsonl``: an automatic grade or a reviewer's override, fsynced."""
    _append_line(folder, record, fsync=True)


def _append_line(folder: Path, record: Grade | GradeOverride, fsync: bool) -> None:
    try:
        with open_own(folder / "grades.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, "a") as f:
            f.write((record.model_dump_json() + "\n").encode())
            f.flush()
            if fsync:
                os.fsync(f.fileno())
    except OSError as exc:
        raise StoreError(f"cannot write {folder / 'grades.jsonl'}: {exc.strerror or exc}") from exc


def _history_size(folder: Path) -> int:
    """The size of the folder's ``grades.jsonl``; -1 when there is none."""
    try:
        return os.lstat(folder / "grades.jsonl").st_size
    except OSError:
        return -1


def _cut_history(folder: Path, size: int) -> None:
    """``grades.jsonl`` cut back to ``size`` bytes, or removed if there was none (-1): the lines appended since are
    taken back (shrinking a file needs no space). Best effort: a history that cannot be cut keeps a line of a grade
    that did not take."""
    if size < 0:
        try:
            (folder / "grades.jsonl").unlink(missing_ok=True)
        except OSError:
            pass
        return
    try:
        fd = os.open(folder / "grades.jsonl", os.O_WRONLY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass
    finally:
        os.close(fd)


def undo_grade_files(written: list[tuple[Path, int]]) -> None:
    """Take back what ``write_grade_files`` wrote (a later step of the same record failed): each folder's history cut
    back to where it was, its grade.json removed (the attempt it grades was not recorded)."""
    for folder, size in written:
        _cut_history(folder, size)
        (folder / "grade.json").unlink(missing_ok=True)


def write_grade_files_batch(graded: list[tuple[Path, Grade]]) -> list[tuple[Path, int]]:
    """Each folder's ``grade.json`` (the latest grade, replaced atomically) and one more line of its ``grades.jsonl``
    (history), for one attempt or many (a regrade of a whole sweep), with one disk flush for them all: every new
    grade.json is written to a temporary name and every history line appended, the file systems are flushed
    (``FileSystems``; an fsync of each file where there is no ``syncfs``), then every grade.json is renamed into place.
    So a reader sees the old grade.json or the new one, never half of one, and a history line is on disk before the
    grade it records has its name. A flush per file cost 0.3 ms each here (two per attempt: a third of recording a
    short one, 6 s of a 10,000-attempt regrade). When any of it fails, what did not take is taken back: the temporary
    files removed and the lines of the grades not renamed cut off again, so the history holds a line for each grade
    that took, and only those. Returns each folder with its history's size before (``undo_grade_files``)."""
    pending: list[tuple[Path, str, int]] = []  # folder, grade.json's temporary name, the history's size before
    renamed = 0
    try:
        try:
            with FileSystems() as systems:
                each = not systems.together
                for folder, grade in graded:
                    systems.before_write(folder)
                    path = folder / "grade.json"
                    size = _history_size(folder)
                    try:
                        tmp = temp_beside(path, grade.model_dump_json(indent=2).encode(), fsync=each)
                    except OSError as exc:
                        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc
                    pending.append((folder, tmp, size))
                    _append_line(folder, grade, fsync=each)
                if not each:
                    systems.flush()
        except WriteFailed as exc:  # a folder that cannot be opened, a file system that cannot be flushed
            raise StoreError(str(exc)) from exc
        for folder, tmp, _ in pending:
            try:
                os.replace(tmp, folder / "grade.json")
            except OSError as exc:
                raise StoreError(f"cannot write {folder / 'grade.json'}: {exc.strerror or exc}") from exc
            renamed += 1
    finally:
        for folder, tmp, size in pending[renamed:]:
            Path(tmp).unlink(missing_ok=True)
            _cut_history(folder, size)
    return [(folder, size) for folder, _, size in pending]


def read_grade_history(folder: Path) -> GradeHistory:
    """Every grade given to the attempt in ``folder``, oldest first: automatic grades (``Grade``) and overrides
    (``GradeOverride``), from ``grades.jsonl``. No file is no history; a bad line is a ``StoreError`` naming the
    file and the line."""
    path = folder / "grades.jsonl"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
    history: GradeHistory = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
            if isinstance(obj, dict) and obj.get("kind") == "override":
                history.append(GradeOverride.model_validate(obj))
            else:
                history.append(Grade.model_validate(obj))
        except ValueError as exc:
            # ValidationError is a ValueError; json's too.
            why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise StoreError(f"{path}: line {n}: {why}") from None
    return history


def latest_override(folder: Path) -> GradeOverride | None:
    """The attempt's latest override (the one its summary counts), or None."""
    overrides = [h for h in read_grade_history(folder) if isinstance(h, GradeOverride)]
    return overrides[-1] if overrides else None
