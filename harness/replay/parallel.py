"""Replay every session under every policy, in parallel over cores (docs/replay.md).

Sessions are split into chunks handed to worker processes (``--jobs``, default: the machine's cores); each worker
starts its own guards (an external guard process per worker and policy, reused for all its sessions) and the
outcomes come back in session order. A guard's or an input's error in a worker is the same one line as in one
process.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence

from harness.replay.engine import replay_session
from harness.replay.outcome import ReplayOutcome
from harness.replay.policies import PolicySpec
from harness.replay.session import ReplaySession

__all__ = ["replay_all", "default_jobs"]

_worker_specs: list[PolicySpec] = []
_shared_sessions: Sequence[ReplaySession] = ()
"""Set before the pool forks: the workers read their chunks from here, so no session is pickled to them."""


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _replay_chunk(sessions: Sequence[ReplaySession], specs: Sequence[PolicySpec]) -> list[list[ReplayOutcome]]:
    return [[replay_session(s, spec.guard_for(s), spec.name) for spec in specs] for s in sessions]


def _close_worker_specs() -> None:
    for spec in _worker_specs:
        spec.close()


def _terminated(signum: int, frame: object) -> None:
    # The command ends its workers with SIGTERM (an error, a stop signal): their guards end with them, even one
    # that would not exit when its input closes.
    for spec in _worker_specs:
        spec.kill()
    os._exit(128 + signum)


def _init(specs: list[PolicySpec]) -> None:
    global _worker_specs
    # Ctrl-C reaches the whole process group: only the command's own process acts on it (it ends the workers);
    # a worker interrupted mid-chunk would only race it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminated)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    _worker_specs = [spec.for_worker() for spec in specs]
    import multiprocessing.util  # lazy: as in replay_all; the parent loaded it before forking

    # A worker that ends normally closes its guards, as the command's own process does.
    multiprocessing.util.Finalize(None, _close_worker_specs, exitpriority=10)


def _work(span: tuple[int, int]) -> list[list[ReplayOutcome]]:
    out = _replay_chunk(_shared_sessions[span[0]:span[1]], _worker_specs)
    for spec in _worker_specs:
        spec.check_quiet(0.01)
    return out


def replay_all(sessions: Sequence[ReplaySession], specs: Sequence[PolicySpec], jobs: int | None = None,
               progress: Callable[[int, int], None] | None = None) -> list[list[ReplayOutcome]]:
    """Per session (in order), its outcome under each policy (in order)."""
    jobs = default_jobs() if jobs is None else max(1, jobs)
    total = len(sessions)
    if jobs == 1 or total < 2 * jobs:
        out = []
        for n, session in enumerate(sessions, start=1):
            out.extend(_replay_chunk([session], specs))
            if progress is not None:
                progress(n, total)
        for spec in specs:
            spec.check_quiet(0.05)
        return out
    # Here, not at the top: a replay of a few sessions runs in this process, and multiprocessing (with pickle) is
    # a few milliseconds of its start.
    import multiprocessing  # lazy: for many sessions only

    global _shared_sessions
    size = max(1, min(256, total // (jobs * 4)))
    spans = [(i, min(total, i + size)) for i in range(0, total, size)]
    results: list[list[ReplayOutcome]] = []
    # fork: the workers start with the sessions and policies already in memory (nothing re-imported, re-read or
    # pickled on the way in); only the outcomes travel back.
    _shared_sessions = sessions
    pool = multiprocessing.get_context("fork").Pool(jobs, initializer=_init, initargs=(list(specs),))
    try:
        for chunk in pool.imap(_work, spans):
            results.extend(chunk)
            if progress is not None:
                progress(len(results), total)
        pool.close()
    except BaseException:
        # An error in a worker, or a stop signal here: no worker goes on (terminate ends them; their guard
        # processes see their input close and exit).
        pool.terminate()
        raise
    finally:
        pool.join()
        _shared_sessions = ()
    return results
