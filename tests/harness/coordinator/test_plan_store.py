"""Planning (cells and their ids) and the result store (atomic files, sha256, idempotent recording,
the sqlite index, the single writer)."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import version
from harness.core.catalog import load_catalog
from harness.core.errors import ArtifactCorrupt, ArtifactRefused, StoreError, UsageError
from harness.core.inventory import load_inventory
from harness.coordinator.plan import plan_sweep
from harness.core.records import Artifact, AttemptResult, AttemptSummary, sha256_hex
from harness.core.sweep import SweepRecord
from harness.core.files import atomic_write
from harness.store import Store

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINp+KAVIeeJtmTE2mHUtyrWs6pTWHU1PACBUX+WdKpp4"
INVENTORY = f"""\
schema_version = 1
[defaults]
user = "qual"
host_key = "{KEY}"
model = {{ base_url = "http://127.0.0.1:8080/v1", id = "m", context = 4096, max_output = 512 }}
[defaults.agents.builtin]
kind = "builtin"

[hosts.alpha]
address = "alpha.lan"
[hosts.alpha.agents.control]
command = ["echo", "{{prompt_file}}"]

[hosts.beta]
address = "beta.lan"
"""
ROUND = """\
schema_version = 1
repetitions = 3
[[tasks]]
id = "mark"
title = "Mark"
prompt = "write {{marker}}"
[tasks.vars]
marker = "M-{hex:8}"
"""


@pytest.fixture(autouse=True)
def _fixed_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The recorded harness commit comes from the environment here: no git call from unit tests.
    monkeypatch.setenv("FLEET_HARNESS_COMMIT", "test-commit")
    version.harness_commit.cache_clear()
    yield
    version.harness_commit.cache_clear()


@pytest.fixture()
def inv(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "inv.toml"
    path.write_text(INVENTORY, encoding="utf-8")
    return load_inventory(path)


@pytest.fixture()
def cat(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "prompts"
    for folder in ("01-one", "02-two"):
        (root / "open" / folder).mkdir(parents=True)
        (root / "open" / folder / "item.toml").write_text(f'title = "{folder}"\n', encoding="utf-8")
        (root / "open" / folder / "prompt.md").write_text(f"do {folder}\n", encoding="utf-8")
    (root / "rounds").mkdir()
    (root / "rounds" / "r.toml").write_text(ROUND, encoding="utf-8")
    return load_catalog(root)


# -- planning ----------------------------------------------------------------------------------------


def test_cells_are_host_x_item_x_agent_x_rep(inv, cat) -> None:  # type: ignore[no-untyped-def]
    sweep = plan_sweep(inv, cat, items=["01", "02"], agents=["builtin"], repeat=2, label="t")
    ids = [c.id for c in sweep.cells]
    assert ids == [
        f"{h}/{i}/builtin/r{r}" for h in ("alpha", "beta") for i in ("01-one", "02-two") for r in (1, 2)
    ]
    assert len(set(ids)) == len(ids)
    c = sweep.cells[0]
    assert (c.host, c.item, c.agent, c.rep) == ("alpha", "01-one", "builtin", 1)
    assert sweep.harness_commit == "test-commit"
    assert sweep.id.endswith("-t") and sweep.status == "planned" and sweep.attempts == {}
    assert set(sweep.hosts) == {"alpha", "beta"} and set(sweep.items) == {"01-one", "02-two"}
    assert sweep.options["repeat"] == 2


def test_two_agents_on_one_host_are_two_cells(inv, cat) -> None:  # type: ignore[no-untyped-def]
    sweep = plan_sweep(inv, cat, hosts=["alpha"], items=["01"], agents=["builtin", "control"])
    assert [c.id for c in sweep.cells] == ["alpha/01-one/builtin/r1", "alpha/01-one/control/r1"]


def test_a_host_or_agent_named_twice_is_planned_once(inv, cat) -> None:  # type: ignore[no-untyped-def]
    # --hosts alpha,alpha --agents builtin,builtin planned each cell twice under one id.
    sweep = plan_sweep(inv, cat, hosts=["alpha", "beta", "alpha"], items=["01"],
                       agents=["builtin", "builtin"])
    assert [c.id for c in sweep.cells] == ["alpha/01-one/builtin/r1", "beta/01-one/builtin/r1"]
    assert sweep.options["hosts"] == ["alpha", "beta"] and sweep.options["agents"] == ["builtin"]


def test_default_agent_is_the_hosts_first(inv, cat) -> None:  # type: ignore[no-untyped-def]
    sweep = plan_sweep(inv, cat, items=["02"])
    assert [c.id for c in sweep.cells] == ["alpha/02-two/builtin/r1", "beta/02-two/builtin/r1"]


def test_the_sweep_records_what_serves_each_hosts_model(tmp_path: Path, cat) -> None:  # type: ignore[no-untyped-def]
    # The report names the server; an inventory may change after the sweep, so sweep.json keeps it.
    path = tmp_path / "served.toml"
    path.write_text(INVENTORY.replace('max_output = 512 }', 'max_output = 512, server = "llama.cpp" }'), encoding="utf-8")
    sweep = plan_sweep(load_inventory(path), cat, items=["02"])
    assert {h.name: h.model_server for h in sweep.hosts.values()} == {"alpha": "llama.cpp", "beta": "llama.cpp"}
    assert SweepRecord.model_validate_json(sweep.model_dump_json()).hosts["alpha"].model_server == "llama.cpp"


def test_agent_a_host_lacks_is_a_usage_error(inv, cat) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError) as err:
        plan_sweep(inv, cat, items=["01"], agents=["control"])
    msg = str(err.value)
    assert "hosts.beta.agents" in msg and "'control'" in msg and inv.path in msg
    assert err.value.exit_code == 2


def test_round_repetitions_and_repeat_multiply(inv, cat) -> None:  # type: ignore[no-untyped-def]
    sweep = plan_sweep(inv, cat, hosts=["beta"], round_name="r", repeat=2)
    assert [c.id for c in sweep.cells] == [f"beta/r.mark/builtin/r{n}" for n in range(1, 7)]
    # each repetition draws its own values from its own recorded seed
    for c in sweep.cells:
        assert c.values["marker"].startswith("M-") and len(c.values["marker"]) == 10
    assert len({c.seed for c in sweep.cells}) == 6


def test_plan_rejects_bad_options(inv, cat) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UsageError):
        plan_sweep(inv, cat, repeat=0)
    with pytest.raises(UsageError):
        plan_sweep(inv, cat, hosts=["gamma"])
    with pytest.raises(UsageError):
        plan_sweep(inv, cat, items=["77"])
    with pytest.raises(UsageError):
        plan_sweep(inv, cat, label="bad label/..")


def _claim(root: str, base: str, go, out) -> None:  # type: ignore[no-untyped-def]
    go.wait()
    out.put(Store(root).claim_sweep_id(base))


def test_sweep_ids_are_claimed_once_even_by_processes_racing(tmp_path: Path) -> None:
    """Eight processes propose the same id in the same instant: each gets its own, and its own folder."""
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(tmp_path / "runs"), "20261201-000000-x", go, out)) for _ in range(8)]
    for p in procs:
        p.start()
    go.set()
    ids = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert sorted(ids) == sorted(["20261201-000000-x"] + [f"20261201-000000-x-{n}" for n in range(2, 9)])
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(ids)


def test_a_claimed_id_is_never_handed_out_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs")
    first = store.claim_sweep_id("20261201-000000-x")
    # A claimed folder without sweep.json yet (its coordinator is still planning) is taken all the same.
    assert store.claim_sweep_id("20261201-000000-x") == f"{first}-2"


# -- the store -------------------------------------------------------------------------------------------


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "f.json"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    atomic_write(target, b"old")
    with pytest.raises(TypeError):
        atomic_write(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def _result(sweep: SweepRecord, cell_index: int = 0, attempt: int = 1, **kw) -> AttemptResult:  # type: ignore[no-untyped-def]
    cell = sweep.cells[cell_index]
    fields = dict(
        sweep_id=sweep.id, cell_id=cell.id, attempt=attempt, status="finished", exit_code=0,
        host=cell.host, agent=cell.agent, item=cell.item, model={"id": "m"}, harness_commit="test-commit",
        seed=cell.seed, values=cell.values, duration_s=1.5,
        artifacts=[
            Artifact.of("agent.stdout", b"hello\n"),
            Artifact.of("answer.txt", b"the answer"),
            Artifact.of("harness/exit.json", b'{"exit_code": 0}'),
            Artifact.of("workspace/src/main.py", b"print('hi')\n"),
        ],
    )
    fields.update(kw)
    return AttemptResult(**fields)


@pytest.fixture()
def planned(inv, cat, tmp_path: Path):  # type: ignore[no-untyped-def]
    store = Store(tmp_path / "runs")
    sweep = plan_sweep(inv, cat, hosts=["alpha"], items=["01", "02"], label="s")
    return store, sweep


def test_record_attempt_writes_artifacts_and_meta(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        assert w.record_attempt(sweep, _result(sweep)) is True
    folder = store.root / sweep.id / "alpha" / "01-one" / "builtin" / "r1" / "attempt-1"
    assert folder == store.attempt_dir(sweep.id, sweep.cells[0].id, 1)
    meta = json.loads((folder / "meta.json").read_bytes())
    assert meta["status"] == "finished" and meta["exit_code"] == 0 and meta["cell_id"] == "alpha/01-one/builtin/r1"
    assert {a["name"] for a in meta["artifacts"]} == {
        "agent.stdout", "answer.txt", "harness/exit.json", "workspace/src/main.py"
    }
    for art in meta["artifacts"]:
        assert set(art) == {"name", "size", "sha256"}  # no contents in meta.json
        data = (folder / art["name"]).read_bytes()
        assert sha256_hex(data) == art["sha256"] and len(data) == art["size"]
    # nothing half-written anywhere under the sweep
    assert not [p for p in (store.root / sweep.id).rglob("*.tmp")]
    # sweep.json on disk has the attempt summary
    on_disk = store.load_sweep(sweep.id)
    (summary,) = on_disk.attempts[sweep.cells[0].id]
    assert (summary.attempt, summary.status, summary.exit_code, summary.duration_s) == (1, "finished", 0, 1.5)
    assert store.list_sweeps() == [sweep.id]
    loaded = store.load_meta(sweep.id, sweep.cells[0].id, 1)
    assert (loaded.kind, loaded.schema_version, loaded.status) == ("run", 2, "finished")
    assert loaded.model_dump(mode="json") == meta  # the file is exactly the model's dump: nothing lost or added


def test_index_has_the_rows(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
        w.record_attempt(sweep, _result(sweep))
        w.record_attempt(sweep, _result(sweep, 1, status="harness_failure", reason="host_unreachable",
                                        exit_code=None, artifacts=[]))
    db = sqlite3.connect(store.root / "index.sqlite")
    try:
        assert db.execute("SELECT id, label, status, harness_commit, cells FROM sweeps").fetchall() == [
            (sweep.id, "s", "planned", "test-commit", 2)
        ]
        rows = db.execute(
            "SELECT cell_id, attempt, host, item, agent, status, reason, exit_code, model, path FROM attempts ORDER BY cell_id"
        ).fetchall()
        assert rows == [
            ("alpha/01-one/builtin/r1", 1, "alpha", "01-one", "builtin", "finished", "", 0, "m",
             f"{sweep.id}/alpha/01-one/builtin/r1/attempt-1"),
            ("alpha/02-two/builtin/r1", 1, "alpha", "02-two", "builtin", "harness_failure", "host_unreachable", None, "m",
             f"{sweep.id}/alpha/02-two/builtin/r1/attempt-1"),
        ]
        arts = dict(db.execute("SELECT name, sha256 FROM artifacts WHERE cell_id = 'alpha/01-one/builtin/r1'").fetchall())
        assert arts["answer.txt"] == sha256_hex(b"the answer") and len(arts) == 4
    finally:
        db.close()


def test_dispatched_attempt_is_completed_in_place(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    cid = sweep.cells[0].id
    sweep.attempts[cid] = [AttemptSummary(attempt=1, task_id="task-1", status="dispatched", dispatched_at="T0")]
    with store.writer(sweep.id) as w:
        assert w.record_attempt(sweep, _result(sweep, exit_code=3)) is True
    (summary,) = store.load_sweep(sweep.id).attempts[cid]
    assert (summary.status, summary.exit_code, summary.task_id, summary.dispatched_at) == ("finished", 3, "task-1", "T0")


def test_second_record_of_an_attempt_changes_nothing(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    cid = sweep.cells[0].id
    with store.writer(sweep.id) as w:
        assert w.record_attempt(sweep, _result(sweep)) is True
        folder = store.attempt_dir(sweep.id, cid, 1)
        before = {p: p.read_bytes() for p in (store.root / sweep.id).rglob("*") if p.is_file() and p.name != ".lock"}
        with sqlite3.connect(store.root / "index.sqlite") as db:
            rows_before = db.execute("SELECT * FROM attempts").fetchall()
        again = _result(sweep, exit_code=1, artifacts=[Artifact.of("answer.txt", b"a different answer")])
        assert w.record_attempt(sweep, again) is False
        # Compared before the writer closes: closing writes a snapshot of the (unchanged) state.
        after = {p: p.read_bytes() for p in (store.root / sweep.id).rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before
    assert (folder / "answer.txt").read_bytes() == b"the answer"
    assert [a.exit_code for a in sweep.attempts[cid]] == [0]
    with sqlite3.connect(store.root / "index.sqlite") as db:
        assert db.execute("SELECT * FROM attempts").fetchall() == rows_before


def test_a_second_attempt_is_kept_beside_the_first(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    cid = sweep.cells[0].id
    with store.writer(sweep.id) as w:
        w.record_attempt(sweep, _result(sweep, status="harness_failure", reason="host_lost", exit_code=None))
        w.record_attempt(sweep, _result(sweep, attempt=2))
    assert [(a.attempt, a.status) for a in store.load_sweep(sweep.id).attempts[cid]] == [
        (1, "harness_failure"), (2, "finished")
    ]
    assert (store.attempt_dir(sweep.id, cid, 1) / "meta.json").is_file()
    assert (store.attempt_dir(sweep.id, cid, 2) / "meta.json").is_file()


@pytest.mark.parametrize("name", ["../x", "workspace/../../x", "/etc/passwd", "", "meta.json", "grade.json",
                                  "grades.jsonl", "a\x00b"])
def test_refuses_artifact_names_outside_the_attempt(planned, name: str) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    bad = Artifact.of(name, b"evil")
    with store.writer(sweep.id) as w:
        with pytest.raises(ArtifactRefused) as err:
            w.record_attempt(sweep, _result(sweep, artifacts=[bad]))
    assert repr(name) in str(err.value)
    assert not (store.root / sweep.id / "alpha" / "01-one" / "builtin" / "x").exists()
    assert not (store.root / sweep.id / "x").exists()
    assert not (store.attempt_dir(sweep.id, sweep.cells[0].id, 1) / "meta.json").exists()


def test_corrupted_artifact_is_refused(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    art = Artifact.of("answer.txt", b"the answer")
    tampered = art.model_copy(update={"sha256": sha256_hex(b"something else")})
    with store.writer(sweep.id) as w:
        with pytest.raises(ArtifactCorrupt) as err:
            w.record_attempt(sweep, _result(sweep, artifacts=[tampered]))
    assert "answer.txt" in str(err.value) and "corrupted" in str(err.value)
    folder = store.attempt_dir(sweep.id, sweep.cells[0].id, 1)
    assert not (folder / "meta.json").exists() and not (folder / "answer.txt").exists()


def test_a_refused_delivery_writes_no_file_at_all(planned) -> None:  # type: ignore[no-untyped-def]
    """Good artifacts listed before a bad one must not be left behind without a meta.json naming them."""
    store, sweep = planned
    good = _result(sweep).artifacts
    for bad in (Artifact.of("../x", b"evil"), good[0].model_copy(update={"size": 999})):
        with store.writer(sweep.id) as w:
            with pytest.raises((ArtifactRefused, ArtifactCorrupt)):
                w.record_attempt(sweep, _result(sweep, artifacts=[*good, bad]))
        assert not store.attempt_dir(sweep.id, sweep.cells[0].id, 1).exists()
        if (store.root / "index.sqlite").exists():
            db = sqlite3.connect(store.root / "index.sqlite")
            try:
                assert db.execute("SELECT * FROM attempts").fetchall() == []
            finally:
                db.close()


def test_second_writer_of_a_sweep_is_refused(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    with store.writer(sweep.id):
        with pytest.raises(UsageError) as err:
            with Store(store.root).writer(sweep.id):
                pass  # pragma: no cover
        assert sweep.id in str(err.value) and "another fleet process" in str(err.value)
    with store.writer(sweep.id):  # released: a later writer is fine
        pass


def test_second_writer_in_another_process_is_refused(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    code = (
        "import sys\nfrom harness.store import Store\nfrom harness.core.errors import UsageError\n"
        "try:\n    with Store(sys.argv[1]).writer(sys.argv[2]):\n        sys.exit(0)\n"
        "except UsageError as e:\n    print(e); sys.exit(3)\n"
    )
    with store.writer(sweep.id):
        held = subprocess.run([sys.executable, "-c", code, str(store.root), sweep.id], capture_output=True, text=True, timeout=30)
    free = subprocess.run([sys.executable, "-c", code, str(store.root), sweep.id], capture_output=True, text=True, timeout=30)
    assert held.returncode == 3 and "another fleet process" in held.stdout
    assert free.returncode == 0, free.stderr


def test_load_unknown_sweep_lists_the_latest(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    with pytest.raises(UsageError) as err:
        store.load_sweep("20990101-000000-nope")
    assert "no sweep '20990101-000000-nope'" in str(err.value) and "latest: none" in str(err.value)
    with store.writer(sweep.id) as w:
        w.save_sweep(sweep)
    with pytest.raises(UsageError) as err:
        store.load_sweep("20990101-000000-nope")
    assert f"latest: {sweep.id}" in str(err.value)
    for bad in ("", "../etc", ".lock", "a/b"):
        with pytest.raises(UsageError):
            store.load_sweep(bad)


def test_corrupt_sweep_json_is_a_store_error(planned) -> None:  # type: ignore[no-untyped-def]
    store, sweep = planned
    (store.root / sweep.id).mkdir(parents=True)
    (store.root / sweep.id / "sweep.json").write_text('{"id": 3}', encoding="utf-8")
    with pytest.raises(StoreError):
        store.load_sweep(sweep.id)
