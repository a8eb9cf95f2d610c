"""Sweep state as a snapshot plus a journal: what a writer recorded reads back the same without a new
snapshot, a crash loses nothing that was acknowledged, and a corrupt journal is one clear error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.errors import StoreError
from harness.core.records import AttemptSummary
from harness.store import JOURNAL, Store
from tests.support import REPO, finished_result, synthetic_sweep



def _state(sweep) -> dict:  # type: ignore[no-untyped-def]
    return {cid: [a.model_dump() for a in runs] for cid, runs in sweep.attempts.items()} | {"status": sweep.status}


def test_what_was_journaled_reads_back_before_any_new_snapshot(tmp_path: Path) -> None:
    store = Store(tmp_path)
    sweep = synthetic_sweep()
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        snapshot = (tmp_path / sweep.id / "sweep.json").read_bytes()
        w.set_status(sweep, "running")
        for k, cell in enumerate(sweep.cells):
            w.dispatched(sweep, cell.id, AttemptSummary(attempt=1, task_id=f"t{k}", status="dispatched"))
            if k % 2 == 0:
                w.record_attempt(sweep, finished_result(sweep, cell))
        # Recording never rewrote the snapshot: the journal carries the state.
        assert (tmp_path / sweep.id / "sweep.json").read_bytes() == snapshot
        loaded = store.load_sweep(sweep.id)
        assert _state(loaded) == _state(sweep)
        assert [a.status for a in loaded.attempts[sweep.cells[1].id]] == ["dispatched"]
    # Closing leaves a snapshot that alone holds the state, and an empty journal.
    assert (tmp_path / sweep.id / JOURNAL).read_bytes() == b""
    assert _state(store.load_sweep(sweep.id)) == _state(sweep)


def test_a_long_journal_is_folded_into_a_snapshot(tmp_path: Path) -> None:
    store = Store(tmp_path)
    sweep = synthetic_sweep(hosts=1, items=1)
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        cell = sweep.cells[0]
        for k in range(1, 1102):
            w.dispatched(sweep, cell.id, AttemptSummary(attempt=k, task_id=f"t{k}", status="dispatched"))
        lines = (tmp_path / sweep.id / JOURNAL).read_bytes().count(b"\n")
        assert lines < 1000  # folded once it passed max(1000, cells)
        assert len(store.load_sweep(sweep.id).attempts[cell.id]) == 1101


def test_a_torn_last_line_is_ignored_and_a_bad_line_is_named(tmp_path: Path) -> None:
    store = Store(tmp_path)
    sweep = synthetic_sweep(hosts=1, items=2)
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.dispatched(sweep, sweep.cells[0].id, AttemptSummary(attempt=1, task_id="t", status="dispatched"))
    journal = tmp_path / sweep.id / JOURNAL
    good = json.dumps({"t": "attempt", "cell": sweep.cells[1].id,
                       "summary": AttemptSummary(attempt=1, task_id="u", status="dispatched").model_dump()})
    journal.write_text(good + "\n" + good[: len(good) // 2])  # a crash in the middle of the second write
    assert [c for c, runs in store.load_sweep(sweep.id).attempts.items() if runs] == [sweep.cells[0].id, sweep.cells[1].id]
    journal.write_text(good + "\n" + '{"t": "attempt", "cell": "x", "summary": {"attempt": "one"}}\n' + good + "\n")
    with pytest.raises(StoreError, match=r"journal.jsonl: line 2: summary|journal.jsonl: line 2: attempt"):
        store.load_sweep(sweep.id)


_KILLED_WRITER = """
import os, signal, sys
sys.path.insert(0, {repo!r})
from harness.core.records import AttemptSummary
from harness.store import Store
from tests.support import finished_result, synthetic_sweep
store = Store({root!r})
sweep = synthetic_sweep()
with store.writer(sweep.id) as w:
    w.save_sweep(sweep)
    w.set_status(sweep, "running")
    for k, cell in enumerate(sweep.cells):
        w.dispatched(sweep, cell.id, AttemptSummary(attempt=1, task_id=f"t{{k}}", status="dispatched"))
        if k < 4:
            w.record_attempt(sweep, finished_result(sweep, cell))
    print("recorded", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_coordinator_loses_nothing_and_status_says_it_is_gone(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER.format(repo=str(REPO), root=str(root))],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == -signal.SIGKILL and "recorded" in proc.stdout
    store = Store(root)
    (sweep_id,) = store.list_sweeps()
    sweep = store.load_sweep(sweep_id)
    assert sweep.status == "running"  # as journaled: nobody could say otherwise
    assert [a.status for c in sweep.cells for a in sweep.attempts[c.id]] == ["finished"] * 4 + ["dispatched"] * 2
    for c in sweep.cells[:4]:
        assert (store.attempt_dir(sweep_id, c.id, 1) / "meta.json").is_file()
    assert not store.is_being_written(sweep_id)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    shown = subprocess.run([sys.executable, "-m", "harness.cli", "status", sweep_id, "--runs", str(root), "--json"],
                           capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert out["status"] == "interrupted"
    assert [c["label"] for c in out["cells"]][4:] == ["abandoned", "abandoned"]
