"""What a one-shot command imports (issue 14): `fleet --version`, a one-session `fleet replay` and a one-session
`fleet import` load none of the modules they do not use, so their start stays a small part of their time.

Checked in a fresh interpreter by the modules loaded, never by a clock (bench/bench_startup.py measures the time).
Each list says what a module cost a start when it came back (python -X importtime, 2-core development machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO

SESSION = REPO / "tests" / "fixtures" / "pixel-fleet" / "photo-renamer-bfb62a2b.json"

# The queue, the SSH transport, the dashboard's server and browser, the store's SQL broker: none is used by a
# command that reads or replays a file on this machine.
FLEET_ONLY = ("celery", "kombu", "redis", "paramiko", "fabric", "invoke", "httpx", "starlette", "uvicorn",
              "sqlalchemy", "playwright", "workers")

# Run one command through the console script's own `main` and write the modules then loaded. `-c` from the
# checkout: this checkout's harness, whichever one the venv's editable install points at.
_CODE = """
import json, sys
from harness.cli import main
rc = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump(sorted(sys.modules), f)
sys.exit(rc or 0)
"""


def _loaded(tmp_path: Path, *args: str) -> set[str]:
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env["FLEET_HARNESS_COMMIT"] = "test-commit"  # --version asks git otherwise: not what is measured here
    proc = subprocess.run([sys.executable, "-c", _CODE, str(out), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(out.read_text()))


def _present(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` loaded, as a package or any module under one."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


def test_version_loads_neither_rich_nor_pydantic_nor_the_stores_models(tmp_path: Path) -> None:
    modules = _loaded(tmp_path, "--version")
    # rich: about 20 ms of an 80 ms start (the console is made on its first print); pydantic and the models
    # built at import (records, settings, catalog, inventory, transcript): 100 ms and more.
    heavy = ("rich", "pydantic", "pydantic_core", "harness.records", "harness.settings", "harness.store",
             "harness.catalog", "harness.inventory", "harness.transcript", "harness.importers", *FLEET_ONLY)
    assert _present(modules, heavy) == []


def test_a_one_session_replay_loads_neither_the_grader_nor_the_records_nor_rich(tmp_path: Path) -> None:
    modules = _loaded(tmp_path, "replay", str(SESSION), "--runs", str(tmp_path / "runs"))
    assert "harness.replay.command" in modules  # the command ran
    # The grader, the catalog, the records' and the inventory's models: about 0.1 s, for a session file that
    # holds none of them (a sweep's or an imported folder's meta.json is read through them, when given).
    heavy = ("rich", "harness.grading", "harness.catalog", "harness.records", "harness.inventory", "harness.store",
             "harness.importers.folder", "multiprocessing", *FLEET_ONLY)
    assert _present(modules, heavy) == []


def test_a_one_session_import_loads_nothing_of_the_fleet(tmp_path: Path) -> None:
    modules = _loaded(tmp_path, "import", "pixel-fleet", str(SESSION), "--out", str(tmp_path / "out"))
    assert "harness.importers.pixel_fleet" in modules and list((tmp_path / "out").glob("*/grade.json"))
    assert _present(modules, (*FLEET_ONLY, "harness.coordinator", "harness.dispatch", "harness.settings")) == []
