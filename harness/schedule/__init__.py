"""Schedules: sweeps that run themselves (docs/schedules.md).

``config`` reads ``schedules.toml``; ``beat`` is ``fleet schedule run`` (Celery beat sending each fire to the control
queue); ``service`` is ``fleet schedule service`` (the coordinator service running the fired sweeps); ``summary``
is what the notification (harness/schedule/notify.py) carries.
"""

from harness.schedule.config import Schedule, ScheduleFile, load_schedules, next_fire

__all__ = ["Schedule", "ScheduleFile", "load_schedules", "next_fire"]
