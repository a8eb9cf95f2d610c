"""The harness's exception tree.

Every error the harness raises on purpose is a ``FleetError``. Errors from the libraries underneath
(paramiko, socket, Celery, kombu, redis, HTTP, TOML, pydantic) are translated at the boundary where
they happen into the most specific class below, chained with ``raise ... from exc``, and carry the
context a user needs (file and key, host, cell). The CLI prints any ``FleetError`` as one line and
exits with its ``exit_code``; it never prints a traceback for one.

::

    FleetError                       exit 1
    ├── InputError                   exit 2   bad input from the user: nothing was run
    │   ├── InventoryError                    inventory file: file, key path, problem
    │   ├── CatalogError                      prompt item or round: file, key path, problem
    │   ├── UsageError                        a bad argument or an unknown host / item / agent / sweep
    │   ├── TranscriptError                   a transcript or raw session that cannot be read
    │   │   └── TranscriptImportError         a recorded session an importer cannot read (file, key, problem)
    │   ├── PolicyError                       a guard policy file for replay: file, key path, problem
    │   ├── ScheduleError                     a schedules file (schedules.toml): file, key path, problem
    │   ├── ReplayError                       a replay source, --edit or external guard that cannot be used
    │   └── UnsafeStoredPath                  a stored id or name (sweep.json, journal.jsonl) would make a path
    │                                         outside the sweep's folder, or a stored file is a link out of it
    ├── StoreError                            the results directory cannot be read or written
    │   └── DiskFull                          no space left under it; the sweep is left for resume
    ├── DispatchError                         the queue (broker, result backend) failed
    │   └── BrokerOutage                      it stayed unreachable past FLEET_BROKER_OUTAGE_S; sweep resumable
    ├── SweepInterrupted             exit 130 Ctrl-C, SIGTERM or SIGHUP stopped a sweep; names the id to resume
    ├── NothingMeasured              exit 3   the sweep ran, but every cell ended in a harness failure
    ├── GradeGate                    exit 4   a cell's grade is one of those given to --fail-on
    ├── RegressionGate               exit 4   fleet compare found more regressions than --fail-on-regressions
    └── InfrastructureError                   the fleet failed, not the model: graded HARNESS_FAILURE
        ├── HostUnreachable                   SSH refused, timed out, DNS, auth failed
        ├── HostKeyMismatch                   the host's key is not the pinned one; nothing ran
        ├── HostLost                          the connection died while a run was going
        ├── SupervisionLost                   the agent's run was not supervised to its end (launcher gone, ...)
        ├── AgentNotStarted                   the agent never started (the launcher reported no start in time)
        ├── AgentMissing                      the agent's program is not on the host (not retried)
        ├── AgentUnsuited                     the agent cannot work with the host's setup (not retried)
        ├── AgentUnavailable                  no adapter for the agent's kind in this harness (not retried)
        ├── ModelEndpointFailed               the host's model endpoint failed while the agent ran
        ├── WorkerLost                        the worker running the attempt died
        ├── WorkerError                       the worker raised an unexpected error
        ├── ArtifactCorrupt                   an artifact's bytes did not match its sha256 on arrival
        └── ArtifactRefused                   an artifact name points outside the attempt folder (not retried)

An ``InfrastructureError`` is never shown to a user as a crash: it is recorded on the attempt as
``HARNESS_FAILURE`` with ``reason`` (a short code) and ``str(exc)`` (the human text), and the attempt
is retried a bounded number of times, except where a retry cannot help. Each class's ``reason`` is a code
of ``harness.core.failures.FailureReason``; ``harness.core.failures.REASONS`` says for each code whether it is retried
and why (docs/failures.md).
"""

from __future__ import annotations

import unicodedata

__all__ = [
    "one_line",
    "FleetError",
    "InputError",
    "InventoryError",
    "CatalogError",
    "UsageError",
    "TranscriptError",
    "TranscriptImportError",
    "PolicyError",
    "ScheduleError",
    "ReplayError",
    "UnsafeStoredPath",
    "StoreError",
    "DiskFull",
    "DispatchError",
    "BrokerOutage",
    "SweepInterrupted",
    "NothingMeasured",
    "GradeGate",
    "RegressionGate",
    "InfrastructureError",
    "HostUnreachable",
    "HostKeyMismatch",
    "HostLost",
    "SupervisionLost",
    "AgentNotStarted",
    "AgentMissing",
    "AgentUnsuited",
    "AgentUnavailable",
    "ModelEndpointFailed",
    "WorkerLost",
    "WorkerError",
    "ArtifactCorrupt",
    "ArtifactRefused",
]


def one_line(text: str) -> str:
    """``text`` with every control, format or unassigned character (a newline, ESC, NUL, a right-to-left
    override, a lone surrogate) written as its escape (``\\n``, ``\\x1b``, ``\\u202e``). Error messages quote
    file names, keys and values from the user's input; escaped, the message stays the one line the CLI
    promises, and a name cannot move the cursor, clear the terminal or reverse the text after it."""
    if text.isprintable():
        return text
    return "".join(c if c == " " or not unicodedata.category(c).startswith(("C", "Z")) or c.isprintable()
                   else repr(c)[1:-1] for c in text)


class FleetError(Exception):
    """Base of every error the harness raises on purpose."""

    exit_code: int = 1


class InputError(FleetError):
    """Bad input from the user (a file, an argument): nothing was run."""

    exit_code = 2


class _FileKeyError(InputError):
    """An error in a file at a key path: printed as ``file: key: problem``."""

    def __init__(self, file: str, key: str, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        where = f"{file}: {key}" if key else file
        super().__init__(one_line(f"{where}: {problem}"))

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        # Rebuilt from its parts when it crosses a process boundary (a replay worker's error reaches the CLI).
        return type(self), (self.file, self.key, self.problem)


class InventoryError(_FileKeyError):
    """An inventory file is missing, is not TOML, or does not validate."""


class CatalogError(_FileKeyError):
    """A prompt item or a qualification round is missing or does not validate."""


class UsageError(InputError):
    """A bad argument: unknown host, item, agent or sweep, or options that do not fit together."""


class TranscriptError(_FileKeyError):
    """A transcript or raw session that cannot be read (file, line or row, problem)."""


class TranscriptImportError(TranscriptError):
    """A recorded session that an importer cannot read: not JSON, a missing or mistyped key, an entry it
    does not understand. ``key`` is the JSON path, e.g. ``calls[3].tool`` or ``sessions[1].calls``."""


class PolicyError(_FileKeyError):
    """A guard policy file (``fleet replay --policy``) that is missing, not TOML, or does not validate."""


class ScheduleError(_FileKeyError):
    """A schedules file (``fleet schedule``) is missing, is not TOML, or does not validate."""


class ReplayError(_FileKeyError):
    """A replay source, edit or external guard that cannot be used (file or guard, where, problem)."""


class UnsafeStoredPath(_FileKeyError):
    """A crafted or damaged store: an id or name read from one of its files (a cell id with ``../``, an absolute
    path, a NUL, a sweep.json naming another sweep) would make a path outside the sweep's folder, or a folder or
    record file in it is a symbolic link that leads out. Nothing is read or written through it; the line names
    the file and the key."""


class StoreError(FleetError):
    """The results directory cannot be read or written."""


class DiskFull(StoreError):
    """No space is left on the device of the results directory (or of the embedded queue beside it). The sweep
    stopped at once, nothing half-written is left, and ``fleet resume`` completes it once there is room."""


class DispatchError(FleetError):
    """The queue failed: the broker or the result backend cannot be reached or answered wrongly."""


class BrokerOutage(DispatchError):
    """The broker or result backend stayed unreachable longer than ``FLEET_BROKER_OUTAGE_S``. The sweep is left
    ``interrupted`` with its attempts in flight still ``dispatched``: ``fleet resume`` takes their results."""


class SweepInterrupted(FleetError):
    """A sweep was stopped by Ctrl-C, SIGTERM or SIGHUP. What was in flight was revoked and recorded; the
    sweep is ``interrupted`` and ``fleet resume ID`` continues it."""

    exit_code = 130

    def __init__(self, sweep_id: str, how: str, *, resumable: bool = True) -> None:
        self.sweep_id = sweep_id
        self.how = how
        if resumable:
            text = f"interrupted ({how}); continue with `fleet resume {sweep_id}`"
        else:
            text = f"interrupted ({how}) before anything was dispatched; nothing was kept"
        super().__init__(text)


class NothingMeasured(FleetError):
    """The sweep ran to its end, but no cell was measured: every one ended in a harness failure."""

    exit_code = 3


class GradeGate(FleetError):
    """``--fail-on``: at least one cell's grade is one of the grades the user gates on."""

    exit_code = 4


class RegressionGate(FleetError):
    """``fleet compare --fail-on-regressions N``: more than N cell groups regressed from the baseline."""

    exit_code = 4


class InfrastructureError(FleetError):
    """The fleet failed, not the model. Recorded as HARNESS_FAILURE and retried.

    ``reason`` is a short, stable code used in reports and queries; the message is for people.
    """

    reason: str = "infrastructure"

    def __init__(self, message: str, *, host: str | None = None) -> None:
        self.host = host
        super().__init__(f"{host}: {message}" if host else message)


class HostUnreachable(InfrastructureError):
    """SSH could not connect or authenticate: refused, timed out, name unknown, auth failed."""

    reason = "host_unreachable"


class HostKeyMismatch(InfrastructureError):
    """The host presented a key that is not the pinned one. No command ran on it."""

    reason = "host_key_mismatch"


class HostLost(InfrastructureError):
    """The connection to the host died while an attempt was running."""

    reason = "host_lost"


class SupervisionLost(InfrastructureError):
    """The agent's run was not supervised to its end: its launcher on the host died first, a later delivery of
    the same attempt or host slot ended it, or no heartbeat came from the worker within the bound and the
    launcher ended it. Nothing was measured; retried."""

    reason = "supervision_lost"


class AgentNotStarted(InfrastructureError):
    """The agent never started: the launcher did not report a start in time, or the command is missing."""

    reason = "agent_not_started"


class AgentMissing(InfrastructureError):
    """The agent's program is not installed on the host (not on its PATH). Not retried: it will not appear
    by itself; ``fleet hosts check`` reports it."""

    reason = "agent_missing"


class AgentUnsuited(InfrastructureError):
    """The agent cannot run with this host's setup (e.g. Hermes with a model context under its minimum).
    Not retried: nothing changes until the inventory does."""

    reason = "agent_unsuited"


class WorkerLost(InfrastructureError):
    """The Celery worker that ran the attempt died before reporting a result."""

    reason = "worker_lost"


class WorkerError(InfrastructureError):
    """The worker raised an error the attempt lifecycle did not turn into a record itself."""

    reason = "worker_error"


class AgentUnavailable(InfrastructureError):
    """This harness version has no adapter for the agent's ``kind``. Not retried."""

    reason = "agent_unavailable"


class ModelEndpointFailed(InfrastructureError):
    """The host's model endpoint failed while the agent ran (HTTP errors, refused, timed out)."""

    reason = "model_endpoint"


class ArtifactCorrupt(InfrastructureError):
    """An artifact arrived whose bytes do not match its recorded size and sha256."""

    reason = "artifact_corrupt"


class ArtifactRefused(InfrastructureError):
    """A worker sent an artifact whose name points outside the attempt folder (or at meta.json). Not retried."""

    reason = "artifact_refused"
