"""What ``--policy`` names (docs/replay.md): ``default``, a policy file (TOML), ``git:REF`` or ``cmd:COMMAND``.

Each resolves to a ``PolicySpec`` that starts guards: in this process for ``default`` and files; a process per
replay worker for the external kinds, reused for every session that worker replays.

``git:REF`` replays the guard of another commit of this repository: REF is read with ``git archive`` into a
temporary folder (a checkout no git command has to clean up: a killed replay leaves nothing registered), and that
commit's own ``harness.replay.guard_server`` answers the replay protocol with its own code and default policy,
run by this Python with only that folder on its path.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import ReplayError
from harness.guard.policy import DEFAULT_GUARD, GuardPolicy, load_policy_file
from harness.replay.engine import Guard, SessionGuard
from harness.replay.session import ReplaySession

__all__ = ["PolicySpec", "resolve_policy", "repository_root"]

SERVER_MODULE = "harness.replay.guard_server"
SERVER_FILE = "harness/replay/guard_server.py"


@dataclass
class PolicySpec:
    """One ``--policy`` value, ready to start guards."""

    name: str
    kind: str
    """default, file, git, cmd."""
    policy: GuardPolicy | None = None
    """In-process kinds: the policy. External kinds: None (the guard has its own)."""
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    checkout: str | None = None
    """git: the temporary folder holding REF's tree (removed by ``close``)."""
    _process: Any = None
    timeout: float = 60.0
    """External kinds: seconds the guard has to answer each message (``FLEET_REPLAY_GUARD_TIMEOUT``)."""

    def guard_for(self, session: ReplaySession) -> Guard:
        if self.policy is not None:
            return SessionGuard(self.policy, session)
        from harness.replay.external import ExternalGuard, GuardProcess  # lazy: an external guard only (3 ms)

        if self._process is None:
            self._process = GuardProcess(self.name, self.argv, None, env=self.env, cwd=self.cwd,
                                         timeout=self.timeout)
        return ExternalGuard(self._process, session)

    def check_quiet(self, grace: float) -> None:
        """An external guard has nothing left unread (the lockstep's last check)."""
        if self._process is not None:
            self._process.check_quiet(grace)

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    def close(self) -> None:
        if self._process is not None:
            self._process.close()
            self._process = None
        if self.checkout is not None:
            shutil.rmtree(self.checkout, ignore_errors=True)
            self.checkout = None

    def for_worker(self) -> PolicySpec:
        """A copy a worker process can own (its own guard process, the same checkout)."""
        return PolicySpec(self.name, self.kind, self.policy, list(self.argv), self.env, self.cwd, None,
                          timeout=self.timeout)


def repository_root() -> Path:
    """The git checkout this harness runs from (``git:REF`` reads other commits from it)."""
    here = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReplayError("git:", "", f"cannot run git: {exc}") from None
    if out.returncode != 0:
        raise ReplayError("git:", "", f"{here} is not a git checkout, so no other commit can be read")
    return Path(out.stdout.strip())


def _git_checkout(ref: str) -> tuple[str, str]:
    """(commit, folder): REF's tree extracted into a new temporary folder."""
    name = f"git:{ref}"
    if not ref or ref.startswith("-"):
        raise ReplayError(name, "", "give a commit, branch or tag after git:")
    root = repository_root()
    resolved = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                              capture_output=True, text=True, timeout=30)
    if resolved.returncode != 0:
        raise ReplayError(name, "", f"no commit {ref!r} in {root}")
    commit = resolved.stdout.strip()
    has = subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{commit}:{SERVER_FILE}"], capture_output=True,
                         timeout=30)
    if has.returncode != 0:
        raise ReplayError(name, "", f"commit {commit[:12]} has no {SERVER_FILE}: its guard cannot be replayed "
                          "(the replay protocol is newer than that commit)")
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit, "harness", "workers"],
                             capture_output=True, timeout=120)
    if archive.returncode != 0:
        raise ReplayError(name, "", f"git archive failed: {archive.stderr.decode('utf-8', 'replace').strip()}")
    folder = tempfile.mkdtemp(prefix=f"fleet-replay-{commit[:12]}-")
    try:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(folder, filter="data")
    except (tarfile.TarError, OSError) as exc:
        shutil.rmtree(folder, ignore_errors=True)  # nothing half-extracted is left behind
        raise ReplayError(name, "", f"cannot extract {commit[:12]} into {folder}: {exc}") from None
    return commit, folder


def resolve_policy(text: str, guard_timeout: float = 60.0) -> PolicySpec:
    """The spec ``--policy TEXT`` names; a bad one is one ``ReplayError`` or ``PolicyError`` line.
    ``guard_timeout``: seconds an external guard has to answer each message."""
    if text == "default":
        return PolicySpec("default", "default", DEFAULT_GUARD)
    if text.startswith("cmd:"):
        command = text[4:].strip()
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ReplayError(text, "", f"cannot split the command: {exc}") from None
        if not argv:
            raise ReplayError(text, "", "give a command after cmd:")
        return PolicySpec(text, "cmd", None, argv, timeout=guard_timeout)
    if text.startswith("git:"):
        _, folder = _git_checkout(text[4:])
        env = {**os.environ, "PYTHONPATH": folder, "PYTHONDONTWRITEBYTECODE": "1"}
        # -m from the checkout's folder: its own harness package comes first on the path, before this one's.
        return PolicySpec(text, "git", None, [sys.executable, "-m", SERVER_MODULE], env, folder, folder,
                          timeout=guard_timeout)
    path = Path(text)
    if path.suffix == ".toml" or path.exists():
        policy = load_policy_file(path)
        return PolicySpec(policy.name, "file", policy)
    raise ReplayError(text, "", "a policy is default, a .toml policy file, git:REF or cmd:COMMAND")
