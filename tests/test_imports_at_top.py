"""Imports at the top of each module (issue 30, docs/imports.md): what a module needs is read in one place.

An import inside a function or a class is a lazy one: it puts a module's cost off until the call. Two places do that
on purpose, as a whole: the CLI (``harness/cli/``, its ``LAZY`` table, held to by tests/harness/cli/test_cli_lazy.py)
and the launcher (``workers/host/launcher/``: the standard library loaded as late as it can be, for the host's start).
Anywhere else in harness/ and workers/ a lazy import says why on its line, ``# lazy: <why>`` (for a parenthesised
``from ... import (``, on the line that opens it). ``if TYPE_CHECKING:`` imports are no lazy imports.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable
from pathlib import Path

from tests.support import REPO

CODE = ("harness", "workers")
EXEMPT = ("harness/cli/", "workers/host/launcher/")
"""Lazy as a whole, each by its own rule (see the module's docstring)."""

MARK = re.compile(r"#\s*lazy:(.*)$")
"""``# lazy: <why>``, also after another comment on the line (``# noqa: F401  # lazy: ...``)."""

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def lazy_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports inside a function or a class; those under ``if TYPE_CHECKING:`` left out."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(nodes: Iterable[ast.AST], nested: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                walk(node.orelse, nested)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if nested:
                    found.append(node)
            else:
                walk(ast.iter_child_nodes(node), nested or isinstance(node, _NESTED))

    walk(tree.body, False)
    return found


def module_lookups(tree: ast.Module) -> list[ast.Call]:
    """``importlib.import_module(...)`` calls: an import by name, lazy wherever it stands."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "import_module"]


def lazy_marks(source: str) -> dict[int, str]:
    """Line -> the reason of its ``# lazy:`` comment (empty when none is given)."""
    marks: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and (m := MARK.search(tok.string)):
            marks[tok.start[0]] = m.group(1).strip()
    return marks


def scan(source: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]], list[tuple[int, str]]]:
    """(lazy imports with no mark, lazy imports kept with their reason, marks that say nothing or stand on no lazy
    import), each as (line, text)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    marks = lazy_marks(source)
    unmarked: list[tuple[int, str]] = []
    kept: list[tuple[int, str]] = []
    for node in [*lazy_imports(tree), *module_lookups(tree)]:
        text = lines[node.lineno - 1].strip()
        (kept if node.lineno in marks else unmarked).append((node.lineno, text))
    on_imports = {line for line, _ in kept}
    bad = [(line, lines[line - 1].strip()) for line, why in sorted(marks.items())
           if not re.search(r"[A-Za-z]", why) or line not in on_imports]
    return unmarked, kept, bad


def _modules() -> list[Path]:
    return sorted(p for top in CODE for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)


def _exempt(rel: str) -> bool:
    return rel.startswith(EXEMPT)


def test_every_import_is_at_the_top_or_says_why_it_is_lazy() -> None:
    unmarked: list[str] = []
    kept: list[str] = []
    for path in _modules():
        rel = path.relative_to(REPO).as_posix()
        if _exempt(rel):
            continue
        missing, marked, _ = scan(path.read_text(encoding="utf-8"))
        unmarked += [f"{rel}:{line}: {text}" for line, text in missing]
        kept += [f"{rel}:{line}: {text}" for line, text in marked]
    assert unmarked == [], (
        "imports inside a function with no `# lazy: <why>` on their line: move each to the module's top, or say "
        "why it must wait (docs/imports.md)\n  " + "\n  ".join(unmarked)
        + "\nthe lazy imports kept, each with its reason:\n  " + "\n  ".join(kept))


def test_every_lazy_mark_gives_its_reason_on_a_lazy_import() -> None:
    bad: list[str] = []
    for path in _modules():
        rel = path.relative_to(REPO).as_posix()
        _, _, wrong = scan(path.read_text(encoding="utf-8"))
        bad += [f"{rel}:{line}: {text}" for line, text in wrong]
    assert bad == [], ("`# lazy:` marks with no reason, or on a line that is no import inside a function (moved to "
                       "the top? drop the mark):\n  " + "\n  ".join(bad))


def test_the_scan_finds_what_it_must() -> None:
    # The rules above on a planted module, so they can never pass by finding nothing.
    source = '''
from typing import TYPE_CHECKING
import json
if TYPE_CHECKING:
    from pathlib import Path

def f():
    import os
    import re  # lazy: a reason
    from collections import (  # lazy: opened here
        OrderedDict,
    )
    if TYPE_CHECKING:
        import sys
    import shutil  # lazy:

class C:
    import glob  # noqa: F401  # lazy: a class body waits too

g = lambda: __import__("x")
x = 1  # lazy: not an import
'''
    unmarked, kept, bad = scan(source)
    assert [text for _, text in unmarked] == ["import os"]
    assert [line for line, _ in kept] == [9, 10, 15, 18]
    assert [text for _, text in bad] == ["import shutil  # lazy:", "x = 1  # lazy: not an import"]


def test_an_import_by_name_is_a_lazy_import_too() -> None:
    source = ('import importlib\n'
              'def f(name):\n'
              '    return importlib.import_module(name)\n'
              'def g(name):\n'
              '    return importlib.import_module(name)  # lazy: a plug-in by its name\n')
    unmarked, kept, bad = scan(source)
    assert [line for line, _ in unmarked] == [3] and [line for line, _ in kept] == [5] and bad == []
