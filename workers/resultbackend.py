"""Celery's Redis result backend, storing a task's state in one command instead of two.

Celery stores each state of a task (STARTED, then the result) with a GET of the state stored before, so that a
result already SUCCESS is never overwritten (a redelivered task of a lost worker), then a pipelined SET and PUBLISH:
two round trips to Redis on the path of every attempt, twice (a worker's STARTED before the attempt, its result
after it, which the coordinator waits on to send the host's next attempt). Here the check, the SET and the PUBLISH
are one Lua script: one round trip each, and the check and the write are one atomic step (Celery's GET and SET leave
a window in which another worker's result can come between them).

Only JSON results without compression are stored so (the script reads the stored state with cjson): the harness's
own configuration (workers/app.py). Any other falls back to Celery's own path, and so does a store over a stored state
the script does not read (see STORE_UNLESS_SUCCESS). Redis 2.6+ (Lua, cjson); the harness asks for 3.2+ already
(docs/settings.md).
"""

from __future__ import annotations

from typing import Any

from celery import states
from celery.backends.redis import RedisBackend as _CeleryRedisBackend
from celery.exceptions import BackendStoreError
from kombu.utils.encoding import bytes_to_str

__all__ = ["READ_AT_MOST", "RedisBackend", "STORE_UNLESS_SUCCESS"]

STORE_UNLESS_SUCCESS = """
local stored = redis.call('GET', KEYS[1])
if stored then
  if string.len(stored) > tonumber(ARGV[3]) then
    return -1
  end
  local ok, meta = pcall(cjson.decode, stored)
  if not ok or type(meta) ~= 'table' or type(meta['status']) ~= 'string' then
    return -1
  end
  if meta['status'] == 'SUCCESS' then
    return 0
  end
  if ARGV[4] == '1' and (meta['status'] == 'FAILURE' or meta['status'] == 'REVOKED') then
    return 0
  end
end
local expires = tonumber(ARGV[2])
if expires > 0 then
  redis.call('SETEX', KEYS[1], expires, ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
"""
"""KEYS[1] the task's key, ARGV[1] its new meta (JSON), ARGV[2] the expiry in seconds (0: none), ARGV[3] the largest
stored value the script reads, ARGV[4] "1" when the new state is a progress state (STARTED, RETRY: not final). Stores
and publishes the meta unless the state stored is SUCCESS (what Celery's _store_result checks, in one step), or, for a
progress state, any final state (SUCCESS, FAILURE, REVOKED: a STARTED stored late, beside the task, after the task was
revoked or failed, must not make it look running again): 1 if stored, 0 if not. -1, and nothing written, when the stored value is one the
script does not read: larger than ARGV[3] (decoding it would hold Redis, which serves no one else meanwhile), or not
a task's JSON meta (compressed by a worker with result_compression, or anything else): Celery's own path decides
then, as it always did."""

READ_AT_MOST = 256 * 1024
"""The largest stored state the script decodes (a few milliseconds of Redis's time). A late store over a larger one (a
result, stored already, of a task delivered again) takes Celery's path, which decodes it here."""


class RedisBackend(_CeleryRedisBackend):
    """Celery's Redis backend (``redis://``, ``rediss://``), with ``_store_result`` as one script call, and no
    subscription of the sender to each task's result (``on_task_call``)."""

    _store_script: Any = None

    def on_task_call(self, producer: Any, task_id: str) -> None:
        """Nothing: Celery's subscribes the sender to the task's result channel here, for ``AsyncResult.get()``. The
        coordinator never calls it: it waits on its own subscription (``harness.coordinator.wakeup``) and reads results with GET.
        Celery's subscription only cost each send a SUBSCRIBE (and each result an UNSUBSCRIBE when it was dropped) and
        had Redis push every result to a connection nobody read, where they piled up."""

    def _store_result(self, task_id: str, result: Any, state: str, traceback: Any = None, request: Any = None,
                      **kwargs: Any) -> Any:
        if self.serializer != "json" or self.compression:
            return super()._store_result(task_id, result, state, traceback=traceback, request=request, **kwargs)
        meta = self._get_result_meta(result=result, state=state, traceback=traceback, request=request)
        meta["task_id"] = bytes_to_str(task_id)
        value = self.encode(meta)
        if isinstance(value, str) and len(value) > self._MAX_STR_VALUE_SIZE:
            raise BackendStoreError("value too large for Redis backend", state=state, task_id=task_id)
        expires = self.failure_expires if state == states.FAILURE else self.expires
        key = self.get_key_for_task(task_id)
        progress = state not in states.READY_STATES
        if self.ensure(self._store_unless_success, (key, value, int(expires or 0), progress)) < 0:
            return super()._store_result(task_id, result, state, traceback=traceback, request=request, **kwargs)
        return result

    def _store_unless_success(self, key: bytes | str, value: str | bytes, expires: int, progress: bool = False) -> int:
        if self._store_script is None:
            # Registered once per backend: redis-py sends EVALSHA, and the script itself when Redis does not know it
            # (a restarted server).
            self._store_script = self.client.register_script(STORE_UNLESS_SUCCESS)
        return int(self._store_script(keys=[key], args=[value, expires, READ_AT_MOST, "1" if progress else "0"]))
