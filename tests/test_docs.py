"""The docs hold together: every relative link in README.md, docs/*.md and bench/README.md reaches a file that
exists (and, with ``#anchor``, a heading of that file, as GitHub makes its anchors), and the README stays a page a
newcomer reads in five minutes (docs/README.md is the map of the rest)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import click
import pytest

from harness.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])
README_MAX_LINES = 200
# Pages the map links that are being written on another branch: a link to one passes while it is missing, and
# test_the_pages_being_written_are_still_missing says when to take it off this list.
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or [text](target "title"); the text may hold one level of brackets (a link around code).
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with their numbers: a link or a heading in a code block is text."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text as rendered (code marks, link targets and emphasis gone), lower
    case, every character that is not a letter, a mark, a digit, an underscore, a hyphen or a space dropped,
    each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = _CODE_SPAN.sub(lambda m: m.group(2), text)
    text = re.sub(r"[*]+|(?<!\w)_+|_+(?!\w)", "", text)
    text = text.strip().lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch)[0] in "LMN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub gives the page's headings (a repeated slug gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose_lines(page.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[tuple[int, str]]:
    """The relative links of a page (line number, target), code blocks and code spans left out."""
    found = []
    for number, line in _prose_lines(page.read_text(encoding="utf-8")):
        line = _CODE_SPAN.sub("", line)
        for m in _LINK.finditer(line):
            target = m.group(1)
            if not _SCHEME.match(target):
                found.append((number, target))
    return found


def test_the_slugs_are_githubs() -> None:
    assert slug("Checking the hosts: `fleet hosts check`") == "checking-the-hosts-fleet-hosts-check"
    assert slug("Exit status of `fleet sweep`, `resume` and `rerun`") == "exit-status-of-fleet-sweep-resume-and-rerun"
    assert slug("1. Test verdicts (`harness.guard.verdict`)") == "1-test-verdicts-harnessguardverdict"
    assert slug("Acceptance checks: one runner protocol") == "acceptance-checks-one-runner-protocol"
    assert slug("`agents.NAME`: what runs on the host") == "agentsname-what-runs-on-the-host"
    assert slug("The config (`ATTEMPT/openclaw.json`, generated from the inventory)") == (
        "the-config-attemptopenclawjson-generated-from-the-inventory")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for number, target in links(page):
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path_part)).resolve() if path_part else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            broken.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            broken.append(f"{where}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail to docs/"


def test_the_docs_have_a_map() -> None:
    """docs/README.md links every page of docs/, so none is found only by listing the folder."""
    linked = {(ROOT / "docs" / unquote(t.partition("#")[0])).resolve() for _, t in links(ROOT / "docs" / "README.md")}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "README.md" and p.resolve() not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


def _verbs() -> list[str]:
    """Every command of `fleet`, subcommands as `hosts check`."""
    out: list[str] = []

    def walk(command: click.Command, path: list[str]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        else:
            out.append(" ".join(path))

    walk(cli, [])
    return sorted(out)


def test_the_readme_and_the_reference_name_every_verb() -> None:
    """The README's table has a row, docs/commands.md a section, for each command `fleet --help` lists."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    reference = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    verbs = _verbs()
    assert len(verbs) > 20
    assert [v for v in verbs if f"| `fleet {v}` |" not in readme] == []
    assert [v for v in verbs if f"### `fleet {v}`" not in reference] == []
