"""Every stored record of every version the harness ever wrote still loads, through its model, with its
meaning: today's v1 files from a real sweep and a real import, and the older v1 forms from real sweeps of
the commits before ``agent_kind``, ``Item.folder`` and ``Grade.failure`` (tests/golden/README.md).
Regrading each golden attempt folder gives the grade recorded in it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from harness.core.checks.result import CheckResult
from harness.grading import GRADER_VERSION, Grade, evidence_from_attempt, grade
from harness.grading.model import CHECKS_ADAPTER
from harness.core.recordfile import read_optional, read_record
from harness.core.records import MANIFEST_ADAPTER, AttemptMeta, ImportedMeta, read_meta
from harness.core.sweep import SweepRecord
from harness.store import Store
from harness.core.transcript import OwnerReceipt, ReceiptEvent, RunEnd, RunStart, StopEvent, read_transcript

GOLDEN = Path(__file__).parent
TODAY = GOLDEN / "v1" / "runs"
TODAY_SWEEP = "20261201-213416-golden"
IMPORTED = GOLDEN / "v1" / "imported" / "fe9ee859-c533-483c-b978-5c4a672dc126"
BEFORE_KIND = GOLDEN / "v1-before-agent-kind" / "runs"
BEFORE_KIND_SWEEP = "20261201-213543-before-agent-kind"
BEFORE_FAILURE_SWEEP = "20261201-213755-before-failure-code"
V2 = GOLDEN / "v2" / "runs"
V2_SWEEP = "20261201-214544-new"
V2_IMPORTED = GOLDEN / "v2" / "imported" / "fe9ee859-c533-483c-b978-5c4a672dc126"
BEFORE_FOLDER = GOLDEN / "v1-before-item-folder" / "runs"
BEFORE_FOLDER_SWEEP = "20261201-213629-before-item-folder"
PIXEL_TOWER2 = Path(__file__).parents[1] / "fixtures" / "pixel-fleet" / "photo-renamer-tower2-d4a61f33.json"

SWEEPS = [(TODAY, TODAY_SWEEP), (BEFORE_KIND, BEFORE_KIND_SWEEP), (BEFORE_KIND, BEFORE_FAILURE_SWEEP),
          (BEFORE_FOLDER, BEFORE_FOLDER_SWEEP), (V2, V2_SWEEP)]


def _raw(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(path.read_text(encoding="utf-8"))


def _attempt(root: Path, sweep: str, item: str) -> Path:
    return root / sweep / "local" / item / "builtin" / "r1" / "attempt-1"


def _attempt_folders() -> list[tuple[str, Path, str | None]]:
    """(test id, folder, sweep.json of its sweep) of every golden attempt folder, the import included."""
    found: list[tuple[str, Path, str | None]] = []
    for root, sweep in SWEEPS:
        for meta in sorted((root / sweep).rglob("meta.json")):
            found.append((f"{sweep}/{meta.parent.relative_to(root / sweep)}", meta.parent, str(root / sweep / "sweep.json")))
    found.append(("imported", IMPORTED, None))
    found.append(("v2-imported", V2_IMPORTED, None))
    return found


ATTEMPTS = _attempt_folders()


def test_every_golden_file_is_the_bytes_its_meta_json_lists() -> None:
    """The golden folders are untouched copies: each artifact has the size and sha256 recorded when it was
    written, and nothing else is in the folder but the records written beside it."""
    assert len(ATTEMPTS) == 13
    for _, folder, _ in ATTEMPTS:
        meta = _raw(folder / "meta.json")
        for art in meta["artifacts"]:
            data = (folder / art["name"]).read_bytes()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (art["size"], art["sha256"]), (folder, art["name"])
        on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
        assert on_disk == {"meta.json", "grade.json", "grades.jsonl", *(a["name"] for a in meta["artifacts"])}, folder


def test_todays_sweep_json_loads_with_its_plan_and_attempts() -> None:
    sweep = Store(TODAY).load_sweep(TODAY_SWEEP)
    assert (sweep.schema_version, sweep.id, sweep.label, sweep.status) == (1, TODAY_SWEEP, "golden", "finished")
    assert sweep.harness_commit == "be30429032ff6f5cb9462591cba5a72e48fc1b17"
    assert [c.id for c in sweep.cells] == [f"local/{i}/builtin/r1" for i in
                                           ("07-photo-renamer", "12-explain-only", "27-log-stats")]
    assert sweep.options["items"] == ["07", "12", "27"] and sweep.hosts["local"].model_id == "scripted-model"
    assert sweep.items["12-explain-only"].deliverable == "answer"
    assert sweep.items["07-photo-renamer"].checks == ["test_photo_renamer.py"]
    assert sweep.items["07-photo-renamer"].folder.endswith("prompts/open/07-photo-renamer")
    assert {c: [(a.attempt, a.status, a.exit_code, a.grade) for a in runs] for c, runs in sweep.attempts.items()} == {
        "local/07-photo-renamer/builtin/r1": [(1, "finished", 0, "DELIVERED")],
        "local/12-explain-only/builtin/r1": [(1, "finished", 0, "DELIVERED")],
        "local/27-log-stats/builtin/r1": [(1, "finished", 0, "NOTHING")],
    }
    assert sweep.attempts["local/07-photo-renamer/builtin/r1"][0].task_id == \
        f"{TODAY_SWEEP}:local/07-photo-renamer/builtin/r1:a1"


def test_todays_run_meta_json_loads_as_an_attempt_meta() -> None:
    folder = _attempt(TODAY, TODAY_SWEEP, "07-photo-renamer")
    assert _raw(folder / "meta.json")["schema_version"] == 1 and "kind" not in _raw(folder / "meta.json")
    meta = Store(TODAY).load_meta(TODAY_SWEEP, "local/07-photo-renamer/builtin/r1", 1)
    assert isinstance(meta, AttemptMeta)
    assert (meta.schema_version, meta.kind, meta.status, meta.exit_code, meta.reason) == (2, "run", "finished", 0, "")
    assert (meta.sweep_id, meta.cell_id, meta.attempt, meta.host, meta.agent, meta.item) == (
        TODAY_SWEEP, "local/07-photo-renamer/builtin/r1", 1, "local", "builtin", "07-photo-renamer")
    assert meta.agent_kind == "builtin" and meta.agent_command[1:3] == ["-m", "workers.agent"]
    assert meta.model == {"id": "scripted-model", "base_url": "http://127.0.0.1:8765/v1", "context": 65536,
                          "max_output": 2048}
    assert meta.host_facts["harness_release"] == meta.harness_commit == "be30429032ff6f5cb9462591cba5a72e48fc1b17"
    assert meta.started_at < meta.agent_started_at < meta.ended_at and meta.duration_s == 18.892
    assert {a.name for a in meta.artifacts} >= {"transcript.jsonl", "checks.json", "receipt.json", "answer.txt",
                                                "workspace/Playground/photo-renamer/rename_photos.py"}


def test_todays_imported_meta_json_loads_as_the_imported_variant_with_its_facts() -> None:
    raw = _raw(IMPORTED / "meta.json")
    assert raw["schema_version"] == 1 and raw["imported"] is True and raw["recorded_grade"] == "PARTIAL"
    meta = read_meta(IMPORTED / "meta.json")
    assert isinstance(meta, ImportedMeta)
    assert (meta.schema_version, meta.kind, meta.source_format, meta.agent, meta.calls) == (
        2, "imported", "pixel-fleet", "pixel", 11)
    assert meta.source_sha256 == hashlib.sha256(PIXEL_TOWER2.read_bytes()).hexdigest()
    assert (meta.run, meta.item, meta.deliverable, meta.answer_recorded) == (
        "fe9ee859-c533-483c-b978-5c4a672dc126", "photo-renamer-tower2-d4a61f33", "workspace", True)
    # Version 1 spread the recording's facts among the record's keys; version 2 keeps them apart, all of them.
    assert set(meta.facts) == {"session_id", "recorded_grade", "evidence"}
    assert meta.facts["recorded_grade"] == "PARTIAL" and meta.facts["session_id"] == meta.run
    assert str(meta.facts["evidence"]).startswith("tower2 (Qwen3-Coder-Next)")


def test_grade_json_checks_json_receipt_and_manifest_load_through_their_models() -> None:
    renamer = _attempt(TODAY, TODAY_SWEEP, "07-photo-renamer")
    g = read_record(renamer / "grade.json", Grade)
    assert (g.grader_version, g.grade, g.outcome, g.stop, g.failure) == (3, "DELIVERED", "passed", None, "")
    (check,) = g.checks
    assert isinstance(check, CheckResult) and (check.name, check.kind, check.status, check.summary) == (
        "test_photo_renamer", "pytest", "passed", "2 passed")
    assert [d.status for d in check.details] == ["passed", "passed"]
    assert read_record(renamer / "checks.json", CHECKS_ADAPTER) == g.checks
    receipt = read_record(renamer / "receipt.json", OwnerReceipt)
    assert (receipt.status, receipt.source) == ("passed", "model") and receipt.test and receipt.test.passed == 5
    manifest = read_record(renamer / "workspace.manifest.json", MANIFEST_ADAPTER)
    assert [(m.path, m.size, m.packed) for m in manifest] == [
        ("Playground/photo-renamer/rename_photos.py", 2386, True),
        ("Playground/photo-renamer/test_rename_photos.py", 2038, True)]

    stopped = read_record(_attempt(TODAY, TODAY_SWEEP, "27-log-stats") / "grade.json", Grade)
    assert (stopped.grade, stopped.outcome) == ("NOTHING", "failed")
    assert stopped.stop and (stopped.stop.reason, stopped.stop.text, stopped.stop.at_call) == (
        "consecutive_failures", "4 consecutive failures", 4)
    assert [d.status for d in stopped.checks[0].details] == ["error", "error", "error", "failed"]
    answer = _attempt(TODAY, TODAY_SWEEP, "12-explain-only")
    assert read_optional(answer / "checks.json", CHECKS_ADAPTER) is None  # no checks: no file, not an empty record
    assert read_record(answer / "grade.json", Grade).reasons == ["the owner got a written answer"]


def test_transcripts_load() -> None:
    renamer = read_transcript(_attempt(TODAY, TODAY_SWEEP, "07-photo-renamer") / "transcript.jsonl")
    assert isinstance(renamer[0], RunStart) and renamer[0].agent == "builtin" and renamer[0].imported is None
    assert isinstance(renamer[-1], RunEnd) and renamer[-1].outcome == "completed" and renamer[-1].exit_code == 0
    assert [e.receipt.status for e in renamer if isinstance(e, ReceiptEvent)] == ["passed"]
    stopped = read_transcript(_attempt(TODAY, TODAY_SWEEP, "27-log-stats") / "transcript.jsonl")
    assert [(e.rule, e.reason) for e in stopped if isinstance(e, StopEvent)] == [("budget", "consecutive_failures")]
    imported = read_transcript(IMPORTED / "transcript.jsonl")
    assert isinstance(imported[0], RunStart) and imported[0].imported is not None
    assert (imported[0].imported.format, imported[0].imported.run) == ("pixel-fleet", IMPORTED.name)
    assert [(e.rule, e.reason) for e in imported if isinstance(e, StopEvent)] == [("recursive_delete", "recursive_delete")]
    older = read_transcript(_attempt(BEFORE_FOLDER, BEFORE_FOLDER_SWEEP, "07-photo-renamer") / "transcript.jsonl")
    assert isinstance(older[-1], RunEnd) and older[-1].outcome == "completed"


@pytest.mark.parametrize(("folder", "sweep_json"), [(f, s) for _, f, s in ATTEMPTS], ids=[i for i, _, _ in ATTEMPTS])
def test_grading_a_golden_attempt_gives_the_grade_recorded_in_it(folder: Path, sweep_json: str | None) -> None:
    recorded = read_record(folder / "grade.json", Grade)
    item = None
    if sweep_json is not None:
        sweep = SweepRecord.model_validate_json(Path(sweep_json).read_bytes())
        meta = read_meta(folder / "meta.json")
        assert isinstance(meta, AttemptMeta)
        item = sweep.items[meta.item]
    again = grade(evidence_from_attempt(folder, item))
    assert (again.grade, again.outcome, again.stop, again.failure, again.checks) == (
        recorded.grade, recorded.outcome, recorded.stop, recorded.failure, recorded.checks)
    if recorded.grader_version == GRADER_VERSION:  # older rules may word their reasons otherwise
        assert again.reasons == recorded.reasons
    # the latest grade is the last line of the history
    history = (folder / "grades.jsonl").read_text().splitlines()
    assert Grade.model_validate_json(history[-1]) == recorded


# -- the older forms -----------------------------------------------------------------------------------


def test_a_meta_json_from_before_agent_kind_is_a_builtin_attempt_by_its_command_line() -> None:
    folder = _attempt(BEFORE_KIND, BEFORE_KIND_SWEEP, "07-photo-renamer")
    raw = _raw(folder / "meta.json")
    assert "agent_kind" not in raw and "workers.agent" in raw["agent_command"]
    meta = Store(BEFORE_KIND).load_meta(BEFORE_KIND_SWEEP, "local/07-photo-renamer/builtin/r1", 1)
    assert (meta.schema_version, meta.kind, meta.agent_kind, meta.harness_commit) == (2, "run", "builtin", "f595e764")


def test_the_migrated_agent_kind_decides_the_grade_of_an_older_attempt(tmp_path: Path) -> None:
    """A builtin run always leaves a transcript: one without is a harness failure, not the model's work,
    even for an attempt whose meta.json is too old to name its agent kind."""
    folder = tmp_path / "attempt-1"
    shutil.copytree(_attempt(BEFORE_KIND, BEFORE_KIND_SWEEP, "07-photo-renamer"), folder)
    (folder / "transcript.jsonl").unlink()
    g = grade(evidence_from_attempt(folder, None))
    assert (g.grade, g.failure) == ("HARNESS_FAILURE", "no_transcript"), g.reasons


def test_items_of_a_sweep_from_before_item_folder_take_their_source_folder() -> None:
    raw = _raw(BEFORE_FOLDER / BEFORE_FOLDER_SWEEP / "sweep.json")
    assert all("folder" not in item for item in raw["items"].values())
    sweep = Store(BEFORE_FOLDER).load_sweep(BEFORE_FOLDER_SWEEP)
    renamer = sweep.items["07-photo-renamer"]
    assert renamer.folder == renamer.source == "/tmp/old-ce50/prompts/open/07-photo-renamer"
    assert renamer.check_folder == renamer.folder and renamer.checks == ["test_photo_renamer.py"]
    # what the dispatcher sends on a rerun of that sweep is read from there
    assert sweep.items["12-explain-only"].folder.endswith("/12-explain-only")


def test_a_grade_from_before_failure_codes_gets_the_code_its_reason_names() -> None:
    folder = _attempt(BEFORE_KIND, BEFORE_FAILURE_SWEEP, "30-roman-numerals")
    raw = _raw(folder / "grade.json")
    assert "failure" not in raw and raw["grader_version"] == 2
    assert raw["reasons"] == ["harness failure: model_endpoint: the model endpoint failed: model_http_503"]
    g = read_record(folder / "grade.json", Grade)
    assert (g.grade, g.failure) == ("HARNESS_FAILURE", "model_endpoint")
    sweep = Store(BEFORE_KIND).load_sweep(BEFORE_FAILURE_SWEEP)
    (summary,) = sweep.attempts["local/30-roman-numerals/builtin/r1"]
    assert (summary.status, summary.reason, summary.grade, summary.failure) == (
        "harness_failure", "model_endpoint", "HARNESS_FAILURE", "")


@pytest.mark.parametrize(("reason", "code"), [
    ("harness failure: host_unreachable: tower1: connection refused", "host_unreachable"),
    ("harness failure: unknown", "infrastructure"),
    ("the agent's model endpoint failed", "model_endpoint"),
    ("the agent left no transcript: it never ran", "no_transcript"),
    ("the host's shell failed: Wsl/Service/0x8007274c", "shell_failure"),
])
def test_every_reason_the_older_rules_gave_a_harness_failure_maps_to_its_code(reason: str, code: str) -> None:
    # The exact words of harness/grading/rules.py before commit be30429, one per way it found a harness failure.
    old = {"schema_version": 1, "grader_version": 2, "grade": "HARNESS_FAILURE", "outcome": "none", "stop": None,
           "reasons": [reason], "checks": [], "graded_at": "2026-11-30T03:17:04.337Z"}
    assert Grade.model_validate(old).failure == code
    # a grade that is not a harness failure gets no code, and a recorded code is never replaced
    assert Grade.model_validate({**old, "grade": "PARTIAL", "reasons": ["the receipt failed"]}).failure == ""
    assert Grade.model_validate({**old, "failure": "worker_lost"}).failure == "worker_lost"


def test_a_version_2_meta_json_is_exactly_its_models_dump() -> None:
    """What this version writes reads back unchanged: no migrator touches it, and nothing in it is lost."""
    for folder in (V2 / V2_SWEEP / "local/07-photo-renamer/builtin/r1/attempt-1", V2_IMPORTED):
        raw = _raw(folder / "meta.json")
        assert raw["schema_version"] == 2 and raw["kind"] in ("run", "imported")
        assert read_meta(folder / "meta.json").model_dump(mode="json") == raw
    run = read_meta(V2 / V2_SWEEP / "local/27-log-stats/builtin/r1/attempt-1" / "meta.json")
    assert isinstance(run, AttemptMeta) and run.agent_kind == "builtin"
    imported = read_meta(V2_IMPORTED / "meta.json")
    assert isinstance(imported, ImportedMeta) and imported.facts == read_meta(IMPORTED / "meta.json").facts


def test_migrated_records_write_back_as_todays_version_and_read_back_the_same() -> None:
    for _, folder, _ in ATTEMPTS:
        meta = read_meta(folder / "meta.json")
        again = type(meta).model_validate_json(meta.model_dump_json())
        assert again == meta and again.schema_version == 2
        g = read_record(folder / "grade.json", Grade)
        assert Grade.model_validate_json(g.model_dump_json()) == g
