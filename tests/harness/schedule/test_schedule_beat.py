"""Beat's side of schedules: each fire is routed to the control queue, and a cron entry keeps its zone through
beat's state file (entries are pickled there and read back when beat starts again)."""

from __future__ import annotations

import pickle
from datetime import datetime, timezone
from pathlib import Path

from harness.schedule import load_schedules
from harness.schedule.beat import beat_schedule, zoned_crontab
from workers.app import TASK_FIRE_SCHEDULE, app, control_queue

EXAMPLE = Path(__file__).resolve().parents[3] / "inventory" / "schedules.example.toml"


def test_a_fire_goes_to_the_control_queue_of_its_namespace() -> None:
    entries = beat_schedule(load_schedules(EXAMPLE), "team-a")
    entry = entries["fleet.schedule.nightly"]
    assert entry["task"] == TASK_FIRE_SCHEDULE
    assert entry["kwargs"]["schedule"]["name"] == "nightly" and entry["kwargs"]["namespace"] == "team-a"
    options = app.amqp.router.route({}, TASK_FIRE_SCHEDULE, args=(), kwargs=entry["kwargs"])
    assert getattr(options["queue"], "name", options["queue"]) == control_queue("team-a") == "fleet.team-a.control"


def test_a_zoned_crontab_keeps_its_zone_through_beats_state_file() -> None:
    c = pickle.loads(pickle.dumps(zoned_crontab("Europe/Berlin", "0", "2", "*", "*", "*")))
    assert isinstance(c, zoned_crontab) and c.zone == "Europe/Berlin"
    # Last fired 2026-07-01 00:00 UTC (02:00 Berlin summer time): the next is 24 h later, at 02:00 Berlin again.
    last = datetime(2026, 7, 1, 0, 0, tzinfo=timezone.utc)
    assert last + c.remaining_delta_from(last) == datetime(2026, 7, 2, 0, 0, tzinfo=timezone.utc)
    # A crontab read in the app's zone (UTC) would fire at 02:00 UTC instead: the zone is what makes the difference.
    assert zoned_crontab("UTC", "0", "2", "*", "*", "*").remaining_delta_from(last).total_seconds() == 2 * 3600
