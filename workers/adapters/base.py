"""The adapter interface. An adapter says what to start and what to collect; it never runs anything itself."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from harness.core.agents import AgentKind
from harness.core.catalog import Item
from harness.core.inventory import AgentConfig, Host

__all__ = ["AgentAdapter", "AttemptPaths"]


@dataclass(frozen=True)
class AttemptPaths:
    """Absolute paths of one attempt on the host.

    ``root/prompt.md`` is the prompt file, ``root/workspace/`` the agent's working folder (the only place
    the product goes), ``root/.fleet/`` scratch of the acceptance checks, ``root/answer.txt`` the answer an
    agent may write for the owner. The launcher and its records (stdout, stderr, exit status) are not here,
    where the agent can write, but in a per-delivery folder it is not told of (docs/launcher.md).
    """

    root: str

    @property
    def workspace(self) -> str:
        return f"{self.root}/workspace"

    @property
    def fleet(self) -> str:
        return f"{self.root}/.fleet"

    @property
    def prompt_file(self) -> str:
        return f"{self.root}/prompt.md"

    @property
    def answer_file(self) -> str:
        return f"{self.root}/answer.txt"


class AgentAdapter(ABC):
    """How to run one kind of agent for one attempt."""

    kind: ClassVar[AgentKind]
    """The kind's declaration (``harness.core.agents``), set by ``workers.adapters.registry.registered``: its name,
    whether it leaves a transcript, its infrastructure exit code."""

    needs_harness: bool = False
    """True for agents that run the harness's own code on the host (the builtin agent): the lifecycle
    installs the coordinator's release there first and sets ``harness_python``."""

    def __init__(self, name: str, config: AgentConfig) -> None:
        self.name = name
        self.config = config
        self.harness_python: str = ""

    @abstractmethod
    def argv(self, host: Host, item: Item, paths: AttemptPaths) -> list[str]:
        """The command to start, run with the workspace as its working folder."""

    def at_home(self, home: str) -> None:
        """Expand a leading ``~`` in the agent's ``program``, ``command[0]`` and each ``env`` value's
        ``:``-separated parts to the host user's ``home``: an inventory can name an agent installed under each
        host's own home (``~/.cache/fleet-harness/agents/...``), and no shell ever expands it (the launcher
        starts argv directly)."""

        def expand(value: str) -> str:
            return ":".join(home + part[1:] if part == "~" or part.startswith("~/") else part for part in value.split(":"))

        c = self.config
        self.config = c.model_copy(update={
            "program": expand(c.program) if c.program else c.program,
            "command": [expand(c.command[0]), *c.command[1:]] if c.command else c.command,
            "env": {k: expand(v) for k, v in c.env.items()},
        })

    def program(self) -> str | None:
        """The executable that must exist on the host before the agent can start (a path, or a name looked up
        on the PATH of :meth:`env`); ``None`` when there is nothing to look for. A missing one is a harness
        failure, ``agent_missing``, reported before anything runs."""
        return None

    def version_argv(self) -> list[str]:
        """argv printing the agent's version (recorded in meta.json as ``agent_version``); [] for none."""
        return list(self.config.version_command)

    def env(self, host: Host, paths: AttemptPaths) -> dict[str, str]:
        """Environment for the agent: the host's, then the agent's own."""
        return {**host.env, **self.config.env}

    def pass_env(self, host: Host) -> list[str]:
        """Names of the host's own variables the agent also gets, copied by the launcher on the host: the model's
        API key (``model.api_key_env``) and the agent's ``pass_env``. Only the names travel and are stored; the
        values never leave the host (docs/environment.md)."""
        names = [host.model.api_key_env] if host.model.api_key_env else []
        return names + [n for n in self.config.pass_env if n not in names]

    def files(self, host: Host, item: Item, paths: AttemptPaths) -> dict[str, bytes]:
        """Extra files to upload before the start (config files), by path relative to the attempt root."""
        return {}

    def collect(self) -> list[str]:
        """Extra files to download after the run (transcripts, sessions), relative to the attempt root.
        An entry ending in ``/`` is a folder (a state directory): every file under it is collected."""
        return []

    def normalize(self, collected: dict[str, bytes]) -> bytes | None:
        """The normalized ``transcript.jsonl`` (harness/core/transcript.py) made from the collected files, for an
        agent that records its session in its own format; None when the agent writes one itself or left
        nothing to read. May raise ``TranscriptImportError``: the attempt then keeps the raw files and
        ``transcript.error.txt``, and grades as having no transcript."""
        return None

    def infrastructure_failure(self, exit_code: int | None, files: dict[str, bytes]) -> str | None:
        """Why the run failed for infrastructure reasons the agent itself reported (None: it did not).

        ``files`` are the collected files by name. An agent that could not reach its model endpoint
        did not give the model's answer: the attempt is a harness failure and is retried.
        """
        return None

    def answer(self, stdout: bytes, answer_file: bytes | None) -> bytes:
        """What the owner was delivered: the answer file if the agent wrote one, else its output."""
        return answer_file if answer_file is not None else stdout
