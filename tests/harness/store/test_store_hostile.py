"""What a worker or a crash can hand the store, found by adversarial review: each is that attempt's record or
its refusal, never a traceback, a file outside the attempt folder, or an unreadable sweep."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import threading
import time
from pathlib import Path

import pytest

from harness.coordinator.dispatch import result_from_backend
from harness.core.errors import ArtifactRefused, StoreError
from harness.core.records import Artifact, AttemptSummary
from harness.store import JOURNAL, Store
from tests.support import finished_result, synthetic_sweep


def _recording(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = Store(tmp_path / "runs")
    sweep = synthetic_sweep()
    return store, sweep


def test_a_file_name_of_raw_bytes_is_kept_under_an_escaped_name(tmp_path: Path) -> None:
    store, sweep = _recording(tmp_path)
    cell = sweep.cells[0]
    # A workspace file named b"bad\xffname" arrives decoded with surrogates, as tarfile gives it.
    odd = Artifact.of("workspace/bad\udcffname", b"hi\n")
    lone = Artifact.of("workspace/lone\ud800", b"ho\n")
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        assert w.record_attempt(sweep, finished_result(sweep, cell, artifacts=[odd, lone]))
    folder = store.attempt_dir(sweep.id, cell.id, 1)
    assert (folder / "workspace" / "bad\\udcffname").read_bytes() == b"hi\n"
    assert (folder / "workspace" / "lone\\ud800").read_bytes() == b"ho\n"
    names = [a.name for a in store.load_meta(sweep.id, cell.id, 1).artifacts]
    assert names == ["workspace/bad\\udcffname", "workspace/lone\\ud800"]


@pytest.mark.parametrize("change", [{"cell_id": "../../../../escaped/x/y/r1"}, {"cell_id": "host9/99-x/builtin/r1"},
                                    {"sweep_id": "another-sweep"}])
def test_a_result_for_another_cell_or_sweep_is_refused_and_writes_nothing(tmp_path: Path, change: dict) -> None:
    store, sweep = _recording(tmp_path)
    cell = sweep.cells[0]
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        with pytest.raises(ArtifactRefused, match="does not belong to sweep"):
            w.record_attempt(sweep, finished_result(sweep, cell).model_copy(update=change))
    assert not (tmp_path / "escaped").exists()
    assert {p.name for p in (tmp_path / "runs" / sweep.id).iterdir()} <= {".lock", JOURNAL, "sweep.json"}


def test_the_dispatcher_takes_a_result_only_for_the_attempt_it_sent() -> None:
    sweep = synthetic_sweep()
    a, b = sweep.cells[0], sweep.cells[1]
    other = finished_result(sweep, b).model_dump(mode="json")
    got = result_from_backend(other, sweep.id, a, 1)
    assert (got.cell_id, got.status, got.reason) == (a.id, "harness_failure", "worker_error")
    assert "not the attempt it was sent" in got.error
    assert result_from_backend({"nonsense": 1}, sweep.id, a, 1).reason == "worker_error"
    assert result_from_backend(finished_result(sweep, a).model_dump(mode="json"), sweep.id, a, 1).status == "finished"


@pytest.mark.parametrize("names", [["answer.txt", "answer.txt"], ["harness", "harness/exit.json"],
                                   ["harness/exit.json", "harness"]])
def test_two_artifacts_that_cannot_both_be_files_are_refused(tmp_path: Path, names: list[str]) -> None:
    store, sweep = _recording(tmp_path)
    arts = [Artifact.of(n, f"{i}".encode()) for i, n in enumerate(names)]
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        with pytest.raises(ArtifactRefused, match="given twice, or under another"):
            w.record_attempt(sweep, finished_result(sweep, sweep.cells[0], artifacts=arts))
    assert not store.attempt_dir(sweep.id, sweep.cells[0].id, 1).exists()


def test_a_file_name_of_250_bytes_is_stored(tmp_path: Path) -> None:
    store, sweep = _recording(tmp_path)
    name = "workspace/" + "L" * 250
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        assert w.record_attempt(sweep, finished_result(sweep, sweep.cells[0], artifacts=[Artifact.of(name, b"x")]))
    assert (store.attempt_dir(sweep.id, sweep.cells[0].id, 1) / name).read_bytes() == b"x"


def test_a_torn_last_line_is_cut_before_the_next_writer_appends(tmp_path: Path) -> None:
    store, sweep = _recording(tmp_path)
    cell = sweep.cells[0]
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
    journal = tmp_path / "runs" / sweep.id / JOURNAL
    journal.write_bytes(b'{"t":"attempt","cell":"' + cell.id.encode() + b'","summ')  # a crash mid-write
    with store.writer(sweep.id) as w:
        w.dispatched(sweep, cell.id, AttemptSummary(attempt=1, task_id="t", status="dispatched"))
        # Read while the writer still holds the sweep (no closing snapshot yet): the journal must parse.
        assert [a.status for a in store.load_sweep(sweep.id).attempts[cell.id]] == ["dispatched"]


@pytest.mark.parametrize("entry", [{"t": "status", "status": "bogus", "finished_at": ""},
                                   {"t": "status", "status": "finished", "finished_at": 5}])
def test_a_bad_status_entry_is_a_clear_error_not_a_new_state(tmp_path: Path, entry: dict) -> None:
    store, sweep = _recording(tmp_path)
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
    (tmp_path / "runs" / sweep.id / JOURNAL).write_text(json.dumps(entry) + "\n")
    with pytest.raises(StoreError, match=r"journal.jsonl: line 1: status entry"):
        store.load_sweep(sweep.id)


def test_a_reader_looking_at_the_lock_never_turns_a_writer_away(tmp_path: Path) -> None:
    store, sweep = _recording(tmp_path)
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
    lock = open(tmp_path / "runs" / sweep.id / ".lock", "rb")
    fcntl.flock(lock, fcntl.LOCK_SH)  # a `fleet status` looking, held a while

    def let_go() -> None:
        time.sleep(0.3)
        fcntl.flock(lock, fcntl.LOCK_UN)

    threading.Thread(target=let_go).start()
    with store.writer(sweep.id):
        pass
    lock.close()
    assert not store.is_being_written(sweep.id)


def _names_kept(store: Store, sweep, arts: list[Artifact]) -> dict[str, tuple[str, bytes]]:  # type: ignore[no-untyped-def]
    """Record ``arts`` and read them back: original name -> (stored name, the stored file's bytes), each file
    checked against the size and sha256 meta.json lists."""
    cell = sweep.cells[0]
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        assert w.record_attempt(sweep, finished_result(sweep, cell, artifacts=arts))
    folder = store.attempt_dir(sweep.id, cell.id, 1)
    out = {}
    for rec in store.load_meta(sweep.id, cell.id, 1).artifacts:
        data = (folder / rec.name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (rec.size, rec.sha256)
        raw = base64.b64decode(rec.original_b64) if rec.original_b64 is not None else rec.name.encode()
        out[raw.decode("utf-8", "surrogateescape")] = (rec.name, data)
    assert len(out) == len(arts)
    return out


def test_names_too_long_once_escaped_or_nested_are_stored_under_short_names_with_the_original_kept(
        tmp_path: Path) -> None:
    store, sweep = _recording(tmp_path)
    escaped = "workspace/" + "\udcff" * 200            # 200 raw bytes: 1,200 once each is written as \udcff
    wide = "workspace/" + "\u00e9" * 200               # 400 bytes of UTF-8 in one name
    deep = "workspace/" + "/".join("D%02d" % i + "d" * 240 for i in range(20)) + "/deep.txt"  # past PATH_MAX
    arts = [Artifact.of(escaped, b"esc"), Artifact.of(wide, b"wide"), Artifact.of(deep, b"deep"),
            Artifact.of("workspace/" + "L" * 255, b"fits")]
    kept = _names_kept(store, sweep, arts)
    assert kept["workspace/" + "L" * 255] == ("workspace/" + "L" * 255, b"fits")
    for name, data in ((escaped, b"esc"), (wide, b"wide"), (deep, b"deep")):
        stored, got = kept[name]
        assert got == data and stored != name
        assert all(len(part.encode()) <= 255 for part in stored.split("/")) and len(stored.encode()) <= 1024
    assert kept[deep][0].startswith("renamed/") and kept[deep][0].endswith("~deep.txt")
    meta = json.loads((store.attempt_dir(sweep.id, sweep.cells[0].id, 1) / "meta.json").read_bytes())
    by_name = {a["name"]: a for a in meta["artifacts"]}
    assert by_name[kept[wide][0]]["original"] == wide
    assert set(by_name["workspace/" + "L" * 255]) == {"name", "size", "sha256"}  # a kept name: as it always was


def test_an_escaped_name_that_clashes_with_a_real_one_is_kept_too(tmp_path: Path) -> None:
    store, sweep = _recording(tmp_path)
    # b"lit\xff" escapes to the text "lit\udcff", which is also a legal name by itself; so is a folder of it.
    arts = [Artifact.of("workspace/lit\\udcff", b"literal"), Artifact.of("workspace/lit\udcff", b"raw"),
            Artifact.of("workspace/dir\\udcff", b"a file"), Artifact.of("workspace/dir\udcff/in.txt", b"inside")]
    kept = _names_kept(store, sweep, arts)
    assert kept["workspace/lit\\udcff"] == ("workspace/lit\\udcff", b"literal")
    assert kept["workspace/dir\\udcff"] == ("workspace/dir\\udcff", b"a file")
    assert kept["workspace/lit\udcff"][1] == b"raw" and kept["workspace/lit\udcff"][0].startswith("renamed/")
    assert kept["workspace/dir\udcff/in.txt"][1] == b"inside"


def test_a_fifo_planted_as_the_lock_does_not_hang_a_reader(tmp_path: Path) -> None:
    """`fleet status` opened .lock to see if a coordinator holds it: a FIFO there blocked that open for ever."""
    import os

    from harness.store import Store
    from tests.support import run_fleet, synthetic_sweep

    store = Store(tmp_path / "runs")
    sweep = synthetic_sweep(hosts=1, items=1)
    sweep.status = "finished"
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
    lock = store.sweep_dir(sweep.id) / ".lock"
    lock.unlink()
    os.mkfifo(lock)
    import threading

    answers: list[bool] = []
    looked = threading.Thread(target=lambda: answers.append(store.is_being_written(sweep.id)), daemon=True)
    looked.start()
    looked.join(10)
    assert answers == [False], "is_being_written blocked on the FIFO"
    proc = run_fleet("status", sweep.id, "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"sweep {sweep.id}: finished" in proc.stdout
