"""The launcher as one script: workers/host/launcher/ is a package by concern, and the host runs one source text,
assembled from its modules (``workers.host.launcher.source()``). This checks that the text is what the worker sends,
that it runs alone (no repository, no site packages), and that every module is in it and imports nothing but the
standard library and the package."""

from __future__ import annotations

import ast
import base64
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from workers.host import launcher

PACKAGE = Path(launcher.__file__).parent
OTHER_INTERPRETERS = {"_sha2"}
"""Imported by a module where the interpreter has it, and not a module of this one's standard library: CPython 3.12's
sha256 (3.8 to 3.11 have ``_sha256``)."""


def module_lines(name: str) -> list[bytes]:
    return (PACKAGE / f"{name}.py").read_bytes().splitlines(keepends=True)


def test_the_worker_sends_the_assembled_script(tmp_path: Path) -> None:
    from workers.attempt import LAUNCHER_SOURCE

    assert LAUNCHER_SOURCE is launcher.source()
    # Deterministic: the same files give the same bytes, wherever they lie (the host keeps compiled code by source).
    copy = tmp_path / "launcher"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert launcher.assemble(str(copy)) == launcher.assemble(str(PACKAGE)) == launcher.source()
    # What goes on stdin is that text (zlib), with the code compiled from it.
    import marshal
    import zlib

    stdin = launcher.boot_stdin(LAUNCHER_SOURCE, {"verb": "reap"})
    line, _, body = stdin.partition(b"\n")
    sent = marshal.loads(body[:int(line)])
    assert zlib.decompress(sent["source"]) == launcher.source()
    assert marshal.loads(sent["code"]).co_filename == "fleet-launcher"


def test_every_module_is_in_the_script_in_an_order_where_each_imports_only_those_before_it() -> None:
    names = sorted(p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert sorted(launcher.MODULES) == names and len(set(launcher.MODULES)) == len(names)
    script = launcher.source()
    seen: list[str] = []
    imported: set[bytes] = set()
    for name in launcher.MODULES:
        lines = module_lines(name)
        tree = ast.parse(b"".join(lines))
        assert ast.get_docstring(tree), f"{name}.py says what it is"
        assert len(lines) < 800, f"{name}.py: {len(lines)} lines"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                # The form assemble() drops: at the top of the module, from a module the script has put before.
                assert node in tree.body and node.level == 1 and node.module in seen, (name, node.module)
                assert lines[node.lineno - 1].startswith(b"from .") and node.end_lineno == node.lineno, name
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for top in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]):
                    top = top.split(".")[0]
                    assert top in sys.stdlib_module_names or top in OTHER_INTERPRETERS, (name, top)
        # The module whole in the script, but for its imports of the others and of what an earlier one imported.
        kept = [line for line in lines if not line.startswith(b"from .") and line.rstrip() not in imported]
        assert b"".join(kept) in script, name
        imported |= {line.rstrip() for line in lines if line.startswith(b"import ")}
        seen.append(name)
    # Nothing in the script imports the package (or anything outside the standard library).
    for node in ast.walk(ast.parse(script)):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and (node.module or "").split(".")[0] in sys.stdlib_module_names | OTHER_INTERPRETERS
        elif isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] in sys.stdlib_module_names for a in node.names)


def test_no_two_modules_bind_the_same_name() -> None:
    """In the script the modules share one namespace: a name bound in two would be the later one's in both."""
    owner: dict[str, tuple[str, str]] = {}
    for name in launcher.MODULES:
        for node in _top_level(ast.parse(b"".join(module_lines(name)))):
            bound: list[tuple[str, str]] = []
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                bound.append((node.name, "def"))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bound += [(n.id, "value") for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            elif isinstance(node, ast.Import):
                bound += [((a.asname or a.name).split(".")[0], f"import {a.name}") for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                bound += [(a.asname or a.name, f"from {node.module} import {a.name}") for a in node.names]
            for bound_name, what in bound:
                first = owner.setdefault(bound_name, (name, what))
                # Only a standard module imported again by another module is the same binding.
                assert first[0] == name or (what.startswith("import ") and first[1] == what), (bound_name, name, first)


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """The statements that run at the module's top level: its body, and what a try or an if there holds."""
    found: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        found.append(node)
        if isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
        elif isinstance(node, ast.If):
            todo += node.body + node.orelse
    return found


def test_the_script_has_every_name_the_package_shows() -> None:
    namespace: dict = {"__name__": "fleet_launcher"}
    exec(compile(launcher.source(), "fleet-launcher", "exec"), namespace)
    missing = set(launcher.__all__) - {"MODULES", "assemble", "source"} - set(namespace)
    assert not missing and callable(namespace["serve"])


def test_the_script_runs_alone_with_no_access_to_the_repository(tmp_path: Path) -> None:
    """Copied on its own into a folder and run there with ``python3 -I`` (no environment, no site packages, no
    repository on sys.path): as a file, as a person runs it, and through BOOT, compiled there from the source."""
    alone = tmp_path / "alone"
    alone.mkdir()
    script = alone / "launch.py"
    script.write_bytes(launcher.source())
    work = tmp_path / "work"
    base = work / "runs" / "s" / "attempt-1"
    fleet = work / ".fleet"
    token, key, marker = secrets.token_hex(12), secrets.token_hex(32), secrets.token_hex(16)
    req = {"verb": "run", "fleet": str(fleet), "token": token, "key": key, "marker": marker, "deadline_s": 30,
           "spec": {"argv": ["sh", "-c", "echo made > made.txt; echo out"], "env": {}, "pass_env": [],
                    "cwd": str(base / "workspace")},
           "prepare": {"root": str(base), "dirs": [str(base / "workspace")],
                       "files": {str(base / "prompt.md"): base64.b64encode(b"do it").decode()}},
           "pack": {"root": str(base), "outputs": ["prompt.md"], "limit_s": 60}}
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    proc = subprocess.run([sys.executable, "-I", "-S", str(script)], input=(json.dumps(req) + "\n").encode(),
                          capture_output=True, timeout=60, cwd=alone, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert launcher.verify(key, answer["started"], token) and answer["prepared"]["reaped"] == [], answer
    here = fleet / "deliveries" / token
    end = time.monotonic() + 30
    while not (here / "packed.json").exists() and time.monotonic() < end:
        time.sleep(0.05)
    ended, packed = (json.loads((here / n).read_text()) for n in ("exit.json", "packed.json"))
    assert launcher.verify(key, ended, token) and ended["exit_code"] == 0 and ended["ended_by"] == "exit"
    assert launcher.verify(key, packed, token) and packed["ok"] is True
    frames = {(k, n): data for k, n, data in launcher.read_bundle((here / launcher.BUNDLE).read_bytes(), 1 << 30)}
    assert frames[launcher.FILE, "agent.stdout"] == b"out\n" and frames[launcher.WORKSPACE, "made.txt"] == b"made\n"
    assert frames[launcher.OUTPUT, "prompt.md"] == b"do it"
    # Through BOOT, as the worker calls it, on an interpreter whose code it does not have: compiled from the source.
    body = {"verb": "reap", "fleet": str(fleet), "token": secrets.token_hex(12), "forget": [str(here)]}
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", launcher.BOOT, "reap", body["token"]], cwd=alone, env=env,
                          input=launcher.boot_stdin(launcher.source(), body, ("another interpreter", b"")),
                          capture_output=True, timeout=60)
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"reaped": []}, proc.stderr[-2000:]
    assert not here.exists()  # forgotten: the worker had taken its files
