"""JSON and TOML read with a bound on nesting depth.

Why: Python's parsers recurse once per level, so a file nested a few thousand levels deep (``[[[[...``) ends
in a ``RecursionError`` inside the parser, and a value a few hundred deep that does parse can end in one later,
in whatever walks it (pydantic, ``json.dumps``, a recursive key search). No file the harness reads nests deeper
than about ten levels (the real recordings in tests/ reach 9), so anything past ``MAX_DEPTH`` is refused where
it is read, as that format's own syntax error: the errors below subclass the parsers' own, so every reader's
existing ``except json.JSONDecodeError`` / ``except tomllib.TOMLDecodeError`` names the file and the line.

Standard library only: the host-side agent and ``harness.modelserver`` import it too.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any, Final

__all__ = ["MAX_DEPTH", "JSONTooDeep", "TOMLTooDeep", "loads_json", "loads_toml", "depth_exceeds"]

MAX_DEPTH: Final = 100
"""Levels of arrays and objects (tables) a value may have."""

_PROBLEM = f"nested more than {MAX_DEPTH} levels deep (arrays or objects inside each other)"


class JSONTooDeep(json.JSONDecodeError):
    """JSON nested deeper than ``MAX_DEPTH``: a ``JSONDecodeError`` whose ``msg`` says so."""

    def __init__(self, doc: str) -> None:
        super().__init__(_PROBLEM, doc, 0)


class TOMLTooDeep(tomllib.TOMLDecodeError):
    """TOML nested deeper than ``MAX_DEPTH``."""

    def __init__(self) -> None:
        super().__init__(_PROBLEM)


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` holds lists and dicts more than ``limit`` levels deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if level > limit:
            return True
        stack.extend((child, level + 1) for child in children)
    return False


def loads_json(text: str | bytes) -> Any:
    """``json.loads``; nesting past ``MAX_DEPTH`` raises ``JSONTooDeep`` (a ``JSONDecodeError``)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise JSONTooDeep(text if isinstance(text, str) else "") from None
    # A value cannot nest deeper than the text has opening brackets: most lines are settled by two C-speed counts,
    # and only the rest are walked (the walk was the dearest part of reading a transcript).
    opening = text.count("[") + text.count("{") if isinstance(text, str) else text.count(b"[") + text.count(b"{")
    if opening > MAX_DEPTH and depth_exceeds(value):
        raise JSONTooDeep(text if isinstance(text, str) else "")
    return value


def loads_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads``; nesting past ``MAX_DEPTH`` raises ``TOMLTooDeep`` (a ``TOMLDecodeError``)."""
    try:
        value = tomllib.loads(text)
    except RecursionError:
        raise TOMLTooDeep() from None
    if depth_exceeds(value):
        raise TOMLTooDeep()
    return value
