"""Make the recorded OpenCode and Hermes sessions in this folder by running the real programs.

    .venv/bin/python tests/agents/data/make_sessions.py [opencode|hermes ...]

Each run is what an attempt runs: the adapter's own command, environment and config files
(``workers/adapters/opencode.py``, ``hermes.py``) in a fresh attempt folder, against the scripted model
server, with the agents from ``.ci/agents``. What is kept, per run NAME:

* OpenCode (``opencode/``): ``NAME.jsonl`` (the ``--format json`` event stream, ``agent.stdout``),
  ``NAME.db.gz`` (the session store, its WAL folded in by ``VACUUM INTO``, gzipped), and for the photo
  renamer ``NAME.export.json`` (``opencode export SESSION``);
* Hermes (``hermes/``): ``NAME.export.jsonl`` (``hermes sessions export``), ``NAME.final.txt`` (what
  ``hermes -z`` printed) and ``NAME.usage.json`` (``--usage-file``), and ``NAME.state.db.gz`` where the
  store itself is tested.

Runs: ``photo-renamer`` and ``explain-only`` (the items' ``models/<kind>.toml``), ``mixed`` (a command
exiting 3, a missing file, an unknown tool and, for OpenCode, a write outside the workspace that its
permission policy refuses), and ``endpoint-down`` (the model endpoint refuses connections).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from harness.core.catalog import load_open_item  # noqa: E402
from harness.core.inventory import AgentConfig, Host  # noqa: E402
from harness.modelserver import ScriptedModelServer  # noqa: E402
from workers.adapters import AttemptPaths, adapter_for  # noqa: E402

HERE = Path(__file__).resolve().parent
OPEN = REPO / "prompts" / "open"

MIXED = {
    "opencode": '''schema_version = 1
[[turns]]
text = "Writing a script."
tool_calls = [{ name = "write", arguments = { filePath = "proj/hello.py", content = "print('hi')\\n" } }]
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "python3 proj/hello.py; echo oops >&2; exit 3" } }]
[[turns]]
tool_calls = [{ name = "read", arguments = { filePath = "proj/nothere.py" } }]
[[turns]]
tool_calls = [{ name = "write_file", arguments = { path = "proj/other.py", content = "x = 1\\n" } }]
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "python3 -m unittest -v", workdir = "proj" } }]
[[turns]]
text = "Saving a copy outside the project."
tool_calls = [{ name = "write", arguments = { filePath = "/etc/fleet-outside.txt", content = "x\\n" } }]
[[turns]]
text = "Done."
''',
    "hermes": '''schema_version = 1
[[turns]]
text = "Writing a script."
tool_calls = [{ name = "write_file", arguments = { path = "proj/hello.py", content = "print('hi')\\n" } }]
[[turns]]
tool_calls = [{ name = "terminal", arguments = { command = "python3 proj/hello.py; echo oops >&2; exit 3" } }]
[[turns]]
tool_calls = [{ name = "read_file", arguments = { path = "proj/nothere.py" } }]
[[turns]]
tool_calls = [{ name = "write", arguments = { filePath = "proj/other.py", content = "x = 1\\n" } }]
[[turns]]
tool_calls = [{ name = "patch", arguments = { path = "proj/hello.py", old_string = "hi", new_string = "hello" } }]
[[turns]]
text = "Done: proj/hello.py prints hello."
''',
}
RUNS = {  # name -> (item whose prompt is used, script)
    "photo-renamer": ("07-photo-renamer", None),
    "explain-only": ("12-explain-only", None),
    "mixed": ("07-photo-renamer", "mixed"),
    "endpoint-down": ("12-explain-only", "down"),
}


def _cache() -> Path:
    out = subprocess.run(["bash", str(REPO / ".ci" / "agents")], check=True, capture_output=True, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def _vacuumed_gz(db: Path, dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / db.name
        shutil.copyfile(db, copy)
        if Path(f"{db}-wal").is_file():
            shutil.copyfile(f"{db}-wal", f"{copy}-wal")
        flat = Path(tmp) / "flat.db"
        con = sqlite3.connect(copy)
        con.execute("VACUUM INTO ?", (str(flat),))
        con.close()
        dest.write_bytes(gzip.compress(flat.read_bytes(), mtime=0))


def run(kind: str, name: str, cache: Path, root: Path) -> None:
    item_id, special = RUNS[name]
    item = load_open_item(OPEN / item_id)
    if special == "mixed":
        script_file = root.parent / f"{kind}-mixed.toml"
        script_file.write_text(MIXED[kind])
        scripts = [str(script_file)]
    else:
        scripts = [str(OPEN / item_id / "models" / f"{kind}.toml")]
    with ScriptedModelServer(scripts, model_id="scripted-model", context_size=65536, max_output_tokens=2048) as server:
        url = "http://127.0.0.1:9/v1" if special == "down" else server.url
        host = Host.model_validate({"name": "local", "transport": "local", "agents": {kind: {"kind": kind}},
                                    "model": {"base_url": url, "id": "scripted-model", "context": 65536,
                                              "max_output": 2048}})
        bin_path = f"{cache}/npm/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"
        program = str(cache / "hermes" / "bin" / "hermes") if kind == "hermes" else "opencode"
        adapter = adapter_for(kind, AgentConfig(kind=kind, program=program, env={"PATH": bin_path}))
        shutil.rmtree(root, ignore_errors=True)
        paths = AttemptPaths(str(root))
        Path(paths.workspace).mkdir(parents=True)
        Path(paths.prompt_file).write_bytes((OPEN / item_id / "prompt.md").read_bytes())
        for rel, data in adapter.files(host, item, paths).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        env = {**os.environ, **adapter.env(host, paths)}
        done = subprocess.run(adapter.argv(host, item, paths), cwd=paths.workspace, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
    print(f"{kind} {name}: exit {done.returncode}", file=sys.stderr)
    out = HERE / kind
    out.mkdir(exist_ok=True)
    if kind == "opencode":
        (out / f"{name}.jsonl").write_bytes(done.stdout)
        _vacuumed_gz(root / "opencode/data/opencode/opencode.db", out / f"{name}.db.gz")
        if name == "photo-renamer":
            session_id = json.loads(done.stdout.splitlines()[0])["sessionID"]
            exported = subprocess.run([program, "export", session_id], cwd=paths.workspace, env=env,
                                      capture_output=True, check=True).stdout
            (out / f"{name}.export.json").write_bytes(exported)
    else:
        subprocess.run([program, "sessions", "export", str(out / f"{name}.export.jsonl")], cwd=paths.workspace,
                       env=env, capture_output=True, check=True)
        for rel, suffix in (("hermes/final.txt", "final.txt"), ("hermes/usage.json", "usage.json")):
            if (root / rel).is_file():
                shutil.copyfile(root / rel, out / f"{name}.{suffix}")
        if name in ("photo-renamer", "endpoint-down"):
            _vacuumed_gz(root / "hermes/home/.hermes/state.db", out / f"{name}.state.db.gz")


def main() -> None:
    kinds = sys.argv[1:] or ["opencode", "hermes"]
    cache = _cache()
    with tempfile.TemporaryDirectory(prefix="fleet-sessions-") as tmp:
        for kind in kinds:
            for name in RUNS:
                run(kind, name, cache, Path(tmp) / f"{kind}-{name}")


if __name__ == "__main__":
    main()
