"""The store is one face over small modules: the package exports what code outside it uses, each module says what it
exports, the grade files are grading's (which imports nothing of the store), and the harness writes a file whole in
one place (harness/core/files.py)."""

from __future__ import annotations

import ast
import importlib
import pkgutil

import harness.store
from tests.support import REPO


def test_the_face_exports_what_it_names_and_every_module_says_what_it_exports() -> None:
    for name in harness.store.__all__:
        assert getattr(harness.store, name) is not None, name
    for module in pkgutil.iter_modules(harness.store.__path__):
        mod = importlib.import_module(f"harness.store.{module.name}")
        assert mod.__all__ and all(hasattr(mod, n) for n in mod.__all__), module.name


def _imported(path: str) -> set[str]:
    """Every module the file imports, TYPE_CHECKING and function-level imports too."""
    names: set[str] = set()
    for node in ast.walk(ast.parse((REPO / path).read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_grading_imports_nothing_of_the_store() -> None:
    for path in sorted((REPO / "harness" / "grading").glob("*.py")):
        rel = str(path.relative_to(REPO))
        assert not [m for m in _imported(rel) if m == "harness.store" or m.startswith("harness.store.")], rel


def test_a_file_is_renamed_into_place_only_by_the_atomic_writes() -> None:
    """os.replace is called by harness/core/files.py and the grade files' batch (which renames the temporary files
    ``atomic_write``'s helper wrote, after one flush); the launcher, on the host's bare Python, keeps its own."""
    allowed = {"harness/core/files.py", "harness/grading/gradefiles.py", "workers/host/launcher/wire.py",
               "workers/host/launcher/bundle.py"}
    found = set()
    for top in ("harness", "workers"):
        for path in (REPO / top).rglob("*.py"):
            if "os.replace(" in path.read_text():
                found.add(str(path.relative_to(REPO)))
    assert found <= allowed, found - allowed
