"""schedules.toml: the example file loads; bad input is one line naming the file and the key; next fire times are
read in each schedule's own zone."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from harness.core.errors import ScheduleError
from harness.schedule import load_schedules, next_fire
from tests.support import assert_one_line_error, run_fleet

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "inventory" / "schedules.example.toml"

GOOD = """schema_version = 1
[schedules.nightly]
cron = "0 2 * * *"
timezone = "Europe/Berlin"
inventory = "fleet.toml"
label = "nightly"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "schedules.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_example_file_loads_with_paths_from_its_folder() -> None:
    parsed = load_schedules(EXAMPLE)
    assert sorted(parsed.schedules) == ["nightly", "weekly-round"]
    nightly = parsed.schedules["nightly"]
    assert nightly.name == "nightly" and nightly.inventory == str(REPO / "inventory" / "fleet.toml")
    assert nightly.notify.command[0] == "/usr/local/bin/fleet-mail-summary"
    assert parsed.schedules["weekly-round"].on_late == "queue"


@pytest.mark.parametrize(("old", "new", "key", "problem"), [
    ('cron = "0 2 * * *"', 'cron = "0 2 * *"', "schedules.nightly.cron", "5 fields"),
    ('cron = "0 2 * * *"', 'cron = "61 2 * * *"', "schedules.nightly.cron", "not a valid cron expression"),
    ('timezone = "Europe/Berlin"', 'timezone = "Europe/Atlantis"', "schedules.nightly.timezone",
     "not a known IANA time zone"),
    ("", 'colour = "blue"', "schedules.nightly.colour", "unknown key"),
    ("", 'on_late = "later"', "schedules.nightly.on_late", "'skip' or 'queue'"),
    ("", 'repeat = "three"', "schedules.nightly.repeat", "integer"),
    ("", "every_s = 5", "schedules.nightly.cron", "exactly one of cron"),
    ('cron = "0 2 * * *"', "every_s = 0.000001", "schedules.nightly.every_s", "greater than or equal to 1"),
    ('cron = "0 2 * * *"', "every_s = inf", "schedules.nightly.every_s", "finite number"),
    ('cron = "0 2 * * *"', "every_s = 1e300", "schedules.nightly.every_s", "less than or equal to"),
    ('label = "nightly"', 'label = ""', "schedules.nightly.label", "give a label"),
    ("", "hosts = []", "schedules.nightly.hosts", "empty list"),
    ("", 'notify = { webhook = "ftp://x" }', "schedules.nightly.notify.webhook", "not an http"),
    # Each of these was accepted, and failed every night's notification without a retry (ValueError in urlsplit).
    ("", 'notify = { webhook = "http://127.0.0.1:99999/x" }', "schedules.nightly.notify.webhook", "Port out of range"),
    ("", 'notify = { webhook = "http://[::1/x" }', "schedules.nightly.notify.webhook", "not a valid URL"),
    ("", 'notify = { webhook = "http:///x" }', "schedules.nightly.notify.webhook", "names no host"),
    # A label becomes part of each sweep's id: refused on load, not at every fire.
    ('label = "nightly"', 'label = "a/b"', "schedules.nightly.label", "use letters, digits"),
    ('label = "nightly"', 'label = ".."', "schedules.nightly.label", "use letters, digits"),
    ('label = "nightly"', 'label = "../../etc"', "schedules.nightly.label", "use letters, digits"),
    ('timezone = "Europe/Berlin"', 'timezone = "localtime"', "schedules.nightly.timezone", "not a known IANA"),
    ('timezone = "Europe/Berlin"', 'timezone = "../../../etc/passwd"', "schedules.nightly.timezone", "not a known"),
])
def test_bad_input_is_one_line_with_file_and_key(tmp_path: Path, old: str, new: str, key: str, problem: str) -> None:
    text = GOOD.replace(old + "\n", new + "\n") if old else GOOD + new + "\n"
    assert text != GOOD
    path = _write(tmp_path, text)
    with pytest.raises(ScheduleError) as err:
        load_schedules(path)
    assert str(err.value).startswith(f"{path}: {key}: "), str(err.value)
    assert problem in str(err.value), str(err.value)


def test_unknown_top_level_key_and_missing_version(tmp_path: Path) -> None:
    with pytest.raises(ScheduleError, match=r": shedules: unknown key"):
        load_schedules(_write(tmp_path, GOOD + "[shedules.x]\ncron = '* * * * *'\n"))
    with pytest.raises(ScheduleError, match=r": schema_version: required key is missing"):
        load_schedules(_write(tmp_path, GOOD.replace("schema_version = 1\n", "")))


def test_next_fire_is_read_in_the_schedule_zone(tmp_path: Path) -> None:
    s = load_schedules(_write(tmp_path, GOOD)).schedules["nightly"]
    # 2026-07-01 10:00 UTC is 12:00 in Berlin (summer time): the next 02:00 Berlin is 2026-07-02 00:00 UTC.
    nxt = next_fire(s, datetime(2026, 7, 1, 10, 0, tzinfo=timezone.utc))
    assert nxt.astimezone(timezone.utc) == datetime(2026, 7, 2, 0, 0, tzinfo=timezone.utc)
    assert nxt.utcoffset() is not None and nxt.utcoffset().total_seconds() == 7200
    # In winter, 02:00 Berlin is 01:00 UTC.
    nxt = next_fire(s, datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc))
    assert nxt.astimezone(timezone.utc) == datetime(2026, 12, 2, 1, 0, tzinfo=timezone.utc)


def test_fleet_schedule_list_prints_next_fires_and_refuses_bad_files(tmp_path: Path) -> None:
    ok = run_fleet("schedule", "list", "-f", str(EXAMPLE), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert lines[0].split() == ["schedule", "when", "next", "fire", "label", "on", "late"]
    assert lines[1].startswith("nightly ") and "0 2 * * * (Europe/Berlin)" in lines[1] and " skip" in lines[1]
    assert lines[2].startswith("weekly-round ") and "30 6 * * 6 (UTC)" in lines[2]
    bad = _write(tmp_path, GOOD.replace("Europe/Berlin", "Mars/Olympus"))
    assert_one_line_error(run_fleet("schedule", "list", "-f", str(bad), cwd=tmp_path),
                          f"{bad}: schedules.nightly.timezone: 'Mars/Olympus' is not a known IANA time zone")
    assert_one_line_error(run_fleet("schedule", "list", "-f", str(tmp_path / "none.toml"), cwd=tmp_path),
                          "none.toml: file not found")


def test_run_and_service_refuse_the_embedded_broker(tmp_path: Path) -> None:
    for args in (("schedule", "run", "-f", str(EXAMPLE)), ("schedule", "service")):
        assert_one_line_error(run_fleet(*args, cwd=tmp_path), "fleet schedule needs Redis")


@pytest.mark.parametrize("name", ["..", ".", "a/b", ".state", "-x"])
def test_odd_schedule_names_are_refused(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, GOOD.replace("[schedules.nightly]", f'[schedules."{name}"]'))
    with pytest.raises(ScheduleError, match="schedule name"):
        load_schedules(path)


def test_a_fire_message_whose_schedule_name_is_a_path_is_refused() -> None:
    """The service takes a fire's schedule from the control queue; its name makes the state file's path."""
    from pydantic import ValidationError

    from harness.schedule.config import Schedule

    with pytest.raises(ValidationError, match="schedule name"):
        Schedule.model_validate({"name": "../../../tmp/x", "cron": "0 2 * * *", "inventory": "/x.toml",
                                 "label": "nightly"})
