"""Reading a stored JSON record through its model, with one line naming the file and the key on bad input.

Every record the store keeps (meta.json, grade.json, checks.json, receipt.json, the workspace manifest)
is read here, so a corrupt or hand-edited file is always said the same way,
``PATH: KEY: problem``, as a ``StoreError`` that the CLI prints as one line, never as a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

from harness.core.nesting import loads_json
from harness.core.errors import StoreError

__all__ = ["read_record", "read_optional", "problem", "STORED", "is_stored", "check_version"]

T = TypeVar("T")

STORED = {"stored": True}
"""Validation context of a record read from a file: its migrators then insist on a ``schema_version``,
which a record made in code takes from its default."""


def is_stored(info: ValidationInfo) -> bool:
    return isinstance(info.context, dict) and info.context.get("stored") is True


def check_version(data: dict[str, Any], known: tuple[int, ...], info: ValidationInfo) -> int:
    """The record's ``schema_version``, one of ``known``. A record read from a file must say it: every
    version ever written did, so one without it is not such a record. Made in code, it is today's."""
    if "schema_version" not in data:
        if is_stored(info):
            raise PydanticCustomError("schema_version", "schema_version: missing")
        return known[-1]
    version = data["schema_version"]
    if type(version) is not int or version not in known:
        raise PydanticCustomError(
            "schema_version", "schema_version {version} is not supported (this harness reads {known})",
            {"version": repr(version), "known": ", ".join(map(str, known))})
    return version


def problem(error: ValidationError, *, tags: tuple[str, ...] = ()) -> str:
    """``KEY: message`` of a validation error's first problem (``and N more`` when there are others).

    ``tags`` are the labels of a tagged union, which pydantic puts first in the location; they name no key
    of the file, so they are left out."""
    first = error.errors()[0]
    loc = list(first["loc"])
    if loc and loc[0] in tags:
        loc = loc[1:]
    where = ""
    for part in loc:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    more = error.error_count() - 1
    message = str(first["msg"]) + (f" (and {more} more)" if more else "")
    return f"{where}: {message}" if where else message


def read_optional(path: Path, model: type[T] | TypeAdapter[T], *, tags: tuple[str, ...] = ()) -> T | None:
    """Like ``read_record``, but a missing file is None: for a record that is absent for a reason (checks.json
    of an attempt whose item has no checks, the manifest of a folder whose workspace was not captured)."""
    if not path.exists():
        return None
    return read_record(path, model, tags=tags)


def read_record(path: Path, model: type[T] | TypeAdapter[T], *, tags: tuple[str, ...] = ()) -> T:
    """The record in ``path``, validated (and migrated) by ``model``, a pydantic model class or a TypeAdapter.
    A missing, unreadable or invalid file is a ``StoreError`` naming the file and the key."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise StoreError(f"{path}: missing") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = loads_json(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise StoreError(f"{path}: not valid JSON: {reason}{where}") from None
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(data, context=STORED)
        return model.model_validate(data, context=STORED)  # type: ignore[attr-defined]
    except ValidationError as exc:
        raise StoreError(f"{path}: {problem(exc, tags=tags)}") from None
