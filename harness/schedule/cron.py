"""A cron expression read in its schedule's own IANA time zone: Celery's ``crontab`` reads the app's zone.

Apart from beat (``harness.schedule.beat``) because the schedules file (``harness.schedule.config``) needs it too,
to say when a schedule fires next (``fleet schedule list``), without starting beat.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from celery.schedules import crontab

__all__ = ["zoned_crontab"]


class zoned_crontab(crontab):  # noqa: N801 - named like celery's own schedule classes
    """A crontab read in its own IANA zone, whatever the beat process's zone (celery's reads the app's)."""

    def __init__(self, zone: str, minute: str, hour: str, day_of_month: str, month_of_year: str,
                 day_of_week: str) -> None:
        super().__init__(minute=minute, hour=hour, day_of_week=day_of_week, day_of_month=day_of_month,
                         month_of_year=month_of_year)
        self.zone = zone

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    def __reduce__(self) -> Any:
        # Beat pickles entries into its state file: the zone must come back with them.
        return (zoned_crontab, (self.zone, self._orig_minute, self._orig_hour, self._orig_day_of_month,
                                self._orig_month_of_year, self._orig_day_of_week))

    def remaining_delta_from(self, now: datetime) -> timedelta:
        """From ``now`` to the next fire after it."""
        start, delta, _ = self.remaining_delta(now)
        return (start + delta) - now
