"""Every setting of the harness, resolved in one ordered place: defaults < environment < command-line flags.

``Settings.resolve(cli_options, environ)`` is the only code that reads a ``FLEET_*`` variable that configures
the harness (the few that are a contract with other processes are listed in :data:`CONTRACT_VARIABLES`,
each with why). Each field declares its variable, its flag, its default, which process reads it and what
it means; ``docs/settings.md`` documents exactly these fields (a test keeps them equal), and ``fleet
settings`` prints the resolved values and where each came from, secrets redacted.

Nothing passes settings through ``os.environ``: the coordinator hands its ``Settings`` to the Coordinator,
and a worker gets its own through ``workers.app.configure`` (``fleet worker`` at start, the coordinator
before it starts the embedded worker).

A bad value is a :class:`~harness.core.errors.UsageError` (exit 2) whose one line names the variable or flag.
An empty variable or flag counts as not given, as it always has.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from harness.core.timebudget import AttemptBudget
from harness.core.errors import UsageError

__all__ = ["CONTRACT_VARIABLES", "Origin", "ReadBy", "Settings", "SettingSpec", "is_redis_url", "redact", "setting_specs"]

Origin = Literal["default", "env", "flag"]
ReadBy = Literal["coordinator", "worker", "both"]

_SECRET_QUERY_KEYS = frozenset({"password", "passwd", "pass", "token", "secret"})


def is_redis_url(url: str) -> bool:
    """Whether redis-py opens this broker or backend URL itself (``redis``, ``rediss``, ``unix``)."""
    return url.split("://", 1)[0].lower() in ("redis", "rediss", "unix")


def redact(url: str) -> str:
    """A URL fit for logs and records: a password in its user part or its query replaced by ``***``.

    kombu reads ``a;b`` as a failover list of broker URLs: each is redacted (only the first was, and the
    second's password was printed by ``fleet settings`` and the broker check).
    """
    if not url:
        return url
    if ";" in url:
        return ";".join(_redact_one(part) for part in url.split(";"))
    return _redact_one(url)


def _redact_one(url: str) -> str:
    if not url:
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL we can take apart (a bad port ...): show nothing of it that could be secret
        return "***" if "@" in url or "password" in url.lower() else url
    netloc = parts.netloc
    if password:
        user, _, host = netloc.rpartition("@")
        name = user.partition(":")[0]
        netloc = f"{name}:***@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in _SECRET_QUERY_KEYS for k, _ in pairs):
            query = urlencode([(k, "***" if k.lower() in _SECRET_QUERY_KEYS else v) for k, v in pairs], safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


# -- parsers: text of a variable or flag -> the typed value, or ValueError with what was expected ---------------------

def _text(raw: str) -> str:
    return raw


_NAMESPACE = re.compile(r"[A-Za-z0-9_.:-]+")


def _namespace(raw: str) -> str:
    # It becomes part of queue names (a worker's --queues is a comma-separated list) and Redis keys.
    if not _NAMESPACE.fullmatch(raw):
        raise ValueError("expected letters, digits, '.', '_', ':' or '-' (it names queues and slot leases)")
    return raw


def _url(raw: str) -> str:
    if "://" not in raw or not urlsplit(raw).scheme:
        raise ValueError("expected a URL such as redis://host:6379/0")
    if any(c.isspace() or not c.isprintable() for c in raw):
        # "redis://h:6379/0 extra" (a pasted line) was read by redis-py as db 0 of h and by kombu otherwise.
        raise ValueError("a URL has no spaces or control characters (percent-encode them in a password: %20)")
    return raw


def _path(raw: str) -> Path:
    return Path(raw)


def _folder(raw: str) -> Path:
    # A results directory that names a file failed later as "cannot create FILE: File exists", far from the flag.
    path = Path(raw)
    if path.is_symlink() and not path.exists():
        # A dangling link: mkdir cannot make it ("File exists"), and readers said "no sweeps yet".
        raise ValueError("a link to nothing (create its target, or name the directory itself)")
    if path.exists() and not path.is_dir():
        raise ValueError("not a directory (the results directory holds one folder per sweep)")
    return path


def _whole(least: int, unit: str) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"expected a whole number of {unit}") from None
        if value < least:
            raise ValueError(f"expected a whole number of {unit}, at least {least}")
        return value

    return parse


def _port(raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError("expected a TCP port, 1 to 65535") from None
    if not 1 <= value <= 65535:
        raise ValueError("expected a TCP port, 1 to 65535")
    return value


def _seconds(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("expected a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("expected a number of seconds greater than 0")
    return value


def _backoff(raw: str) -> tuple[float, ...]:
    try:
        delays = tuple(float(x) for x in raw.split(","))
    except ValueError:
        raise ValueError("expected seconds separated by commas") from None
    if any(not math.isfinite(d) or d < 0 for d in delays):
        raise ValueError("expected seconds separated by commas, none negative")
    return delays


@dataclass(frozen=True)
class SettingSpec:
    """How one setting is given and what it means (``fields(Settings)`` metadata; ``docs/settings.md`` lists them)."""

    name: str
    env: str | None
    flag: str | None
    read_by: ReadBy
    doc: str
    parse: Callable[[str], Any]
    secret: bool = False
    """A URL that may hold a password: shown only through :func:`redact`."""
    default_text: str = ""
    """How the default reads in docs and ``fleet settings`` when the value itself says too little."""


def _setting(default: Any, *, env: str | None = None, flag: str | None = None, read_by: ReadBy, doc: str,
             parse: Callable[[str], Any], secret: bool = False, default_text: str = "") -> Any:
    # The spec's name is filled in from the field's name by setting_specs().
    spec = SettingSpec("", env, flag, read_by, doc, parse, secret, default_text)
    return field(default=default, metadata={"spec": spec})


@dataclass(frozen=True)
class Settings:
    """The resolved settings of one ``fleet`` process. Build it with :meth:`resolve`; never stored with secrets."""

    runs: Path = _setting(
        Path("runs"), env="FLEET_RUNS", flag="--runs", read_by="coordinator", parse=_folder,
        doc="The results directory (sweeps, attempts, index.sqlite; the embedded broker in its .queue/).")
    """The results directory."""
    broker_url: str = _setting(
        "", env="FLEET_BROKER_URL", flag="--broker", read_by="both", parse=_url, secret=True,
        default_text="embedded (SQLite under RUNS/.queue/, worker in-process)",
        doc="The Celery broker, e.g. redis://host:6379/0; empty means the embedded default.")
    """The Celery broker; empty: the embedded default."""
    result_backend: str = _setting(
        "", env="FLEET_RESULT_BACKEND", read_by="both", parse=_url, secret=True,
        default_text="the broker",
        doc="Where workers leave results, with a Redis broker (the embedded default always uses SQLite beside its broker).")
    """The Celery result backend; empty: the broker."""
    namespace: str = _setting(
        "", env="FLEET_NAMESPACE", read_by="both", parse=_namespace, default_text="none",
        doc="Keeps several fleets apart on one broker: queues are fleet.NAMESPACE.host.NAME, slot leases fleet:NAMESPACE:slots:NAME.")
    """Queue and slot-lease namespace."""
    visibility_timeout_s: int = _setting(
        6 * 3600, env="FLEET_VISIBILITY_TIMEOUT", read_by="both", parse=_whole(1, "seconds"),
        doc="Seconds before Redis delivers a task again whose worker died without acknowledging it (longer than any attempt).")
    """Redis redelivery delay for unacknowledged tasks."""
    slots_url: str = _setting(
        "", env="FLEET_SLOTS_URL", read_by="worker", parse=_url, secret=True,
        default_text="the broker, when it is Redis",
        doc="The Redis that holds host slot leases; without a Redis one, slots are file locks on the worker's machine.")
    """Redis for slot leases; empty: the broker if it is Redis."""
    slot_ttl_s: float = _setting(
        30.0, env="FLEET_SLOT_TTL", read_by="worker", parse=_seconds,
        doc="Seconds a slot lease lives without a heartbeat: how soon a dead worker's slot frees.")
    """Lifetime of an unrenewed slot lease."""
    start_timeout_s: float = _setting(
        AttemptBudget.start_s, env="FLEET_START_TIMEOUT", read_by="worker", parse=_seconds,
        doc="Seconds the agent has to start on its host, else the attempt is HARNESS_FAILURE (agent_not_started).")
    """How long the lifecycle waits for the agent to start."""
    broker_outage_s: float = _setting(
        300.0, env="FLEET_BROKER_OUTAGE_S", read_by="both", parse=_seconds,
        doc="Seconds a Redis broker or result backend may stay unreachable: the coordinator waits (back-off 0.5 s "
            "doubling to 5 s) and then leaves the sweep interrupted for resume; a worker retries storing a result as long.")
    """How long an outage of the queue is ridden out."""
    no_worker_timeout_s: float | None = _setting(
        None, env="FLEET_NO_WORKER_TIMEOUT", flag="--no-worker-timeout", read_by="coordinator", parse=_seconds,
        default_text="none (wait for a worker)",
        doc="Seconds a host's queue may have no worker consuming it while attempts wait there (sweep, rerun, resume "
            "on Redis); then the host's cells still to run are recorded as HARNESS_FAILURE (no_worker).")
    """How long attempts wait on a queue that no worker consumes."""
    heartbeat_timeout_s: float = _setting(
        120.0, env="FLEET_HEARTBEAT_TIMEOUT", read_by="worker", parse=_seconds,
        doc="Seconds the launcher on a host lets an agent run without a heartbeat from its worker before it ends the "
            "agent's whole process tree itself (a dead worker, pool process or SSH link never leaves one running longer).")
    """How long an agent runs on without its worker's heartbeat."""
    retry_backoff_s: tuple[float, ...] = _setting(
        (5.0, 30.0, 120.0), env="FLEET_RETRY_BACKOFF", read_by="coordinator", parse=_backoff,
        doc="Seconds to wait before each retry of a harness failure (the last repeats), comma-separated.")
    """Back-off before retries of a harness failure."""
    max_attempts: int = _setting(
        3, flag="--max-attempts", read_by="coordinator", parse=_whole(1, "attempts"),
        doc="Attempts per cell when the harness fails (sweep, rerun, resume).")
    """Attempts per cell on harness failures."""
    model_port: int | None = _setting(
        None, env="FLEET_MODEL_PORT", flag="--model-port", read_by="coordinator", parse=_port,
        default_text="the inventory's, else a free one",
        doc="The port the coordinator serves a scripted model on (the embedded default's), in place of the one in "
            "the host's model.base_url; without it a busy port is replaced by a free one (two sweeps on one machine).")
    """Where the scripted model listens."""
    log_file: Path | None = _setting(
        None, env="FLEET_LOG_FILE", flag="--log-file", read_by="coordinator", parse=_path, default_text="none",
        doc="A file that sweep, rerun and resume append their log to (the resolved settings first).")
    """Where sweep, rerun and resume append their log."""
    replay_guard_timeout_s: float = _setting(
        60.0, env="FLEET_REPLAY_GUARD_TIMEOUT", read_by="coordinator", parse=_seconds,
        doc="Seconds an external replay guard (fleet replay --policy cmd:... or git:...) has to answer each message "
            "of the replay protocol (docs/replay-protocol.md), else the replay stops with one error line.")
    """How long ``fleet replay`` waits for each answer of an external guard."""

    origins: Mapping[str, Origin] = field(default_factory=dict, compare=False, repr=False)
    """Where each setting's value came from (not a setting itself)."""

    # -- resolution ----------------------------------------------------------------------------------------------
    @classmethod
    def resolve(cls, cli_options: Mapping[str, object | None] | None = None,
                environ: Mapping[str, str] | None = None) -> "Settings":
        """Defaults, then the environment's ``FLEET_*`` variables, then the flags given (``None`` or ``""``: not
        given), each value parsed and checked. A bad value raises UsageError naming its variable or flag."""
        cli = dict(cli_options or {})
        env = environ or {}
        specs = {s.name: s for s in setting_specs()}
        unknown = sorted(set(cli) - set(specs))
        if unknown:
            raise TypeError(f"not a setting: {', '.join(unknown)}")  # a programming error, not the user's
        values: dict[str, Any] = {}
        origins: dict[str, Origin] = {}
        for f in dataclasses.fields(cls):
            spec = specs.get(f.name)
            if spec is None:
                continue
            origin: Origin = "default"
            value = f.default
            raw = env.get(spec.env, "") if spec.env else ""
            if raw != "":
                value, origin = _parse(spec, raw, "env"), "env"
            given = cli.get(f.name)
            if given is not None and str(given) != "":
                value, origin = _parse(spec, str(given), "flag"), "flag"
            values[f.name] = value
            origins[f.name] = origin
        return cls(**values, origins=origins)

    # -- what the rest of the harness asks ------------------------------------------------------------------------
    @property
    def embedded(self) -> bool:
        """No broker given: Celery on SQLite under the results directory, with a worker inside ``fleet``."""
        return not self.broker_url

    @property
    def queue_dir(self) -> Path:
        """The embedded broker's folder (and its slot locks)."""
        return self.runs.resolve() / ".queue"

    @property
    def celery_broker(self) -> str:
        # workers/sqlitebroker.py: kombu's SQLite transport, polled every 0.1 s instead of every second.
        return f"fleet-sqla+sqlite:///{self.queue_dir / 'broker.sqlite'}" if self.embedded else self.broker_url

    @property
    def celery_backend(self) -> str:
        if self.embedded:
            return f"db+sqlite:///{self.queue_dir / 'results.sqlite'}"
        return self.result_backend or self.broker_url

    @property
    def slots_redis(self) -> str:
        """The Redis URL of the slot leases, or "" for file locks."""
        url = self.slots_url or self.broker_url
        return url if url.startswith(("redis://", "rediss://", "unix://")) else ""

    @property
    def slots_dir(self) -> Path:
        """Where file-lock slots live: beside the embedded broker, else in this machine's cache."""
        return (self.queue_dir if self.embedded else Path.home() / ".cache" / "fleet-harness") / "slots"

    # -- showing ---------------------------------------------------------------------------------------------------
    def shown(self, name: str) -> str:
        """The value of one setting as text, a secret redacted."""
        spec = _spec(name)
        value = getattr(self, name)
        if value is None:
            return ""
        if isinstance(value, tuple):
            return ",".join(f"{v:g}" for v in value)
        if isinstance(value, float):
            return f"{value:g}"
        text = str(value)
        return redact(text) if spec.secret else text

    def origin(self, name: str) -> str:
        """``default``, ``env FLEET_<NAME>`` or ``flag --x``: where the value came from."""
        spec = _spec(name)
        how = self.origins.get(name, "default")
        if how == "env":
            return f"env {spec.env}"
        if how == "flag":
            return f"flag {spec.flag}"
        return "default"

    def rows(self, read_by: ReadBy | None = None) -> list[tuple[str, str, str]]:
        """(name, value, origin) of every setting, or of those a ``coordinator`` or a ``worker`` reads."""
        return [(s.name, self.shown(s.name), self.origin(s.name)) for s in setting_specs()
                if read_by is None or s.read_by in (read_by, "both")]

    def one_line(self, read_by: ReadBy | None = None) -> str:
        """The settings for a log, on one line, secrets redacted."""
        parts = []
        for name, value, origin in self.rows(read_by):
            parts.append(f"{name}={value or '-'}" + ("" if origin == "default" else f" ({origin})"))
        return "settings: " + ", ".join(parts)


def _parse(spec: SettingSpec, raw: str, how: Origin) -> Any:
    try:
        return spec.parse(raw)
    except ValueError as exc:
        shown = _masked(raw) if spec.secret else raw
        given = f"{spec.env}={shown!r}" if how == "env" else f"{spec.flag} {shown!r}"
        raise UsageError(f"{given}: {exc}") from None


def _masked(raw: str) -> str:
    """A bad secret value for an error line: what is before an ``@`` may be a password even when the text is no
    URL that redact() can take apart, so it is never shown."""
    text = redact(raw)
    if "@" in text:
        scheme, sep, rest = text.rpartition("://")
        text = f"{scheme}{sep}***@{rest.rpartition('@')[2]}"
    return text


def setting_specs() -> list[SettingSpec]:
    """Every setting, in the order of the Settings fields."""
    out = []
    for f in dataclasses.fields(Settings):
        spec = f.metadata.get("spec")
        if spec is not None:
            out.append(dataclasses.replace(spec, name=f.name))
    return out


def _spec(name: str) -> SettingSpec:
    for s in setting_specs():
        if s.name == name:
            return s
    raise KeyError(name)


CONTRACT_VARIABLES: dict[str, str] = {
    "FLEET_WORKSPACE": "set by the harness for each acceptance-check process on the host (the path of the "
                       "attempt's workspace); the check's conftest reads it there, so it is an interface to that "
                       "process, not a setting of this one",
    "FLEET_CHROMIUM": "read by the web check process that runs on the host (python -m workers.host.webcheck): it "
                      "says where that host's Chromium is, which only the host's own environment can know",
    "FLEET_HARNESS_COMMIT": "names the code itself, not how to run it: read wherever harness code records its "
                            "commit (coordinator, worker, a host installed from a tarball), and by tests that pin it",
    "FLEET_AGENT_MARK": "set by the launcher in each agent's environment to a random value per delivery, so that the "
                        "launcher finds every process of the agent's tree on the host (even one that left its "
                        "session); nothing reads it as a setting",
    "FLEET_AGENTS_CACHE": "read only by the test suite (tests/agents/conftest.py, .ci/run): where the real agents "
                          "are installed for the agent tests; no harness code reads it",
    "FLEET_DASHBOARD_TOKEN": "read only by `fleet dashboard` (as --token): the secret that allows grade overrides; "
                             "kept out of the settings so that no listing ever holds it, and out of argv (ps)",
}
"""``FLEET_*`` variables that are not settings, by design, and why (docs/settings.md repeats this)."""
