"""An imported run as an attempt-like folder that the grading code reads like any other attempt.

It holds what the recording really holds: ``transcript.jsonl``, ``session.json`` (the run's recording),
``prompt.md``, ``answer.txt`` (only when the recording says what the owner got), ``receipt.json`` (only
when it records the product outcome too), and ``meta.json``, written last as in the store. There is no
workspace manifest and no ``checks.json``: no workspace was captured and no check ran.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from harness.core.errors import StoreError, UsageError
from harness.grading import Grade, evidence_from_attempt, grade
from harness.importers.recorded import RecordedRun
from harness.core.records import ArtifactRecord, ImportedMeta, read_meta, sha256_hex, utc_now
from harness.core.transcript import Event, ReceiptEvent, TranscriptWriter

__all__ = ["write_run_folder", "grade_folder"]


def _is_import(folder: Path) -> bool:
    """An earlier import's folder, which a new import of the run may replace (read through the model, so an
    import written by an older version counts too)."""
    try:
        return isinstance(read_meta(folder / "meta.json"), ImportedMeta)
    except StoreError:
        return False


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_run_folder(run: RecordedRun, events: Sequence[Event], folder: Path) -> Path:
    """Write ``folder`` for one run and its transcript events (``harness.importers.events.to_events``), built
    aside, then renamed into place. An earlier import there is replaced; any other existing folder is refused.
    ``meta.json``'s ``calls`` counts the calls the recording holds by id: a call whose result came late is one
    call, a call with no result is one too."""
    if folder.exists() and not _is_import(folder):
        raise UsageError(f"{folder}: exists and is not an imported run's folder; choose another --out")
    staging = folder.parent / f".{folder.name}.importing"
    try:
        if staging.exists():
            shutil.rmtree(staging)  # our own leftover from an interrupted import
        staging.mkdir(parents=True)
        with TranscriptWriter(staging / "transcript.jsonl") as writer:
            for event in events:
                writer.append(event)
        files = {"session.json": run.raw, "prompt.md": run.prompt.encode("utf-8")}
        if run.delivered is not None:
            files["answer.txt"] = run.delivered.encode("utf-8")
        receipt = next((e.receipt for e in events if isinstance(e, ReceiptEvent)), None)
        if receipt is not None:
            files["receipt.json"] = (receipt.model_dump_json(indent=2) + "\n").encode("utf-8")
        for name, data in files.items():
            _write(staging / name, data)
        artifacts = [ArtifactRecord(name=name, size=(staging / name).stat().st_size,
                                    sha256=sha256_hex((staging / name).read_bytes()))
                     for name in sorted([*files, "transcript.jsonl"])]
        meta = ImportedMeta(
            source_format=run.format, source_file=run.file, source_sha256=run.sha256, run=run.label,
            host=run.host, agent=run.agent, item=run.item or Path(run.file).stem, deliverable=run.deliverable,
            answer_recorded=run.delivered is not None, calls=len({call.call_id for call in run.calls}),
            imported_at=utc_now(),
            facts=run.facts, artifacts=artifacts,
        )
        _write(staging / "meta.json", (meta.model_dump_json(indent=2) + "\n").encode("utf-8"))
        if folder.exists():
            shutil.rmtree(folder)  # an earlier import of this run (checked above)
        staging.rename(folder)
    except OSError as exc:
        raise StoreError(f"{folder}: cannot write the imported run: {exc.strerror or exc}") from exc
    return folder


def grade_folder(folder: Path) -> Grade:
    """Grade an imported run's folder with the harness's grading code (nothing is written)."""
    return grade(evidence_from_attempt(folder, None))
