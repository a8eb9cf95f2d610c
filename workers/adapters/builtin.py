"""The ``builtin`` adapter: runs the harness's own guarded agent (``python -m workers.host.agent``) on the host.

The agent writes ``transcript.jsonl``, ``answer.txt`` and ``receipt.json`` into the attempt root, beside
``prompt.md``, so they are collected with the attempt. It drives the host's model endpoint from the
inventory (base URL, model id, context size, output limit, API-key variable).

The agent runs from the harness release installed on the host (``workers.install``): the same code
as the coordinator, in a venv of its own, so a host never runs another version of the guard.
"""

from __future__ import annotations

import json

from harness.core.catalog import Item
from harness.core.inventory import Host
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.adapters.registry import registered

__all__ = ["BuiltinAdapter"]


@registered("builtin")
class BuiltinAdapter(AgentAdapter):
    """The builtin guarded agent."""

    needs_harness = True

    def argv(self, host: Host, item: Item, paths: AttemptPaths) -> list[str]:
        model = host.model
        argv = [
            self.harness_python or host.python, "-m", "workers.host.agent",
            "--prompt-file", paths.prompt_file,
            "--workspace", paths.workspace,
            "--out-dir", paths.root,
            "--base-url", model.base_url,
            "--model", model.id,
            "--context", str(model.context),
            "--max-output", str(model.max_output),
        ]
        if model.api_key_env:
            argv += ["--api-key-env", model.api_key_env]
        return argv

    def collect(self) -> list[str]:
        return ["transcript.jsonl", "receipt.json"]

    def answer(self, stdout: bytes, answer_file: bytes | None) -> bytes:
        """The agent's ``answer.txt``; an agent that died before writing it delivered nothing."""
        return answer_file if answer_file is not None else b""

    def infrastructure_failure(self, exit_code: int | None, files: dict[str, bytes]) -> str | None:
        """The transcript's ``run_end`` reason when the agent exits with its kind's infrastructure code."""
        if exit_code is None or exit_code != self.kind.infrastructure_exit:
            return None
        lines = (files.get("transcript.jsonl") or b"").decode("utf-8", "replace").strip().splitlines()
        try:
            end = json.loads(lines[-1]) if lines else {}
        except ValueError:
            end = {}
        detail = end.get("reason") or "unknown"
        return f"the model endpoint failed: {detail}"
