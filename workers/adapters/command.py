"""The generic ``command`` adapter: a command template from the inventory, run in the workspace.

Each argv element may hold these placeholders, replaced as whole values (no shell is involved, so a
path with spaces stays one argument): ``{prompt_file}``, ``{workspace}``, ``{answer_file}``,
``{attempt_dir}``, ``{model_base_url}``, ``{model_id}``, ``{context}``, ``{max_output}``.
A template that needs a shell says so itself: ``["sh", "-c", "my-agent < \\"$1\\"", "sh", "{prompt_file}"]``.
"""

from __future__ import annotations

from harness.core.catalog import Item
from harness.core.inventory import Host
from workers.adapters.base import AgentAdapter, AttemptPaths
from workers.adapters.registry import registered

__all__ = ["CommandAdapter"]


@registered("command")
class CommandAdapter(AgentAdapter):
    def program(self) -> str | None:
        return self.config.command[0] if self.config.command else None

    def argv(self, host: Host, item: Item, paths: AttemptPaths) -> list[str]:
        values = {
            "{prompt_file}": paths.prompt_file,
            "{workspace}": paths.workspace,
            "{answer_file}": paths.answer_file,
            "{attempt_dir}": paths.root,
            "{model_base_url}": host.model.base_url,
            "{model_id}": host.model.id,
            "{context}": str(host.model.context),
            "{max_output}": str(host.model.max_output),
        }
        out = []
        for arg in self.config.command:
            for token, value in values.items():
                arg = arg.replace(token, value)
            out.append(arg)
        return out
