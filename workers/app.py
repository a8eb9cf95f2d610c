"""The Celery app: one import-light module, JSON only, one routing table.

Two modes, the same code path (``harness.core.settings.Settings`` says which):
- distributed: a broker URL (``--broker`` / ``FLEET_BROKER_URL``, ``redis://...``); workers run anywhere with
  ``fleet worker``.
- embedded (no broker given): kombu's SQLAlchemy transport on SQLite under ``<runs>/.queue/`` and
  an in-process worker started by the coordinator. Not ``task_always_eager``: tasks go through a
  real broker, a real consumer and a real result backend.

``configure(settings)`` is the one explicit call that points this process at its queue and gives its tasks
their settings (slot leases, start timeout); no setting travels through the environment.

Every host has its own queue, ``fleet.<namespace>.host.<name>``; ``route`` is the one routing table. Scheduled
fires (``fleet schedule run``, Celery beat) go to the control queue, ``fleet.<namespace>.control``, which the
coordinator service (``fleet schedule service``) consumes itself: no Celery worker runs that task.
"""

from __future__ import annotations

import math

from celery import Celery

from harness.core.settings import Settings, redact

__all__ = ["app", "configure", "control_queue", "current_settings", "queue_for", "route", "TASK_FIRE_SCHEDULE",
           "TASK_RUN_ATTEMPT", "TASKS", "WAITING", "redact"]

TASK_RUN_ATTEMPT = "fleet.run_attempt"
WAITING = "WAITING"
"""The attempt task's own progress state: a worker took it and waits for its host's slot (workers/tasks.py), which
the host's attempt in front gives back when its agent ended. Not running yet; taken, so its queue has a worker."""
TASKS = (TASK_RUN_ATTEMPT,)
TASK_FIRE_SCHEDULE = "fleet.fire_schedule"
"""Sent by beat, read by the coordinator service from the control queue (harness/schedule/service.py)."""

_settings: Settings | None = None


def queue_for(host: str, namespace: str = "") -> str:
    return f"fleet.{namespace}.host.{host}" if namespace else f"fleet.host.{host}"


def control_queue(namespace: str = "") -> str:
    return f"fleet.{namespace}.control" if namespace else "fleet.control"


def route(name: str, args: tuple, kwargs: dict, options: dict, task=None, **kw) -> dict | None:  # noqa: ANN001
    """The routing table: an attempt goes to its host's queue, a schedule's fire to the control queue."""
    if name == TASK_FIRE_SCHEDULE:
        return {"queue": control_queue(kwargs.get("namespace", ""))}
    if name == TASK_RUN_ATTEMPT:
        request = args[0] if args else kwargs["request"]
        return {"queue": queue_for(request["host"]["name"], request.get("namespace", ""))}
    return None


app = Celery("fleet", include=["workers.tasks"])
# Celery's Redis result backend, each state of a task stored in one round trip instead of two (workers/resultbackend.py).
app.loader.override_backends = {**app.loader.override_backends, "redis": "workers.resultbackend:RedisBackend",
                                "rediss": "workers.resultbackend:RedisBackend"}
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
    task_track_started=True,  # fleet.run_attempt stores its own (workers/tasks.py)
    # Not extended: the backend keeps a task's state and result only, never its arguments (an agent's env may
    # hold an API key, and a revoked task's row would keep it).
    result_extended=False,
    result_expires=7 * 24 * 3600,
    task_routes=(route,),
    task_default_queue="fleet.default",
    worker_hijack_root_logger=False,
    worker_send_task_events=False,
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=3,
)


def configure(settings: Settings, *, worker: bool = False) -> Celery:
    """Point the app at a broker and result backend, and hand this process's tasks their settings.

    Called by ``fleet worker`` before the worker starts (pool processes fork from it and keep them), with
    ``worker=True``, and by the coordinator before it dispatches or starts the embedded worker (whose threads
    share them)."""
    global _settings
    if settings.embedded:
        from workers.sqlitebroker import register  # lazy: SQLAlchemy (190 ms), for the embedded broker only

        register()
        settings.queue_dir.mkdir(parents=True, exist_ok=True)
    # kombu's SQLAlchemy transport hands every transport option to create_engine(): give it none.
    options = {} if settings.embedded else {"visibility_timeout": settings.visibility_timeout_s}
    backend_options: dict[str, object] = dict(options)
    outage = math.ceil(settings.broker_outage_s)
    if worker and not settings.embedded:
        # A result finished while Redis is away must not be lost: storing it (and the STARTED state) is tried
        # again for as long as the coordinator waits (FLEET_BROKER_OUTAGE_S), about once a second. Celery's own
        # default gives up after 20 tries; the coordinator would then wait for a result that never comes.
        backend_options["retry_policy"] = {"max_retries": outage + 5, "interval_start": 0, "interval_step": 0.5,
                                           "interval_max": 1}
    previous_backend, previous_broker = app.conf.result_backend, app.conf.broker_url
    app.conf.update(
        broker_url=settings.celery_broker,
        result_backend=settings.celery_backend,
        broker_transport_options=options,
        result_backend_transport_options=backend_options,
        # The coordinator reads results itself and waits out an outage where it can say so (harness.coordinator.outage); a
        # worker retries every backend call (its reads before it stores a result too) for that long.
        result_backend_always_retry=worker and not settings.embedded,
        result_backend_max_retries=2 * outage + 10,  # the sleeps are random, up to 1 s: about 0.5 s each
        result_backend_base_sleep_between_retries_ms=250,
        result_backend_max_sleep_between_retries_ms=1000,
        # A worker is a service: it reconnects to a broker that went away for as long as it takes (the
        # coordinator keeps its bound), instead of shutting down after a few tries.
        broker_connection_max_retries=None if worker else 3,
    )
    if previous_backend != settings.celery_backend:
        # The app builds its result backend on first use and keeps it: configured again in one process (a test, a
        # service running sweeps with other settings), it went on storing and reading results in the first one.
        # (Celery keeps it app-wide when it is thread-safe, else per thread: this thread's is dropped.)
        app._backend_cache = None
        vars(app._local).pop("backend", None)
    if previous_broker != settings.celery_broker:
        # The same for the broker: the app keeps the connection and producer pools of its first send, and an embedded
        # sweep after a Redis one sent its attempts to Redis, where nobody consumed them (what Celery does after a fork).
        app._pool = None
        amqp = vars(app).get("amqp")
        if amqp is not None:
            amqp._producer_pool = None
    _settings = settings
    return app


def current_settings() -> Settings:
    """The settings ``configure`` gave this process; a worker nobody configured has no broker and gets no task."""
    if _settings is None:
        raise RuntimeError("workers.app.configure() was not called: start workers with `fleet worker`")
    return _settings
