"""Fuzz every input format through the real ``fleet`` verb that reads it: one clear line and exit 2, never a
traceback (tests/harness/fuzz/runner.py says what is judged; mutate.py how inputs are broken).

| format | seeds (the repository's real files) | verb |
| --- | --- | --- |
| inventory | inventory/local.toml, inventory/fleet.toml | ``fleet sweep --dry-run --inventory F`` |
| item, round | prompts/open/07-photo-renamer, prompts/rounds/qualification.toml | ``fleet sweep --dry-run --prompts D`` |
| model script | prompts/scripts/*.toml, an item's model.toml, the same as JSON | ``fleet model serve --check --script F`` |
| transcript | tests/golden/v2 transcripts | ``fleet transcript check F`` |
| imports | tests/fixtures/pixel-fleet, tests/agents/data (JSON, JSONL, SQLite) | ``fleet import FORMAT F`` |
| stored records | the golden sweep tests/golden/v2 (sweep.json, meta.json, transcript ...) | ``fleet status/show/grade/report`` |
| arguments | hostile values for sweep's options | ``fleet sweep --dry-run ...`` |

Deterministic (``derandomize``, no example database) so CI sees the same inputs every run."""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
import sqlite3
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.harness.fuzz import mutate
from tests.harness.fuzz.runner import judge, run_main
from tests.support import REPO, TESTS, assert_one_line_error, run_fleet

FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])
DATA = TESTS / "agents" / "data"
PIXEL = TESTS / "fixtures" / "pixel-fleet"
GOLDEN = TESTS / "golden" / "v2"

_counter = itertools.count()


def _scratch(tmp_path: Path) -> Path:
    """A fresh folder for one example (hypothesis runs many examples in one test's tmp_path)."""
    return Path(tempfile.mkdtemp(prefix=f"x{next(_counter)}-", dir=tmp_path))


def _edits_of_toml(raw: bytes) -> st.SearchStrategy[tuple[str, bytes]]:
    doc = tomllib.loads(raw.decode("utf-8"))
    structured = mutate.value_edits(doc).map(lambda e: (e[0], mutate.to_toml(e[1]).encode("utf-8")))
    return st.one_of(mutate.byte_edits(raw), structured, structured)


def _edits_of_json(raw: bytes) -> st.SearchStrategy[tuple[str, bytes]]:
    doc = json.loads(raw)
    structured = mutate.value_edits(doc).map(lambda e: (e[0], mutate.to_json(e[1]).encode("utf-8")))
    return st.one_of(mutate.byte_edits(raw), structured, structured)


def _edits_of_jsonl(raw: bytes) -> st.SearchStrategy[tuple[str, bytes]]:
    return st.one_of(mutate.byte_edits(raw), mutate.line_edits(raw), mutate.line_edits(raw))


# --------------------------------------------------------------------------------------------------
# Inventory

INVENTORIES = [REPO / "inventory" / "local.toml", REPO / "inventory" / "fleet.toml"]
HOST_KEYS = [
    "ssh-ed25519 !!!not-base64!!!", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI", "ssh-ed25519 AAAA", "ssh-ed25519 ====",
    "ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ==", "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFake",
    "ssh-dss AAAAB3NzaC1kc3M=", "SHA256:short", "SHA256:" + "!" * 43, "host ssh-ed25519 \x00", "ssh-ed25519 AA\nAA",
    "ssh-ed25519 " + "A" * 5000, "ecdsa-sha2-nistp256 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
]


@pytest.fixture(scope="module")
def one_item_prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prompts folder with one open prompt: planning stays quick, so the examples go to the inventory."""
    root = tmp_path_factory.mktemp("prompts")
    shutil.copytree(REPO / "prompts" / "open" / "12-explain-only", root / "open" / "12-explain-only")
    return root


def _host_key_edits(raw: bytes) -> st.SearchStrategy[tuple[str, bytes]]:
    doc = tomllib.loads(raw.decode("utf-8"))
    hosts = sorted(doc["hosts"])
    return st.tuples(st.sampled_from(hosts), st.sampled_from(HOST_KEYS)).map(
        lambda a: (f"hosts.{a[0]}.host_key = {a[1]!r:.60}",
                   mutate.to_toml(mutate.set_at(doc, ("hosts", a[0], "host_key"), a[1])).encode("utf-8")))


@settings(FUZZ, max_examples=130)
@pytest.mark.parametrize("seed", INVENTORIES, ids=lambda p: p.name)
@given(data=st.data())
def test_inventory(seed: Path, one_item_prompts: Path, tmp_path: Path, data: st.DataObject) -> None:
    raw = seed.read_bytes()
    what, new = data.draw(st.one_of(_edits_of_toml(raw), _host_key_edits(raw)), label="edit")
    inv = _scratch(tmp_path) / seed.name
    inv.write_bytes(new)
    run = run_main("sweep", "--dry-run", "--inventory", str(inv), "--prompts", str(one_item_prompts))
    judge("inventory", what, run, [str(inv)], ok_output="cell(s) planned")


@pytest.mark.parametrize("key", HOST_KEYS)
def test_a_host_key_that_is_not_a_key_is_refused(key: str, one_item_prompts: Path, tmp_path: Path) -> None:
    """Not the fuzz: each bad pin named, at the load, not when a worker first connects."""
    doc = tomllib.loads((REPO / "inventory" / "fleet.toml").read_text())
    inv = tmp_path / "fleet.toml"
    inv.write_text(mutate.to_toml(mutate.set_at(doc, ("hosts", "tower1", "host_key"), key)))
    run = run_main("sweep", "--dry-run", "--inventory", str(inv), "--prompts", str(one_item_prompts))
    assert run.code == 2 and not run.escaped, (run, key)
    line, = run.err.splitlines()
    assert line.startswith(f"fleet: error: {inv}: hosts.tower1.host_key: "), line


# --------------------------------------------------------------------------------------------------
# Items and rounds

OPEN_ITEM = REPO / "prompts" / "open" / "07-photo-renamer"
ROUND = REPO / "prompts" / "rounds" / "qualification.toml"
FOLDER_NAMES = ["07-photo\x1brenamer", "07-..", "07-photo-renamer\n", "7-photo-renamer", "07-Photo", "07-\u202e",
                "07-a" + "b" * 240, "99999999999999999999-x", "07-photo renamer"]


def _prompts_copy(root: Path) -> tuple[Path, Path, Path]:
    shutil.copytree(OPEN_ITEM, root / "open" / OPEN_ITEM.name)
    shutil.copytree(ROUND.parent / "qualification", root / "rounds" / "qualification")
    shutil.copy(ROUND, root / "rounds" / ROUND.name)
    return root / "open" / OPEN_ITEM.name, root / "rounds" / ROUND.name, root


def _item_edits() -> st.SearchStrategy[tuple[str, str, bytes]]:
    """(which file, what was done, its new bytes); "folder" renames the open prompt's folder."""
    files = {"item.toml": OPEN_ITEM / "item.toml", "qualification.toml": ROUND}
    tomls = [st.tuples(st.just(name), _edits_of_toml(path.read_bytes())).map(lambda a: (a[0], *a[1]))
             for name, path in files.items()]
    prompt = st.tuples(st.just("prompt.md"), mutate.byte_edits((OPEN_ITEM / "prompt.md").read_bytes())).map(
        lambda a: (a[0], *a[1]))
    folder = st.sampled_from(FOLDER_NAMES).map(lambda n: ("folder", f"rename the folder to {n!r}", n.encode()))
    return st.one_of(*tomls, *tomls, prompt, folder)


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_items(tmp_path: Path, data: st.DataObject) -> None:
    which, what, new = data.draw(_item_edits(), label="edit")
    item, round_file, root = _prompts_copy(_scratch(tmp_path) / "prompts")
    if which == "folder":
        try:
            item = item.rename(item.with_name(new.decode()))
        except OSError:
            assume(False)  # a name this filesystem refuses is no input
        target = item
    else:
        target = {"item.toml": item / "item.toml", "prompt.md": item / "prompt.md", "qualification.toml": round_file}[which]
        target.write_bytes(new)
    run = run_main("sweep", "--dry-run", "--prompts", str(root), "--round", "qualification")
    judge("item", f"{which}: {what}", run, [str(root)], ok_output="cell(s) planned")


# --------------------------------------------------------------------------------------------------
# Model scripts

SCRIPTS = [REPO / "prompts" / "scripts" / "example.toml", *sorted((REPO / "prompts" / "scripts" / "builtin").glob("*.toml")),
           OPEN_ITEM / "model.toml"]


@settings(FUZZ, max_examples=40)
@pytest.mark.parametrize("seed", SCRIPTS, ids=lambda p: f"{p.parent.name}-{p.name}")
@pytest.mark.parametrize("suffix", [".toml", ".json"])
@given(data=st.data())
def test_model_script(seed: Path, suffix: str, tmp_path: Path, data: st.DataObject) -> None:
    raw = seed.read_bytes()
    if suffix == ".json":
        raw = json.dumps(tomllib.loads(raw.decode()), indent=1).encode()
        what, new = data.draw(_edits_of_json(raw), label="edit")
    else:
        what, new = data.draw(_edits_of_toml(raw), label="edit")
    script = _scratch(tmp_path) / f"script{suffix}"
    script.write_bytes(new)
    run = run_main("model", "serve", "--check", "--script", str(script))
    judge("model script", what, run, [str(script)], ok_output="valid")


# --------------------------------------------------------------------------------------------------
# Transcripts

TRANSCRIPTS = sorted(GOLDEN.glob("runs/*/local/*/builtin/r1/attempt-1/transcript.jsonl")) + sorted(
    GOLDEN.glob("imported/*/transcript.jsonl"))


@settings(FUZZ, max_examples=60)
@pytest.mark.parametrize("seed", TRANSCRIPTS, ids=lambda p: p.parts[-6] if "runs" in p.parts else "imported")
@given(data=st.data())
def test_transcript(seed: Path, tmp_path: Path, data: st.DataObject) -> None:
    what, new = data.draw(_edits_of_jsonl(seed.read_bytes()), label="edit")
    file = _scratch(tmp_path) / "transcript.jsonl"
    file.write_bytes(new)
    run = run_main("transcript", "check", str(file))
    judge("transcript", what, run, [str(file)], ok_output="event(s)")


# --------------------------------------------------------------------------------------------------
# Imports: every format, from its real recordings

TEXT_SOURCES = [
    ("pixel-fleet", PIXEL / "photo-renamer-tower2-d4a61f33.json"),
    ("pixel-fleet", PIXEL / "photo-renamer-bfb62a2b.json"),
    ("pixel-fleet", PIXEL / "unittest-verdict-strixy-tail-d4a61f33.json"),
    ("pixel-fleet", PIXEL / "inspection-budget-replay-round106-107.json"),
    ("openclaw-jsonl", DATA / "openclaw" / "jsonl" / "renamer-v3.jsonl"),
    ("openclaw-jsonl", DATA / "openclaw" / "jsonl" / "compaction-v3.jsonl"),
    ("opencode", DATA / "opencode" / "photo-renamer.jsonl"),
    ("opencode", DATA / "opencode" / "photo-renamer.export.json"),
    ("hermes", DATA / "hermes" / "photo-renamer.export.jsonl"),
    ("hermes", DATA / "hermes" / "mixed.export.jsonl"),
]
STORES = [
    ("openclaw-sqlite", DATA / "openclaw" / "sqlite" / "renamer-v4.sqlite.gz"),
    ("openclaw-sqlite", DATA / "openclaw" / "sqlite" / "renamer-v3.sqlite.gz"),
    ("opencode", DATA / "opencode" / "photo-renamer.db.gz"),
    ("hermes", DATA / "hermes" / "photo-renamer.state.db.gz"),
]


def _import(fmt: str, src: Path, what: str, scratch: Path) -> None:
    run = run_main("import", fmt, str(src), "--out", str(scratch / "out"))
    judge(f"import {fmt}", what, run, [str(src)], ok_output="(outcome ")


@settings(FUZZ, max_examples=45)
@pytest.mark.parametrize(("fmt", "seed"), TEXT_SOURCES, ids=lambda v: v if isinstance(v, str) else v.name)
@given(data=st.data())
def test_import_text(fmt: str, seed: Path, tmp_path: Path, data: st.DataObject) -> None:
    raw = seed.read_bytes()
    edits = _edits_of_jsonl(raw) if seed.suffix == ".jsonl" else _edits_of_json(raw)
    what, new = data.draw(edits, label="edit")
    scratch = _scratch(tmp_path)
    src = scratch / seed.name
    src.write_bytes(new)
    _import(fmt, src, what, scratch)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    root = tmp_path_factory.mktemp("stores")
    out = {}
    for _, gz in STORES:
        db = root / gz.name.removesuffix(".gz")
        db.write_bytes(gzip.decompress(gz.read_bytes()))
        out[gz] = db
    return out


@settings(FUZZ, max_examples=45)
@pytest.mark.parametrize(("fmt", "seed"), STORES, ids=lambda v: v if isinstance(v, str) else v.name)
@given(data=st.data())
def test_import_store(fmt: str, seed: Path, stores: dict[Path, Path], tmp_path: Path, data: st.DataObject) -> None:
    what, edit = data.draw(mutate.sqlite_edits(stores[seed]), label="edit")
    scratch = _scratch(tmp_path)
    src = scratch / stores[seed].name
    shutil.copyfile(stores[seed], src)
    try:
        edit(src)
    except sqlite3.Error:
        assume(False)  # the edit itself was refused (a constraint): no input was made
    _import(fmt, src, what, scratch)


# --------------------------------------------------------------------------------------------------
# The in-process path is the real one

def test_subprocess_equals_in_process(tmp_path: Path, one_item_prompts: Path) -> None:
    """A few broken inputs through the real ``fleet`` process give the same exit code and line as in-process."""
    inv = tmp_path / "inv.toml"
    inv.write_bytes((REPO / "inventory" / "local.toml").read_bytes().replace(b"context = 65536", b"context = 0"))
    deep = tmp_path / "deep.toml"
    deep.write_text("schema_version = 1\nhosts = " + mutate.deep_list() + "\n")
    bad_utf8 = tmp_path / "session.json"
    bad_utf8.write_bytes(b'{"calls": [\xff]}')
    transcript = tmp_path / "transcript.jsonl"
    lines = TRANSCRIPTS[0].read_bytes().splitlines(keepends=True)
    transcript.write_bytes(lines[1] + lines[0] + b"".join(lines[2:]))
    cases = [
        (("sweep", "--dry-run", "--inventory", str(inv), "--prompts", str(one_item_prompts)), "hosts.local.model.context"),
        (("sweep", "--dry-run", "--inventory", str(deep), "--prompts", str(one_item_prompts)), str(deep)),
        (("import", "pixel-fleet", str(bad_utf8), "--out", str(tmp_path / "o")), str(bad_utf8)),
        (("transcript", "check", str(transcript)), "line 1"),
        (("model", "serve", "--check", "--script", str(deep)), "(syntax)"),
        (("sweep", "--dry-run", "--repeat", "x"), "--repeat"),
    ]
    for argv, needle in cases:
        proc = run_fleet(*argv, cwd=tmp_path)
        line = assert_one_line_error(proc, needle)
        inside = run_main(*argv)
        assert (inside.code, inside.err.strip()) == (proc.returncode, line), (argv, inside, proc.stderr)


@pytest.mark.parametrize("argv_of", [
    lambda: ("sweep", "--dry-run", "--inventory", str(INVENTORIES[1])),
    lambda: ("model", "serve", "--check", "--script", str(SCRIPTS[0])),
    lambda: ("transcript", "check", str(TRANSCRIPTS[0])),
], ids=["inventory", "script", "transcript"])
def test_the_seeds_are_valid(argv_of: Any) -> None:
    """The fuzz starts from valid inputs: each verb accepts its unbroken seed (else every edit 'fails' alike)."""
    run = run_main(*argv_of())
    assert run.code == 0 and not run.err and not run.escaped, run


# --------------------------------------------------------------------------------------------------
# Stored records: a results directory whose files were damaged (disk, a hand edit, another version)

SWEEP = GOLDEN / "runs" / "20261201-214544-new"
ATTEMPT = Path("local") / "07-photo-renamer" / "builtin" / "r1" / "attempt-1"
RECORDS = ["sweep.json", *(str(ATTEMPT / n) for n in ("meta.json", "transcript.jsonl", "grade.json", "receipt.json",
                                                       "checks.json", "workspace.manifest.json", "grades.jsonl"))]
READERS = {
    "status": ("status", SWEEP.name, "--json"),
    "show": ("show", SWEEP.name, "local", "07-photo-renamer", "--json"),
    "grade": ("grade", SWEEP.name, "--json"),
    "report": ("report", SWEEP.name),
}


def _record_edits(record: str) -> st.SearchStrategy[tuple[str, bytes]]:
    raw = (SWEEP / record).read_bytes()
    return _edits_of_jsonl(raw) if record.endswith(".jsonl") else _edits_of_json(raw)


@settings(FUZZ, max_examples=30)
@pytest.mark.parametrize("record", RECORDS, ids=lambda r: Path(r).name)
@given(data=st.data())
def test_stored_records(record: str, tmp_path: Path, data: st.DataObject) -> None:
    what, new = data.draw(_record_edits(record), label="edit")
    verb = data.draw(st.sampled_from(sorted(READERS)), label="verb")
    runs = _scratch(tmp_path) / "runs"
    shutil.copytree(SWEEP, runs / SWEEP.name)
    (runs / SWEEP.name / record).write_bytes(new)
    run = run_main(*READERS[verb], "--runs", str(runs))
    judge(f"store {verb}", f"{record}: {what}", run, [str(runs)], codes=(1, 2))


# --------------------------------------------------------------------------------------------------
# Arguments: the command line is input too

ARG_OPTIONS = ["--hosts", "--items", "--round", "--agents", "--label", "--repeat", "--fail-on", "--max-attempts"]
ARG_VALUES = [*mutate.HOSTILE_NAMES, "10" * 200, "-1", "0", str(2**63), "1e9", "nan", "1000001", ",", ",,local,",
              "local,local", "07,07", "HARNESS_FAILURE,", "--json"]


@settings(FUZZ, max_examples=120)
@given(args=st.lists(st.tuples(st.sampled_from(ARG_OPTIONS), st.sampled_from(ARG_VALUES)), min_size=1, max_size=3))
def test_arguments(one_item_prompts: Path, args: list[tuple[str, str]]) -> None:
    argv = ["sweep", "--dry-run", "--prompts", str(one_item_prompts), *(part for pair in args for part in pair)]
    run = run_main(*argv)
    # The line names the option or the value it refuses (escaped, as the line must show it).
    escaped = ["".join(c if c.isprintable() else repr(c)[1:-1] for c in v) for _, v in args if v]
    names = [opt for opt, _ in args] + escaped + ["no items", "unknown", "option"]
    judge("arguments", " ".join(f"{o} {v!r}" for o, v in args), run, names, ok_output="cell(s) planned")
