"""The real ``fleet`` console script on bad input: exit code 2, exactly one line on stderr starting
``fleet: error:``, naming the file and key, and never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import assert_one_line_error, fleet_argv, run_fleet

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINp+KAVIeeJtmTE2mHUtyrWs6pTWHU1PACBUX+WdKpp4"


@pytest.fixture()
def bad_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventories" / "a-rather-long-folder-name-for-the-fleet" / "bad-fleet.toml"
    path.parent.mkdir(parents=True)
    path.write_text(
        f"""schema_version = 1
[hosts.box]
address = "box.lan"
user = "qual"
host_key = "{KEY}"
slots = 0
model = {{ base_url = "http://127.0.0.1:8080/v1", id = "m", context = 4096, max_output = 512 }}
[hosts.box.agents.echo]
command = ["echo", "{{prompt_file}}"]
""",
        encoding="utf-8",
    )
    return path


def test_bad_inventory_in_sweep(tmp_path: Path, bad_inventory: Path) -> None:
    proc = run_fleet("sweep", "-i", str(bad_inventory), "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert_one_line_error(proc, str(bad_inventory), "hosts.box.slots")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/sweep.json"))


def test_bad_inventory_in_hosts_check(tmp_path: Path, bad_inventory: Path) -> None:
    proc = run_fleet("hosts", "check", "-i", str(bad_inventory), cwd=tmp_path)
    assert_one_line_error(proc, str(bad_inventory), "hosts.box.slots")


def test_unknown_agent_kind_names_the_known_ones(tmp_path: Path, bad_inventory: Path) -> None:
    text = bad_inventory.read_text(encoding="utf-8").replace("slots = 0\n", "")
    bad_inventory.write_text(text.replace('[hosts.box.agents.echo]\n', '[hosts.box.agents.echo]\nkind = "aider"\n'),
                             encoding="utf-8")
    proc = run_fleet("hosts", "check", "-i", str(bad_inventory), cwd=tmp_path)
    assert_one_line_error(proc, f"{bad_inventory}: hosts.box.agents.echo.kind: unknown kind 'aider' "
                                "(known: builtin, command, hermes, openclaw, opencode)")


def test_missing_inventory_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    proc = run_fleet("hosts", "check", "-i", str(missing), cwd=tmp_path)
    assert_one_line_error(proc, f"{missing}: file not found")


def test_unknown_host(tmp_path: Path) -> None:
    proc = run_fleet("sweep", "--hosts", "nope", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert_one_line_error(proc, "unknown host nope", "local.toml")


def test_unknown_item(tmp_path: Path) -> None:
    proc = run_fleet("sweep", "--items", "99", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert_one_line_error(proc, "unknown item '99'")


def test_status_on_empty_runs_dir(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    proc = run_fleet("status", "--runs", str(runs), cwd=tmp_path)
    assert_one_line_error(proc, str(runs), "no sweeps yet")


def test_status_of_unknown_sweep(tmp_path: Path) -> None:
    proc = run_fleet("status", "20990101-000000-nope", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert_one_line_error(proc, "no sweep '20990101-000000-nope'")


def test_worker_without_a_broker(tmp_path: Path) -> None:
    proc = run_fleet("worker", cwd=tmp_path)
    assert_one_line_error(proc, "needs a broker", "FLEET_BROKER_URL")


@pytest.mark.parametrize("args", [["sweep"], ["resume", "20990101-000000-nope"], ["rerun", "h", "i", "--sweep", "x"],
                                  ["worker", "--broker", "redis://127.0.0.1:1/0"], ["status"], ["settings"]])
@pytest.mark.parametrize(("variable", "value", "problem"), [
    ("FLEET_VISIBILITY_TIMEOUT", "abc", "expected a whole number of seconds"),
    ("FLEET_RETRY_BACKOFF", "x", "expected seconds separated by commas"),
])
def test_a_bad_setting_is_one_line_naming_its_variable(tmp_path: Path, args: list[str], variable: str, value: str,
                                                         problem: str) -> None:
    proc = run_fleet(*args, cwd=tmp_path, **{variable: value})
    assert_one_line_error(proc, f"{variable}={value!r}: {problem}")
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_a_bad_max_attempts_is_one_line(tmp_path: Path) -> None:
    proc = run_fleet("sweep", "--max-attempts", "0", cwd=tmp_path)
    assert_one_line_error(proc, "--max-attempts '0': expected a whole number of attempts, at least 1")


@pytest.mark.parametrize(("args", "line"), [
    (["sweep", "--items", ""], "--items '': names nothing"),
    (["sweep", "--items", ",", "--dry-run"], "--items ',': names nothing"),
    (["sweep", "--hosts", "local,", "--dry-run"], "--hosts 'local,': an empty name (a stray comma?)"),
    (["sweep", "--agents", "builtin,,receipt-echo"], "--agents 'builtin,,receipt-echo': an empty name (a stray comma?)"),
    (["worker", "--hosts", "a,", "--broker", "redis://127.0.0.1:1/0"], "--hosts 'a,': an empty name"),
    (["hosts", "prepare", "--hosts", " , "], "--hosts ' , ': names nothing"),
    (["sweep", "--repeat", "two"], "Invalid value for '--repeat': 'two' is not a valid integer"),
    (["sweep", "--fail-on", "HARNESS_FAILURE,", "--dry-run"], "--fail-on 'HARNESS_FAILURE,': an empty name"),
])
def test_a_list_flag_that_names_nothing_or_an_empty_name_is_refused(tmp_path: Path, args: list[str],
                                                                     line: str) -> None:
    # Taken as "every host" or as "a", a stray comma would run what the caller never asked for.
    proc = run_fleet(*args, cwd=tmp_path)
    assert_one_line_error(proc, line)
    assert not (tmp_path / "runs").exists()  # nothing planned, nothing stored


def test_a_list_flags_name_given_twice_counts_once(tmp_path: Path) -> None:
    proc = run_fleet("hosts", "check", "--hosts", "local,local", "--agents", "receipt-echo,receipt-echo", "--json",
                     cwd=tmp_path)
    out = json.loads(proc.stdout)
    assert out["agents_counted"] == ["receipt-echo"], out
    assert [h["host"] for h in out["hosts"]] == ["local"], out


@pytest.mark.parametrize("verb", [["sweep", "--items", "04"], ["status"], ["sweeps"], ["prune", "--keep", "1"],
                                  ["settings"]])
def test_runs_naming_a_file_is_one_line(tmp_path: Path, verb: list[str]) -> None:
    (tmp_path / "results.txt").write_text("not a folder\n")
    proc = run_fleet(*verb, "--runs", "results.txt", cwd=tmp_path)
    assert_one_line_error(proc, "--runs 'results.txt': not a directory")
    assert (tmp_path / "results.txt").read_text() == "not a folder\n"


@pytest.mark.parametrize("verb", [["sweep", "--items", "04"], ["status"]])
def test_runs_naming_a_dangling_link_is_one_line(tmp_path: Path, verb: list[str]) -> None:
    # It failed as "cannot create runs: File exists" (sweep) or "no sweeps yet" (status).
    (tmp_path / "runs").symlink_to(tmp_path / "gone")
    proc = run_fleet(*verb, "--runs", "runs", cwd=tmp_path)
    assert_one_line_error(proc, "--runs 'runs': a link to nothing")
    assert not (tmp_path / "gone").exists()


def test_fleet_settings_shows_each_value_and_where_it_came_from_redacted(tmp_path: Path) -> None:
    secret = "s3cr3t-pw"
    proc = run_fleet("settings", "--max-attempts", "5", "--json", cwd=tmp_path,
                     FLEET_BROKER_URL=f"redis://:{secret}@127.0.0.1:6379/0", FLEET_SLOT_TTL="3")
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stdout + proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["settings"]}
    assert rows["broker_url"] == {"name": "broker_url", "value": "redis://:***@127.0.0.1:6379/0",
                                  "from": "env FLEET_BROKER_URL", "env": "FLEET_BROKER_URL", "flag": "--broker"}
    assert (rows["slot_ttl_s"]["value"], rows["slot_ttl_s"]["from"]) == ("3", "env FLEET_SLOT_TTL")
    assert (rows["max_attempts"]["value"], rows["max_attempts"]["from"]) == ("5", "flag --max-attempts")
    assert (rows["runs"]["value"], rows["runs"]["from"]) == ("runs", "default")
    table = run_fleet("settings", "--broker", "redis://h:6379/0", cwd=tmp_path, FLEET_BROKER_URL=f"redis://:{secret}@x/0")
    assert table.returncode == 0 and secret not in table.stdout
    assert any(line.split() == ["broker_url", "redis://h:6379/0", "flag", "--broker"] for line in table.stdout.splitlines())
    assert table.stdout.splitlines()[-1] == "queue: redis://h:6379/0"


def test_sweep_rerun_and_resume_build_their_coordinator_in_one_place() -> None:
    """A thin CLI: the three verbs share one helper (``_coordinate``) for the coordinator, progress, table and exit
    status, instead of three copies of the same closure."""
    import inspect

    import harness.cli.sweep_cmd

    source = inspect.getsource(harness.cli.sweep_cmd)
    assert source.count("Coordinator(") == 1
    for verb in (harness.cli.sweep_cmd.sweep, harness.cli.sweep_cmd.rerun, harness.cli.sweep_cmd.resume):
        assert "_coordinate(" in inspect.getsource(verb.callback)


def test_fleet_show_escapes_what_the_agent_named_and_wrote(tmp_path: Path) -> None:
    # A workspace file named with a newline must not fake a row of the artifact list, and an escape sequence in a
    # name, an error or the answer must not reach the terminal.
    from harness.core.records import Artifact
    from harness.store import Store
    from tests.support import finished_result, run_fleet, synthetic_sweep

    runs = tmp_path / "runs"
    sweep = synthetic_sweep()
    cell = sweep.cells[0]
    arts = [Artifact.of("workspace/a\n0123456789ab        3  workspace/fake.txt", b"x"),
            Artifact.of("workspace/\x1b[2Jclear.txt", b"y"),
            Artifact.of("answer.txt", b"line one\n\x1b]0;pwned\x07\tkept tab\n")]
    with Store(runs).writer(sweep.id) as w:
        w.save_sweep(sweep)
        assert w.record_attempt(sweep, finished_result(sweep, cell, artifacts=arts, error="bad\x1b[31m red"))
    proc = run_fleet("show", sweep.id, cell.host, cell.item, "--runs", str(runs), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "workspace/a\\n0123456789ab" in proc.stdout
    assert not [line for line in proc.stdout.splitlines() if line.strip().endswith("workspace/fake.txt")
                and "\\n" not in line]
    assert "line one\n\\x1b]0;pwned\\x07" in proc.stdout and "kept tab" in proc.stdout  # rich shows the tab as spaces
    assert "error: bad\\x1b[31m red" in proc.stdout


def test_version_names_the_harness_commit(tmp_path: Path) -> None:
    from harness import __version__

    proc = run_fleet("--version", cwd=tmp_path, FLEET_HARNESS_COMMIT="0123abcd-dirty")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"fleet {__version__} (harness commit 0123abcd-dirty)\n"
    unset = subprocess.run([*fleet_argv(), "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           env={k: v for k, v in os.environ.items() if k != "FLEET_HARNESS_COMMIT"})
    from harness.core.version import harness_commit

    assert unset.stdout == f"fleet {__version__} (harness commit {harness_commit()})\n"


def _json_verbs() -> set[str]:
    import click

    from harness.cli import cli

    found: set[str] = set()

    def walk(group: click.Group, prefix: str) -> None:
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                walk(cmd, f"{prefix}{name} ")
            elif any(p.name == "as_json" for p in cmd.params):
                found.add(f"{prefix}{name}")

    walk(cli, "")
    return found


def test_every_json_output_carries_a_schema_version(tmp_path: Path) -> None:
    from harness.store import Store
    from tests.support import synthetic_sweep

    runs = tmp_path / "runs"
    sweep = synthetic_sweep(hosts=1, items=1)
    sweep.status = "finished"
    with Store(runs).writer(sweep.id) as w:
        w.save_sweep(sweep)
    r = ["--runs", str(runs)]
    calls = {
        "sweep": ["sweep", "--dry-run", "--json", "--items", "04"],
        "status": ["status", sweep.id, "--json", *r],
        "settings": ["settings", "--json", *r],
        "sweeps": ["sweeps", "--json", *r],
        "compare": ["compare", sweep.id, sweep.id, "--json", *r],
        "grade": ["grade", sweep.id, "--json", *r],
        "schedule list": ["schedule", "list", "-f", str(Path(__file__).parents[3] / "inventory" / "schedules.example.toml"),
                          "--json"],
    }
    # Printed whole from records that carry their own schema_version, each tested where the record is:
    # show (meta.json), rerun/resume (the sweep's --json, as above), replay (one ReplayOutcome per line),
    # hosts check (tests of harness/coordinator/hostcheck.py).
    elsewhere = {"show", "rerun", "resume", "replay", "hosts check"}
    assert _json_verbs() == set(calls) | elsewhere, "a verb with --json: add it here"
    for verb, args in calls.items():
        proc = run_fleet(*args, cwd=tmp_path)
        assert proc.returncode == 0, (verb, proc.stderr)
        assert isinstance(json.loads(proc.stdout).get("schema_version"), int), (verb, proc.stdout[:300])


def test_every_verb_describes_each_option_and_shows_an_example() -> None:
    import click

    from harness.cli import cli

    def walk(group: click.Group, prefix: str):
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                assert cmd.help, f"fleet {prefix}{name}: no help"
                yield from walk(cmd, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", cmd

    for path, cmd in walk(cli, ""):
        bare = [p.name for p in cmd.params if isinstance(p, click.Option) and not p.help]
        assert not bare, f"fleet {path}: options without help: {bare}"
        assert "Example" in (cmd.help or ""), f"fleet {path}: its --help shows no example"
