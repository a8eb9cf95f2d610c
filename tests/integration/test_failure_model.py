"""The one failure model on the embedded default's real parts (a Celery worker on the SQLite broker, the local
transport, real agent processes): what is retried, what resume runs again, one bad delivery, stopping, and the
exit status a scheduler reads."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from harness.core.records import Artifact
from tests.integration.conftest import write_prompts
from tests.integration.fleetkit import free_port, run_embedded, start_embedded

pytestmark = pytest.mark.integration

INVENTORY = """schema_version = 1
[defaults]
transport = "local"
slots = 1
model = {{ base_url = "http://127.0.0.1:{port}/v1", id = "m", context = 65536, max_output = 2048 }}
[defaults.agents.echo]
kind = "command"
command = ["sh", "-c", "echo done > \\"$1\\"; echo 'print(1)' > main.py", "sh", "{{answer_file}}"]
[defaults.agents.silent]
# A real agent's kind (its session always becomes transcript.jsonl) whose program runs and leaves nothing.
kind = "openclaw"
program = "{silent}"
[defaults.agents.slow]
kind = "command"
env = {{ FLEET_TEST_API_KEY = "sk-TOPSECRET-0451" }}
command = ["sh", "-c", "touch \\"$1.started\\"; exec sleep 300", "sh", "{{answer_file}}"]
[hosts.one]
workdir = "{work}/one"
[hosts.two]
workdir = "{work}/two"
"""


def _setup(tmp_path: Path, **prompts: str) -> tuple[Path, Path]:
    silent = tmp_path / "silent-agent"
    silent.write_text("#!/bin/sh\necho 'ran, wrote nothing'\nexit 0\n")
    silent.chmod(0o755)
    inv = tmp_path / "inv.toml"
    inv.write_text(INVENTORY.format(port=free_port(), silent=silent, work=tmp_path / "hosts"))
    cat = write_prompts(tmp_path / "prompts", prompts or {"01-a": "a\n"}, timeout_s=600)
    return inv, cat


def _cells(stdout: str) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(stdout)["cells"]}


FAST = {"FLEET_RETRY_BACKOFF": "0.1"}


def test_a_graded_harness_failure_is_retried_and_resume_keeps_the_budget(tmp_path: Path) -> None:
    inv, cat = _setup(tmp_path)
    args = ["-i", str(inv), "--prompts", str(cat), "--json"]
    r = run_embedded(["sweep", *args, "--hosts", "one", "--agents", "silent"], tmp_path, **FAST)
    # Exit 3: the sweep ran, but measured nothing.
    assert r.returncode == 3, r.stderr[-2000:]
    assert "nothing was measured: all 1 cell(s) ended in HARNESS_FAILURE" in r.stderr
    (cell,) = _cells(r.stdout).values()
    # The attempt finished (exit 0), but the grader calls it the fleet's failure: it is retried all the same.
    assert (cell["status"], cell["grade"], cell["failure"], cell["attempts"]) == ("finished", "HARNESS_FAILURE",
                                                                                  "no_transcript", 3)
    assert cell["label"] == "HARNESS_FAILURE(no_transcript)"
    sweep = json.loads(r.stdout)["sweep"]
    # resume gives no fresh budget, and says so.
    again = run_embedded(["resume", sweep, "--json"], tmp_path, **FAST)
    assert again.returncode == 3
    assert "already used all 3 attempts" in again.stderr and "--retry-exhausted" in again.stderr
    assert _cells(again.stdout)[cell["id"]]["attempts"] == 3
    assert json.loads(again.stdout)["status"] == "finished"  # nothing left to run: it ran to its end
    # --retry-exhausted asks for one.
    fresh = run_embedded(["resume", sweep, "--retry-exhausted", "--max-attempts", "2", "--json"], tmp_path, **FAST)
    assert _cells(fresh.stdout)[cell["id"]]["attempts"] == 5
    for k in range(1, 6):
        assert (tmp_path / "runs" / sweep / cell["id"] / f"attempt-{k}" / "meta.json").is_file()


def test_resume_runs_a_cell_that_still_has_budget_from_another_folder(tmp_path: Path) -> None:
    inv, cat = _setup(tmp_path)
    # A relative inventory path: the sweep records it absolute, so resume works from anywhere.
    r = run_embedded(["sweep", "-i", "inv.toml", "--prompts", str(cat), "--hosts", "one", "--agents", "silent",
                      "--max-attempts", "1", "--json"], tmp_path, **FAST)
    assert r.returncode == 3
    sweep = json.loads(r.stdout)["sweep"]
    record = json.loads((tmp_path / "runs" / sweep / "sweep.json").read_text())
    assert record["inventory"] == str(inv.resolve()) and len(record["inventory_sha256"]) == 64
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    inv.write_text(inv.read_text() + "\n# changed\n")
    again = run_embedded(["resume", sweep, "--runs", str(tmp_path / "runs"), "--max-attempts", "2", "--json"], elsewhere,
                         home=tmp_path / "home", **FAST)
    assert again.returncode == 3, again.stderr[-2000:]
    assert "changed since sweep" in again.stderr
    (cell,) = _cells(again.stdout).values()
    assert cell["attempts"] == 2  # one left of a budget of 2


def test_fail_on_gates_on_grades_and_rejects_unknown_ones(tmp_path: Path) -> None:
    inv, cat = _setup(tmp_path)
    args = ["sweep", "-i", str(inv), "--prompts", str(cat), "--hosts", "one", "--agents", "echo", "--json"]
    ok = run_embedded(args + ["--fail-on", "HARNESS_FAILURE,PARTIAL,NOTHING"], tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    (cell,) = _cells(ok.stdout).values()
    assert cell["grade"] == "DELIVERED"
    gated = run_embedded(args + ["--fail-on", "DELIVERED"], tmp_path)
    assert gated.returncode == 4
    assert f"--fail-on DELIVERED: 1 cell(s): {cell['id']} DELIVERED" in gated.stderr
    for empty in ("", ",", " "):
        off = run_embedded(args + ["--fail-on", empty], tmp_path)
        assert off.returncode == 2 and "no grade given" in off.stderr, off.stderr
    bad = run_embedded(args + ["--fail-on", "GREAT"], tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "fleet: error: --fail-on 'GREAT': not a grade (grades: DELIVERED, PARTIAL, NOTHING, CODE_IN_CHAT, HARNESS_FAILURE)")


def test_one_bad_delivery_is_that_attempts_failure_and_every_other_cell_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker returns a corrupt artifact for one attempt and a refused name for another: each becomes that
    attempt's harness failure (the corrupt one retried, the refused one not), and every other cell is recorded."""
    import workers.tasks
    from harness.core.catalog import load_catalog
    from harness.coordinator.verbs import Coordinator
    from harness.coordinator.dispatch import RetryPolicy
    from harness.core.inventory import load_inventory
    from harness.store import Store
    from harness.core.settings import Settings

    inv_path, cat_path = _setup(tmp_path, **{"01-a": "a\n", "02-b": "b\n"})
    real = workers.tasks.run_attempt

    def hostile(transport, req, adapter, **kw):  # type: ignore[no-untyped-def]
        result = real(transport, req, adapter, **kw)
        if (req.cell.host, req.item.id, req.attempt) == ("one", "01-a", 1):
            art = result.artifacts[0]
            result.artifacts[0] = art.model_copy(update={"sha256": "0" * 64})
        if (req.cell.host, req.item.id) == ("two", "02-b"):
            result.artifacts.append(Artifact.of("../../outside.txt", b"escape"))
        return result

    monkeypatch.setattr(workers.tasks, "run_attempt", hostile)
    store = Store(tmp_path / "runs")
    warnings: list[str] = []
    co = Coordinator(store, Settings.resolve({"runs": store.root}, {}), retry=RetryPolicy(max_attempts=3, backoff_s=(0.1,)),
                     on_event=lambda e: warnings.append(e.text) if e.kind == "warning" else None)
    sweep = co.sweep(load_inventory(inv_path), load_catalog(cat_path), agents=["echo"])
    assert sweep.status == "finished"
    runs = {c.id: [(a.status, a.failure, a.grade) for a in sweep.attempts[c.id]] for c in sweep.cells}
    assert runs == {
        "one/01-a/echo/r1": [("harness_failure", "artifact_corrupt", "HARNESS_FAILURE"), ("finished", "", "DELIVERED")],
        "one/02-b/echo/r1": [("finished", "", "DELIVERED")],
        "two/01-a/echo/r1": [("finished", "", "DELIVERED")],
        "two/02-b/echo/r1": [("harness_failure", "artifact_refused", "HARNESS_FAILURE")],
    }
    assert any("arrived corrupted" in w for w in warnings) and any("refusing artifact name" in w for w in warnings)
    # The refused deliveries kept no file but their meta.json, and nothing escaped the attempt folder.
    for cid in ("one/01-a/echo/r1", "two/02-b/echo/r1"):
        folder = store.attempt_dir(sweep.id, cid, 1)
        assert sorted(p.name for p in folder.iterdir()) == ["grade.json", "grades.jsonl", "meta.json"]
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["artifacts"] == [] and meta["worker"] and meta["duration_s"] > 0  # what is known of the run stays
    assert not list(tmp_path.rglob("outside.txt"))


@pytest.mark.parametrize(("sig", "times"), [(signal.SIGTERM, 1), (signal.SIGHUP, 1), (signal.SIGTERM, 3),
                                           (signal.SIGINT, 3)])
def test_sigterm_and_sighup_stop_a_sweep_as_ctrl_c_does(tmp_path: Path, sig: signal.Signals, times: int) -> None:
    """One signal or three in a row (an impatient operator): exit 130, every attempt recorded, agents killed."""
    inv, cat = _setup(tmp_path)
    proc = start_embedded(["sweep", "-i", str(inv), "--prompts", str(cat), "--agents", "slow",
                           "--label", "stopme"], tmp_path)
    deadline = time.monotonic() + 120
    while len(list((tmp_path / "hosts").rglob("*.started"))) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the agents never started"
        time.sleep(0.2)
    for _ in range(times):
        proc.send_signal(sig)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=120)
    (sweep_id,) = [p.name for p in (tmp_path / "runs").iterdir() if p.name.endswith("-stopme")]
    assert proc.returncode == 130, err[-2000:]
    how = "Ctrl-C" if sig == signal.SIGINT else sig.name
    assert err.strip().splitlines() == [f"fleet: interrupted ({how}); continue with `fleet resume {sweep_id}`"]
    record = json.loads((tmp_path / "runs" / sweep_id / "sweep.json").read_text())
    assert record["status"] == "interrupted"
    # Settled, not left `running`: revoked (the user's stop, not counted against the budget).
    assert [(a["status"], a["reason"]) for runs in record["attempts"].values() for a in runs] == [
        ("harness_failure", "revoked")] * 2
    # The agents' environment (an API key) is nowhere in the results, the queue's own files included.
    assert not [p for p in (tmp_path / "runs").rglob("*") if p.is_file() and b"sk-TOPSECRET-0451" in p.read_bytes()]
    # The agent's process group was killed: no process is left working in this test's host folder.
    deadline = time.monotonic() + 30
    while _working_in(tmp_path / "hosts"):
        assert time.monotonic() < deadline, f"the agent is still running: {_working_in(tmp_path / 'hosts')}"
        time.sleep(0.2)


def _working_in(folder: Path) -> list[str]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(folder):
                found.append(pid)
        except OSError:
            continue
    return found


def test_a_sweep_that_fails_before_dispatching_leaves_no_sweep_behind(tmp_path: Path) -> None:
    inv, cat = _setup(tmp_path)
    # A bad broker: one line, nothing kept.
    r = run_embedded(["sweep", "-i", str(inv), "--prompts", str(cat), "--broker", "redis://127.0.0.1:1/0"], tmp_path)
    assert r.returncode == 1 and r.stderr.strip().startswith("fleet: error: cannot reach the broker at redis://127.0.0.1:1/0")
    # A scripted model whose port (--model-port) is taken: one line, nothing kept.
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    inv.write_text(inv.read_text().replace("max_output = 2048 }", "max_output = 2048, scripted = true }")
                   .replace(f"127.0.0.1:{inv.read_text().split('127.0.0.1:')[1].split('/')[0]}", f"127.0.0.1:{port}"))
    try:
        # The bundled 12 has a demo script, so its scripted model is served: on the port given, which is taken (the
        # inventory's port, taken, would be replaced by a free one: tests/integration/test_model_port.py).
        r = run_embedded(["sweep", "-i", str(inv), "--items", "12", "--hosts", "one", "--agents", "echo",
                          "--model-port", str(port)], tmp_path)
    finally:
        busy.close()
    assert r.returncode == 2 and "cannot serve the scripted model" in r.stderr, r.stderr[-2000:]
    runs = tmp_path / "runs"
    assert not runs.exists() or [p.name for p in runs.iterdir() if not p.name.startswith(".") and p.is_dir()] == []
    status = run_embedded(["status"], tmp_path)
    assert status.returncode == 2 and "no sweeps yet" in status.stderr


def test_resume_grades_an_attempt_its_stopped_coordinator_recorded_but_never_graded(tmp_path: Path) -> None:
    """Stopped between recording and grading: the attempt looks measured (finished, exit 0) until its grade says
    it is the fleet's failure. resume grades it first, then retries it within the budget."""
    inv, cat = _setup(tmp_path)
    r = run_embedded(["sweep", "-i", str(inv), "--prompts", str(cat), "--hosts", "one", "--agents", "silent",
                      "--max-attempts", "1", "--json"], tmp_path, **FAST)
    assert r.returncode == 3
    sweep = json.loads(r.stdout)["sweep"]
    path = tmp_path / "runs" / sweep / "sweep.json"
    record = json.loads(path.read_text())
    (runs,) = record["attempts"].values()
    runs[0].update(grade="", failure="")  # as a coordinator stopped right after record_attempt left it
    path.write_text(json.dumps(record))
    again = run_embedded(["resume", sweep, "--max-attempts", "2", "--json"], tmp_path, **FAST)
    (cell,) = _cells(again.stdout).values()
    assert (cell["attempts"], cell["failure"]) == (2, "no_transcript"), again.stderr[-2000:]


def test_resume_with_an_agent_the_inventory_no_longer_has_is_one_line(tmp_path: Path) -> None:
    inv, cat = _setup(tmp_path)
    r = run_embedded(["sweep", "-i", str(inv), "--prompts", str(cat), "--hosts", "one", "--agents", "silent",
                      "--max-attempts", "1", "--json"], tmp_path, **FAST)
    sweep = json.loads(r.stdout)["sweep"]
    inv.write_text(inv.read_text().replace("[defaults.agents.silent]", "[defaults.agents.renamed]"))
    for args in (["resume", sweep, "--max-attempts", "3"], ["rerun", "one", "01-a", "--sweep", sweep]):
        again = run_embedded(args, tmp_path, **FAST)
        assert again.returncode == 2 and "Traceback" not in again.stderr, again.stderr[-2000:]
        assert again.stderr.strip().splitlines()[-1].endswith(
            "hosts.one.agents has no 'silent', which cell one/01-a/silent/r1 of the sweep needs")
    assert json.loads((tmp_path / "runs" / sweep / "sweep.json").read_text())["status"] == "finished"

