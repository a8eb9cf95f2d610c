"""Load a TOML file into a pydantic model, turning every problem into one line: file, key path, problem.

Inventory files, items and rounds all go through here, so they fail the same way.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from harness.core.errors import _FileKeyError
from harness.core.nesting import loads_toml

M = TypeVar("M", bound=BaseModel)


class FieldProblem(ValueError):
    """A validator's error about one key of the model it checks (a model-level validator has no field
    location of its own): ``validate`` appends ``key`` to the location, so the message names that key."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        super().__init__(problem)


def read_toml(path: Path, error: type[_FileKeyError]) -> dict[str, Any]:
    """Parse a TOML file; a missing or malformed file raises ``error`` naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(str(path), "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(str(path), "", f"cannot read: {exc}") from exc
    try:
        return loads_toml(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(str(path), "", f"not valid TOML: {exc}") from exc


def key_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic error location as a TOML-ish key path: ``hosts.tower1.model.context``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def validate(model: type[M], data: Any, file: str, error: type[_FileKeyError], prefix: str = "") -> M:
    """Validate ``data`` as ``model``; the first problem becomes ``error(file, key, problem)``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, FieldProblem):
            loc += (cause.key,)
        key = key_path(loc)
        if prefix:
            key = f"{prefix}.{key}" if key else prefix
        problem = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            problem = "unknown key"
        elif first["type"] == "missing":
            problem = "required key is missing"
        more = len(exc.errors()) - 1
        if more:
            problem += f" (and {more} more problem{'s' if more > 1 else ''})"
        raise error(file, key, problem) from None
