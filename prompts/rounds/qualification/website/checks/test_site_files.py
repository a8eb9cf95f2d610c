"""The qualification website's files: in the run's project folder, self-contained, marker in the heading.

The web check (site.web.toml) judges the page in Chromium; these read the files themselves.
"""
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest


def project(workspace: Path, values: dict) -> Path:
    found = sorted(p for p in workspace.glob(f"**/{values['project']}") if p.is_dir())
    if not found:
        pytest.fail(f"no project folder {values['project']} in the workspace")
    return found[0]


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.urls: list[str] = []
        self._in_heading = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("h1", "h2"):
            self._in_heading += 1
            self.headings.append("")
        for key in ("src", "href"):
            if a.get(key):
                self.urls.append(a[key])

    def handle_endtag(self, tag):
        if tag in ("h1", "h2") and self._in_heading:
            self._in_heading -= 1

    def handle_data(self, data):
        if self._in_heading:
            self.headings[-1] += data


def test_index_in_the_project_folder(workspace, values):
    assert (project(workspace, values) / "index.html").is_file(), "index.html is not in the project folder"


def test_heading_carries_this_runs_marker(workspace, values):
    page = Page()
    page.feed((project(workspace, values) / "index.html").read_text(encoding="utf-8", errors="replace"))
    want = f"Night Garden {values['marker']}"
    headings = [" ".join(h.split()) for h in page.headings]
    assert want in headings, f"no heading reads {want!r}; headings: {headings}"


EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']((?:https?:)?//[^"']+)|url\(\s*["']?((?:https?:)?//[^)"']+)|@import\s+["']((?:https?:)?//[^"']+)""")


def test_no_external_resources(workspace, values):
    root = project(workspace, values)
    external = []
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.suffix.lower() in (".html", ".htm", ".css", ".js"):
            text = f.read_text(encoding="utf-8", errors="replace")
            external += [f"{f.relative_to(root)}: {next(g for g in m if g)}" for m in EXTERNAL.findall(text)]
    assert not external, "external resources: " + "; ".join(external[:5])
