"""Adversarial review of ``fleet compare`` and ``fleet sweeps`` (review11): one test per finding, each failing on
the code it was written against and passing once the finding is fixed. Sweeps are written through the real store
writer (as tests/harness/views/test_compare.py does); a crafted sweep.json is an edit of what the writer wrote."""

from __future__ import annotations

import json
from pathlib import Path

from harness.views.comparison import compare_sweeps
from harness.core.errors import InputError
from harness.store import Store
from tests.harness.views.test_compare import _id, _sweep, _write
from tests.support import run_fleet


def _two(store: Store) -> None:
    _write(store, _sweep("20261201-000001-a", label="x", created_at="2026-12-01T00:00:01.000Z"),
           {_id(0, 1): ["DELIVERED"], _id(0, 2): ["DELIVERED"], _id(0, 3): ["NOTHING"]})
    _write(store, _sweep("20261201-000002-b", label="x", created_at="2026-12-01T00:00:02.000Z"),
           {_id(0, 1): ["DELIVERED"], _id(0, 2): ["NOTHING"], _id(0, 3): ["NOTHING"]})


def test_a_sweep_json_listing_a_cell_twice_is_refused_not_counted_twice(tmp_path: Path) -> None:
    """A crafted (or damaged) sweep.json whose ``cells`` holds the same cell twice is read: compare makes the one
    cell a group of two repetitions, both ``r1`` (k 2), and the sweep's rate counts 4 graded cells of 3 (2/4
    instead of 1/3). Right: a duplicate cell id is one error line naming sweep.json and the cell, exit 2, as
    every other stored id is checked (``check_stored_ids``)."""
    root = tmp_path / "runs"
    store = Store(root)
    _two(store)
    path = root / "20261201-000002-b" / "sweep.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["cells"].append(dict(data["cells"][0]))
    path.write_text(json.dumps(data), encoding="utf-8")
    try:
        result = compare_sweeps(store.load_sweep("20261201-000001-a"), store.load_sweep("20261201-000002-b"))
    except InputError as exc:
        assert "sweep.json" in str(exc)
        return
    reps = {r.item: [x.rep for x in r.candidate.reps] for r in result.rows if r.candidate is not None}
    assert all(len(v) == len(set(v)) for v in reps.values()), reps
    assert result.candidate.rate.graded == 3, result.candidate.rate


def test_one_unreadable_sweep_does_not_break_the_listing_or_previous(tmp_path: Path) -> None:
    """A results directory with one damaged sweep.json (``{``; not in the index, as after a copy without it):
    ``fleet sweeps`` prints nothing but that sweep's error (exit 1), and ``fleet compare previous B`` fails the
    same way although the damaged sweep is neither B nor of its label. Right: the listing shows the sweeps it can
    read and names the unreadable one (a line of its own, or on stderr) and exits 0 or 2, never hiding the good
    sweeps; ``previous`` skips what it cannot read, or at least says which sweep is unreadable with exit 2."""
    root = tmp_path / "runs"
    _two(Store(root))
    (root / "20261201-000003-c").mkdir()
    (root / "20261201-000003-c" / "sweep.json").write_text("{", encoding="utf-8")
    listing = run_fleet("sweeps", "--runs", str(root), cwd=tmp_path)
    assert "20261201-000001-a" in listing.stdout and "20261201-000002-b" in listing.stdout, (
        listing.returncode, listing.stdout, listing.stderr)
    compared = run_fleet("compare", "previous", "20261201-000002-b", "--runs", str(root), cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert "20261201-000001-a" in compared.stdout


def test_compare_says_interrupted_for_a_running_sweep_whose_coordinator_is_gone(tmp_path: Path) -> None:
    """A sweep left ``running`` by a coordinator that is gone: ``fleet sweeps`` and ``fleet status`` say
    ``interrupted`` (docs/compare.md: "as in fleet status"), but ``fleet compare`` prints ``baseline ... (running,
    ...)`` and its JSON has ``"status": "running"``: the three verbs disagree about the same sweep. Right: compare
    shows the status fleet status and fleet sweeps show (interrupted)."""
    root = tmp_path / "runs"
    store = Store(root)
    left = _sweep("20261201-000001-a", label="x", created_at="2026-12-01T00:00:01.000Z")
    with store.writer(left.id) as w:
        w.save_sweep(left)
        w.set_status(left, "running")  # and the coordinator is gone: the writer is closed
    _write(store, _sweep("20261201-000002-b", label="x", created_at="2026-12-01T00:00:02.000Z"),
           {_id(0, 1): ["DELIVERED"]})
    listing = run_fleet("sweeps", "--json", "--runs", str(root), cwd=tmp_path)
    listed = {s["id"]: s["status"] for s in json.loads(listing.stdout)["sweeps"]}
    assert listed["20261201-000001-a"] == "interrupted"  # the premise
    compared = run_fleet("compare", "20261201-000001-a", "20261201-000002-b", "--json", "--runs", str(root),
                         cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert json.loads(compared.stdout)["baseline"]["status"] == "interrupted"
