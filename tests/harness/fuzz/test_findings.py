"""Each input the fuzz found giving a traceback (or more than one line), as a plain test of its own: the
smallest input, the real verb, and the exact line it must give now."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.harness.fuzz import mutate
from tests.harness.fuzz.runner import Run, run_main
from tests.support import REPO, TESTS, run_fleet

DATA = TESTS / "agents" / "data"
TOO_DEEP = "nested more than 100 levels deep"


def _line(run: Run) -> str:
    assert not run.escaped, run.escaped
    assert run.code == 2, run
    line, = run.err.splitlines()
    return line


def _prompts(tmp_path: Path) -> Path:
    root = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts" / "open" / "12-explain-only", root / "open" / "12-explain-only")
    return root


@pytest.mark.parametrize("depth", [mutate.DEEP, 900, 101])
@pytest.mark.parametrize("kind", ["list", "table"])
def test_a_deep_inventory_is_one_line(kind: str, depth: int, tmp_path: Path) -> None:
    inv = tmp_path / "inv.toml"
    value = mutate.deep_list(depth) if kind == "list" else mutate.deep_table_toml(depth)
    inv.write_text((REPO / "inventory" / "local.toml").read_text() + f"\n[hosts.local.env]\nX = {value}\n")
    line = _line(run_main("sweep", "--dry-run", "--inventory", str(inv), "--prompts", str(_prompts(tmp_path))))
    assert line.startswith(f"fleet: error: {inv}: not valid TOML: {TOO_DEEP}"), line


def test_just_under_the_depth_bound_is_read(tmp_path: Path) -> None:
    """The bound refuses only what no real file holds: an env value 100 levels down is still a TOML file
    (refused for its type, by the model, not for its depth)."""
    inv = tmp_path / "inv.toml"
    inv.write_text((REPO / "inventory" / "local.toml").read_text() + "\n[hosts.local.env]\nX = " + mutate.deep_list(96) + "\n")
    line = _line(run_main("sweep", "--dry-run", "--inventory", str(inv), "--prompts", str(_prompts(tmp_path))))
    assert TOO_DEEP not in line and "hosts.local.env.X" in line, line


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_deep_model_script_is_one_line(suffix: str, tmp_path: Path) -> None:
    script = tmp_path / f"s{suffix}"
    if suffix == ".json":
        script.write_text('{"schema_version": 1, "turns": [{"text": "a", "tool_calls": ' + mutate.deep_list() + "}]}")
    else:
        script.write_text("schema_version = 1\nvalues = " + mutate.deep_table_toml() + "\n")
    line = _line(run_main("model", "serve", "--check", "--script", str(script)))
    assert line.startswith(f"fleet: error: {script}: (syntax): {TOO_DEEP}"), line


def test_a_deep_transcript_line_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "transcript.jsonl"
    first = next((TESTS / "golden" / "v2").glob("runs/*/local/*/builtin/r1/attempt-1/transcript.jsonl")).read_text()
    file.write_text(first.splitlines()[0] + "\n" + mutate.deep_list() + "\n")
    line = _line(run_main("transcript", "check", str(file)))
    assert line.startswith(f"fleet: error: {file}: line 2: not valid JSON: {TOO_DEEP}"), line


@pytest.mark.parametrize(("fmt", "seed"), [
    ("pixel-fleet", TESTS / "fixtures" / "pixel-fleet" / "photo-renamer-bfb62a2b.json"),
    ("openclaw-jsonl", DATA / "openclaw" / "jsonl" / "renamer-v3.jsonl"),
    ("opencode", DATA / "opencode" / "photo-renamer.jsonl"),
    ("opencode", DATA / "opencode" / "photo-renamer.export.json"),
    ("hermes", DATA / "hermes" / "photo-renamer.export.jsonl"),
])
@pytest.mark.parametrize("depth", [mutate.DEEP, 900])
def test_a_deep_recording_is_one_line(fmt: str, seed: Path, depth: int, tmp_path: Path) -> None:
    src = tmp_path / seed.name
    raw = seed.read_bytes()
    if seed.suffix == ".jsonl":
        src.write_bytes(raw + mutate.deep_list(depth).encode() + b"\n")
    else:
        src.write_bytes(raw.rstrip()[:-1] + b', "x": ' + mutate.deep_table_json(depth).encode() + b"}")
    line = _line(run_main("import", fmt, str(src), "--out", str(tmp_path / "out")))
    assert line.startswith(f"fleet: error: {src}: ") and TOO_DEEP in line, line


@pytest.mark.parametrize("name", ["line\nbreak", "esc\x1b[2Jape", "rtl\u202eoverride"])
def test_a_key_with_control_characters_is_one_escaped_line(name: str, tmp_path: Path) -> None:
    """The key is quoted escaped: the line stays one line and cannot clear or reverse the terminal."""
    inv = tmp_path / "inv.toml"
    quoted = name.encode("unicode_escape").decode()  # what the line shows: \n, \x1b, \u202e
    inv.write_text((REPO / "inventory" / "local.toml").read_text().replace(
        "[hosts.local.model]", f"[hosts.local.model]\n{json.dumps(name)} = 1", 1))
    line = _line(run_main("sweep", "--dry-run", "--inventory", str(inv), "--prompts", str(_prompts(tmp_path))))
    assert line == f"fleet: error: {inv}: hosts.local.model.{quoted}: unknown key", line
    script = tmp_path / "s.json"
    script.write_text('{"schema_version": 1, "turns": [{"text": "a", ' + json.dumps(name) + ': 1}]}')
    line = _line(run_main("model", "serve", "--check", "--script", str(script)))
    assert line == f"fleet: error: {script}: turns[0].{quoted}: unknown key", line


def test_a_prompt_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    root = _prompts(tmp_path)
    prompt = root / "open" / "12-explain-only" / "prompt.md"
    prompt.write_bytes(b"Explain \xff this")
    line = _line(run_main("sweep", "--dry-run", "--prompts", str(root)))
    assert line == f"fleet: error: {prompt}: byte 8: not UTF-8 text (invalid start byte)", line


def _store(tmp_path: Path, gz: Path, statement: str) -> Path:
    db = tmp_path / gz.name.removesuffix(".gz")
    db.write_bytes(gzip.decompress(gz.read_bytes()))
    con = sqlite3.connect(db)
    con.execute(statement)
    con.commit()
    con.close()
    return db


NOT_UTF8 = "cast(x'ffff' as text)"


@pytest.mark.parametrize(("fmt", "gz", "statement"), [
    ("hermes", DATA / "hermes" / "photo-renamer.state.db.gz", f"update messages set content = {NOT_UTF8} where id = 2"),
    ("opencode", DATA / "opencode" / "photo-renamer.db.gz", f"update part set data = {NOT_UTF8}"),
    ("openclaw-sqlite", DATA / "openclaw" / "sqlite" / "renamer-v4.sqlite.gz",
     f"update transcript_events set event_json = {NOT_UTF8} where event_json is not null"),
])
def test_a_store_with_text_that_is_not_utf8_is_one_line(fmt: str, gz: Path, statement: str, tmp_path: Path) -> None:
    db = _store(tmp_path, gz, statement)
    line = _line(run_main("import", fmt, str(db), "--out", str(tmp_path / "out")))
    assert line.startswith(f"fleet: error: {db}: ") and "UTF-8" in line, line


def test_a_store_whose_column_name_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """sqlite3 raises UnicodeDecodeError (not a DatabaseError) for a name it cannot decode; the fuzz made one
    by flipping bits in a Hermes state.db."""
    db = _store(tmp_path, DATA / "hermes" / "photo-renamer.state.db.gz", "PRAGMA writable_schema=ON")
    con = sqlite3.connect(db)
    con.execute("PRAGMA writable_schema=ON")
    con.execute(f"update sqlite_master set sql = replace(sql, 'git_branch', 'g' || {NOT_UTF8}) "
                "where name = 'sessions'")
    con.commit()
    con.close()
    line = _line(run_main("import", "hermes", str(db), "--out", str(tmp_path / "out")))
    assert line == (f"fleet: error: {db}: not a readable SQLite session store (a text value that is not UTF-8 "
                    "(byte 1))"), line


def test_a_hermes_store_with_a_blob_is_one_line(tmp_path: Path) -> None:
    db = _store(tmp_path, DATA / "hermes" / "photo-renamer.state.db.gz",
                "update messages set codex_message_items = x'28b52ffd00' where id = 3")
    line = _line(run_main("import", "hermes", str(db), "--out", str(tmp_path / "out")))
    assert line == (f"fleet: error: {db}: messages row 3.codex_message_items: a blob of 5 bytes where Hermes "
                    "stores text or a number"), line


def test_the_model_server_module_checks_a_deep_script_in_one_line(tmp_path: Path) -> None:
    """``python -m harness.modelserver --check``, the server's own entry point, reads scripts the same way."""
    import subprocess
    import sys

    script = tmp_path / "deep.json"
    script.write_text('{"schema_version": 1, "values": ' + mutate.deep_table_json() + "}")
    proc = subprocess.run([sys.executable, "-m", "harness.modelserver", "--check", "--script", str(script)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert "Traceback" not in proc.stderr and proc.returncode == 2, proc
    assert proc.stderr.splitlines() == [f"error: {script}: (syntax): {TOO_DEEP} (arrays or objects inside each other) (at line 1, column 1)"]
    ok = subprocess.run([sys.executable, "-m", "harness.modelserver", "--check", "--script",
                         str(REPO / "prompts" / "scripts" / "example.toml")], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip().endswith("example.toml: valid"), ok


@pytest.mark.parametrize("name", ["../../07-photo-renamer/checks/test_photo_renamer.py", "/etc/test_abs.py",
                                  "sub/../../test_up.py", "..\\\\test_win.py"])
def test_a_check_outside_the_checks_folder_is_refused(name: str, tmp_path: Path) -> None:
    root = tmp_path / "prompts"
    item = root / "open" / "07-photo-renamer"
    shutil.copytree(REPO / "prompts" / "open" / "07-photo-renamer", item)
    meta = item / "item.toml"
    meta.write_text(meta.read_text().replace('checks = ["test_photo_renamer.py"]', f"checks = [{json.dumps(name)}]"))
    line = _line(run_main("sweep", "--dry-run", "--prompts", str(root)))
    assert line.startswith(f"fleet: error: {meta}: checks[0]: ") and "inside the item's checks/ folder" in line, line


@pytest.mark.parametrize(("argv", "line"), [
    (("sweep", "--repeat", "x"), "fleet: error: Invalid value for '--repeat': 'x' is not a valid integer. (see `fleet sweep -h`)"),
    (("nosuch",), "fleet: error: No such command 'nosuch'. (see `fleet -h`)"),
    (("import",), "fleet: error: Missing argument 'FORMAT'. (see `fleet import -h`)"),
    (("transcript", "check", "a", "b"), "fleet: error: Got unexpected extra argument (b) (see `fleet transcript check -h`)"),
])
def test_a_bad_argument_is_one_line(argv: tuple[str, ...], line: str, tmp_path: Path) -> None:
    """Click's own form is four lines (usage, hint, blank, error); an argument is input like a file."""
    proc = run_fleet(*argv, cwd=tmp_path)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [line]), proc.stderr


def test_bare_fleet_still_prints_its_help(tmp_path: Path) -> None:
    proc = run_fleet(cwd=tmp_path)
    assert "Usage: fleet [OPTIONS] COMMAND [ARGS]..." in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_a_repeat_past_the_bound_is_refused_before_planning(tmp_path: Path) -> None:
    """--repeat 100000000 would plan 10^9 cells in memory before saying anything (a typo, not a sweep)."""
    run = run_main("sweep", "--dry-run", "--prompts", str(_prompts(tmp_path)), "--repeat", "100000000")
    assert _line(run) == "fleet: error: --repeat 100000000: at most 1000 (a round's own repetitions have the same bound)"
    ok = run_main("sweep", "--dry-run", "--prompts", str(_prompts(tmp_path / "b")), "--repeat", "1000")
    assert ok.code == 0 and "1000 cell(s) planned" in ok.out, ok
