"""The launcher supervises its agent on real parts: sshd hosts on loopback, Redis, `fleet worker` processes.

A redelivered task never records the old delivery's exit and never overlaps it; an agent's whole tree (a child
that called setsid too) ends at the timeout and at a revoke; an agent that rewrites what it finds cannot change
the recorded result or put a file outside its attempt; a worker that vanishes leaves its agent running no
longer than the heartbeat bound (FLEET_HEARTBEAT_TIMEOUT)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.fleetkit import SSHHost, run_fleet, start_fleet
from tests.support import alive

pytestmark = pytest.mark.integration


def _wait_for(pred, timeout: float = 120, what: str = "") -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"{what} never happened in {timeout} s")
        time.sleep(0.05)




def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _stored_once_with_matching_sha256(runs: Path, sweep: str) -> list[dict]:
    """Every finished attempt of the sweep is stored once, each artifact's bytes matching meta.json's sha256."""
    metas = []
    for meta_path in sorted((runs / sweep).rglob("meta.json")):
        meta = json.loads(meta_path.read_text())
        for art in meta["artifacts"]:
            data = (meta_path.parent / art["name"]).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (art["size"], art["sha256"]), art["name"]
        metas.append(meta)
    keys = [(m["cell_id"], m["attempt"]) for m in metas]
    assert len(keys) == len(set(keys)), keys
    return metas


# The agent logs its own interval to a file outside any workspace: "start PID T" then "end PID T" (also when it
# is stopped: the TERM trap), so the test sees whether two deliveries ever ran at once. One end line whatever the
# order of the TERMs: the tree's TERM may reach its sleep first, which ends the wait, and the shell itself a moment
# later, while it writes its own end line (the trap wrote a second one: seen once in CI). Signals are taken between
# commands, so `e` says whether the end line was claimed.
def _interval_agent(log: Path, first_flag: Path, first_s: int, later_s: int) -> list[str]:
    end = f'if [ $e = 0 ]; then e=1; echo "end $$ $(date +%s.%N)" >> {log}; fi'
    script = (
        f'e=0; echo "start $$ $(date +%s.%N)" >> {log}; '
        f"trap '{end}; exit 143' TERM; "
        f'if [ ! -e {first_flag} ]; then touch {first_flag}; s={first_s}; else s={later_s}; fi; '
        f'sleep $s & wait $!; {end}; echo "ran $$"'
    )
    return ["sh", "-c", script]


def _intervals(log: Path) -> dict[int, list[float]]:
    spans: dict[int, list[float]] = {}
    for line in log.read_text().splitlines():
        what, pid, t = line.split()
        spans.setdefault(int(pid), []).append(float(t))
    return spans


def _assert_no_overlap(spans: dict[int, list[float]]) -> None:
    ordered = sorted(spans.items(), key=lambda kv: kv[1][0])
    for pid, span in ordered:
        assert len(span) == 2, f"agent {pid} has no end: it was killed without a trace or runs on ({spans})"
    for (p1, (s1, e1)), (p2, (s2, e2)) in zip(ordered, ordered[1:]):
        assert e1 <= s2, f"agent {p1} ran until {e1:.2f}, after agent {p2} started at {s2:.2f}: they overlapped"


@pytest.mark.parametrize("dies", ["whole-worker", "pool-process"])
def test_a_redelivered_or_retried_attempt_records_its_own_exit_and_never_overlaps_the_first(
        dies, tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    host = ssh_hosts["delta"]
    log, flag = tmp_path / "intervals", tmp_path / "first-started"
    # The first agent would outlive the redelivery's start and end before it: exactly when its exit.json used to
    # land in the new delivery's folder and be recorded as the cell's result.
    agent = _interval_agent(log, flag, first_s=12, later_s=4)
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=agent)])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"})
    fast = {"FLEET_VISIBILITY_TIMEOUT": "4", "FLEET_SLOT_TTL": "3"}
    first = workers(["delta"], inv, concurrency=1, **fast)
    runs = tmp_path / "runs"
    proc = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                        "--broker", redis_server.url], namespace)
    try:
        _wait_for(lambda: log.exists(), what="the first agent's start")
        (first_pid,) = _intervals(log)
        if dies == "whole-worker":
            os.killpg(first.proc.pid, 9)  # main process and pool die without a word: the task is delivered again
            first.proc.wait(10)
            time.sleep(5)  # past the visibility timeout
            second = workers(["delta"], inv, concurrency=1, **fast)
        else:
            for child in first.pool_children():  # the pool process dies: worker_lost, retried as attempt 2
                os.kill(child, 9)
            second = first
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out)
    (cell,) = summary["cells"]
    spans = _intervals(log)
    assert first_pid in spans and len(spans) == 2, spans
    (second_pid,) = [p for p in spans if p != first_pid]
    _assert_no_overlap(spans)
    assert spans[first_pid][1] - spans[first_pid][0] < 12, "the first agent was not stopped: it ran its full sleep"
    print(f"{dies}: first agent ran {spans[first_pid][1] - spans[first_pid][0]:.1f} s, ended "
          f"{spans[second_pid][0] - spans[first_pid][1]:.2f} s before the second started")
    metas = _stored_once_with_matching_sha256(runs, summary["sweep"])
    last = max(metas, key=lambda m: m["attempt"])
    assert (last["status"], last["exit_code"]) == ("finished", 0), last
    attempt_dir = runs / summary["sweep"] / cell["id"] / f"attempt-{last['attempt']}"
    assert (attempt_dir / "agent.stdout").read_text() == f"ran {second_pid}\n"
    assert last["worker"].startswith(second.name + "@")
    if dies == "whole-worker":
        assert cell["attempts"] == 1 and [m["attempt"] for m in metas] == [1]
    else:
        assert cell["attempts"] == 2 and [m["status"] for m in sorted(metas, key=lambda m: m["attempt"])] == [
            "harness_failure", "finished"]
    assert not list((host.workdir / ".fleet" / "running").iterdir()), "a delivery is still listed as running"


def _setsid_agent(pids: Path) -> list[str]:
    child = f"import os,time; os.setsid(); open({str(pids)!r},'a').write('%d\\n' % os.getpid()); time.sleep(999)"
    return ["sh", "-c", f'{sys.executable} -c "{child}" & echo $$ >> {pids}; sleep 300']


def test_a_child_that_called_setsid_is_gone_after_the_timeout_kill(tmp_path, ssh_hosts, client_key, redis_server,
                                                                   namespace, workers):
    host = ssh_hosts["bravo"]
    pids = tmp_path / "pids"
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=_setsid_agent(pids))])
    prompts = write_prompts(tmp_path / "prompts", {"01-slow": "take your time\n"}, timeout_s=3)
    workers(["bravo"], inv)
    r = run_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs",
                   str(tmp_path / "runs"), "--broker", redis_server.url], namespace)
    assert r.returncode == 0, r.stderr[-3000:]
    (cell,) = json.loads(r.stdout)["cells"]
    assert cell["status"] == "timeout" and cell["attempts"] == 1
    started = _pids(pids)
    assert len(started) == 2
    # The kill is done when the result is in: no grace to wait for.
    assert [p for p in started if alive(p)] == [], "a process of the agent's tree outlived its timeout"


def test_a_child_that_called_setsid_is_gone_after_a_revoke(tmp_path, ssh_hosts, client_key, redis_server, namespace,
                                                           workers):
    host = ssh_hosts["alpha"]
    pids = tmp_path / "pids"
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=_setsid_agent(pids))])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"})
    workers(["alpha"], inv, concurrency=1)
    runs = tmp_path / "runs"
    proc = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                        "--broker", redis_server.url], namespace)
    _wait_for(lambda: len(_pids(pids)) == 2, what="the agent and its setsid child")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    started = _pids(pids)
    end = time.monotonic() + 20
    while any(alive(p) for p in started) and time.monotonic() < end:
        time.sleep(0.1)
    assert [p for p in started if alive(p)] == [], "a revoked attempt left part of its agent's tree running"


HOSTILE = r"""
set -u
ws=$(pwd)
root=$(dirname "$ws")
# The host's work folder: the nearest folder above with the harness's .fleet/ in it.
work=$root; d=$root
while [ "$d" != / ]; do d=$(dirname "$d"); if [ -d "$d/.fleet" ]; then work=$d; break; fi; done
fake='{"exit_code": 0, "signal": null, "timed_out_by_launcher": false, "ended_by": "exit", "time": 0}'
# The old layout's launcher, rewritten to forge an exit and to pack members outside the workspace.
mkdir -p "$root/.fleet"
cat > "$root/.fleet/launch.py" <<'PY'
import io, json, os, sys, tarfile
base = sys.argv[-1]
json.dump({"exit_code": 0, "signal": None}, open(os.path.join(base, ".fleet", "exit.json"), "w"))
with tarfile.open(os.path.join(base, ".fleet", "workspace.tar.gz"), "w:gz") as tar:
    for name in ("../../../../pwned-by-tar", "/tmp/pwned-abs"):
        info = tarfile.TarInfo(name); info.size = 5; tar.addfile(info, io.BytesIO(b"pwned"))
PY
cp "$root/.fleet/launch.py" "$work/launch.py" 2>/dev/null || true
python3 - "$work" <<'PY'
import io, os, sys, tarfile
work = sys.argv[1]
# A tarball with ../ members wherever the harness keeps its files.
for dirpath, dirs, files in os.walk(work):
    if os.path.basename(dirpath) in (".fleet",) or "deliveries" in dirpath:
        with tarfile.open(os.path.join(dirpath, "workspace.tar.gz"), "w:gz") as tar:
            info = tarfile.TarInfo("../../pwned-by-tar"); info.size = 5; tar.addfile(info, io.BytesIO(b"pwned"))
PY
for i in 1 2 3 4 5 6 7 8 9 10; do
  # A fake exit.json wherever one is, or could be.
  find "$work" -name 'exit.json' 2>/dev/null | while read -r f; do printf '%s' "$fake" > "$f"; done
  for d in "$work"/.fleet/deliveries/*/ "$root/.fleet/"; do [ -d "$d" ] && printf '%s' "$fake" > "$d/exit.json"; done
  sleep 0.3
done
echo "the true output"
exit 5
"""


def _tree(folder: Path) -> set[Path]:
    """Every path under ``folder`` that can be named: the host is shared by the session's tests, and one of them
    leaves a workspace deeper than PATH_MAX, which ``rglob`` cannot enter (os.walk skips what it cannot open)."""
    out: set[Path] = set()
    for root, dirs, files in os.walk(folder):
        out.update(Path(root, n) for n in dirs + files)
    return out


def test_an_agent_that_rewrites_what_it_finds_cannot_change_the_result_or_escape(tmp_path, ssh_hosts, client_key,
                                                                                  redis_server, namespace, workers):
    host = ssh_hosts["charlie"]
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=["sh", "-c", HOSTILE])])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"})
    workers(["charlie"], inv)
    runs = tmp_path / "runs"
    before = _tree(host.folder)
    r = run_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                   "--broker", redis_server.url], namespace)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    (cell,) = summary["cells"]
    assert (cell["status"], cell["exit_code"], cell["attempts"]) == ("finished", 5, 1), cell
    (meta,) = _stored_once_with_matching_sha256(runs, summary["sweep"])
    attempt_dir = runs / summary["sweep"] / cell["id"] / "attempt-1"
    assert (attempt_dir / "agent.stdout").read_text() == "the true output\n"
    exit_record = json.loads((attempt_dir / "harness" / "exit.json").read_text())
    assert exit_record["exit_code"] == 5 and exit_record["mac"]
    assert b"exit_code" in (attempt_dir / "harness" / "forged-records.txt").read_bytes()
    # Nothing the agent made came out of the tarball, in the store or on the host.
    assert not [a["name"] for a in meta["artifacts"] if "pwned" in a["name"]]
    assert not list(tmp_path.rglob("pwned*")) and not Path("/tmp/pwned-abs").exists()
    host_root = Path(meta["workspace"]).parent
    new = _tree(host.folder) - before
    outside = sorted(str(p) for p in new if host_root not in p.parents and p != host_root
                     and host.workdir / ".fleet" not in p.parents and "pwned" in p.name)
    assert outside == []
    assert not [p for p in host.folder.rglob("pwned*")]


@pytest.mark.parametrize("vanishes", ["worker-killed", "sshd-stopped"])
def test_an_agent_whose_worker_vanished_ends_within_the_heartbeat_bound(vanishes, tmp_path, client_key, redis_server,
                                                                        namespace, workers):
    host = SSHHost(f"hb{namespace[-6:]}", tmp_path / "host", client_key[1])
    host.setup()
    host.start()
    pids = tmp_path / "pids"
    inv = write_inventory(tmp_path / "inv.toml", [host.toml(client_key[0], agent=_setsid_agent(pids))])
    prompts = write_prompts(tmp_path / "prompts", {"01-one": "one\n"})
    bound = 4.0
    w = workers([host.name], inv, concurrency=1, FLEET_HEARTBEAT_TIMEOUT=str(bound))
    runs = tmp_path / "runs"
    proc = start_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                        "--broker", redis_server.url], namespace, {"FLEET_RETRY_BACKOFF": "600"})
    try:
        _wait_for(lambda: len(_pids(pids)) == 2, what="the agent and its setsid child")
        started = _pids(pids)
        if vanishes == "worker-killed":
            os.killpg(w.proc.pid, 9)  # no other worker: nothing is ever delivered again
            w.proc.wait(10)
        else:
            host.stop()  # sshd and its sessions are gone; the launcher is in a session of its own and stays
        t0 = time.monotonic()
        while any(alive(p) for p in started) and time.monotonic() - t0 < bound + 30:
            time.sleep(0.1)
        took = time.monotonic() - t0
        assert [p for p in started if alive(p)] == [], f"the agent ran on {took:.0f} s after its worker vanished"
        # The bound, plus a poll interval, the TERM grace and the supervisor's tick.
        assert took < bound + 6, f"ended after {took:.1f} s, bound {bound} s"
        print(f"{vanishes}: agent tree ended {took:.1f} s after the worker vanished (bound {bound} s)")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        host.stop()


def test_redis_leases_name_the_slot_only_on_a_one_slot_host(redis_server, namespace):
    from workers.slots import RedisSlots

    slots = RedisSlots(redis_server.url, namespace=namespace, ttl=5)
    one = slots.try_acquire("solo", 1)
    assert one is not None and one.slot == f"redis:fleet:{namespace}:slots:solo#0"
    one.release()
    two = slots.try_acquire("duo", 2)
    assert two is not None and two.slot is None  # which of two is unknown: only unsupervised leftovers are reaped
    two.release()
