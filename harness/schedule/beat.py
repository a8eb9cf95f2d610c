"""``fleet schedule run``: Celery beat firing each schedule.

Beat only sends: each fire is one ``fleet.fire_schedule`` message on the control queue (workers/app.py routes it),
carrying the schedule's definition and the fire time. The coordinator service consumes it and runs the sweep, so
restarting beat loses no sweep, and a fire sent while the service is down waits in Redis until it starts.

Beat keeps each schedule's last fire time in a state file (``--state``, default ``<runs>/.schedules/beat-state``):
a night missed while beat was down fires once when it starts again, as Celery's persistent scheduler does.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from celery.apps.beat import Beat
from celery.beat import PersistentScheduler
from celery.schedules import schedule as every

from harness.schedule.config import ScheduleFile, cron_fields
from harness.schedule.cron import zoned_crontab
from harness.core.settings import Settings
from workers.app import TASK_FIRE_SCHEDULE, configure

__all__ = ["zoned_crontab", "beat_schedule", "run_beat", "FiringScheduler"]


class FiringScheduler(PersistentScheduler):
    """Celery's persistent scheduler, stamping each fire with its time (the service logs and reports it)."""

    def send_task(self, name: str, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        kwargs = {**(kwargs or {}), "fired_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        return super().send_task(name, args, kwargs, **options)


def beat_schedule(file: ScheduleFile, namespace: str) -> dict[str, dict[str, Any]]:
    """Celery's beat_schedule for the file: one entry per schedule, sending its definition."""
    out: dict[str, dict[str, Any]] = {}
    for name, s in file.schedules.items():
        when: Any = (every(timedelta(seconds=s.every_s)) if s.every_s is not None
                     else zoned_crontab(s.timezone, *cron_fields(s.cron)))
        out[f"fleet.schedule.{name}"] = {
            "task": TASK_FIRE_SCHEDULE, "schedule": when, "args": (),
            "kwargs": {"schedule": s.model_dump(mode="json"), "namespace": namespace, "file": file.path},
        }
    return out


def run_beat(file: ScheduleFile, settings: Settings, state: Path, loglevel: str = "INFO") -> None:
    """Run beat in this process until it is stopped (SIGTERM, Ctrl-C)."""
    app = configure(settings)
    shortest = min((s.every_s for s in file.schedules.values() if s.every_s is not None), default=None)
    app.conf.update(
        beat_schedule=beat_schedule(file, settings.namespace),
        # Beat sleeps until the next fire, at most this long; the test-only every_s needs a short nap.
        beat_max_interval=min(60.0, shortest / 2) if shortest else 60.0,
        timezone="UTC",
        enable_utc=True,
    )
    state.parent.mkdir(parents=True, exist_ok=True)
    Beat(app=app, schedule=str(state), scheduler=FiringScheduler, loglevel=loglevel, quiet=True).run()
