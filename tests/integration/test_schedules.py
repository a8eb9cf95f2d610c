"""Schedules end to end: a real `fleet schedule run` (Celery beat) firing a test-only `every_s` schedule within
seconds, a real `fleet schedule service` running the sweeps, real `fleet worker`s on a test redis-server with
local-transport hosts and with sshd test hosts, and a webhook receiver (http.server) on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Callable

import pytest

from harness.store import Store
from tests.harness.schedule.test_notify import Receiver
from tests.integration.conftest import write_prompts
from tests.integration.fleetkit import FLEET, REPO, fleet_env, run_fleet

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def host_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One workdir for the module's hosts: the harness release is installed on them once."""
    return tmp_path_factory.mktemp("hosts")


def _inventory(path: Path, work: Path, hosts: list[str], sleep_s: float) -> Path:
    blocks = [textwrap.dedent(f"""\
        schema_version = 1
        [defaults]
        transport = "local"
        slots = 1
        model = {{ base_url = "http://127.0.0.1:9/v1", id = "m", context = 65536, max_output = 2048 }}
        [defaults.agents.slow]
        kind = "command"
        command = ["sh", "-c", "sleep {sleep_s}; echo done > \\"$1\\"; echo done", "sh", "{{answer_file}}"]
        """)]
    blocks += [f'[hosts.{h}]\nworkdir = "{work / h}"\n' for h in hosts]
    path.write_text("\n".join(blocks), encoding="utf-8")
    return path


def _schedules(path: Path, inventory: Path, prompts: Path, hosts: list[str], *, every_s: float, on_late: str,
               webhook: str) -> Path:
    path.write_text(textwrap.dedent(f"""\
        schema_version = 1
        [schedules.nightly]
        every_s = {every_s}
        inventory = "{inventory}"
        prompts = "{prompts}"
        hosts = {json.dumps(hosts)}
        items = ["01"]
        label = "nightly"
        on_late = "{on_late}"
        max_attempts = 1
        [schedules.nightly.notify]
        webhook = "{webhook}"
        retries = 3
        backoff_s = 0.2
        timeout_s = 5
        """), encoding="utf-8")
    return path


class Proc:
    """A long-running `fleet` process in its own session, its output in a log file."""

    def __init__(self, args: list[str], log: Path, namespace: str) -> None:
        self.log = log
        self.proc = subprocess.Popen(FLEET + args, cwd=REPO, env=fleet_env(namespace), stdout=open(log, "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _until(what: str, check: Callable[[], object], timeout: float, *logs: Proc) -> object:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    tails = "\n".join(f"--- {p.log.name}\n{p.text()[-3000:]}" for p in logs)
    raise AssertionError(f"{what} did not happen in {timeout} s\n{tails}")


def _setup(tmp_path: Path, host_work: Path, hosts: list[str], sleep_s: float, every_s: float, on_late: str,
           receiver: Receiver) -> tuple[Path, Path]:
    prompts = write_prompts(tmp_path / "prompts", {"01-hello": "say hello"})
    inv = _inventory(tmp_path / "fleet.toml", host_work, hosts, sleep_s)
    return inv, _schedules(tmp_path / "schedules.toml", inv, prompts, hosts, every_s=every_s, on_late=on_late,
                           webhook=receiver.url)


@pytest.fixture()
def procs():
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def test_beat_fires_the_service_sweeps_reports_compares_notifies_and_skips_late_fires(
        tmp_path: Path, host_work: Path, redis_server, namespace, workers, procs) -> None:
    receiver = Receiver([500, 500])
    try:
        inv, sched = _setup(tmp_path, host_work, ["one", "two"], sleep_s=3, every_s=2, on_late="skip",
                            receiver=receiver)
        runs = tmp_path / "runs"
        workers(["one", "two"], inv)
        common = ["--broker", redis_server.url, "--runs", str(runs)]
        service = Proc(["schedule", "service", *common], tmp_path / "service.log", namespace)
        procs.append(service)
        beat = Proc(["schedule", "run", "-f", str(sched), *common], tmp_path / "beat.log", namespace)
        procs.append(beat)

        def finished() -> list[dict]:
            return [b["json"] for b in receiver.bodies if b["status"] == 200 and b["json"]["event"] == "finished"]

        _until("two scheduled sweeps notified", lambda: len(finished()) >= 2, 240, service, beat)
        beat.stop()
        first, second = finished()[:2]

        # The first notification was refused twice, then delivered: the same body three times.
        assert [b["status"] for b in receiver.bodies[:3]] == [500, 500, 200]
        assert receiver.bodies[0]["json"] == receiver.bodies[2]["json"]
        log = service.text()
        assert "failed (try 1 of 4): HTTP 500 Internal Server Error; trying again in 0.2 s" in log
        assert "(try 3)" in log

        for note in (first, second):
            assert note["schema_version"] == 1 and note["schedule"] == "nightly" and note["label"] == "nightly"
            assert note["status"] == "finished" and not note["resumed"] and note["harness_failures"] == {}
            assert note["rate"]["graded"] == 2
            assert Path(note["report"]) == runs / note["sweep"] / "REPORT.md" and Path(note["report"]).is_file()
            assert f"report: {note['report']}" in note["text"]
        assert first["sweep"] != second["sweep"]
        assert second["previous"] == first["sweep"]  # compared with the previous sweep of the label
        assert second["regressions"] == []

        # Beat fired every 2 s while each sweep ran for at least 3 s: those fires were skipped and said so.
        skipped = [b["json"] for b in receiver.bodies if b["status"] == 200 and b["json"]["event"] == "skipped"]
        assert skipped, receiver.bodies
        assert "(on_late = skip)" in skipped[0]["note"] and skipped[0]["sweep"] in (first["sweep"], second["sweep"])
        assert ": skipped" in log
        # One sweep of the schedule at a time: in the log, each sweep ends before the next one starts.
        events = [(ln.split(" sweep ")[1].split()[0], "start" if " started (" in ln else "end")
                  for ln in log.splitlines() if " sweep " in ln and (" started (" in ln or " finished; pass rate" in ln)]
        assert len(events) >= 4, log
        for (a, kind_a), (b, kind_b) in zip(events, events[1:]):
            if kind_a == "start":
                assert (b, kind_b) == (a, "end"), events
        listing = json.loads(run_fleet(["sweeps", "--label", "nightly", "--json", "--runs", str(runs)], namespace).stdout)
        assert {first["sweep"], second["sweep"]} <= {s["id"] for s in listing["sweeps"]}
        assert "Sending due task" in beat.text()
    finally:
        receiver.close()


def test_a_service_killed_mid_sweep_resumes_it_and_a_queued_fire_runs_after(
        tmp_path: Path, host_work: Path, redis_server, namespace, workers, procs) -> None:
    receiver = Receiver([])
    try:
        inv, sched = _setup(tmp_path, host_work, ["one"], sleep_s=6, every_s=2, on_late="queue", receiver=receiver)
        runs = tmp_path / "runs"
        workers(["one"], inv)
        common = ["--broker", redis_server.url, "--runs", str(runs)]
        service = Proc(["schedule", "service", *common], tmp_path / "service-1.log", namespace)
        procs.append(service)
        beat = Proc(["schedule", "run", "-f", str(sched), *common], tmp_path / "beat.log", namespace)
        procs.append(beat)
        state_file = runs / ".schedules" / namespace / "nightly.json"

        def running_sweep() -> str:
            if not state_file.is_file():
                return ""
            state = json.loads(state_file.read_text())
            if state["status"] != "running" or not state["sweep"] or not state["queued"]:
                return ""
            # Killed while its one attempt is out on the worker (dispatched, no result yet): the snapshot with
            # its journal, as the store reads it.
            sweep = Store(runs).load_sweep(state["sweep"])
            started = any(a.status == "dispatched" for ats in sweep.attempts.values() for a in ats)
            return state["sweep"] if started else ""

        sweep_id = str(_until("a sweep under way with a fire queued behind it", running_sweep, 240, service, beat))
        assert "queued (on_late = queue), it runs when that sweep ends" in service.text()
        service.stop(signal.SIGKILL)  # dies mid-sweep: no chance to record anything
        beat.stop()
        assert json.loads(state_file.read_text())["status"] == "running"

        again = Proc(["schedule", "service", *common], tmp_path / "service-2.log", namespace)
        procs.append(again)

        def notes() -> list[dict]:
            return [b["json"] for b in receiver.bodies if b["status"] == 200]

        _until("the resumed sweep and the queued one notified", lambda: len(notes()) >= 2, 240, again)
        resumed, queued = notes()[:2]
        log = again.text()
        assert f"resuming sweep {sweep_id}" in log
        assert resumed["sweep"] == sweep_id and resumed["resumed"] and resumed["status"] == "finished"
        assert queued["event"] == "finished" and queued["sweep"] != sweep_id and not queued["resumed"]
        assert "queued (on_late = queue) and run after it" in queued["note"] and queued["previous"] == sweep_id
        sweep = Store(runs).load_sweep(sweep_id)
        assert sweep.status == "finished"
        (attempts,) = sweep.attempts.values()
        assert attempts[-1].status == "finished", attempts
        _until("the service idle", lambda: json.loads(state_file.read_text())["status"] == "idle", 30, again)
    finally:
        receiver.close()


def test_a_schedule_sweeps_sshd_hosts_through_real_workers(tmp_path: Path, ssh_hosts, client_key, redis_server,
                                                            namespace, workers, procs) -> None:
    """The same service and beat, against two real sshd test hosts with pinned keys: a fleet, not this machine."""
    from tests.integration.conftest import write_inventory

    receiver = Receiver([])
    try:
        hosts = [ssh_hosts["alpha"], ssh_hosts["bravo"]]
        inv = write_inventory(tmp_path / "fleet.toml", [h.toml(client_key[0]) for h in hosts])
        prompts = write_prompts(tmp_path / "prompts", {"01-hello": "say hello"})
        sched = _schedules(tmp_path / "schedules.toml", inv, prompts, [h.name for h in hosts], every_s=5,
                           on_late="skip", webhook=receiver.url)
        runs = tmp_path / "runs"
        workers([h.name for h in hosts], inv)
        common = ["--broker", redis_server.url, "--runs", str(runs)]
        service = Proc(["schedule", "service", *common], tmp_path / "service.log", namespace)
        procs.append(service)
        beat = Proc(["schedule", "run", "-f", str(sched), *common], tmp_path / "beat.log", namespace)
        procs.append(beat)

        def finished() -> list[dict]:
            return [b["json"] for b in receiver.bodies if b["status"] == 200 and b["json"]["event"] == "finished"]

        _until("the scheduled sweep notified", finished, 240, service, beat)
        beat.stop()
        note = finished()[0]
        assert note["status"] == "finished" and note["harness_failures"] == {} and note["rate"]["graded"] == 2, note
        sweep = Store(runs).load_sweep(note["sweep"])
        assert {h.transport for h in sweep.hosts.values()} == {"ssh"}
        for cell in sweep.cells:
            last = sweep.last(cell.id)
            assert last is not None and last.status == "finished" and last.exit_code == 0, (cell.id, last)
        # The agent really ran on each sshd host: its workspace there got the prompt.
        for h in hosts:
            assert list(h.workdir.rglob("received.txt")), h.name
    finally:
        receiver.close()


def test_two_services_of_one_namespace_run_one_sweep_of_a_schedule_at_a_time(
        tmp_path: Path, host_work: Path, redis_server, namespace, workers, procs) -> None:
    """A second `fleet schedule service` (started by mistake, or an old one not stopped) consumes the same control
    queue: each fire goes to one of them. Each one kept its own list of running sweeps, so a fire reaching the
    other one started a second sweep of the schedule beside the first."""
    receiver = Receiver([])
    try:
        inv, sched = _setup(tmp_path, host_work, ["one"], sleep_s=3, every_s=1, on_late="skip", receiver=receiver)
        runs = tmp_path / "runs"
        workers(["one"], inv)
        common = ["--broker", redis_server.url, "--runs", str(runs)]
        services = [Proc(["schedule", "service", *common], tmp_path / f"service-{i}.log", namespace) for i in (1, 2)]
        procs.extend(services)
        beat = Proc(["schedule", "run", "-f", str(sched), *common], tmp_path / "beat.log", namespace)
        procs.append(beat)

        def finished() -> list[dict]:
            return [b["json"] for b in receiver.bodies if b["status"] == 200 and b["json"]["event"] == "finished"]

        def both_got_fires() -> bool:
            return all("fired at" in s.text() for s in services)

        _until("three sweeps notified, and fires taken by both services",
               lambda: len(finished()) >= 3 and both_got_fires(), 240, *services, beat)
        beat.stop()
        for s in services:
            _until("the service idle", lambda: "starting its sweep" not in s.text().splitlines()[-1], 60, s)
        store = Store(runs)
        sweeps = sorted((store.load_sweep(i) for i in store.list_sweeps()), key=lambda r: r.created_at)
        assert len(sweeps) >= 3
        for before, after in zip(sweeps, sweeps[1:]):
            # Each sweep of the schedule ended before the next one was planned.
            assert before.finished_at and before.finished_at <= after.created_at, (before.id, after.id)
        assert any(": skipped" in s.text() for s in services)
    finally:
        receiver.close()
