"""The CLI's lazy imports are a documented list (harness/cli/__init__.py, ``LAZY``): every import inside a command
module's function names a module of the list, the list names nothing no function imports, and a command module's
top imports only what `fleet --version` loads anyway (test_cli_startup.py checks the modules loaded; this says
which line broke the rule)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import harness.cli
from harness.cli import LAZY

CLI = Path(harness.cli.__file__).parent

# Loaded by every start, besides the standard library: click and its siblings, the errors every command raises, and for
# the group's module the package's version and the stop signals of its exit policy.
AT_TOP = ("click", "harness.cli")
AT_TOP_EXACTLY = ("harness.core.errors",)
AT_TOP_OF_GROUP = ("harness", "harness.coordinator.stopping")


def _under(name: str, roots: tuple[str, ...] | list[str]) -> bool:
    return any(name == r or name.startswith(r + ".") for r in roots)


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return [alias.name for alias in node.names]


def _imports(tree: ast.Module) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(at the module's top, inside a function): each import's line and module; TYPE_CHECKING blocks left out."""
    top: list[tuple[int, str]] = []
    inside: list[tuple[int, str]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inside if in_function else top).extend((child.lineno, m) for m in _imported(child))
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    return top, inside


def test_every_lazy_import_of_the_cli_is_in_its_list_and_every_entry_is_used() -> None:
    used: set[str] = set()
    for path in sorted(CLI.glob("*.py")):
        top, inside = _imports(ast.parse(path.read_text()))
        for line, name in inside:
            keys = [k for k in LAZY if _under(name, [k])]
            assert keys, f"{path.name}:{line}: `{name}` imported in a function but not in harness.cli.LAZY"
            used.update(keys)
        exactly = AT_TOP_EXACTLY + (AT_TOP_OF_GROUP if path.name == "__init__.py" else ())
        for line, name in top:
            stdlib = name.split(".")[0] in sys.stdlib_module_names
            assert stdlib or _under(name, AT_TOP) or name in exactly, (
                f"{path.name}:{line}: `{name}` at the top of a CLI module: every start would load it "
                "(import it in the command's function and name it in harness.cli.LAZY)")
    assert set(LAZY) == used, f"in harness.cli.LAZY but imported lazily nowhere: {sorted(set(LAZY) - used)}"
