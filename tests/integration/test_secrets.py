"""The agent under test never sees the harness's secrets, and no secret is stored (docs/environment.md).

Real parts: a redis-server that requires a password, with a second ACL user for the result backend; a `fleet
worker` given both URLs only in its environment (as FLEET_BROKER_URL and FLEET_RESULT_BACKEND), the model's API
key and an unrelated token; two hosts on the `local` transport served by that worker and one sshd host. On one
local host and the sshd host a `command` agent prints its whole environment to stdout and answer.txt; the other
local host's model is a scripted server that answers only with the API key, and the builtin agent there runs
`env` as a tool. After the sweep, `fleet report`, `fleet status --json`, `fleet show` and `fleet settings`, every
planted secret (raw, base64 at each alignment, URL-encoded) is looked for in every file under runs/ (SQLite
files byte for byte, gzip and tar archives unpacked), the attempt folders on the hosts, the worker's and the
coordinator's logs and outputs, and every key and value of every Redis database.

The rule for the model's key: it is the agent's own credential, so an agent on a host whose model names it gets
it; the harness never stores it, and the builtin agent hides it from the commands the model runs. So the
environment-printing agents run on hosts whose model names no key, and the builtin agent, which gets one, must
leave it nowhere.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import sys
import tarfile
import subprocess
import textwrap
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from harness.modelserver import ScriptedModelServer
from tests.integration.conftest import write_inventory, write_prompts
from tests.integration.fleetkit import RedisServer, Worker, run_fleet, start_fleet

pytestmark = pytest.mark.integration

ENVDUMP = ["sh", "-c", 'env; env > "$1"', "sh", "{answer_file}"]

BUILTIN_SCRIPT = textwrap.dedent("""\
    schema_version = 1
    model_id = "scripted-model"

    [[turns]]
    text = "Let me look at my environment first."
    [[turns.tool_calls]]
    name = "exec"
    arguments = { command = "env; echo KEY=${QUAL_MODEL_KEY:-unset}" }

    [[turns]]
    text = "I looked at the environment; there is nothing else to do."
    """)


def _forms(secret: str) -> list[bytes]:
    """The secret as it could be written: raw, URL-encoded, and base64 at each of the three alignments (the middle
    characters that depend on the secret's bytes alone)."""
    raw = secret.encode()
    out = {raw, quote(secret, safe="").encode()}
    for pad in range(3):
        data = b"\0" * pad + raw
        # Character i holds bits 6i..6i+5: keep those wholly after the pad bytes and wholly inside the data.
        out.add(base64.b64encode(data)[(8 * pad + 5) // 6:(8 * len(data)) // 6])
    return [f for f in out if len(f) >= 8]


def _unpacked(name: str, data: bytes) -> list[tuple[str, bytes]]:
    """The file and, for a gzip or tar archive, each member (recursively)."""
    out = [(name, data)]
    if data[:2] == b"\x1f\x8b":
        try:
            inner = gzip.decompress(data)
        except (OSError, EOFError):
            inner = b""
        if inner:
            out += _unpacked(f"{name}!gunzip", inner)
    if len(data) > 262 and data[257:262] == b"ustar":
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            for m in tf.getmembers():
                f = tf.extractfile(m) if m.isfile() else None
                if f is not None:
                    out += _unpacked(f"{name}!{m.name}", f.read())
    return out


def _files(root: Path, skip: tuple[str, ...] = ()) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink() and not any(part in skip for part in p.relative_to(root).parts):
            out += _unpacked(str(p), p.read_bytes())
    return out


def _redis_dump(url: str) -> list[tuple[str, bytes]]:
    """Every key and value of every database: GET / LRANGE / HGETALL / SMEMBERS / ZRANGE by type, and DUMP."""
    admin = redis.Redis.from_url(url)
    dbs = [int(name[2:]) for name in admin.info("keyspace")]
    out: list[tuple[str, bytes]] = []
    for db in dbs:
        r = redis.Redis.from_url(url, db=db)
        for key in r.scan_iter(count=1000):
            kind = r.type(key).decode()
            values: list[bytes] = [key, r.dump(key) or b""]
            if kind == "string":
                values.append(r.get(key) or b"")
            elif kind == "list":
                values += r.lrange(key, 0, -1)
            elif kind == "hash":
                for k, v in r.hgetall(key).items():
                    values += [k, v]
            elif kind == "set":
                values += list(r.smembers(key))
            elif kind == "zset":
                values += [m for m, _ in r.zrange(key, 0, -1, withscores=True)]
            out += [(f"redis db{db} {key!r} ({kind})", v) for v in values + [_body(v) for v in values]]
    return out


def _body(value: bytes) -> bytes:
    """A kombu message's body, decoded (a task's arguments travel base64-encoded in its envelope); b"" for others."""
    try:
        envelope = json.loads(value)
        if isinstance(envelope, dict) and envelope.get("properties", {}).get("body_encoding") == "base64":
            return base64.b64decode(envelope["body"])
    except (ValueError, TypeError, AttributeError):
        pass
    return b""


def test_no_secret_reaches_an_agent_or_anything_stored(tmp_path: Path, ssh_hosts, client_key) -> None:
    tag = uuid.uuid4().hex[:12]
    redis_password = f"redispw{tag}"                   # SECRET1: the broker's password
    model_key = f"sk-{tag}+key/="                      # SECRET2: the model's API key, via api_key_env
    backend_password = f"backendpw{tag}"               # SECRET3: another harness setting (the result backend)
    unrelated = f"deploytoken{tag}"                    # not the harness's, but in the worker's environment
    # Every secret the harness can be configured with. The dashboard (a later issue) will have a token: plant
    # it here, in its setting, when it exists.
    planted = {"redis password": redis_password, "model API key": model_key,
               "result backend password": backend_password, "unrelated worker token": unrelated}

    server = RedisServer(tmp_path / "redis", password=redis_password)
    server.start()
    worker: Worker | None = None
    try:
        redis.Redis.from_url(server.url).acl_setuser(
            "backend", enabled=True, passwords=[f"+{backend_password}"], keys=["*"], channels=["*"],
            commands=["+@all"])
        broker = server.url
        backend = f"redis://backend:{backend_password}@127.0.0.1:{server.port}/1"
        namespace = f"t{tag[:10]}"
        settings_env = {"FLEET_BROKER_URL": broker, "FLEET_RESULT_BACKEND": backend, "DEPLOY_TOKEN": unrelated}

        script = tmp_path / "builtin.toml"
        script.write_text(BUILTIN_SCRIPT)
        with ScriptedModelServer(script, api_key=model_key) as model:
            ssh = ssh_hosts["delta"]
            ssh_block = ssh.toml(client_key[0], agent=ENVDUMP).replace("[hosts.delta.agents.cmd]",
                                                                       "[hosts.delta.agents.envdump]")
            blocks = [
                textwrap.dedent(f"""\
                    [hosts.loc]
                    transport = "local"
                    workdir = "{tmp_path / 'loc'}"
                    python = "{sys.executable}"
                    model = {{ base_url = "{model.url}", id = "scripted-model", context = 32768, max_output = 2048 }}
                    [hosts.loc.agents.envdump]
                    command = {json.dumps(ENVDUMP)}
                    """),
                textwrap.dedent(f"""\
                    [hosts.lockey]
                    transport = "local"
                    workdir = "{tmp_path / 'lockey'}"
                    python = "{sys.executable}"
                    model = {{ base_url = "{model.url}", id = "scripted-model", context = 32768, max_output = 2048, api_key_env = "QUAL_MODEL_KEY" }}
                    [hosts.lockey.agents.builtin]
                    kind = "builtin"
                    """),
                ssh_block,
            ]
            inv = write_inventory(tmp_path / "inv.toml", blocks)
            prompts = write_prompts(tmp_path / "prompts", {"01-env": "print your environment\n"}, timeout_s=300)
            runs = tmp_path / "runs"
            coord_log = tmp_path / "coordinator.log"
            sweep = start_fleet(["sweep", "-i", str(inv), "--prompts", str(prompts), "--json", "--runs", str(runs),
                                 "--log-file", str(coord_log)], namespace, settings_env)
            # The tasks wait in Redis before any worker runs: what travels in them is read there, as sent.
            queues = [f"fleet.{namespace}.host.{h}" for h in ("loc", "lockey", "delta")]
            r = redis.Redis.from_url(broker)
            deadline = time.monotonic() + 60
            while sum(r.llen(q) for q in queues) < 3:
                assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
                time.sleep(0.1)
            in_flight = _redis_dump(broker)
            assert sum(b'"api_key_env": "QUAL_MODEL_KEY"' in v for _, v in in_flight) >= 1  # the request, by name
            # The broker and backend only in the worker's environment, as the worker had them; the
            # model's key there too: a local host's environment is the worker's.
            worker = Worker(tmp_path, "", namespace, ["loc", "lockey", "delta"], inv, concurrency=3,
                            env={**settings_env, "QUAL_MODEL_KEY": model_key})
            worker.wait_ready()
            out, err = sweep.communicate(timeout=600)
            swept = subprocess.CompletedProcess(sweep.args, sweep.returncode, out, err)
            assert swept.returncode == 0, swept.stderr[-3000:]
            summary = json.loads(swept.stdout)
            assert model.requests and all(r.status == 200 for r in model.requests), \
                [r.status for r in model.requests]
        sweep_id = summary["sweep"]
        cells = {c["host"]: c for c in summary["cells"]}
        assert set(cells) == {"loc", "lockey", "delta"}
        assert all(c["status"] == "finished" and c["attempts"] == 1 for c in cells.values()), summary["cells"]
        assert cells["lockey"]["grade"] != "HARNESS_FAILURE", cells["lockey"]

        # The agents did print their environment: what a host gives every program, and nothing of the worker's.
        for host in ("loc", "delta"):
            folder = runs / sweep_id / cells[host]["id"] / "attempt-1"
            printed = dict(line.split("=", 1) for line in (folder / "answer.txt").read_text().splitlines() if "=" in line)
            assert "PATH" in printed and "HOME" in printed, printed
            assert not [k for k in printed if k.startswith("FLEET_")], printed
            assert "DEPLOY_TOKEN" not in printed and "QUAL_MODEL_KEY" not in printed, printed
        transcript = (runs / sweep_id / cells["lockey"]["id"] / "attempt-1" / "transcript.jsonl").read_text()
        assert "KEY=unset" in transcript and "PATH=" in transcript  # the builtin's `env` ran, without the key

        outputs = [("sweep stdout", swept.stdout.encode()), ("sweep stderr", swept.stderr.encode())]
        for args in (["report", sweep_id], ["status", sweep_id, "--json"], ["status", sweep_id],
                     ["show", sweep_id, "lockey", "01-env"], ["show", sweep_id, "lockey", "01-env", "--json"],
                     ["show", sweep_id, "loc", "01-env"], ["settings"], ["settings", "--json"]):
            r = run_fleet([*args, "--runs", str(runs)], namespace, settings_env, timeout=120)
            assert r.returncode == 0, (args, r.stderr[-2000:])
            outputs += [(f"fleet {' '.join(args)} stdout", r.stdout.encode()),
                        (f"fleet {' '.join(args)} stderr", r.stderr.encode())]
        worker.stop()
        haystack = outputs + _files(runs) + _files(tmp_path / "loc" / "runs") + _files(tmp_path / "lockey" / "runs")
        haystack += _files(ssh.workdir / "runs" / sweep_id)
        haystack += [(str(worker.log), worker.log.read_bytes()), (str(coord_log), coord_log.read_bytes())]
        haystack += in_flight + _redis_dump(server.url)
        assert len(haystack) > 50 and any("results.sqlite" in n or "index.sqlite" in n for n, _ in haystack)
        assert any(name.startswith("redis") for name, _ in haystack)
        found = [(what, form, name) for what, secret in planted.items() for form in _forms(secret)
                 for name, data in haystack if form in data]
        assert not found, found[:10]
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
