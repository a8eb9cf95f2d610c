"""The ``openclaw`` adapter: one headless OpenClaw turn per attempt (docs/agents-openclaw.md).

The command is ``openclaw agent exec --message-file PROMPT --cwd WORKSPACE --state-dir STATE --config CONFIG
--model fleet/MODEL --json --timeout S``: the prompt travels as a file, the workspace is OpenClaw's working
folder and the only one its file tools may touch, and the config is pinned (``openclaw.json`` in the attempt
root, generated from the inventory: one ``openai-completions`` provider named ``fleet`` pointing at the host's
endpoint, with its context window and ``maxTokens``), so nothing of the host's own OpenClaw setup leaks in.
``OPENCLAW_HOME`` is the attempt's ``openclaw-home/`` for the same reason. OpenClaw requires its state
directory to exist, so the command is started through ``sh -c 'mkdir -p ...; exec "$@"'`` with the paths as
positional parameters (no text of the attempt is ever pasted into the script).

OpenClaw prints one JSON envelope on stdout (``ok``, ``status``, ``final``, ``usage``, ``sessionId``,
``error``): kept as ``agent.stdout``; its ``final`` is the owner's answer. The session is in the state
directory's SQLite store (``openclaw-state/agents/main/agent/openclaw-agent.sqlite``): ``openclaw-state/agents/``
is collected whole and the session is normalized into ``transcript.jsonl`` by ``harness.importers.openclaw_sqlite``. A
session that ends on the endpoint's failure (an HTTP error, a refused connection) is the fleet's fault: the
attempt is a harness failure (``model_endpoint``), retried, never the model's answer.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.catalog import Item
from harness.core.errors import TranscriptImportError
from harness.core.inventory import Host
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.adapters.registry import registered

if TYPE_CHECKING:
    from harness.importers.recorded import RecordedRun

__all__ = ["OpenClawAdapter", "PROVIDER", "STATE_DIR", "HOME_DIR", "CONFIG_FILE"]

PROVIDER = "fleet"
"""The provider id of the host's endpoint in the generated config: models are ``fleet/<model id>``."""
STATE_DIR = "openclaw-state"
HOME_DIR = "openclaw-home"
CONFIG_FILE = "openclaw.json"
NO_KEY = "fleet-no-key"
"""The API key sent when the inventory names none (local servers ignore it; OpenClaw wants one)."""
_SETUP = 'mkdir -p -- "$1" "$2" && shift 2 && exec "$@"'


@registered("openclaw")
class OpenClawAdapter(AgentAdapter):
    """OpenClaw (npm ``openclaw``, Node 24) driving the host's model through its OpenAI-compatible endpoint."""

    def program(self) -> str:
        return self.config.program or "openclaw"

    def version_argv(self) -> list[str]:
        return list(self.config.version_command) or [self.program(), "--version"]

    def exec_argv(self, host: Host, item: Item, paths: AttemptPaths) -> list[str]:
        """The OpenClaw command itself (``argv`` starts it after creating its folders)."""
        return [
            self.program(), "agent", "exec",
            "--message-file", paths.prompt_file,
            "--cwd", paths.workspace,
            "--state-dir", f"{paths.root}/{STATE_DIR}",
            "--config", f"{paths.root}/{CONFIG_FILE}",
            "--model", f"{PROVIDER}/{host.model.id}",
            "--json",
            "--timeout", str(item.timeout_s),
        ]

    def argv(self, host: Host, item: Item, paths: AttemptPaths) -> list[str]:
        return ["sh", "-c", _SETUP, "openclaw-setup", f"{paths.root}/{STATE_DIR}", f"{paths.root}/{HOME_DIR}",
                *self.exec_argv(host, item, paths)]

    def env(self, host: Host, paths: AttemptPaths) -> dict[str, str]:
        """The host's and the agent's environment, with OpenClaw's home in the attempt (the agent's own ``env``
        may still set ``OPENCLAW_HOME``)."""
        return {**host.env, "OPENCLAW_HOME": f"{paths.root}/{HOME_DIR}", **self.config.env}

    def openclaw_config(self, host: Host, paths: AttemptPaths) -> dict:
        """The pinned OpenClaw config: the host's endpoint as provider ``fleet`` with the inventory's limits."""
        model = host.model
        return {
            "models": {
                "mode": "replace",
                "providers": {
                    PROVIDER: {
                        "baseUrl": model.base_url,
                        "api": "openai-completions",
                        "apiKey": f"${{{model.api_key_env}}}" if model.api_key_env else NO_KEY,
                        # One conversation per attempt for a scripted model server; real servers ignore it.
                        "headers": {"X-Fleet-Conversation": paths.root},
                        "models": [{
                            "id": model.id,
                            "name": model.id,
                            "input": ["text"],
                            "contextWindow": model.context,
                            "maxTokens": model.max_output,
                        }],
                    },
                },
            },
            "agents": {"defaults": {"model": {"primary": f"{PROVIDER}/{model.id}"}}},
        }

    def files(self, host: Host, item: Item, paths: AttemptPaths) -> dict[str, bytes]:
        return {CONFIG_FILE: (json.dumps(self.openclaw_config(host, paths), indent=2) + "\n").encode()}

    def collect(self) -> list[str]:
        """The generated config and the agents' data plane of the state directory (each agent's session
        database with its ``-wal``); the state's shared control plane (``state/``, caches, locks) is left."""
        return [CONFIG_FILE, f"{STATE_DIR}/agents/"]

    def _run(self, collected: dict[str, bytes]) -> RecordedRun | None:
        """The run from the collected state directory; None when OpenClaw left no session store."""
        from harness.importers.openclaw_sqlite import DATABASE_NAME, read_database  # lazy: this agent only (50 ms)

        names = sorted(n for n in collected if n.startswith(f"{STATE_DIR}/") and n.endswith(f"/{DATABASE_NAME}"))
        if not names:
            return None
        if len(names) > 1:
            raise TranscriptImportError(STATE_DIR, "", f"{len(names)} session databases ({', '.join(names)}); "
                                                       "one OpenClaw turn writes one")
        name = names[0]
        with tempfile.TemporaryDirectory(prefix="fleet-openclaw-") as tmp:
            db = Path(tmp) / DATABASE_NAME
            db.write_bytes(collected[name])
            if f"{name}-wal" in collected:
                db.with_name(f"{DATABASE_NAME}-wal").write_bytes(collected[f"{name}-wal"])
            runs = read_database(db, name)
        if len(runs) != 1:
            raise TranscriptImportError(name, "transcript_events", f"{len(runs)} sessions "
                                        f"({', '.join(run.label for run in runs)}); one OpenClaw turn writes one")
        return runs[0]

    def normalize(self, collected: dict[str, bytes]) -> bytes | None:
        from harness.importers.events import to_events, transcript_bytes  # lazy: this agent only (50 ms)

        run = self._run(collected)
        return None if run is None else transcript_bytes(to_events(run))

    def infrastructure_failure(self, exit_code: int | None, files: dict[str, bytes]) -> str | None:
        """The session's own account of an endpoint failure (its last assistant message stopped on an HTTP
        error or a failed connection)."""
        try:
            run = self._run(files)
        except TranscriptImportError:
            return None  # the transcript error is kept with the attempt; the grade says it has no transcript
        if run is None or run.outcome != "infrastructure":
            return None
        return f"the model endpoint failed: {run.reason}: {run.message}"

    def answer(self, stdout: bytes, answer_file: bytes | None) -> bytes:
        """The envelope's ``final`` text (its non-error payloads when ``final`` is empty); nothing when stdout
        holds no envelope (OpenClaw did not get as far as a run)."""
        try:
            envelope = json.loads(stdout.decode("utf-8", "replace"))
        except ValueError:
            return b""
        if not isinstance(envelope, dict):
            return b""
        final = envelope.get("final")
        if isinstance(final, str) and final:
            return final.encode("utf-8")
        payloads = envelope.get("payloads")
        texts = [p["text"] for p in payloads if isinstance(p, dict) and isinstance(p.get("text"), str)
                 and not p.get("isError")] if isinstance(payloads, list) else []
        return "\n\n".join(texts).encode("utf-8")
