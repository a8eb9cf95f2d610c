"""What of a delivery becomes the attempt's artifacts, under the names its attempt folder keeps (docs/store.md).

The agent's streams, the launch and exit records, the launcher's log, the workspace and its manifest, the prompt, the
checks' results, the answer (as the adapter reads it), the adapter's own session files and the transcript it makes of
them, and the evidence of anything refused or forged. Apart from the lifecycle because it is the attempt folder's
layout: one list, in one order, whatever stage the attempt ended in.
"""

from __future__ import annotations

import json

from harness.core.errors import TranscriptImportError
from harness.core.records import Artifact
from workers.adapters.base import AgentAdapter
from workers.delivery.delivered import Delivered

__all__ = ["artifacts_of"]


def artifacts_of(got: Delivered, adapter: AgentAdapter, answer_rel: str, *, prompt: str, launch_record: dict,
                 exit_record: dict, forged: bytes | None, checks_json: bytes | None
                 ) -> tuple[list[Artifact], dict[str, bytes]]:
    """The attempt's artifacts from the delivery ``got``, and the adapter's files among them (what it collects, by
    name). ``answer_rel`` is the answer file's name in the attempt folder; ``forged`` the evidence of records that
    were not taken; ``checks_json`` the checks' results, if any ran."""
    delivered = got.take()
    arts: list[Artifact] = []
    stdout, stderr = got.stream("agent.stdout"), got.stream("agent.stderr")
    arts.append(Artifact.of("agent.stdout", stdout))
    arts.append(Artifact.of("agent.stderr", stderr))
    if got.capped:
        # What was cut: the whole stream's size and sha256 (as the launcher measured it) and the bytes kept.
        arts.append(Artifact.of("harness/capped.json", json.dumps(got.capped, indent=2).encode()))
    arts.append(Artifact.of("harness/launch.json", json.dumps(launch_record, indent=2).encode()))
    if exit_record:
        arts.append(Artifact.of("harness/exit.json", json.dumps(exit_record).encode()))
    for name in ("launcher.log", "outputs.json"):
        if name in delivered:
            arts.append(Artifact.of(f"harness/{name}", delivered[name]))
    arts.append(Artifact.of("workspace.manifest.json", delivered.get("manifest.json") or b"[]"))
    arts += [Artifact.of(f"workspace/{name}", data) for name, data in got.workspace]
    arts.append(Artifact.of("prompt.md", prompt.encode("utf-8")))
    if forged is not None:
        arts.append(Artifact.of("harness/forged-records.txt", forged))
    if checks_json is not None:
        arts.append(Artifact.of("checks.json", checks_json))
    found = got.outputs
    # A symlinked (or FIFO) answer.txt is no answer file: outputs.json records what it was.
    arts.append(Artifact.of("answer.txt", adapter.answer(stdout, found.get(answer_rel))))
    collected: dict[str, bytes] = {}
    for rel in adapter.collect():
        if rel.endswith("/"):
            collected.update((name, data) for name, data in found.items() if name.startswith(rel))
        elif rel in found:
            collected[rel] = found[rel]
    arts += [Artifact.of(rel, data) for rel, data in collected.items()]
    if got.refused:
        arts.append(Artifact.of("harness/refused-members.txt", ("\n".join(got.refused) + "\n").encode(
            "utf-8", "backslashreplace")))
    if "transcript.jsonl" not in collected:
        try:
            transcript = adapter.normalize(collected)
        except TranscriptImportError as exc:
            arts.append(Artifact.of("transcript.error.txt", f"{exc}\n".encode()))
        else:
            if transcript is not None:
                arts.append(Artifact.of("transcript.jsonl", transcript))
    return arts, collected
