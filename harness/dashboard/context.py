"""What every page is rendered with: the store, the token, the templates, and the links between pages.

Links are made by a ``Links`` object, never written into templates by hand: the server's links are absolute
URLs, an export's (``fleet dashboard --export``) are relative file names, and the same templates serve both.
"""

from __future__ import annotations

import functools
import posixpath
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from harness.grading.scale import GRADE_ORDER
from harness.store import Store

__all__ = ["Dashboard", "Links", "ExportLinks", "TEMPLATES", "STATIC", "quote_path", "duration", "GRADE_CLASS",
           "exported_file"]

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

GRADE_CLASS = {
    "DELIVERED": "g-delivered", "PARTIAL": "g-partial", "NOTHING": "g-nothing", "CODE_IN_CHAT": "g-code",
    "HARNESS_FAILURE": "g-failure", "": "g-none",
}
"""A grade's CSS class: the matrix colours a cell by it."""


def quote_path(value: str) -> str:
    """A stored name (a cell id ``host/item/agent/r1``, a file path) as URL path segments: each part
    percent-encoded, the slashes kept."""
    return "/".join(map(_quote_part, value.split("/")))


@functools.lru_cache(maxsize=65536)
def _quote_part(part: str) -> str:
    # A 10,000-cell matrix links 10,000 cells made of a few dozen hosts, items and agents: each is quoted once.
    return urllib.parse.quote(part, safe="")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = float(seconds)
    if s < 10:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s) // 60}m {int(s) % 60:02d}s" if s >= 60 else f"{s:.0f} s"
    return f"{int(s) // 3600}h {int(s) % 3600 // 60:02d}m"


class Links:
    """The server's URLs. Every argument is a stored name: it is percent-encoded here, once."""

    static_root = "/static"

    def static(self, name: str) -> str:
        return f"{self.static_root}/{name}"

    def sweeps(self, label: str | None = None) -> str:
        return "/" + (f"?label={urllib.parse.quote(label, safe='')}" if label else "")

    def sweep(self, sweep_id: str) -> str:
        return f"/sweeps/{quote_path(sweep_id)}"

    def cell(self, sweep_id: str, cell_id: str, attempt: int | None = None) -> str:
        q = f"?attempt={attempt}" if attempt else ""
        return f"/sweeps/{quote_path(sweep_id)}/cells/{quote_path(cell_id)}{q}"

    def file(self, sweep_id: str, path: str) -> str:
        """A stored file of the sweep (``path`` relative to the sweep's folder), downloaded as it is."""
        return f"/sweeps/{quote_path(sweep_id)}/files/{quote_path(path)}"

    def host(self, name: str) -> str:
        return f"/hosts/{quote_path(name)}"

    def compare(self, baseline: str, candidate: str) -> str:
        return "/compare?" + urllib.parse.urlencode({"baseline": baseline, "candidate": candidate})

    def replays(self) -> str:
        return "/replays"

    def replay(self, name: str) -> str:
        return f"/replays/{quote_path(name)}"

    def events(self, sweep_id: str) -> str:
        return f"/sweeps/{quote_path(sweep_id)}/events"

    def override(self, sweep_id: str, cell_id: str) -> str:
        return f"/sweeps/{quote_path(sweep_id)}/cells/{quote_path(cell_id)}/override"

    def login(self) -> str:
        return "/login"


INERT_SUFFIXES = frozenset({
    ".txt", ".md", ".json", ".jsonl", ".log", ".csv", ".tsv", ".py", ".toml", ".yaml", ".yml", ".ini", ".cfg",
    ".sh", ".diff", ".patch", ".stdout", ".stderr", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".bin", ".tar",
    ".gz", ".tgz", ".zip"})
"""Suffixes a static web server serves as inert content (text, data, images, archives). Any other stored file is
exported as text (see ``exported_file``)."""


def exported_file(path: str) -> str:
    """Where an export keeps a stored file (a path under the sweep's folder), relative to the export: under
    ``files/`` by its own name when that is inert, else under ``text/`` with ``.txt`` appended. An export is
    published on a static server that picks the type from the name, so an agent's ``index.html`` (or .svg, .js,
    .xhtml: anything of a type that runs) must never be served as what it says it is; the dashboard's server
    sends every stored file as text or as an attachment, whatever its name. Two roots, so that an agent's
    ``a.html`` and ``a.html.txt`` never land on one name."""
    suffix = posixpath.splitext(posixpath.basename(path))[1].lower()
    return f"files/{path}" if suffix in INERT_SUFFIXES else f"text/{path}.txt"


@dataclass
class ExportLinks(Links):
    """Links between the files of one exported sweep, relative to the page being written (``here``, a path
    inside the export folder). Pages outside the export (other sweeps, compare, replays) have no link: ''."""

    sweep_id: str = ""
    here: str = "index.html"

    def _rel(self, target: str) -> str:
        return posixpath.relpath(target, posixpath.dirname(self.here) or ".")

    def static(self, name: str) -> str:
        return self._rel(f"static/{name}")

    def sweeps(self, label: str | None = None) -> str:
        return ""

    def sweep(self, sweep_id: str) -> str:
        return self._rel("index.html") if sweep_id == self.sweep_id else ""

    def cell(self, sweep_id: str, cell_id: str, attempt: int | None = None) -> str:
        if sweep_id != self.sweep_id:
            return ""
        return self._rel(f"cells/{quote_path(cell_id)}/{f'attempt-{attempt}' if attempt else 'index'}.html")

    def file(self, sweep_id: str, path: str) -> str:
        return self._rel(quote_path(exported_file(path))) if sweep_id == self.sweep_id else ""

    def host(self, name: str) -> str:
        return self._rel(f"hosts/{quote_path(name)}.html")

    def compare(self, baseline: str, candidate: str) -> str:
        return ""

    def replays(self) -> str:
        return ""

    def replay(self, name: str) -> str:
        return ""

    def events(self, sweep_id: str) -> str:
        return ""

    def override(self, sweep_id: str, cell_id: str) -> str:
        return ""

    def login(self) -> str:
        return ""


def _environment() -> jinja2.Environment:
    # Autoescape everywhere: every stored string (a model reply, a file name, an answer) is text, never markup.
    # auto_reload off: the templates are the package's files, and with it on every ``include`` (a chip per cell of
    # a 10,000-cell matrix) asks the file system whether its template changed.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, auto_reload=False)
    env.filters["duration"] = duration
    env.filters["grade_class"] = lambda g: GRADE_CLASS.get(g or "", "g-none")
    env.filters["pct"] = lambda r: "-" if r is None else f"{100 * r:.0f} %"
    env.globals["grades"] = GRADE_ORDER  # the grade filter and the override form list the grades in their one order
    return env


@dataclass
class Dashboard:
    """The app's state: one results directory, read; the token, if overrides are allowed."""

    store: Store
    token: str | None = None
    live_poll_s: float = 1.0
    env: jinja2.Environment = field(default_factory=_environment)

    def render(self, name: str, links: Links, **context: Any) -> str:
        return self.env.get_template(name).render(links=links, writable=self.token is not None and not isinstance(
            links, ExportLinks), **context)
