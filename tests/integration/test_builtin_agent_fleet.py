"""The builtin guarded agent through the whole spine: Redis, a `fleet worker`, an sshd host, the harness
release installed on the host, and a scripted model served beside it. The stored transcript shows each
guard behaviour of issue 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.modelserver import ScriptedModelServer
from harness.core.transcript import read_transcript
from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.fleetkit import REPO, run_fleet

pytestmark = pytest.mark.integration

SCRIPTS = REPO / "prompts" / "scripts" / "builtin"
PHOTO_PROMPT = "write a python script that renames all photos in a folder by date taken, and test it\n"


def _builtin_inventory(tmp_path: Path, host, client_key, url: str) -> Path:
    block = host.toml(client_key[0]).replace("http://127.0.0.1:9/v1", url)
    block = block.split(f"[hosts.{host.name}.agents.cmd]")[0] + f'[hosts.{host.name}.agents.builtin]\nkind = "builtin"\n'
    return write_inventory(tmp_path / "inv.toml", [block])


def _run(tmp_path, script: str, prompt: str, ssh_hosts, client_key, redis_server, namespace, workers):
    host = ssh_hosts["charlie"]
    with ScriptedModelServer(SCRIPTS / script) as server:
        inv = _builtin_inventory(tmp_path, host, client_key, server.url)
        prompts = write_prompts(tmp_path / "prompts", {"01-task": prompt}, timeout_s=300)
        workers(["charlie"], inv)
        runs = tmp_path / "runs"
        r = run_fleet(["sweep", "-i", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                       "--broker", redis_server.url], namespace, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    (cell,) = summary["cells"]
    assert cell["status"] == "finished" and cell["attempts"] == 1, cell
    folder = runs / summary["sweep"] / cell["id"] / "attempt-1"
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["host_facts"]["harness_release"]
    assert "/harness/" in meta["agent_command"][0] and meta["agent_command"][1:3] == ["-m", "workers.host.agent"]
    events = read_transcript(folder / "transcript.jsonl")
    receipt = json.loads((folder / "receipt.json").read_text())
    grade = json.loads((folder / "grade.json").read_text())
    assert cell["grade"] == grade["grade"] and grade["outcome"] == receipt["status"]
    return folder, events, receipt


def _of(events, kind: str):
    return [e for e in events if e.event == kind]


def test_delivered_with_a_passing_test(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    folder, events, receipt = _run(tmp_path, "../../open/07-photo-renamer/model.toml", PHOTO_PROMPT, ssh_hosts, client_key,
                                   redis_server, namespace, workers)
    assert events[-1].event == "run_end" and events[-1].outcome == "completed"
    tests = [r for r in _of(events, "tool_result") if r.details.test is not None]
    assert tests and tests[-1].details.test.verdict == "passed"
    assert receipt["status"] == "passed"
    assert (folder / "workspace" / "Playground" / "photo-renamer" / "rename_photos.py").is_file()
    assert (folder / "answer.txt").read_text() == receipt["text"]
    assert json.loads((folder / "grade.json").read_text())["grade"] == "DELIVERED"


def test_stopped_by_the_budget_at_the_fourth_consecutive_failure(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    folder, events, receipt = _run(tmp_path, "budget-stop.toml", PHOTO_PROMPT, ssh_hosts, client_key, redis_server,
                              namespace, workers)
    (stop,) = _of(events, "stop")
    assert stop.reason == "consecutive_failures"
    failed = [r for r in _of(events, "tool_result") if r.is_error]
    assert len(failed) == 4 and failed[-1].call_id == stop.call_id
    assert receipt["status"] == "failed"
    grade = json.loads((folder / "grade.json").read_text())
    assert grade["grade"] == "NOTHING" and grade["stop"]["reason"] == "consecutive_failures"
    assert grade["stop"]["at_call"] == 4


def test_a_cut_reply_is_continued_once(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    prompt = "make me a cool looking webpage with a forest theme ... Best you can do\n"
    folder, events, _ = _run(tmp_path, "output-limit.toml", prompt, ssh_hosts, client_key, redis_server, namespace, workers)
    responses = _of(events, "model_response")
    assert responses[0].finish_reason == "length"
    decisions = [g for g in _of(events, "guard") if g.decision in ("continue", "report")]
    assert [g.decision for g in decisions] == ["continue"]
    assert events[-1].outcome == "completed"
    assert json.loads((folder / "grade.json").read_text())["grade"] == "DELIVERED"


def test_a_refused_recursive_delete_with_its_receipt(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    folder, events, receipt = _run(tmp_path, "refused-delete.toml", PHOTO_PROMPT, ssh_hosts, client_key,
                                   redis_server, namespace, workers)
    refusals = [g for g in _of(events, "guard") if g.decision == "refuse"]
    assert refusals and refusals[0].reason == "recursive_delete"
    assert events[-1].outcome == "stopped" and events[-1].reason == "recursive_delete"
    assert _of(events, "receipt")
    assert receipt["text"] and (folder / "answer.txt").read_text() == receipt["text"]
    grade = json.loads((folder / "grade.json").read_text())
    assert grade["grade"] == "PARTIAL" and grade["stop"]["reason"] == "recursive_delete"


def test_a_500_storm_is_a_harness_failure_retried_with_every_file_kept(tmp_path, ssh_hosts, client_key, redis_server, namespace, workers):
    script = tmp_path / "storm.toml"
    script.write_text('schema_version = 1\n\n[fallback]\nhttp_status = 500\nerror_body = "the GPU fell over"\n')
    host = ssh_hosts["charlie"]
    with ScriptedModelServer(script) as server:
        inv = _builtin_inventory(tmp_path, host, client_key, server.url)
        prompts = write_prompts(tmp_path / "prompts", {"01-task": PHOTO_PROMPT}, timeout_s=300)
        workers(["charlie"], inv)
        runs = tmp_path / "runs"
        r = run_fleet(["sweep", "-i", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                       "--broker", redis_server.url, "--max-attempts", "2"], namespace, timeout=600)
    # Every cell ended in a harness failure: the sweep ran, but measured nothing (exit 3).
    assert r.returncode == 3, r.stderr[-3000:]
    assert "nothing was measured" in r.stderr
    summary = json.loads(r.stdout)
    (cell,) = summary["cells"]
    assert (cell["status"], cell["reason"], cell["attempts"]) == ("harness_failure", "model_endpoint", 2)
    assert cell["grade"] == "HARNESS_FAILURE"
    for k in (1, 2):
        folder = runs / summary["sweep"] / cell["id"] / f"attempt-{k}"
        meta = json.loads((folder / "meta.json").read_text())
        assert meta["exit_code"] == 75 and "model_http_500" in meta["error"]
        events = read_transcript(folder / "transcript.jsonl")
        assert events[-1].event == "run_end" and events[-1].outcome == "infrastructure"
