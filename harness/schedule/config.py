"""``schedules.toml``: the sweeps that run themselves (docs/schedules.md documents every key).

A schedule names when (a cron expression read in an IANA time zone), what (inventory, hosts, items or round,
agents, repeat, label), what a late night does (``on_late``: skip or queue) and what follows each sweep (report,
compare with the previous sweep of the label, notify). Relative paths are read from the schedules file's folder,
so the file means the same thing whichever directory beat and the service start in. ``schedules_json`` is
``fleet schedule list --json``: the schedules read, each with its next fire time.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.coordinator.plan import new_sweep_id
from harness.core.errors import ScheduleError, UsageError
from harness.schedule.cron import zoned_crontab
from harness.core.tomlfile import FieldProblem, read_toml, validate
from harness.views.jsonout import CLI_JSON_SCHEMA_VERSION

__all__ = ["SCHEDULES_SCHEMA_VERSION", "After", "Notify", "Schedule", "ScheduleFile", "load_schedules", "cron_fields",
           "next_fire", "schedules_json"]

SCHEDULES_SCHEMA_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class After(_Strict):
    """What follows each sweep of the schedule."""

    report: bool = Field(True, description="Write REPORT.md, junit.xml and results.json into the sweep's folder.")
    compare: bool = Field(True, description="Compare with the previous sweep of the same label (needs a label).")


class Notify(_Strict):
    """Where the summary of each sweep goes: a webhook (JSON POST) and/or a command (JSON on stdin)."""

    webhook: str = Field("", description="http(s) URL the summary is POSTed to as JSON.")
    command: list[str] = Field(default_factory=list,
                               description="argv of a program run with the summary on stdin (no shell).")
    retries: int = Field(3, ge=0, le=20, description="Tries after the first when a notification fails.")
    backoff_s: float = Field(5.0, gt=0, le=3600, description="Wait before the first retry; doubled before each next.")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="How long one try may take.")

    @field_validator("webhook")
    @classmethod
    def _http(cls, v: str) -> str:
        if v and not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} is not an http:// or https:// URL")
        if v:
            # Checked here, not first at night: a URL whose host or port cannot be read failed every notification
            # of the schedule, after its sweep, without one retry.
            try:
                u = urlsplit(v)
                host, _port = u.hostname, u.port
            except ValueError as exc:
                raise ValueError(f"{v!r} is not a valid URL ({exc})") from None
            if not host:
                raise ValueError(f"{v!r} names no host")
        return v

    @field_validator("command")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if v and not v[0]:
            raise ValueError("the program (first element) is empty")
        return v


def cron_fields(expr: str) -> tuple[str, str, str, str, str]:
    """The five fields of a cron expression (minute hour day-of-month month day-of-week), each checked."""
    parts = expr.split()
    if len(parts) != 5:
        raise ValueError(f"{expr!r}: a cron expression has 5 fields (minute hour day-of-month month day-of-week), "
                         f"not {len(parts)}")
    minute, hour, dom, month, dow = parts
    try:
        crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow)
    except Exception as exc:  # noqa: BLE001 - celery's parser raises ValueError or its own ParseException
        raise ValueError(f"{expr!r}: not a valid cron expression ({exc})") from None
    return minute, hour, dom, month, dow


class Schedule(_Strict):
    """One schedule: when, what, and what follows."""

    name: str = Field("", description="The schedule's name: its table's key (filled in on load).")
    cron: str = Field("", description="Cron expression, minute hour day-of-month month day-of-week.")
    timezone: str = Field("UTC", description="IANA time zone the cron expression is read in, e.g. Europe/Berlin.")
    every_s: float | None = Field(None, ge=1, le=366 * 86400, allow_inf_nan=False,
                                  description="For tests only: fire every N seconds (1 to a year) instead of cron.")
    # Below 1 s beat naps half the shortest period between checks: a busy loop flooding the control queue. Above
    # a year (or inf) it is no timedelta: `fleet schedule list` and beat ended in an OverflowError traceback.
    inventory: str = Field(description="Inventory TOML (relative to the schedules file's folder).")
    prompts: str = Field("", description="Prompts directory (default: the bundled prompts/).")
    hosts: list[str] | None = Field(None, description="Host names (default: every host of the inventory).")
    items: list[str] | None = Field(None, description="Open prompts by number or id.")
    round: str | None = Field(None, description="A qualification round's name (prompts/rounds/NAME.toml).")
    agents: list[str] | None = Field(None, description="Agents, each a dimension of the matrix (default: each host's first).")
    repeat: int = Field(1, ge=1, le=1000, description="Repetitions of every cell.")
    label: str = Field("", description="The sweeps' label; `compare` compares with the previous sweep of it.")
    max_attempts: int | None = Field(None, ge=1, le=100, description="Attempts per cell on harness failures.")
    on_late: Literal["skip", "queue"] = Field(
        "skip", description="A fire while this schedule's previous sweep still runs: skip it, or run it after.")
    after: After = Field(default_factory=After)
    notify: Notify = Field(default_factory=Notify)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            # ZoneInfo also opens the zone folder's "localtime" (the machine's own zone) and "posixrules": zones
            # that mean another thing on each machine beat may run on.
            if v.lower() in ("localtime", "posixrules"):
                raise ValueError(v)
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v!r} is not a known IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)") from None
        return v

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        if v:
            cron_fields(v)
        return v

    @field_validator("label")
    @classmethod
    def _label(cls, v: str) -> str:
        try:
            new_sweep_id(v)  # the sweep id is made from it: refused here, not at every fire
        except UsageError:
            raise ValueError(f"{v!r}: use letters, digits, '.', '_' and '-' (at most 64), starting with a letter or "
                             "digit (it becomes part of each sweep's id)") from None
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        # A fire from the control queue carries its schedule whole: its name makes the state file's path.
        if v and not _name_ok(v):
            raise ValueError(f"schedule name {v!r}: use letters, digits, '-', '_' and '.', starting with a letter or digit")
        return v

    @field_validator("hosts", "items", "agents")
    @classmethod
    def _names(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or any(not n.strip() for n in v)):
            raise ValueError("an empty list or an empty name; leave the key out to mean all")
        return v

    @model_validator(mode="after")
    def _when(self) -> "Schedule":
        if bool(self.cron) == (self.every_s is not None):
            raise FieldProblem("cron", "give exactly one of cron (a cron expression) and every_s (tests only)")
        if self.after.compare and not self.label:
            raise FieldProblem("label", "after.compare compares with the previous sweep of the label: give a label, "
                               "or set after.compare = false")
        return self

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def when(self) -> str:
        """How the schedule fires, in words for `fleet schedule list` and the logs."""
        return f"every {self.every_s:g} s" if self.every_s is not None else f"{self.cron} ({self.timezone})"


class ScheduleFile(_Strict):
    schema_version: Literal[1] = Field(description="Version of this file's format.")
    schedules: dict[str, Schedule] = Field(description="The schedules, by name.")
    path: str = Field("", description="The file this was read from (filled in on load).")

    @field_validator("schedules")
    @classmethod
    def _some(cls, v: dict[str, Schedule]) -> dict[str, Schedule]:
        if not v:
            raise ValueError("no schedule: add a [schedules.NAME] table")
        for name in v:
            if not _name_ok(name):
                raise ValueError(f"schedule name {name!r}: use letters, digits, '-', '_' and '.', starting with a letter or digit")
        return v


def _name_ok(name: str) -> bool:
    # Starting with a letter or digit: the service's own files beside the state files begin with a dot
    # (.state.lock; a schedule ".state" would take that lock as its run lock and be skipped at every fire).
    return (bool(name) and name[0].isascii() and name[0].isalnum()
            and all(c.isascii() and (c.isalnum() or c in "-_.") for c in name))


def load_schedules(path: str | Path) -> ScheduleFile:
    """Read and check a schedules file; paths in it become absolute (relative to the file's folder)."""
    file = Path(path)
    data = read_toml(file, ScheduleError)
    if "path" in data:
        raise ScheduleError(str(file), "path", "unknown key")
    for name, table in (data.get("schedules") or {}).items():
        if isinstance(table, dict) and "name" in table:
            raise ScheduleError(str(file), f"schedules.{name}.name", "unknown key (the table's key is the name)")
    parsed = validate(ScheduleFile, data, str(file), ScheduleError)
    base = file.resolve().parent
    for name, s in parsed.schedules.items():
        s.name = name
        s.inventory = str((base / s.inventory).resolve())
        if s.prompts:
            s.prompts = str((base / s.prompts).resolve())
    parsed.path = str(file)
    return parsed


def next_fire(schedule: Schedule, now: datetime | None = None) -> datetime:
    """When the schedule fires next after ``now`` (aware, in the schedule's zone)."""
    now = (now or datetime.now(timezone.utc)).astimezone(schedule.zone())
    if schedule.every_s is not None:
        return now + timedelta(seconds=schedule.every_s)
    c = zoned_crontab(schedule.timezone, *cron_fields(schedule.cron))
    return (now + c.remaining_delta_from(now)).astimezone(schedule.zone())


def schedules_json(parsed: ScheduleFile, fires: list[tuple[Schedule, datetime]]) -> dict[str, Any]:
    """``fleet schedule list --json``: ``{schema_version, file, schedules: [{name, when, next, label, inventory,
    on_late}]}``, ``fires`` each schedule with its next fire time (``next_fire``), in the file's order."""
    return {"schema_version": CLI_JSON_SCHEMA_VERSION, "file": parsed.path, "schedules": [
        {"name": s.name, "when": s.when(), "next": n.isoformat(timespec="seconds"), "label": s.label,
         "inventory": s.inventory, "on_late": s.on_late} for s, n in fires]}
