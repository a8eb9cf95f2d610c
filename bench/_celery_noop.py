"""A Celery app with one task that does nothing: the raw Celery round trip ``bench_attempt.py`` measures as part of
the floor (the same Redis broker and result backend the harness uses, a solo worker, no harness code)."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("bench_noop", broker=os.environ["BENCH_REDIS_URL"], backend=os.environ["BENCH_REDIS_URL"])
app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True)


@app.task(name="bench.noop")
def noop() -> dict:
    return {}
