"""Send a scheduled sweep's summary: POST it as JSON to a webhook, and/or give it on stdin to a command.

A notification that fails (connection refused, a non-2xx answer, a command that exits non-zero or hangs) is
tried again after ``backoff_s``, doubled before each next try, ``retries`` times; every failure is logged, and
the last one too, but nothing here raises: a notification is never fatal to the sweep it tells of.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from typing import Callable

from harness.errors import one_line
from harness.schedule.config import Notify
from harness.schedule.summary import SweepSummary

__all__ = ["notify", "post_webhook", "run_command"]


def post_webhook(url: str, body: bytes, timeout_s: float) -> None:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "fleet-harness"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the operator's own URL
            resp.read()
    except urllib.error.HTTPError as exc:
        raise OSError(f"HTTP {exc.code} {exc.reason}") from None


def run_command(argv: list[str], body: bytes, timeout_s: float) -> None:
    try:
        done = subprocess.run(argv, input=body, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise OSError(f"did not finish in {timeout_s:g} s") from None
    except OSError as exc:
        raise OSError(exc.strerror or str(exc)) from None
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:] or [""]
        raise OSError(f"exited {done.returncode}" + (f": {tail[0][:200]}" if tail[0] else ""))


def _redacted(url: str) -> str:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    # A webhook URL often carries its token in the path or query: log only where it goes.
    return f"{u.scheme}://{u.hostname}{f':{u.port}' if u.port else ''}/..."


def notify(config: Notify, summary: SweepSummary, log: Callable[[str], None],
           sleep: Callable[[float], None] = time.sleep) -> dict[str, bool]:
    """Send ``summary`` to each configured target; returns target -> delivered."""
    body = summary.model_dump_json().encode()
    targets: list[tuple[str, Callable[[], None]]] = []
    if config.webhook:
        targets.append((f"webhook {_redacted(config.webhook)}",
                        lambda: post_webhook(config.webhook, body, config.timeout_s)))
    if config.command:
        targets.append((f"command {config.command[0]}", lambda: run_command(config.command, body, config.timeout_s)))
    out = {}
    for what, send in targets:
        delay = config.backoff_s
        for attempt in range(1, config.retries + 2):
            try:
                send()
            except Exception as exc:  # noqa: BLE001 - any failure of one try is logged and tried again
                problem = one_line(str(exc) or type(exc).__name__)
                if attempt > config.retries:
                    log(f"schedule {summary.schedule}: notification to {what} failed {attempt} time(s), giving up: {problem}")
                    out[what] = False
                    break
                log(f"schedule {summary.schedule}: notification to {what} failed (try {attempt} of "
                    f"{config.retries + 1}): {problem}; trying again in {delay:g} s")
                sleep(delay)
                delay *= 2
            else:
                log(f"schedule {summary.schedule}: notified {what}" + (f" (try {attempt})" if attempt > 1 else ""))
                out[what] = True
                break
    return out
