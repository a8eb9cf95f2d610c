"""The ``hermes`` adapter: runs Hermes Agent one-shot (``hermes -z``) against the host's model.

Everything Hermes keeps lives under ``ATTEMPT/hermes/`` (``HOME`` is ``hermes/home``, ``HERMES_HOME`` its
``.hermes``), so each attempt has its own configuration and its own session store, collected after the run:

* ``hermes-config.yaml`` (uploaded beside ``prompt.md``; the command puts it in place as
  ``hermes/home/.hermes/config.yaml``): ``model.provider: custom`` with the inventory's base URL, model id,
  ``context_length`` and ``max_tokens``; lazy installs and the tirith scanner (which downloads its binary
  from GitHub at first use) are off;
* ``hermes/home/.hermes/state.db`` (+ ``-wal``): the session store the transcript is made from
  (``harness.importers.hermes``), and ``logs/``;
* ``hermes/usage.json`` (``--usage-file``) and ``hermes/final.txt`` (what ``-z`` printed): Hermes stores no
  record of a failed model endpoint; it prints "API call failed after N retries: ..." and exits 0, so
  these two say whether the run is the fleet's failure.

``hermes -z`` takes the prompt as an argument: a small ``sh`` script reads it from the prompt file into
one argument (``--oneshot=PROMPT``, so a prompt starting with ``-`` stays a value); its text never passes
through the shell's parser. The same script makes ``HERMES_HOME`` and copies the config into it (uploads
go to existing folders only). ``PIP_DISABLE_PIP_VERSION_CHECK`` stops the pip version check Hermes'
environment probe would otherwise make. Hermes refuses a model whose context is under 64,000 tokens.
"""

from __future__ import annotations

import json

from harness.core.catalog import Item
from harness.core.errors import AgentUnsuited, TranscriptImportError
from harness.core.inventory import Host
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.adapters.registry import registered

__all__ = ["HermesAdapter", "STATE", "DB", "FINAL", "USAGE", "CONFIG", "ONESHOT_SCRIPT"]

STATE = "hermes"
"""The agent's own folder under the attempt root."""
HERMES_HOME = f"{STATE}/home/.hermes"
DB = f"{HERMES_HOME}/state.db"
FINAL = f"{STATE}/final.txt"
USAGE = f"{STATE}/usage.json"
CONFIG = "hermes-config.yaml"
MIN_CONTEXT = 64_000
"""Hermes' own floor (``MINIMUM_CONTEXT_LENGTH``, agent/model_metadata.py): a smaller context is refused
before the first request."""

ONESHOT_SCRIPT = ('p=$(cat "$1"; printf x); p=${p%x}; '
                  'mkdir -p "$HERMES_HOME" && cp "$2" "$HERMES_HOME/config.yaml" || exit 70; '
                  'out=$3; shift 3; "$@" --oneshot="$p" > "$out"; rc=$?; cat "$out"; exit $rc')
"""``sh -c`` script: $1 the prompt file (read whole, trailing newlines kept), $2 the config to put in
``$HERMES_HOME``, $3 where the output is kept, the rest the hermes argv. The output is also printed, so
``agent.stdout`` holds it as always."""
_VERSION = ('bin=$(command -v "$0") && py="$(dirname "$(readlink -f "$bin")")/python" && [ -x "$py" ] '
            '&& "$py" -c "import importlib.metadata as m; print(\'hermes-agent\', m.version(\'hermes-agent\'))" '
            '|| "$0" --version | head -n 1')
"""``hermes --version`` asks PyPI for updates; the installed package's own metadata answers offline."""


def _yaml_str(value: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(value)


@registered("hermes")
class HermesAdapter(AgentAdapter):
    """Hermes Agent, one ``hermes -z`` per attempt."""

    def program(self) -> str:
        return self.config.program or "hermes"

    def version_argv(self) -> list[str]:
        return list(self.config.version_command) or ["sh", "-c", _VERSION, self.program()]

    def argv(self, host: Host, item: Item, paths: AttemptPaths) -> list[str]:
        if host.model.context < MIN_CONTEXT:
            # Hermes would refuse before its first request; that is the host's setup, not the model's answer.
            raise AgentUnsuited(f"agent {self.name!r}: Hermes needs a model context of at least {MIN_CONTEXT} "
                                  f"tokens; the inventory gives {host.model.context}", host=host.name)
        return ["sh", "-c", ONESHOT_SCRIPT, "sh", paths.prompt_file, f"{paths.root}/{CONFIG}", f"{paths.root}/{FINAL}",
                self.program(), "--usage-file", f"{paths.root}/{USAGE}"]

    def env(self, host: Host, paths: AttemptPaths) -> dict[str, str]:
        own = {
            "HOME": f"{paths.root}/{STATE}/home",
            "HERMES_HOME": f"{paths.root}/{HERMES_HOME}",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        return {**host.env, **own, **self.config.env}

    def files(self, host: Host, item: Item, paths: AttemptPaths) -> dict[str, bytes]:
        model = host.model
        lines = [
            "# Written by the fleet harness for one attempt (docs/agents-hermes.md).",
            "model:",
            "  provider: custom",
            f"  base_url: {_yaml_str(model.base_url)}",
            f"  default: {_yaml_str(model.id)}",
            f"  context_length: {model.context}",
            f"  max_tokens: {model.max_output}",
        ]
        if model.api_key_env:
            lines.append(f"  api_key: {_yaml_str('${' + model.api_key_env + '}')}")  # expanded by Hermes on the host
        lines += [
            "security:",
            "  allow_lazy_installs: false",
            "  tirith_enabled: false",
        ]
        return {CONFIG: ("\n".join(lines) + "\n").encode()}

    def collect(self) -> list[str]:
        return [CONFIG, DB, f"{DB}-wal", FINAL, USAGE, f"{HERMES_HOME}/logs/"]

    def _session(self, collected: dict[str, bytes]):
        from harness.importers.hermes import read_attempt  # lazy: this agent only (50 ms)

        if DB not in collected:
            return None
        return read_attempt(collected, DB, collected.get(FINAL), collected.get(USAGE))

    def normalize(self, collected: dict[str, bytes]) -> bytes | None:
        from harness.importers.events import to_events, transcript_bytes  # lazy: this agent only (50 ms)

        session = self._session(collected)
        return None if session is None else transcript_bytes(to_events(session))

    def answer(self, stdout: bytes, answer_file: bytes | None) -> bytes:
        """What ``hermes -z`` printed: the model's final reply and nothing else."""
        return answer_file if answer_file is not None else stdout

    def infrastructure_failure(self, exit_code: int | None, files: dict[str, bytes]) -> str | None:
        """The final output says the model endpoint failed after Hermes' retries (the store has no trace of it)."""
        from harness.importers.hermes import endpoint_failure  # lazy: this agent only (50 ms)

        try:
            report = json.loads(files.get(USAGE) or b"{}")
        except ValueError:
            report = {}
        run_failed = isinstance(report, dict) and report.get("failed") is True
        failed = endpoint_failure((files.get(FINAL) or b"").decode("utf-8", "replace"), run_failed)
        if failed is None:
            return None
        try:
            session = self._session(files)
        except TranscriptImportError:
            session = None
        if session is not None and session.outcome != "infrastructure":
            return None
        return f"the model endpoint failed: {failed[0]}: {failed[1]}"
