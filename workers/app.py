"""The Celery app: one import-light module, JSON only, one routing table.

Two modes, the same code path:
- distributed: ``FLEET_BROKER_URL=redis://...`` (results in the same Redis unless
  ``FLEET_RESULT_BACKEND`` says otherwise); workers run anywhere with ``fleet worker``.
- embedded (nothing configured): kombu's SQLAlchemy transport on SQLite under ``<runs>/.queue/`` and
  an in-process worker started by the coordinator. Not ``task_always_eager``: tasks go through a
  real broker, a real consumer and a real result backend.

Every host has its own queue, ``fleet.<namespace>.host.<name>``; ``route`` is the one routing table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from celery import Celery

__all__ = ["app", "Settings", "configure", "queue_for", "route", "TASK_RUN_ATTEMPT", "redact"]

TASK_RUN_ATTEMPT = "fleet.run_attempt"
TASKS = (TASK_RUN_ATTEMPT,)


def redact(url: str) -> str:
    """A URL fit for logs and records: the password replaced."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


@dataclass(frozen=True)
class Settings:
    """Where the queue lives. Built from the environment or the CLI, never stored with secrets."""

    broker_url: str
    backend_url: str
    namespace: str = ""
    embedded_dir: str = ""
    visibility_timeout_s: int = 6 * 3600

    @property
    def embedded(self) -> bool:
        return bool(self.embedded_dir)

    @property
    def mode(self) -> str:
        return "embedded" if self.embedded else "redis"

    @classmethod
    def resolve(cls, runs_dir: str | Path, broker_url: str | None = None, namespace: str | None = None) -> "Settings":
        broker = broker_url or os.environ.get("FLEET_BROKER_URL", "")
        ns = namespace if namespace is not None else os.environ.get("FLEET_NAMESPACE", "")
        vt = int(os.environ.get("FLEET_VISIBILITY_TIMEOUT", 6 * 3600))
        if broker:
            backend = os.environ.get("FLEET_RESULT_BACKEND", "") or broker
            return cls(broker_url=broker, backend_url=backend, namespace=ns, visibility_timeout_s=vt)
        qdir = Path(runs_dir).resolve() / ".queue"
        qdir.mkdir(parents=True, exist_ok=True)
        return cls(
            broker_url=f"sqla+sqlite:///{qdir / 'broker.sqlite'}",
            backend_url=f"db+sqlite:///{qdir / 'results.sqlite'}",
            namespace=ns,
            embedded_dir=str(qdir),
            visibility_timeout_s=vt,
        )


def queue_for(host: str, namespace: str = "") -> str:
    return f"fleet.{namespace}.host.{host}" if namespace else f"fleet.host.{host}"


def route(name: str, args: tuple, kwargs: dict, options: dict, task=None, **kw) -> dict | None:  # noqa: ANN001
    """The routing table: an attempt goes to its host's queue."""
    if name == TASK_RUN_ATTEMPT:
        request = args[0] if args else kwargs["request"]
        return {"queue": queue_for(request["host"]["name"], request.get("namespace", ""))}
    return None


app = Celery("fleet", include=["workers.tasks"])
# Pool threads resolve a task's app through the default app: make it ours, or they see no backend.
app.set_default()
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_accept_content=["json"],
    task_acks_late=True,
    # A pool child that dies takes its task with it: the task fails with WorkerLostError, which the
    # coordinator records as a harness failure and retries as a new attempt. A whole worker that dies
    # never acks, so the broker delivers the task again (after the visibility timeout on Redis).
    task_reject_on_worker_lost=False,
    worker_prefetch_multiplier=1,
    task_track_started=True,
    result_extended=True,
    result_expires=7 * 24 * 3600,
    task_routes=(route,),
    task_default_queue="fleet.default",
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=3,
)


def configure(settings: Settings) -> Celery:
    """Point the app at a broker and result backend."""
    # kombu's SQLAlchemy transport hands every transport option to create_engine(): give it none.
    options = {} if settings.embedded else {"visibility_timeout": settings.visibility_timeout_s}
    app.conf.update(
        broker_url=settings.broker_url,
        result_backend=settings.backend_url,
        broker_transport_options=options,
        result_backend_transport_options=options,
    )
    os.environ["FLEET_NAMESPACE"] = settings.namespace
    if settings.embedded:
        os.environ["FLEET_EMBEDDED_DIR"] = settings.embedded_dir
    else:
        os.environ.pop("FLEET_EMBEDDED_DIR", None)
        os.environ["FLEET_BROKER_URL"] = settings.broker_url
    return app


def _configure_from_env() -> None:
    broker = os.environ.get("FLEET_BROKER_URL", "")
    embedded = os.environ.get("FLEET_EMBEDDED_DIR", "")
    if broker:
        configure(Settings.resolve(".", broker))
    elif embedded:
        configure(Settings.resolve(Path(embedded).parent))


_configure_from_env()
