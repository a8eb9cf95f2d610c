"""What a one-shot command imports (issue 14): `fleet --version`, a one-session `fleet replay` and a one-session
`fleet import` load none of the modules they do not use, so their start stays a small part of their time.

Checked in a fresh interpreter by the modules loaded, never by a clock (bench/bench_startup.py measures the time).
Each list says what a module cost a start when it came back (python -X importtime, 2-core development machine)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import REPO

SESSION = REPO / "tests" / "fixtures" / "pixel-fleet" / "photo-renamer-bfb62a2b.json"

# The queue, the SSH transport, the dashboard's server and browser, the store's SQL broker: none is used by a
# command that reads or replays a file on this machine.
FLEET_ONLY = ("celery", "kombu", "redis", "paramiko", "fabric", "invoke", "httpx", "starlette", "uvicorn",
              "sqlalchemy", "playwright", "workers")

# Run one command through the console script's own `main` and write the modules then loaded, and the garbage
# collector's state after it. `-c` from the checkout: this checkout's harness, whichever one the venv's editable
# install points at.
_CODE = """
import gc, json, sys
from harness.cli import main
rc = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump({"modules": sorted(sys.modules), "frozen": gc.get_freeze_count(), "collector_on": gc.isenabled()}, f)
sys.exit(rc or 0)
"""


def _run(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "after.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env["FLEET_HARNESS_COMMIT"] = "test-commit"  # --version asks git otherwise: not what is measured here
    proc = subprocess.run([sys.executable, "-c", _CODE, str(out), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def _loaded(tmp_path: Path, *args: str) -> set[str]:
    return set(_run(tmp_path, *args)["modules"])


def _present(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` loaded, as a package or any module under one."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


def test_version_loads_neither_rich_nor_pydantic_nor_the_stores_models(tmp_path: Path) -> None:
    modules = _loaded(tmp_path, "--version")
    # rich: about 20 ms of an 80 ms start (the console is made on its first print); pydantic and the models
    # built at import (records, settings, catalog, inventory, transcript): 100 ms and more.
    heavy = ("rich", "pydantic", "pydantic_core", "harness.core.records", "harness.core.settings", "harness.store",
             "harness.core.catalog", "harness.core.inventory", "harness.core.transcript", "harness.importers", *FLEET_ONLY)
    assert _present(modules, heavy) == []


def test_a_one_session_replay_loads_neither_the_grader_nor_the_records_nor_rich(tmp_path: Path) -> None:
    modules = _loaded(tmp_path, "replay", str(SESSION), "--runs", str(tmp_path / "runs"))
    assert "harness.replay.batch" in modules  # the command ran
    # The grader, the catalog, the records' and the inventory's models: about 0.1 s, for a session file that
    # holds none of them (a sweep's or an imported folder's meta.json is read through them, when given).
    heavy = ("rich", "harness.grading", "harness.core.catalog", "harness.core.records", "harness.core.inventory", "harness.store",
             "harness.importers.folder", "multiprocessing", *FLEET_ONLY)
    assert _present(modules, heavy) == []


def test_a_one_session_import_loads_nothing_of_the_fleet_nor_rich(tmp_path: Path) -> None:
    modules = _loaded(tmp_path, "import", "pixel-fleet", str(SESSION), "--out", str(tmp_path / "out"))
    assert "harness.importers.pixel_fleet" in modules and list((tmp_path / "out").glob("*/grade.json"))
    # rich: 20 ms of about 270 for the one line per run it would print unchanged. The sweep's record and the plan's
    # inputs it embeds (catalog, inventory, check specs): 30 ms, for a session that is no sweep's.
    heavy = ("rich", "harness.coordinator.verbs", "harness.coordinator.dispatch", "harness.core.settings", "harness.core.sweep",
             "harness.core.catalog", "harness.core.inventory", "harness.core.checks.spec", *FLEET_ONLY)
    assert _present(modules, heavy) == []


def test_import_and_replay_load_with_the_collector_off_then_freeze_what_they_loaded(tmp_path: Path) -> None:
    # harness/cli/loading.py: about 70 collector passes over the models being built (20 ms), and the scan of them all
    # at exit (20 ms more), are what this saves. Frozen: the tens of thousands of objects the start built.
    for args in (["import", "pixel-fleet", str(SESSION), "--out", str(tmp_path / "out")],
                 ["replay", str(SESSION), "--runs", str(tmp_path / "runs")]):
        after = _run(tmp_path, *args)
        assert after["frozen"] > 10_000, (args[0], after["frozen"])
        assert after["collector_on"], args[0]  # on again for the work


def _rich_writes(text: str, terminal: bool) -> str:
    """What the CLI's rich console writes for ``print(text, markup=False, soft_wrap=True)``: to a pipe (as wide as
    harness.cli makes it) or to a colour terminal of 80 columns."""
    from rich.console import Console

    out = io.StringIO()
    console = (Console(file=out, force_terminal=True, color_system="truecolor", width=80, highlight=False)
               if terminal else Console(file=out, width=100_000, highlight=False))
    console.print(text, markup=False, soft_wrap=True)
    return out.getvalue()


PLAIN = ["imported/x/b121a8f7-dd71: NOTHING (outcome none; stop: 4 consecutive failures at call 6)",
         "fleet: error: --items '07,': an empty name (a stray comma?) (see `fleet sweep -h`)", "  two  spaces  ", "",
         "x" * 300, "[bold]not markup[/bold] \\n", "a:b :c d: e:"]
NOT_PLAIN = ["got :smile: back", "a:b:c", "tab\there", "line\nbreak", "bell\x07", "caf\u00e9", "wide \u4e2d", "esc \x1b[31m"]


def test_a_line_written_without_rich_is_exactly_what_rich_writes() -> None:
    from harness.cli.console import _plain_line

    for text in PLAIN:
        assert _plain_line((text,), {"markup": False, "soft_wrap": True}) == text
        for terminal in (False, True):
            assert _rich_writes(text, terminal) == text + "\n", (text, terminal)
    for text in NOT_PLAIN:  # rich changes each of these (or may): they go through it
        assert _plain_line((text,), {"markup": False, "soft_wrap": True}) is None, text
    assert _plain_line(("x",), {"markup": False}) is None  # rich would wrap it: through rich
    assert _plain_line(("x", "y"), {"markup": False, "soft_wrap": True}) is None


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x17F), max_size=120))
def test_any_line_taken_as_plain_is_written_by_rich_unchanged(text: str) -> None:
    from harness.cli.console import _plain_line

    if _plain_line((text,), {"markup": False, "soft_wrap": True}) is not None:
        assert _rich_writes(text, False) == text + "\n"
        assert _rich_writes(text, True) == text + "\n"
