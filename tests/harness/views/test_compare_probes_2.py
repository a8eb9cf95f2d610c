"""Adversarial review of ``fleet compare``, second round (review11b): one test per finding, each failing on the
code it was written against. Sweeps are written through the real store writer (tests/harness/views/test_compare.py)."""

from __future__ import annotations

from pathlib import Path

from harness.store import Store
from tests.harness.views.test_compare import _id, _sweep, _write
from tests.support import run_fleet


def test_the_sign_test_line_does_not_call_repeated_groups_cells_and_mcnemar(tmp_path: Path) -> None:
    """docs/compare.md: the test is the sign test over cell GROUPS, "which for groups of one cell is McNemar's
    exact test". The terminal line always says ``sign test (exact McNemar, cells both measured)``, also when the
    groups are of 3 repetitions (flaky 2/3 -> passed 3/3 is one discordant pair, not three cells). Right: with
    repetitions the line names groups (and no McNemar); the McNemar wording only when every group is one cell."""
    root = tmp_path / "runs"
    store = Store(root)
    for n, grades in ((1, ["DELIVERED", "PARTIAL", "DELIVERED"]), (2, ["DELIVERED", "DELIVERED", "DELIVERED"])):
        _write(store, _sweep(f"20261201-00000{n}-x", label="x", created_at=f"2026-12-01T00:00:0{n}.000Z", reps=3,
                             items=1), {_id(0, 1, r): [g] for r, g in enumerate(grades, start=1)})
    proc = run_fleet("compare", "20261201-000001-x", "20261201-000002-x", "--runs", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("sign test"))
    assert "b 0 regressed, c 1 improved" in line  # the premise: one group, flaky -> passed
    assert "McNemar" not in line and "cells" not in line, line
