"""How the ``fleet`` command writes to the terminal: two consoles (stdout, stderr) made on their first use.

Apart from the commands because every one of them prints through these, and because this is where start-up is
decided: rich is imported only when a line needs it (a table, markup, a live display). A plain line (``_plain_line``)
is written as rich would write it, without importing rich, which spares a one-session `fleet import` or an error
line the 20 ms of importing it.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["console", "err_console", "warn", "size_text", "print_json"]


def _console(stderr: bool) -> "Console":
    """A console that wraps only on a terminal: a log or a pipe gets each line whole, however long (rich would
    wrap at 80 columns there, and a grep for a cell id or a path would miss half of it)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    wide = None if stream.isatty() else 100_000
    return Console(stderr=stderr, highlight=False, width=wide)


_EMOJI_CODE = re.compile(r":\S*?:")
"""What rich would look up as an emoji name (``:smile:``) in a printed string, even with markup off."""


def _plain_line(objects: tuple[Any, ...], options: dict[str, Any]) -> str | None:
    """The text of a ``print(text, markup=False, soft_wrap=True)`` that rich would write unchanged, else None: one
    string of printable ASCII (no tab, newline or control character, no wide character) with no emoji code."""
    if len(objects) != 1 or not isinstance(objects[0], str) or options != {"markup": False, "soft_wrap": True}:
        return None
    text = objects[0]
    if not (text.isascii() and text.isprintable()) or _EMOJI_CODE.search(text):
        return None
    return text


class _LazyConsole:
    """The console of one stream, made on its first use: importing rich is a fifth of `fleet --version`'s start,
    and a command that prints through click (replay, --version, the JSON outputs) never needs it."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: "Console | None" = None

    def get(self) -> "Console":
        if self._console is None:
            self._console = _console(self._stderr)
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        text = _plain_line(objects, options)
        if text is not None and "rich" not in sys.modules:
            # A line rich would write as it is, and no rich in this process (so no live display to draw around):
            # written here, which spares a one-session `fleet import` or an error line the 20 ms of importing rich.
            stream = sys.stderr if self._stderr else sys.stdout
            stream.write(text + "\n")
            stream.flush()
            return
        self.get().print(*objects, **options)


console = _LazyConsole(stderr=False)
err_console = _LazyConsole(stderr=True)


def warn(text: str) -> None:
    """``fleet: warning: TEXT`` on stderr, one line: something the command went on past (a skipped prompt folder)."""
    err_console.print(f"fleet: warning: {text}", markup=False, soft_wrap=True)


def size_text(n: int) -> str:
    """Bytes as a person reads them (decimal units, as `df -H` and the issue's "221 MB")."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def print_json(obj: object) -> None:
    """A ``--json`` object on stdout, indented, and one newline after it."""
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")
