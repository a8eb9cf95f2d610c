"""``fleet hosts check``: can each host run attempts? SSH, pinned key, model endpoint, disk, agents."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from harness.core.errors import FleetError, HostKeyMismatch, InfrastructureError, one_line
from harness.core.inventory import Host
from workers.adapters import AttemptPaths, adapter_for
from workers.adapters.probe import probe_agent
from workers.transport import connect_for

__all__ = ["HostCheck", "check_host", "check_hosts", "readiness", "summary_line"]

# Runs on the host with its Python: asks the model endpoint for /v1/models and reports the ids.
_MODELS_PROBE = r"""
import json, sys, urllib.request
url, key_env = sys.argv[1], sys.argv[2]
import os
req = urllib.request.Request(url + "/models")
if key_env and os.environ.get(key_env):
    req.add_header("Authorization", "Bearer " + os.environ[key_env])
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        data = json.load(r)
    print(json.dumps({"ok": True, "ids": [m.get("id") for m in data.get("data", [])]}))
except Exception as exc:
    print(json.dumps({"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}))
"""


SCRIPTED = "scripted (the coordinator serves it during a sweep)"


@dataclass
class HostCheck:
    host: str
    ssh: str = "not checked"
    host_key: str = "not checked"
    model: str = "not checked"
    disk_free_mb: int | None = None
    agents: dict[str, str] = field(default_factory=dict)
    ok: bool = False
    why: str = ""  # why the host is not ready, for the closing line and --json's not_ready ('' when it is)

    def as_dict(self) -> dict:
        return asdict(self)


def readiness(res: HostCheck, counted: Sequence[str] | None = None) -> tuple[bool, str]:
    """Whether the host can run attempts, and why not. SSH, the pinned key and the model must be right. An
    agent counts only when the sweep asks for it (``counted``, the names given to --agents): an optional
    agent that is not installed is shown as missing but does not keep the host from being ready."""
    problems = []
    if res.ssh not in ("ok", "local", "connected"):
        # The error names the host ("failed: HOST: ..."); the closing line names it already.
        problems.append("ssh " + res.ssh.replace(f"failed: {res.host}: ", "failed: ", 1))
    if res.host_key.startswith("MISMATCH"):
        # The transport's message ("HOST: host key mismatch: ...", both fingerprints) says it already, and the
        # closing line names the host: each said once.
        text = res.host_key.removeprefix("MISMATCH: ").removeprefix(f"{res.host}: ")
        problems.append(text if text.startswith("host key") else f"host key {text}")
    elif res.model not in ("ok", SCRIPTED):
        # "not checked" when the connection failed: the SSH problem above already says why.
        if res.model != "not checked":
            problems.append(f"model {res.model}")
    for name in counted or ():
        state = res.agents.get(name)
        if state is not None and state.startswith("missing"):
            problems.append(f"agent {name} {state}")
    if not problems and res.model == "not checked":
        problems.append("not checked")
    return not problems, one_line("; ".join(problems))


def summary_line(results: Sequence[HostCheck]) -> str:
    """The closing line: ``all 3 hosts ready`` or ``2 of 3 hosts ready; not ready: tower2 (model down: ...)``."""
    n = len(results)
    ready = [r for r in results if r.ok]
    if len(ready) == n:
        return f"all {n} host{'s' if n != 1 else ''} ready"
    return (f"{len(ready)} of {n} host{'s' if n != 1 else ''} ready; not ready: "
            + ", ".join(f"{r.host} ({r.why})" for r in results if not r.ok))


def check_host(host: Host, counted: Sequence[str] | None = None) -> HostCheck:
    res = HostCheck(host=host.name)
    t = connect_for(host)
    try:
        t.open()
        res.ssh = "ok" if host.transport == "ssh" else "local"
        res.host_key = "matches pin" if host.transport == "ssh" else "n/a (local)"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in host.env.items())
        probe = t.shell(
            f"{env} {shlex.quote(host.python)} -c {shlex.quote(_MODELS_PROBE)} "
            f"{shlex.quote(host.model.base_url)} {shlex.quote(host.model.api_key_env)}",
            timeout=30,
        )
        try:
            answer = json.loads(probe.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("ids", []), list):
            # The host's Python printed something else last (a wrapper's banner, a number): no answer to trust.
            answer = {"ok": False, "error": probe.tail() or "no answer from the probe"}
        if answer.get("ok"):
            ids = answer.get("ids", [])
            res.model = "ok" if host.model.id in ids else f"answers, but serves {', '.join(map(str, ids)) or 'no model'} (not {host.model.id})"
        elif host.model.scripted:
            # The coordinator serves a scripted endpoint only while a sweep runs: not answering now is normal.
            res.model = SCRIPTED
        else:
            res.model = f"down: {answer.get('error') or 'no answer from the probe'}"
        workdir = host.workdir.replace("~", "$HOME", 1) if host.workdir.startswith("~") else shlex.quote(host.workdir)
        df = t.shell(f'mkdir -p "{workdir}" 2>/dev/null; df -Pk "{workdir}" | tail -n 1', timeout=30)
        cols = df.stdout.split()
        if len(cols) > 3 and cols[3].isdigit():
            res.disk_free_mb = int(cols[3]) // 1024
        for name, agent in host.agents.items():
            res.agents[name] = _check_agent(t, host, name, agent)
    except HostKeyMismatch as exc:
        res.ssh = "connected"
        res.host_key = f"MISMATCH: {exc}"
    except InfrastructureError as exc:
        res.ssh = f"failed: {exc}"
    except Exception as exc:  # noqa: BLE001 - one host's surprise is that host's failure, said on its line
        res.ssh = f"failed: unexpected {type(exc).__name__}: {exc}"
    finally:
        t.close()
    res.ok, res.why = readiness(res, counted)
    return res


def _check_agent(t, host: Host, name: str, agent) -> str:
    """The version line (or "found"), "missing: ..." when the agent's program is not on the host."""
    try:
        adapter = adapter_for(name, agent)
    except FleetError as exc:
        return f"missing: {exc}"
    adapter.at_home(t.shell('printf %s "$HOME"', timeout=30).stdout.strip())
    probe = probe_agent(t, adapter, host, AttemptPaths(host.workdir))
    if not probe.found:
        return f"missing: {probe.program} not on PATH"
    return probe.version or ("found" if probe.program else "not checked")


def check_hosts(hosts: list[Host], counted: Sequence[str] | None = None) -> list[HostCheck]:
    """Every host checked at once; ``counted``: the agents whose absence makes a host not ready (readiness)."""
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(hosts)))) as pool:
        return list(pool.map(lambda h: check_host(h, counted), hosts))
