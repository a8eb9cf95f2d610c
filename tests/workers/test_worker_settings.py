"""A worker's settings reach its tasks through one explicit call (workers.app.configure), never the environment:
the slot backend, its namespace and TTL, and the start timeout are the configured ones, whatever os.environ says;
and `fleet worker` logs them once, on one line, redacted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workers.app
import workers.tasks
from harness.core.catalog import Item
from harness.core.inventory import load_inventory
from harness.core.records import AttemptResult, Cell, utc_now
from harness.core.sweep import AttemptRequest
from harness.core.settings import Settings
from workers.slots import FileSlots, RedisSlots
from tests.support import REPO

ROOT = REPO
SECRET = "s3cr3t-pw"


@pytest.fixture(autouse=True)
def _restore_app():  # type: ignore[no-untyped-def]
    """configure() changes this process's app; put back what was there."""
    conf = {k: workers.app.app.conf.get(k) for k in ("broker_url", "result_backend", "broker_transport_options",
                                                     "result_backend_transport_options", "broker_connection_max_retries",
                                                     "result_backend_always_retry", "result_backend_max_retries")}
    before = workers.app._settings
    yield
    workers.app.app.conf.update(conf)
    workers.app._settings = before


def test_configured_again_the_app_stores_results_in_the_new_backend(tmp_path: Path) -> None:
    """The app keeps the result backend it built first: a process configured for the embedded default and then for
    Redis stored results in the SQLite file while the coordinator listened on Redis (a wait that never woke)."""
    app = workers.app.configure(Settings.resolve({"runs": tmp_path / "runs"}, {}))
    assert type(app.backend).__name__ == "DatabaseBackend"
    workers.app.configure(Settings.resolve({"runs": tmp_path / "runs", "broker_url": "redis://127.0.0.1:1/0"}, {}))
    assert type(app.backend).__name__ == "RedisBackend"
    workers.app.configure(Settings.resolve({"runs": tmp_path / "runs"}, {}))
    assert type(app.backend).__name__ == "DatabaseBackend"


def test_configure_gives_the_tasks_their_settings_and_leaves_the_environment_alone(tmp_path: Path) -> None:
    before = dict(os.environ)
    s = Settings.resolve({"runs": tmp_path / "runs", "broker_url": "redis://127.0.0.1:1/0"}, {"FLEET_NAMESPACE": "ns"})
    app = workers.app.configure(s)
    assert dict(os.environ) == before
    assert workers.app.current_settings() is s
    assert app.conf.broker_url == "redis://127.0.0.1:1/0"
    e = Settings.resolve({"runs": tmp_path / "runs"}, {})
    workers.app.configure(e)
    assert dict(os.environ) == before
    assert app.conf.broker_url == e.celery_broker and (tmp_path / "runs" / ".queue").is_dir()


def test_a_worker_reconnects_to_its_broker_for_ever_and_stores_results_for_the_whole_outage_bound() -> None:
    """A worker is a service: Celery's default of a few reconnection tries (2 + 4 + 6 s) ended `fleet worker` with
    `Unrecoverable error` 12 s into a Redis outage. The coordinator keeps its own bound (FLEET_BROKER_OUTAGE_S).
    tests/integration/test_broker_outage.py stops a real Redis for 30 s under real workers."""
    settings = Settings.resolve({"broker_url": "redis://127.0.0.1:1/0"}, {"FLEET_BROKER_OUTAGE_S": "120"})
    conf = workers.app.configure(settings, worker=True).conf
    assert conf.broker_connection_max_retries is None and conf.broker_connection_retry_on_startup
    assert conf.result_backend_always_retry and conf.result_backend_max_retries >= 2 * 120
    assert conf.result_backend_transport_options["retry_policy"]["max_retries"] >= 120
    coordinator = workers.app.configure(settings).conf
    assert coordinator.broker_connection_max_retries == 3 and not coordinator.result_backend_always_retry


def test_the_slot_backend_follows_the_settings_not_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_SLOTS_URL", "redis://127.0.0.1:9/0")
    monkeypatch.setenv("FLEET_EMBEDDED_DIR", str(tmp_path / "elsewhere"))
    embedded = Settings.resolve({"runs": tmp_path / "a"}, {})
    files = workers.tasks.slots_backend(embedded)
    assert isinstance(files, FileSlots) and files.folder == (tmp_path / "a" / ".queue" / "slots").resolve()
    other = workers.tasks.slots_backend(Settings.resolve({"runs": tmp_path / "b"}, {}))
    assert isinstance(other, FileSlots) and other.folder.parent.parent == (tmp_path / "b").resolve()
    redis = workers.tasks.slots_backend(Settings.resolve(
        {"broker_url": "redis://127.0.0.1:1/0"}, {"FLEET_NAMESPACE": "team-a", "FLEET_SLOT_TTL": "3"}))
    assert isinstance(redis, RedisSlots) and (redis.namespace, redis.ttl) == ("team-a", 3.0)
    assert redis.client.connection_pool.connection_kwargs["port"] == 1


def _request(tmp_path: Path) -> dict:
    inv = tmp_path / "inv.toml"
    inv.write_text('schema_version = 1\n[hosts.one]\ntransport = "local"\nworkdir = "%s"\n'
                   'model = { base_url = "http://127.0.0.1:9/v1", id = "m", context = 4096, max_output = 512 }\n'
                   '[hosts.one.agents.echo]\ncommand = ["echo", "{prompt_file}"]\n' % (tmp_path / "work"))
    host = load_inventory(inv).hosts["one"]
    item = Item(id="01-a", kind="open", title="a", prompt="a", timeout_s=60)
    cell = Cell(id=Cell.make_id("one", item.id, "echo", 1), host="one", item=item.id, agent="echo", rep=1, seed=1)
    return AttemptRequest(sweep_id="s1", cell=cell, attempt=1, host=host, agent=host.agents["echo"], item=item,
                          prompt="p", harness_commit="test").model_dump(mode="json")


def test_the_task_runs_with_the_configured_start_timeout_whatever_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = {}

    def fake_run(transport, req, adapter, *, timing, worker, slot, on_host_free=None):  # type: ignore[no-untyped-def]
        seen["timing"] = timing
        seen["slot"] = slot
        now = utc_now()
        return AttemptResult(sweep_id=req.sweep_id, cell_id=req.cell.id, attempt=1, status="finished", host="one",
                             agent="echo", item="01-a", started_at=now, ended_at=now)

    monkeypatch.setattr(workers.tasks, "run_attempt", fake_run)
    monkeypatch.setenv("FLEET_START_TIMEOUT", "99")
    workers.app.configure(Settings.resolve({"runs": tmp_path / "runs"}, {"FLEET_START_TIMEOUT": "7",
                                                                         "FLEET_HEARTBEAT_TIMEOUT": "9"}))
    out = workers.tasks.run_attempt_task(_request(tmp_path))
    assert out["status"] == "finished" and seen["timing"].start_timeout_s == 7.0
    assert seen["timing"].heartbeat_s == 9.0
    # The slot the task holds is named to the lifecycle (file locks here: no Redis), so it can end its leftovers.
    assert str(seen["slot"]).startswith("file:") and str(seen["slot"]).endswith(".0.lock")


def test_a_request_naming_an_unknown_agent_kind_is_refused_before_any_adapter_is_looked_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the task has no `agent_unavailable` branch around adapter_for: an old or foreign request with a kind
    this harness does not declare fails validating the request, before a slot is taken or an adapter is sought."""
    looked_up = []
    monkeypatch.setattr(workers.tasks, "adapter_for", lambda *a: looked_up.append(a))
    monkeypatch.setattr(workers.tasks, "slots_backend", lambda s: looked_up.append("slot"))
    workers.app.configure(Settings.resolve({"runs": tmp_path / "runs"}, {}))
    request = _request(tmp_path)
    request["agent"]["kind"] = "aider"
    with pytest.raises(ValueError, match="unknown kind 'aider'"):
        workers.tasks.run_attempt_task(request)
    assert looked_up == []


def test_fleet_worker_logs_its_settings_once_on_one_line_redacted() -> None:
    code = (
        "import json, sys\n"
        "import workers.app\n"
        "workers.app.app.worker_main = lambda argv: print(json.dumps(argv))\n"
        "from harness.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "FLEET_HARNESS_COMMIT": "test", "COLUMNS": "80",
           "FLEET_SLOT_TTL": "3", "FLEET_NAMESPACE": "team-a"}
    out = subprocess.run([sys.executable, "-c", code, "worker", "--broker", f"redis://:{SECRET}@127.0.0.1:1/0",
                          "--hosts", "tower1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert SECRET not in out.stderr + out.stdout
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("fleet worker:")]
    assert line.startswith("fleet worker: queues fleet.team-a.host.tower1; settings: ")
    assert "broker_url=redis://:***@127.0.0.1:1/0 (flag --broker)" in line
    assert "slot_ttl_s=3 (env FLEET_SLOT_TTL)" in line and "namespace=team-a (env FLEET_NAMESPACE)" in line
    assert "retry_backoff_s" not in line  # a coordinator's setting; the worker shows what it reads
    (argv,) = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("[")]
    assert "--queues=fleet.team-a.host.tower1" in argv
