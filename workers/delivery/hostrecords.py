"""What a launcher on the host says, read by the worker: JSON lines and records, taken only when signed.

Every record of a delivery (started.json, exit.json, packed.json) is signed with the delivery's key and names its
token (docs/launcher.md); an agent can still write any file it likes in its delivery folder, so what the host sends is
parsed defensively, a record is taken only if it verifies, and one that does not is kept as evidence (:class:`Forged`),
never acted on. Apart from the lifecycle because it is the one place that decides what of the host's words is believed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["ENDED_BY", "MAX_FORGED", "Forged", "answer_lines", "is_pid", "parse_json"]

MAX_FORGED = 20
"""How many different records that were not taken (a wrong signature or token) are kept as evidence per delivery."""

ENDED_BY = {
    "heartbeat": "the launcher ended the agent: no heartbeat came from the worker within the bound "
                 "(FLEET_HEARTBEAT_TIMEOUT); the run was not observed to its end",
    "superseded": "a later delivery of this attempt, or of its host slot, ended the agent before it finished",
    "terminated": "the launcher on the host was told to stop (SIGTERM) before the agent finished",
}
"""An exit record's ``ended_by`` that means the run was not observed to its end (supervision_lost), and why."""


def parse_json(text: str | bytes) -> object:
    """What a host sent as JSON, or None when it is not JSON (or nests deeper than the parser goes: an agent can forge
    any record it likes in its delivery folder)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def answer_lines(stdout: str) -> list[dict]:
    """The JSON objects a launcher verb printed, one a line, in order (anything else on its output is skipped)."""
    answers: list[dict] = []
    for line in stdout.strip().splitlines():
        parsed = parse_json(line)
        if isinstance(parsed, dict):
            answers.append(parsed)
    return answers


def is_pid(value: object) -> bool:
    """Whether a record's value names one real process: an int above 1 (0 names the caller's group, -1 every
    process)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 1


@dataclass
class Forged:
    """Records in the delivery folder whose signature or token was wrong: ignored, kept as evidence."""

    texts: list[str] = field(default_factory=list)
    """Each such record's first 2000 characters, each text once, the first ``MAX_FORGED`` of them."""
    more: int = 0
    """How many more such records came after the first ``MAX_FORGED`` (counted, not kept)."""

    def keep(self, out: str) -> None:
        """Keep a record that was not taken (an agent can write a new one for every poll; the rest are counted)."""
        text = out[:2000]
        if text in self.texts:
            return
        if len(self.texts) < MAX_FORGED:
            self.texts.append(text)
        else:
            self.more += 1

    def evidence(self) -> bytes | None:
        """``harness/forged-records.txt``: the kept texts, then how many more; None when there were none."""
        if not self.texts:
            return None
        more = [f"... and {self.more} more records not taken"] if self.more else []
        return ("\n".join(self.texts + more) + "\n").encode()
