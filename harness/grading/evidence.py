"""Read the evidence for a grade from a stored attempt folder (never from the host, never from memory)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.agents import writes_transcript
from harness.core.errors import TranscriptError
from harness.grading.model import CHECKS_ADAPTER, Evidence, StopRecord
from harness.core.recordfile import read_optional
from harness.core.records import MANIFEST_ADAPTER, AttemptMeta, ImportedMeta, read_meta

if TYPE_CHECKING:
    # Only a type here: an imported session is graded without an item, and `fleet import` starts faster
    # without building the catalog's models.
    from harness.core.catalog import Item

__all__ = ["evidence_from_attempt", "SHELL_TRACE_FAILURES"]

SHELL_TRACE_FAILURES = ("0x8007274c",)
"""Text that shows the host's own shell failed (WSL loses its connection to Windows), not the model."""


def _read(folder: Path, name: str) -> str:
    try:
        return (folder / name).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _stop_from(events: list) -> StopRecord | None:
    calls = [e.call_id for e in events if e.event == "tool_call"]
    for e in events:
        if e.event == "stop":
            at = calls.index(e.call_id) + 1 if e.call_id in calls else None
            return StopRecord(reason=e.reason, text=e.text, at_call=at)
    return None


_FILE_TOOLS = ("write", "edit", "apply_patch", "multiedit", "write_file", "patch")
"""Tools that write or change files, by the names the agents give them: builtin, OpenClaw and OpenCode
(write, edit, apply_patch, multiedit), Hermes (write_file, patch)."""
_PATH_ARGUMENTS = ("path", "filePath", "file_path")


def _files_from(events: list) -> list[str]:
    """Files the transcript shows written or changed, for a folder whose workspace was not captured."""
    paths = {e.call_id: next((v for k in _PATH_ARGUMENTS if isinstance(v := (e.arguments or {}).get(k), str)), None)
             for e in events if e.event == "tool_call"}
    found: list[str] = []
    for e in events:
        if e.event == "tool_result" and e.name in _FILE_TOOLS and not e.is_error:
            path = e.details.path or paths.get(e.call_id)
            name = path if isinstance(path, str) and path else f"({e.name} call {e.call_id}: path not recorded)"
            if name not in found:
                found.append(name)
    return found


def evidence_from_attempt(folder: Path, item: Item | None, agent_kind: str = "") -> Evidence:
    """Evidence from ``meta.json``, the workspace manifest, ``answer.txt``, ``receipt.json``, the transcript
    and ``checks.json`` of one attempt folder, each read through its model (older versions migrated; a bad
    file is a ``StoreError`` naming it and the key). A folder outside any sweep (an imported session) has no
    item: its ``meta.json`` says what the deliverable is; a sweep attempt graded without its item is graded
    as a workspace item."""
    # Here, not at the top: the store loads this package for its grade files, and `fleet status` or `fleet report`
    # reads no transcript.
    from harness.core.transcript import OwnerReceipt, read_transcript  # lazy: 30 ms of models, to grade only

    meta = read_meta(folder / "meta.json")
    manifest = read_optional(folder / "workspace.manifest.json", MANIFEST_ADAPTER)
    receipt = read_optional(folder / "receipt.json", OwnerReceipt)
    checks = read_optional(folder / "checks.json", CHECKS_ADAPTER) or []
    imported = meta if isinstance(meta, ImportedMeta) else None
    # A sweep attempt's meta.json names its adapter (older files are migrated by AttemptMeta).
    kind = agent_kind or (meta.agent_kind if isinstance(meta, AttemptMeta) else "")
    deliverable = item.deliverable if item is not None else (imported.deliverable if imported else "workspace")
    ev = Evidence(
        status=meta.status, reason=meta.reason, error=meta.error, exit_code=meta.exit_code, deliverable=deliverable,
        expects_transcript=writes_transcript(kind), files=[m.path for m in manifest or [] if m.size],
        answer=_read(folder, "answer.txt"), receipt=receipt.status if receipt is not None else "none",
        checks=checks, answer_recorded=imported.answer_recorded if imported else True,
    )
    captured = manifest is not None
    if (folder / "transcript.jsonl").is_file():
        try:
            events = read_transcript(folder / "transcript.jsonl")
        except TranscriptError as exc:
            # A transcript cut by a crash is still evidence up to its last whole line; a grade says so.
            ev.transcript_present = True
            ev.error = ev.error or str(exc)
            return ev
        ev.transcript_present = True
        if not captured:
            ev.files, ev.files_from = _files_from(events), "transcript"
        ends = [e for e in events if e.event == "run_end"]
        ev.run_outcome = ends[-1].outcome if ends else ""
        ev.stop = _stop_from(events)
        for e in events:
            if e.event == "tool_result" and any(t in e.text for t in SHELL_TRACE_FAILURES):
                ev.shell_trace_failure = e.text.strip().splitlines()[0][:200] if e.text.strip() else "trace failure"
                break
    return ev
