"""A host whose queue no worker consumes: real redis-server, a real `fleet worker` for one of two sshd hosts and
none for the other. The sweep says so with the command that starts one, gives up on that host's cells as
HARNESS_FAILURE(no_worker) after --no-worker-timeout, takes its tasks off the queue, and `fleet resume` runs those
cells once a worker is there, without a budget used up and without the withdrawn tasks ever running."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.fleetkit import run_fleet

pytestmark = pytest.mark.integration

ITEMS = {"01-one": "one\n", "02-two": "two\n"}


def _agent(markers: Path) -> list[str]:
    # Each run leaves a marker in its host's own folder, so the test counts the runs per host.
    return ["sh", "-c", f'touch {markers}/$$; cat "$1"; echo done', "sh", "{prompt_file}"]


def _runs_on(markers: Path) -> int:
    return len(list(markers.iterdir()))


def test_no_worker_is_warned_with_the_command_given_up_after_the_timeout_and_resumed(
        tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    alpha, bravo = ssh_hosts["alpha"], ssh_hosts["bravo"]
    marks = {h.name: tmp_path / f"marks-{h.name}" for h in (alpha, bravo)}
    for m in marks.values():
        m.mkdir()
    inv = write_inventory(tmp_path / "inv.toml", [h.toml(client_key[0], agent=_agent(marks[h.name])) for h in (alpha, bravo)])
    prompts = write_prompts(tmp_path / "prompts", ITEMS)
    runs = tmp_path / "runs"
    workers([alpha.name], inv, concurrency=1)  # none for bravo

    start = time.monotonic()
    r = run_fleet(["sweep", "--inventory", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                   "--broker", redis_server.url, "--no-worker-timeout", "8"], namespace, timeout=180)
    took = time.monotonic() - start
    assert r.returncode == 0, r.stderr[-3000:]  # alpha's cells were measured
    assert "Traceback" not in r.stderr
    queue = f"fleet.{namespace}.host.bravo"
    command = f"FLEET_NAMESPACE={namespace} fleet worker --hosts bravo -i {inv} --broker {redis_server.url}"
    warned = [line for line in r.stderr.splitlines() if line.startswith(f"fleet: warning: no worker consumes {queue}:")]
    assert warned and f"start one with `{command}`" in warned[0], r.stderr[-3000:]
    assert "given up as HARNESS_FAILURE(no_worker) in 8 s (--no-worker-timeout 8)" in warned[0], warned[0]
    (gave_up,) = re.findall(rf"^fleet: warning: no worker consumed {re.escape(queue)} for (\d+) s \(--no-worker-timeout 8\); "
                            r"nothing ran on the host: 2 cell\(s\) of host bravo recorded as HARNESS_FAILURE\(no_worker\)$",
                            r.stderr, re.M)
    assert 8 <= int(gave_up) <= 20, gave_up
    assert f"fleet.{namespace}.host.alpha" not in r.stderr  # alpha has its worker
    # Found after the 5 s grace (plus one 1 s broadcast), given up 8 s later: not a minute of silent waiting.
    assert took < 60, took
    result = json.loads(r.stdout)
    by_host = {h: [c for c in result["cells"] if c["host"] == h] for h in ("alpha", "bravo")}
    assert all(c["status"] == "finished" for c in by_host["alpha"]), by_host["alpha"]
    assert [(c["status"], c["failure"], c["attempts"], c["label"]) for c in by_host["bravo"]] == [
        ("harness_failure", "no_worker", 1, "HARNESS_FAILURE(no_worker)")] * 2, by_host["bravo"]
    assert result["status"] == "finished"

    # Nothing of bravo is left on its queue: a worker started now must not run the withdrawn attempts.
    import redis

    client = redis.Redis.from_url(redis_server.url)
    try:
        assert client.llen(queue) == 0
    finally:
        client.close()
    workers([bravo.name], inv, concurrency=1)
    time.sleep(2)
    assert _runs_on(marks["bravo"]) == 0

    # With a worker there, resume runs bravo's two cells (no_worker used no budget: a full 3 attempts remain).
    r2 = run_fleet(["resume", result["sweep"], "--json", "--runs", str(runs), "--broker", redis_server.url,
                    "--max-attempts", "1"], namespace, timeout=180)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "no worker consumes" not in r2.stderr, r2.stderr[-2000:]
    resumed = json.loads(r2.stdout)
    assert all(c["status"] == "finished" for c in resumed["cells"]), resumed["cells"]
    assert _runs_on(marks["bravo"]) == 2 and _runs_on(marks["alpha"]) == 2
    sweep = json.loads((runs / result["sweep"] / "sweep.json").read_text())
    for cell_id, attempts in sweep["attempts"].items():
        expected = ["harness_failure", "finished"] if cell_id.startswith("bravo/") else ["finished"]
        assert [a["status"] for a in attempts] == expected, (cell_id, attempts)
