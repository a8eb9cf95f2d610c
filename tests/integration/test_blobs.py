"""Large artifacts travel beside a task's result on Redis as raw bytes (workers/blobs.py), checked on arrival and
deleted once recorded; the result itself stays small."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import redis

from workers.blobs import INLINE_MAX, BlobStore, blob_prefix
from harness.coordinator.dispatch import result_from_backend
from harness.core.records import Artifact, AttemptResult, Cell
from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.fleetkit import run_fleet

pytestmark = pytest.mark.integration

CELL = Cell(id=Cell.make_id("alpha", "01-big", "cmd", 1), host="alpha", item="01-big", agent="cmd", rep=1, seed=1)


def _result(big: bytes) -> AttemptResult:
    return AttemptResult(sweep_id="s1", cell_id=CELL.id, attempt=1, status="finished", host="alpha", agent="cmd",
                         item="01-big", harness_commit="t", started_at="2026-12-04T00:00:00.000Z",
                         artifacts=[Artifact.of("agent.stdout", b"small"), Artifact.of("workspace/big.bin", big)])


def test_a_large_artifact_rides_beside_the_result_and_is_checked_on_arrival(redis_server, namespace) -> None:
    store, client = BlobStore(redis_server.url), redis.Redis.from_url(redis_server.url)
    big = os.urandom(INLINE_MAX * 16)
    sent = store.offload(_result(big), namespace, "task-1")
    data = json.loads(json.dumps(sent.model_dump(mode="json")))
    assert len(json.dumps(data)) < 4096  # the result names the bytes, it does not hold them
    key = f"{blob_prefix(namespace, 'task-1')}1"
    assert [a.get("blob") for a in data["artifacts"]] == [None, key] and client.get(key) == big
    assert 0 < client.ttl(key) <= 7 * 24 * 3600
    got = result_from_backend(data, "s1", CELL, 1, store, namespace, "task-1")
    assert got.status == "finished" and got.artifacts[1].data() == big and got.artifacts[0].data() == b"small"

    # Bytes changed in Redis, gone, or a key of another task: the attempt's artifact_corrupt, never a record of them.
    client.set(key, big[:-1] + b"!")
    bad = result_from_backend(data, "s1", CELL, 1, store, namespace, "task-1")
    assert (bad.status, bad.reason) == ("harness_failure", "artifact_corrupt") and "not what the result says" in bad.error
    client.delete(key)
    gone = result_from_backend(data, "s1", CELL, 1, store, namespace, "task-1")
    assert (gone.reason, "no longer in the result backend" in gone.error) == ("artifact_corrupt", True)
    other = store.offload(_result(big), namespace, "task-2")
    stolen = result_from_backend(other.model_dump(mode="json"), "s1", CELL, 1, store, namespace, "task-1")
    assert stolen.reason == "artifact_corrupt" and "another task" in stolen.error
    # A coordinator whose backend is not Redis cannot read them: said, not recorded empty.
    assert result_from_backend(data, "s1", CELL, 1, None).reason == "worker_error"
    store.forget(namespace, "task-2", 2)
    assert client.keys(f"{blob_prefix(namespace, '*')}*") == []


def test_a_sweep_records_a_large_workspace_file_whole_and_leaves_no_blob_behind(
        tmp_path, ssh_hosts, client_key, redis_server, namespace, workers) -> None:
    # 3 MB of incompressible bytes the agent makes from its prompt's seed: the same every time, checked below.
    agent = ["python3", "-c", "import hashlib,sys; seed=open(sys.argv[1],'rb').read();"
             "open('big.bin','wb').write(b''.join(hashlib.sha256(seed+i.to_bytes(4,'big')).digest() for i in range(98304)))",
             "{prompt_file}"]
    inv = write_inventory(tmp_path / "inv.toml", [ssh_hosts["alpha"].toml(client_key[0], agent=agent)])
    prompts = write_prompts(tmp_path / "prompts", {"01-big": "seed-1\n"})
    workers(["alpha"], inv)
    client = redis.Redis.from_url(redis_server.url)

    def mgets() -> int:  # workers/blobs.py reads blobs with GETRANGE; Celery's own reads of a result are GETs
        return int(client.info("commandstats").get("cmdstat_getrange", {}).get("calls", 0))

    before = mgets()
    runs = tmp_path / "runs"
    r = run_fleet(["sweep", "-i", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs), "--broker",
                   redis_server.url], namespace)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    (cell,) = summary["cells"]
    assert (cell["status"], cell["exit_code"]) == ("finished", 0), cell
    stored = runs / summary["sweep"] / cell["id"] / "attempt-1" / "workspace" / "big.bin"
    want = b"".join(hashlib.sha256(b"seed-1\n" + i.to_bytes(4, "big")).digest() for i in range(98304))
    assert stored.read_bytes() == want
    assert mgets() > before, "the workspace file came inside the result, not beside it"
    assert client.keys(f"{blob_prefix(namespace, '*')}*") == []
