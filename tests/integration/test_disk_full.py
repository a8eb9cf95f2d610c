"""A full disk under the results directory, for real: a small tmpfs mounted as `--runs` and a filler file, on
the embedded default (whose SQLite broker and backend live in RUNS/.queue/ on the same disk) and on Redis with
`fleet worker` processes. One line, no traceback, a readable store, and `fleet resume` completes the sweep
once the filler is gone, every cell stored once with matching sha256."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.fleetkit import assert_stored_once, run_embedded, run_fleet, tmpfs

pytestmark = pytest.mark.integration

ITEMS = {"01-a": "a\n", "02-b": "b\n", "03-c": "c\n", "04-d": "d\n"}
# Each run answers with about 270 KB: a delivery that needs room to be kept.
AGENT = ["sh", "-c", 'sleep 1; head -c 200000 /dev/urandom | base64; echo done', "sh", "{prompt_file}"]


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """An 8 MB tmpfs of this test's own, unmounted at the end whatever happens."""
    with tmpfs(tmp_path / f"disk-{uuid.uuid4().hex[:8]}", "8m") as mnt:
        yield mnt


def _fill(disk: Path, leave_kb: int) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * ((8192 - leave_kb) * 1024))
    return filler


def _assert_one_disk_full_line(proc: subprocess.CompletedProcess, runs: Path) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    line = lines[0]
    assert line.startswith(f"fleet: error: no space left on device under {runs} ("), line
    assert "fleet resume" in line, line
    return line


def _sweep_id(runs: Path) -> str:
    (sweep,) = [p.name for p in runs.iterdir() if (p / "sweep.json").is_file()]
    return sweep


def _assert_readable(runs: Path, sweep_id: str, status: subprocess.CompletedProcess) -> None:
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["status"] == "interrupted"
    journal = runs / sweep_id / "journal.jsonl"
    data = journal.read_bytes() if journal.exists() else b""
    assert not data or data.endswith(b"\n"), "a torn journal entry was left behind"
    for line in data.splitlines():
        json.loads(line)
    assert not list((runs / sweep_id).rglob(".fleet-*.tmp")), "a temporary file was left behind"


def test_embedded_a_full_disk_is_one_line_and_resume_completes(tmp_path: Path, small_disk: Path) -> None:
    inv = tmp_path / "inv.toml"
    argv = ", ".join(json.dumps(a) for a in AGENT)
    inv.write_text('schema_version = 1\n[defaults]\ntransport = "local"\nslots = 1\n'
                   'model = { base_url = "http://127.0.0.1:9/v1", id = "m", context = 65536, max_output = 2048 }\n'
                   f'[defaults.agents.cmd]\nkind = "command"\ncommand = [{argv}]\n[hosts.one]\n')
    prompts = write_prompts(tmp_path / "prompts", ITEMS, timeout_s=60)
    runs = small_disk / "runs"
    # Room for the queue and the first deliveries: the disk fills while the sweep records (in the embedded
    # SQLite result backend, written by the worker thread, or in the store).
    filler = _fill(small_disk, 1500)
    args = ["-i", str(inv), "--runs", str(runs)]
    r = run_embedded(["sweep", *args, "--prompts", str(prompts)], tmp_path, timeout=180)
    _assert_one_disk_full_line(r, runs)
    sweep_id = _sweep_id(runs)
    _assert_readable(runs, sweep_id, run_embedded(["status", sweep_id, "--runs", str(runs), "--json"], tmp_path))
    filler.unlink()
    again = run_embedded(["resume", sweep_id, *args, "--json"], tmp_path, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stderr
    assert json.loads(again.stdout)["status"] == "finished"
    assert assert_stored_once(runs, sweep_id, len(ITEMS)) >= len(ITEMS)


def test_redis_a_full_disk_is_one_line_and_resume_takes_the_results(tmp_path: Path, small_disk: Path, ssh_hosts,
                                                                    client_key, redis_server, namespace, workers) -> None:
    hosts = [ssh_hosts["charlie"], ssh_hosts["delta"]]
    inv = write_inventory(tmp_path / "inv.toml", [h.toml(client_key[0], agent=AGENT) for h in hosts])
    prompts = write_prompts(tmp_path / "prompts", ITEMS, timeout_s=60)
    workers([h.name for h in hosts], inv)
    runs = small_disk / "runs"
    filler = _fill(small_disk, 400)  # the sweep's records fit; its first deliveries do not
    args = ["--inventory", str(inv), "--json", "--runs", str(runs), "--broker", redis_server.url]
    r = run_fleet(["sweep", *args, "--prompts", str(prompts)], namespace, timeout=180)
    _assert_one_disk_full_line(r, runs)
    sweep_id = _sweep_id(runs)
    _assert_readable(runs, sweep_id, run_fleet(["status", sweep_id, "--runs", str(runs), "--json"], namespace))
    filler.unlink()
    again = run_fleet(["resume", sweep_id, *args], namespace, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Traceback" not in again.stderr
    assert json.loads(again.stdout)["status"] == "finished"
    assert assert_stored_once(runs, sweep_id, 2 * len(ITEMS)) >= 2 * len(ITEMS)


def test_a_journal_entry_the_full_disk_refused_half_way_is_cut_off(tmp_path: Path, small_disk: Path) -> None:
    """The entry straddles a page of the tmpfs: its first bytes fit, the rest does not (a short write, then
    ENOSPC). What the disk took of it is cut off at once, and it never reaches the journal later."""
    from harness.core.errors import StoreError
    from harness.core.records import AttemptSummary
    from harness.store import JOURNAL, Store
    from tests.support import synthetic_sweep

    store = Store(small_disk / "runs")
    sweep = synthetic_sweep()
    journal = small_disk / "runs" / sweep.id / JOURNAL
    cell = sweep.cells[0]
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        before = journal.stat().st_size
        w.dispatched(sweep, cell.id, AttemptSummary(attempt=1, task_id="", status="dispatched"))
        base = journal.stat().st_size - before  # an entry with an empty task id
        # Pad with one entry so that 40 bytes are left in the journal's last page.
        size = journal.stat().st_size
        pad = (4096 - 40 - size - base) % 4096
        w.dispatched(sweep, cell.id, AttemptSummary(attempt=2, task_id="p" * pad, status="dispatched"))
        assert 4096 - journal.stat().st_size % 4096 == 40
        filler = small_disk / "filler"
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        good = journal.read_bytes()
        with pytest.raises(StoreError, match="No space left on device"):
            w.dispatched(sweep, cell.id, AttemptSummary(attempt=3, task_id="refused", status="dispatched"))
        assert journal.read_bytes() == good  # nothing of it stayed
        filler.unlink()
        w.dispatched(sweep, cell.id, AttemptSummary(attempt=4, task_id="after", status="dispatched"))
        data = journal.read_bytes()
        assert b"refused" not in data and data.endswith(b"\n") and b"after" in data
        assert [json.loads(line)["t"] for line in data.splitlines()][-1] == "attempt"
