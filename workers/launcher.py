"""The launcher: uploaded to every attempt's folder on the host and run there with the host's Python.

It must run on any host (Linux, macOS, WSL) with nothing but a Python 3.8+ standard library, so it
imports nothing from the harness. Three verbs:

``run``  Reads ``.fleet/launch.json`` ({"argv", "env", "pass_env", "cwd", "deadline_s"}), starts the agent in
         its own process group (so the whole group can be killed on timeout or revoke) with the environment
         ``agent_env`` makes (never the launcher's own whole), writes
         ``.fleet/started.json`` once the process exists (or ``.fleet/start_error.json`` if it could not
         start), and ``.fleet/exit.json`` when it ends. The argv comes from a file, never from a shell
         command line, so no prompt or model text ever reaches a shell. ``deadline_s`` is a last guard
         for a worker that vanished: past it the launcher kills the group itself.
``kill`` Ends the agent's process group: what the worker calls on a timeout or a revoke.
``pack`` Writes ``.fleet/workspace.tar.gz`` with the workspace's files (size-capped, vendored folders
         skipped) and ``.fleet/manifest.json`` listing every file with its size and sha256.

Files it writes are written to a temporary name and renamed, so the worker never reads half a file.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time

# What the agent inherits of the launcher's environment: what a login gives every program, nothing more. The
# launcher runs under the worker's own environment on a local host (its broker URL and Redis password) and
# under the SSH session's elsewhere; neither is the agent's business (docs/environment.md).
AGENT_ENV_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR")
AGENT_ENV_PREFIXES = ("LC_",)

SKIP_DIRS = {"node_modules", ".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".cache"}
MAX_FILE = 8 * 1024 * 1024
MAX_TOTAL = 48 * 1024 * 1024


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _kill_group(pgid, proc=None):
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.time() + wait
        while time.time() < end:
            if proc is not None:
                proc.poll()  # reap the agent itself: an unreaped zombie would keep its group "alive"
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def agent_env(environ, spec):
    """The agent's environment: the allow-listed part of ``environ`` (``AGENT_ENV_NAMES``, ``LC_*``), then the
    variables ``spec["pass_env"]`` names, copied from ``environ`` when set there (the model's API key: its value
    lives only on the host, never in launch.json), then ``spec["env"]``, the values the adapter sets."""
    env = {k: v for k, v in environ.items() if k in AGENT_ENV_NAMES or k.startswith(AGENT_ENV_PREFIXES)}
    for name in spec.get("pass_env") or ():
        if name in environ:
            env[name] = environ[name]
    env.update(spec.get("env") or {})
    return env


def run(base):
    # Leave the SSH session's process group, so a closed channel (SIGHUP) does not end the run.
    try:
        os.setsid()
    except OSError:
        pass
    fleet = os.path.join(base, ".fleet")
    with open(os.path.join(fleet, "launch.json")) as f:
        spec = json.load(f)
    env = agent_env(os.environ, spec)
    out = open(os.path.join(fleet, "agent.stdout"), "wb")
    err = open(os.path.join(fleet, "agent.stderr"), "wb")
    try:
        proc = subprocess.Popen(
            spec["argv"],
            cwd=spec["cwd"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    except OSError as exc:
        _write_json(os.path.join(fleet, "start_error.json"), {"error": "%s: %s" % (type(exc).__name__, exc)})
        return 127
    _write_json(
        os.path.join(fleet, "started.json"),
        {"pid": proc.pid, "pgid": proc.pid, "launcher_pid": os.getpid(), "time": time.time()},
    )
    deadline = time.time() + float(spec.get("deadline_s") or 86400)
    timed_out = False
    while proc.poll() is None:
        if time.time() > deadline:
            timed_out = True
            _kill_group(proc.pid, proc)
            break
        time.sleep(0.2)
    code = proc.wait()
    # The agent may have left children in its group (a dev server, a test watcher): end them too.
    _kill_group(proc.pid)
    out.close()
    err.close()
    _write_json(
        os.path.join(fleet, "exit.json"),
        {
            "exit_code": code if code >= 0 else None,
            "signal": -code if code < 0 else None,
            "timed_out_by_launcher": timed_out,
            "time": time.time(),
        },
    )
    return 0


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pack(base):
    workspace = os.path.join(base, "workspace")
    fleet = os.path.join(base, ".fleet")
    manifest = []
    total = 0
    tmp = os.path.join(fleet, "workspace.tar.gz.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for root, dirs, files in os.walk(workspace):
            skipped = sorted(d for d in dirs if d in SKIP_DIRS)
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for d in skipped:
                rel = os.path.relpath(os.path.join(root, d), workspace)
                manifest.append({"path": rel + "/", "size": None, "sha256": None, "packed": False, "why": "skipped folder"})
            for name in sorted(files):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, workspace)
                if os.path.islink(path) or not os.path.isfile(path):
                    manifest.append({"path": rel, "size": None, "sha256": None, "packed": False, "why": "not a regular file"})
                    continue
                size = os.path.getsize(path)
                entry = {"path": rel, "size": size, "sha256": _sha256(path), "packed": True, "why": ""}
                if size > MAX_FILE or total + size > MAX_TOTAL:
                    entry["packed"] = False
                    entry["why"] = "over the size cap"
                else:
                    tar.add(path, arcname=rel, recursive=False)
                    total += size
                manifest.append(entry)
    os.replace(tmp, os.path.join(fleet, "workspace.tar.gz"))
    _write_json(os.path.join(fleet, "manifest.json"), manifest)
    return 0


def kill(base):
    """End the agent's process group (TERM, a grace, then KILL). Python, not the shell's ``kill``,
    because shells disagree on how to name a process group (dash rejects ``kill -- -PGID``)."""
    try:
        with open(os.path.join(base, ".fleet", "started.json")) as f:
            pgid = int(json.load(f)["pgid"])
    except (OSError, ValueError, KeyError):
        return 0
    if pgid > 1:
        _kill_group(pgid)
    return 0


VERBS = {"run": run, "pack": pack, "kill": kill}


def main(argv):
    if len(argv) != 3 or argv[1] not in VERBS:
        sys.stderr.write("usage: launch.py run|pack|kill ATTEMPT_DIR\n")
        return 2
    return VERBS[argv[1]](argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
