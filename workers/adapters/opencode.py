"""The ``opencode`` adapter: runs OpenCode headless (``opencode run --format json``) against the host's model.

Everything OpenCode keeps lives under ``ATTEMPT/opencode/`` (``HOME`` and the XDG folders point there), so
each attempt has its own configuration and its own session store, collected after the run:

* ``opencode.json`` (uploaded beside ``prompt.md``, named by ``OPENCODE_CONFIG``): one provider, ``fleet``,
  through OpenCode's bundled ``@ai-sdk/openai-compatible``, with the inventory's base URL, model id, context
  and output limit; no autoupdate, no sharing;
* ``opencode/data/opencode/opencode.db`` (+ ``-wal``): the session store the transcript is made from
  (``harness.importers.opencode``), and ``log/``.

Nothing is fetched at run time: ``OPENCODE_DISABLE_AUTOUPDATE``, ``OPENCODE_DISABLE_MODELS_FETCH`` (no
models.dev catalog), ``OPENCODE_DISABLE_LSP_DOWNLOAD``, and ``npm_config_offline`` for the background
``npm install`` of ``@opencode-ai/plugin`` OpenCode starts in its config folder (it fails offline, harmlessly).
``--title`` is given so OpenCode asks the model for no session title.

The prompt reaches OpenCode on its standard input, byte for byte, from the prompt file (``opencode run``
reads stdin when it is not a terminal; a message given as arguments would be quoted and re-joined).
"""

from __future__ import annotations

import json

from harness.core.catalog import Item
from harness.core.errors import TranscriptImportError
from harness.core.inventory import Host
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.adapters.registry import registered

__all__ = ["OpenCodeAdapter", "STATE", "DB", "CONFIG"]

STATE = "opencode"
"""The agent's own folder under the attempt root."""
DB = f"{STATE}/data/opencode/opencode.db"
CONFIG = "opencode.json"
PROVIDER = "fleet"
_STDIN_FROM_PROMPT = 'f=$1; shift; exec "$@" < "$f"'
"""``sh -c`` script: run the rest of argv with the prompt file ($1) as standard input (no prompt text in it)."""


@registered("opencode")
class OpenCodeAdapter(AgentAdapter):
    """OpenCode, one headless ``opencode run`` per attempt."""

    def program(self) -> str:
        return self.config.program or "opencode"

    def version_argv(self) -> list[str]:
        return list(self.config.version_command) or [self.program(), "--version"]

    def argv(self, host: Host, item: Item, paths: AttemptPaths) -> list[str]:
        return ["sh", "-c", _STDIN_FROM_PROMPT, "sh", paths.prompt_file,
                self.program(), "run", "--format", "json", "--model", f"{PROVIDER}/{host.model.id}",
                "--title", f"fleet {item.id}"]

    def env(self, host: Host, paths: AttemptPaths) -> dict[str, str]:
        home = f"{paths.root}/{STATE}"
        own = {
            "HOME": f"{home}/home",
            "XDG_CONFIG_HOME": f"{home}/config",
            "XDG_DATA_HOME": f"{home}/data",
            "XDG_CACHE_HOME": f"{home}/cache",
            "XDG_STATE_HOME": f"{home}/state",
            "OPENCODE_CONFIG": f"{paths.root}/{CONFIG}",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
            "npm_config_offline": "true",
        }
        return {**host.env, **own, **self.config.env}

    def files(self, host: Host, item: Item, paths: AttemptPaths) -> dict[str, bytes]:
        model = host.model
        options: dict[str, str] = {"baseURL": model.base_url}
        if model.api_key_env:
            options["apiKey"] = "{env:" + model.api_key_env + "}"  # read on the host; never written here
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": f"{host.name} model",
                "options": options,
                "models": {model.id: {"name": model.id, "limit": {"context": model.context, "output": model.max_output}}},
            }},
            "model": f"{PROVIDER}/{model.id}",
            "small_model": f"{PROVIDER}/{model.id}",
            "autoupdate": False,
            "share": "disabled",
        }
        return {CONFIG: (json.dumps(config, indent=2) + "\n").encode()}

    def collect(self) -> list[str]:
        return [CONFIG, DB, f"{DB}-wal", f"{STATE}/data/opencode/log/"]

    def _session(self, collected: dict[str, bytes]):
        from harness.importers.opencode import read_store, root_sessions  # lazy: this agent only (50 ms)

        if DB not in collected:
            return None
        sessions = root_sessions(read_store(collected, DB))
        if not sessions:
            raise TranscriptImportError(DB, "table session", "holds no session of this run")
        session = sessions[-1]
        if len(sessions) > 1:
            session.limits.append(f"the store holds {len(sessions)} sessions; this is the last one")
        return session

    def normalize(self, collected: dict[str, bytes]) -> bytes | None:
        from harness.importers.events import to_events, transcript_bytes  # lazy: this agent only (50 ms)

        session = self._session(collected)
        return None if session is None else transcript_bytes(to_events(session))

    def answer(self, stdout: bytes, answer_file: bytes | None) -> bytes:
        """The model's last reply as ``opencode run`` printed it (the text of its last step with text)."""
        from harness.importers.opencode import final_text_of_stream  # lazy: this agent only (50 ms)

        if answer_file is not None:
            return answer_file
        text = final_text_of_stream(stdout)
        return (text + "\n").encode() if text else b""

    def infrastructure_failure(self, exit_code: int | None, files: dict[str, bytes]) -> str | None:
        """OpenCode stores the endpoint's failure (after its own retries) as the error of its last reply."""
        if exit_code == 0:
            return None
        try:
            session = self._session(files)
        except TranscriptImportError:
            return None
        if session is None or session.outcome != "infrastructure":
            return None
        return f"the model endpoint failed: {session.reason}: {session.message}"
