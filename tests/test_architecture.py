"""The house's map holds (docs/architecture.md): the import contracts, one place per decision, small modules.

The contracts are import-linter's, declared in pyproject.toml and run by .ci/run; here they run too, and each is
shown to fail on a copy of the code with one import planted that breaks it, so a contract can never hold by being
empty. The other checks find a decision written a second time where a test can see it.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from harness.grading.scale import GRADE_ORDER
from tests.support import REPO

LINT = Path(sys.executable).with_name("lint-imports")
CODE = ("harness", "workers")


def _modules() -> list[Path]:
    return sorted(p for top in CODE for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT), "--no-cache", "--no-logo"], cwd=root, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})


def _contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_hold() -> None:
    proc = _lint(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(_contracts())} kept, 0 broken" in proc.stdout


# One planted import per contract: (file, line added at its top, words of the contract that must be reported broken).
PLANTED = {
    "layers": ("harness/core/errors.py", "import harness.views.report",
               "harness.core is not allowed to import harness.views"),
    "acyclic": ("harness/core/nesting.py", "import harness.core.version", "No cycles are allowed in harness.core"),
    "host": ("harness/guard/results.py", "import rich", "harness.guard is not allowed to import rich"),
    "stdlib": ("workers/host/clean.py", "import pydantic", "workers.host.clean is not allowed to import pydantic"),
}


@pytest.mark.parametrize("contract", sorted(PLANTED))
def test_each_contract_fails_when_an_import_breaks_it(contract: str, tmp_path: Path) -> None:
    assert {c["id"] for c in _contracts()} == set(PLANTED), "every contract has a planted break here"
    for top in CODE:
        shutil.copytree(REPO / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    file, line, words = PLANTED[contract]
    if contract == "acyclic":  # a circle needs both ends: version imports nesting back
        version = tmp_path / "harness/core/version.py"
        version.write_text("import harness.core.nesting\n" + version.read_text())
    target = tmp_path / file
    target.write_text(line + "\n" + target.read_text())
    proc = _lint(tmp_path)
    assert proc.returncode != 0, proc.stdout
    broken = proc.stdout.split("Broken contracts", 1)[-1]
    assert words in broken, proc.stdout


def test_every_package_has_its_place_in_the_layers() -> None:
    layers = next(c for c in _contracts() if c["id"] == "layers")["layers"]
    declared = {name.strip() for layer in layers for name in layer.split("|")}
    packages = {f"harness.{p.name}" for p in (REPO / "harness").iterdir() if (p / "__init__.py").is_file()}
    assert packages | {"workers"} == declared
    loose = sorted(p.name for p in (REPO / "harness").glob("*.py") if p.name != "__init__.py")
    assert loose == [], "a module of harness/ belongs to one of its packages"


SIZE_LIMIT = 800
OVER_LIMIT: dict[str, str] = {}
"""Modules allowed past the limit, each with why (docs/architecture.md says the same)."""


def test_no_module_is_over_about_800_lines() -> None:
    over = {str(p.relative_to(REPO)): n for p in _modules() if (n := len(p.read_text().splitlines())) > SIZE_LIMIT}
    assert set(over) <= set(OVER_LIMIT), over


SHARED_NAMES = {
    # Each plug-in point (agent adapters, transports) has its interface and its registry under these names.
    "base.py": ["workers/adapters/base.py", "workers/transport/base.py"],
    "registry.py": ["workers/adapters/registry.py", "workers/transport/registry.py"],
    # One module per real agent on each side of it: the adapter that runs the agent, the importer of its sessions.
    "openclaw.py": ["harness/importers/openclaw.py", "workers/adapters/openclaw.py"],
    "opencode.py": ["harness/importers/opencode.py", "workers/adapters/opencode.py"],
    "hermes.py": ["harness/importers/hermes.py", "workers/adapters/hermes.py"],
    # An application object each: the dashboard's Starlette app, the workers' Celery app.
    "app.py": ["harness/dashboard/app.py", "workers/app.py"],
}
"""File names that repeat by convention; any other repeat is two modules a reader would mix up."""


def test_no_file_name_is_used_twice_but_by_convention() -> None:
    seen: dict[str, list[str]] = {}
    for p in _modules():
        if p.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(p.name, []).append(str(p.relative_to(REPO)))
    assert {n: sorted(ps) for n, ps in seen.items() if len(ps) > 1} == SHARED_NAMES


def _literals(tree: ast.AST) -> list[ast.AST]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Tuple, ast.List, ast.Set))]


GRADE_TABLES = {
    # A per-grade display table: each grade's colour or class (every grade has one, so a new grade fails here).
    "harness/views/labels.py": "STYLES",
    "harness/dashboard/context.py": "GRADE_CLASS",
}
"""The only dicts outside harness/grading/ keyed by grade names, each naming every grade."""


def test_the_grade_order_is_written_only_in_grading() -> None:
    # A sequence of two or more grade names outside harness/grading/ is the order (or the list of grades) written a
    # second time: it must come from harness.grading.scale.GRADE_ORDER. So is a dict keyed by them, but for the
    # per-grade display tables above; and a list of them in a template.
    names = set(GRADE_ORDER)
    found = []
    for p in _modules():
        if p.is_relative_to(REPO / "harness" / "grading"):
            continue
        rel = str(p.relative_to(REPO))
        tree = ast.parse(p.read_text())
        for node in _literals(tree):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(names.intersection(words)) >= 2:
                found.append(f"{rel}:{node.lineno}")
        for assign in ast.walk(tree):
            if not (isinstance(assign, (ast.Assign, ast.AnnAssign)) and isinstance(assign.value, ast.Dict)):
                continue
            keys = {k.value for k in assign.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if len(names & keys) < 2:
                continue
            target = assign.targets[0] if isinstance(assign, ast.Assign) else assign.target
            name = target.id if isinstance(target, ast.Name) else ""
            if GRADE_TABLES.get(rel) != name or not names <= keys:
                found.append(f"{rel}:{assign.lineno}")
    for page in sorted((REPO / "harness").rglob("*.html")) + sorted((REPO / "harness").rglob("*.js")):
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if sum(f"'{g}'" in line or f'"{g}"' in line for g in names) >= 2:
                found.append(f"{page.relative_to(REPO)}:{n}")
    assert found == []


def test_the_grade_scale_is_the_grade_model_s_names() -> None:
    from typing import get_args

    from harness.grading.model import GradeName

    assert GRADE_ORDER == get_args(GradeName) and GRADE_ORDER[0] == "DELIVERED"
