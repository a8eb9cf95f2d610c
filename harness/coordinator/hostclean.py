"""``fleet hosts clean``: what the coordinator side does for each host (the host side is ``workers/host/clean.py``).

It resolves the host's work dir (``~`` is the host user's home), sends the host-side source and one request on
stdin through the host's transport (SSH or local, the same way the launcher is sent), and reads back one JSON
answer: the releases and attempt folders removed (or, with ``dry_run``, that would be), with their sizes, and
what was kept and why.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import InfrastructureError, UsageError
from harness.core.inventory import Host
from workers.host.launcher import BOOT, boot_stdin
from workers.transport.base import Transport

__all__ = ["CleanReport", "clean_host", "HOSTCLEAN_SOURCE"]

HOSTCLEAN_SOURCE = (Path(__file__).resolve().parents[2] / "workers" / "host" / "clean.py").read_text(encoding="utf-8")


@dataclass
class Removed:
    path: str
    size: int


@dataclass
class CleanReport:
    host: str
    releases: list[Removed] = field(default_factory=list)
    attempts: list[Removed] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trash: int = 0
    """Bytes an earlier clean that was killed had left in the trash, deleted now."""

    @property
    def freed(self) -> int:
        return sum(r.size for r in self.releases + self.attempts) + self.trash


def clean_host(t: Transport, host: Host, keep_release: str, keep_attempts_days: float, dry_run: bool) -> CleanReport:
    """Clean one host over its transport; an unreachable host or a host-side error is an InfrastructureError."""
    if math.isnan(keep_attempts_days) or keep_attempts_days < 0:
        # NaN passes a range check (it compares false) and is younger than no folder: it would remove them all.
        raise UsageError(f"--keep-attempts-days {keep_attempts_days}: must be a number of days, 0 or more")
    home = t.shell('printf %s "$HOME"', timeout=30).stdout.strip()
    workdir = home + host.workdir[1:] if host.workdir.startswith("~") else host.workdir
    body = {"workdir": workdir, "keep_release": keep_release, "keep_attempts_days": keep_attempts_days,
            "dry_run": dry_run}
    script = f"cd / && exec {shlex.quote(host.python)} -c {shlex.quote(BOOT)} clean"
    r = t.shell(script, timeout=1800, stdin=boot_stdin(HOSTCLEAN_SOURCE, body))
    lines = r.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if not isinstance(answer, dict) or "error" in answer or "releases" not in answer:
        why = answer.get("error") if isinstance(answer, dict) and answer.get("error") else r.tail(300) or f"exit {r.exit_code}"
        raise InfrastructureError(f"cleaning {workdir} failed: {why}", host=host.name)
    return CleanReport(
        host=host.name,
        releases=[Removed(x["path"], int(x["size"])) for x in answer["releases"]],
        attempts=[Removed(x["path"], int(x["size"])) for x in answer["attempts"]],
        kept=[(x["path"], x["why"]) for x in answer["kept"]],
        notes=list(answer["notes"]), trash=int(answer.get("trash") or 0),
    )
