"""A task broker on Redis Streams, and the Redis task store that other brokers can use.

Keys, under ``prefix`` and the queue name (in braces, so a queue's keys share one Redis Cluster
slot): ``{queue}:stream``, the tasks, read by the consumer group ``workers``; ``{queue}:dead``,
the dead-letter stream; and ``{queue}:t:<task id>``, one hash per task holding its state,
attempt counters, lease deadline, result and error.

Every step that changes a task is one Lua script, so the stream and the task's hash never
disagree: submit (``XADD`` plus the hash, skipped if the id exists), begin an attempt (counts
it; dead-letters the task when its attempts are spent), heartbeat (``XCLAIM`` to reset the
entry's idle time, plus the lease deadline), settle (the result or failure, ``XACK`` and
``XDEL``; refused unless the attempt is the newest and the task has not ended), cancel. Entries
of a dead worker are taken over with ``XAUTOCLAIM`` once idle for a lease (each handle looks every
quarter lease, or every second if sooner); a task handed back or retried is added again as a new
entry, so every worker sees it at once. Lease deadlines use the Redis server's clock.

Durability is the server's: with ``appendonly yes`` and ``appendfsync always`` a task is on disk
before ``submit`` returns; with ``everysec`` up to a second of submits can be lost on power loss.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from typing import Any

from daimon.core.codec import dumps, loads
from daimon.core.errors import BuilderError, SerializationError
from daimon.core.optional import require
from daimon.core.results import ApprovalDecision
from daimon.core.tasks import AgentTask, DeadLetter, TaskPause, TaskResult, TaskState, TaskStatus
from daimon.kit.task_records import (
    BrokerBoundary,
    SettleByTaskId,
    SettlingDelivery,
    check_dead_letter_limit,
    check_options,
    dead_letter_attempts,
    dead_letter_task,
    decide_through,
)

aioredis = require("redis.asyncio", extra="redis")
redis_exceptions = require("redis.exceptions", extra="redis")
redis_retry = require("redis.asyncio.retry", extra="redis")
redis_backoff = require("redis.backoff", extra="redis")

__all__ = ("RedisBroker", "RedisTaskStore")

_log = logging.getLogger("daimon.distributed")

_GROUP = "workers"
_DAY = 86_400.0
_SERVICE_ERRORS = (redis_exceptions.RedisError, OSError)
"""What redis-py raises when Redis fails or cannot be reached: raised as BrokerError."""

# Shared by the scripts below. KEYS[1] is the task's hash; KEYS[2] and KEYS[3], when given, the
# stream and the dead-letter stream (a store used by another broker passes the hash alone).
_LIB = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function ack(group, entry)
  if #KEYS > 1 and entry ~= '' then
    redis.call('XACK', KEYS[2], group, entry)
    redis.call('XDEL', KEYS[2], entry)
  end
end
local function expire(ttl)
  if tonumber(ttl) > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
end
local function dead_letter(group, entry, task_id, payload, err, ttl)
  redis.call('HSET', KEYS[1], 'state', 'failed', 'error', err)
  if #KEYS > 2 then
    local spent = tonumber(redis.call('HGET', KEYS[1], 'attempt') or '0')
                  - tonumber(redis.call('HGET', KEYS[1], 'released') or '0')
    redis.call('XADD', KEYS[3], '*', 'id', task_id, 'task', payload, 'error', err,
               'attempts', spent)
  end
  ack(group, entry)
  expire(ttl)
end
local function requeue(group, entry, task_id, payload, not_before)
  -- A new entry, so every worker's XREADGROUP sees the task at once; one read before
  -- not_before is parked (see park) until then.
  redis.call('HSET', KEYS[1], 'lease', not_before)
  if #KEYS > 1 then
    ack(group, entry)
    redis.call('HSET', KEYS[1], 'entry',
               redis.call('XADD', KEYS[2], '*', 'id', task_id, 'task', payload))
  end
end
local function park(group, entry, consumer, not_before, lease_ms, now)
  -- Leave the entry in this consumer's pending list with an idle time that makes XAUTOCLAIM
  -- take it again at not_before (or after a lease, whichever is sooner).
  if #KEYS > 1 and entry ~= '' then
    local idle = math.max(0, tonumber(lease_ms) - math.max(0, not_before - now))
    redis.call('XCLAIM', KEYS[2], group, consumer, 0, entry, 'IDLE', idle, 'JUSTID')
  end
end
"""

# ARGV: task id, payload. Returns 1 when queued, 0 when the id was already known.
_SUBMIT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local entry = ''
if #KEYS > 1 then
  entry = redis.call('XADD', KEYS[2], '*', 'id', ARGV[1], 'task', ARGV[2])
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempt', 0, 'released', 0, 'lease', 0,
           'entry', entry)
return 1
"""

# ARGV: group, entry, consumer, lease ms, max_deliver, ttl ms, payload, task id, lease text.
# Returns {outcome, value}: run (attempt), busy (ms left), dead, skip.
_BEGIN = (
    _LIB
    + """
local now = now_ms()
local s = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'released', 'lease', 'error')
local state = s[1]
if not state or state == 'completed' or state == 'failed' or state == 'cancelled'
   or state == 'paused' then  -- a paused task waits for the message its decide sends
  ack(ARGV[1], ARGV[2])
  return {'skip', 0}
end
local attempt, released, lease = tonumber(s[2]), tonumber(s[3]), tonumber(s[4])
if lease > now then
  -- Leased by a live attempt (a duplicate delivery), or a retry waiting for its delay.
  if state == 'pending' then park(ARGV[1], ARGV[2], ARGV[3], lease, ARGV[4], now) end
  return {'busy', lease - now}
end
local spent = attempt - released
if spent >= tonumber(ARGV[5]) then
  local why
  if state == 'running' then
    why = 'attempt ' .. attempt .. ' was lost: no heartbeat within the ' .. ARGV[9] ..
          's lease (its worker crashed or hung)'
  else
    why = 'last error: ' .. (s[5] or '')
  end
  dead_letter(ARGV[1], ARGV[2], ARGV[8], ARGV[7],
              'dead-lettered after ' .. spent .. ' attempts; ' .. why, ARGV[6])
  return {'dead', 0}
end
attempt = attempt + 1
redis.call('HSET', KEYS[1], 'state', 'running', 'attempt', attempt, 'lease', now + ARGV[4])
redis.call('HDEL', KEYS[1], 'paused')
return {'run', attempt}
"""
)

# ARGV: group, entry, consumer, attempt, lease ms. Returns 1 (renewed), 2 (cancelled), 0 (lost).
_HEARTBEAT = (
    _LIB
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'attempt')
if tonumber(s[2]) ~= tonumber(ARGV[4]) then return 0 end
if s[1] ~= 'running' then
  if s[1] == 'cancelled' then return 2 end
  return 0
end
redis.call('HSET', KEYS[1], 'lease', now_ms() + ARGV[5])
if #KEYS > 1 then redis.call('XCLAIM', KEYS[2], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID') end
return 1
"""
)

# ARGV: group, entry, consumer, attempt, action (complete, pause, fail, retry, release), result,
# pause or error, max_deliver, delay ms, lease ms, ttl ms, payload, task id.
# Returns ok, paused, requeued, released, dead, stale or ended.
_SETTLE = (
    _LIB
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'released', 'result', 'paused')
local attempt = tonumber(ARGV[4])
if tonumber(s[2]) ~= attempt then return 'stale' end
local action = ARGV[5]
if s[1] ~= 'running' then
  ack(ARGV[1], ARGV[2])
  -- the same complete or pause again (its first answer was lost): the first's outcome
  if action == 'complete' and s[1] == 'completed' and s[4] == ARGV[6] then return 'ok' end
  if action == 'pause' and s[1] == 'paused' and s[5] == ARGV[6] then return 'paused' end
  return 'ended'
end
if action == 'complete' then
  redis.call('HSET', KEYS[1], 'state', 'completed', 'result', ARGV[6])
  redis.call('HDEL', KEYS[1], 'error')
  ack(ARGV[1], ARGV[2])
  expire(ARGV[10])
  return 'ok'
end
if action == 'pause' then
  redis.call('HSET', KEYS[1], 'state', 'paused', 'paused', ARGV[6], 'lease', 0)
  redis.call('HINCRBY', KEYS[1], 'released', 1)
  ack(ARGV[1], ARGV[2])
  return 'paused'
end
local now = now_ms()
if action == 'release' then
  redis.call('HSET', KEYS[1], 'state', 'pending')
  redis.call('HINCRBY', KEYS[1], 'released', 1)
  requeue(ARGV[1], ARGV[2], ARGV[12], ARGV[11], 0)
  return 'released'
end
local err = ARGV[6]
if action == 'retry' then
  local spent = attempt - tonumber(s[3])
  if spent < tonumber(ARGV[7]) then
    redis.call('HSET', KEYS[1], 'state', 'pending', 'error', err)
    requeue(ARGV[1], ARGV[2], ARGV[12], ARGV[11], now + ARGV[8])
    return 'requeued'
  end
  err = 'dead-lettered after ' .. spent .. ' attempts; last error: ' .. err
end
dead_letter(ARGV[1], ARGV[2], ARGV[12], ARGV[11], err, ARGV[10])
return 'dead'
"""
)

# ARGV: group, ttl ms. Returns 1 (cancelled), 0 (had ended), -1 (unknown).
_CANCEL = (
    _LIB
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'entry')
if not s[1] then return -1 end
if s[1] == 'completed' or s[1] == 'failed' or s[1] == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'cancelled')
if s[1] == 'pending' then ack(ARGV[1], s[2] or '') end
expire(ARGV[2])
return 1
"""
)

# Removes a pending task no attempt has begun (its submit could not send it). Returns 1 or 0.
_WITHDRAW = """
local s = redis.call('HMGET', KEYS[1], 'state', 'attempt')
if s[1] ~= 'pending' or tonumber(s[2]) ~= 0 then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

# Returns {state, lease, result, error, now, pause}; state false when unknown.
_STATUS = (
    _LIB
    + """
local s = redis.call('HMGET', KEYS[1], 'state', 'lease', 'result', 'error', 'paused')
return {s[1], s[2], s[3], s[4], now_ms(), s[5]}
"""
)

# A paused task goes back to pending. Returns {1, pause}, {0} (not paused) or {-1} (unknown).
_DECIDE = """
local s = redis.call('HMGET', KEYS[1], 'state', 'paused')
if not s[1] then return {-1} end
if s[1] ~= 'paused' or not s[2] then return {0} end
redis.call('HSET', KEYS[1], 'state', 'pending')
return {1, s[2]}
"""

# ARGV: attempt. Undoes a decide whose message was not sent. Returns 1 or 0.
_UNDECIDE = """
local s = redis.call('HMGET', KEYS[1], 'state', 'attempt', 'paused')
if s[1] ~= 'pending' or tonumber(s[2]) ~= tonumber(ARGV[1]) or not s[3] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'paused')
return 1
"""

# KEYS: stream. ARGV: group, this consumer, idle ms. Deletes consumers with nothing pending that
# are this one or idle that long (a dead worker's); what is pending is never deleted with them.
_FORGET = """
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return 0 end
local dropped = 0
for _, c in ipairs(consumers) do
  local info = {}
  for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
  if info['pending'] == 0 and (info['name'] == ARGV[2] or info['idle'] > tonumber(ARGV[3])) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    dropped = dropped + 1
  end
end
return dropped
"""


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _connect(url: str, max_connections: int) -> Any:
    """A client that reconnects and retries a command up to 3 times when the connection drops.

    Its pool waits for a free connection rather than fail when all ``max_connections`` are busy
    (a worker holds one per blocking read, and many in flight at high concurrency).
    """
    backoff = redis_backoff.ExponentialWithJitterBackoff(cap=1.0, base=0.05)
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=30, retry=redis_retry.Retry(backoff, 3)
    )
    return aioredis.Redis.from_pool(pool)


class RedisTaskStore(BrokerBoundary):
    """Task states, attempts, leases and results in Redis hashes, one per task.

    :class:`RedisBroker` keeps its tasks' states this way; brokers whose service has no
    key-value store (RabbitMQ) take one of these as their ``store``. Every change is one Lua
    script: only the newest attempt of a task may settle it, and it settles once.

    Args:
        client: A ``redis.asyncio.Redis`` (left open by :meth:`aclose`), or a URL such as
            ``"redis://localhost:6379/0"`` (the connection is then this store's to close).
        queue: The queue's name: tasks of different queues never meet.
        prefix: Prefix of every key.
        result_ttl: Seconds an ended task's state and result are kept (``None``: forever).
        max_connections: Connections opened to a URL at most (calls wait for a free one).
    """

    _service_errors = _SERVICE_ERRORS
    _operations = frozenset(
        {
            "create",
            "withdraw",
            "begin",
            "heartbeat",
            "settle",
            "decide",
            "undecide",
            "cancel",
            "status",
        }
    )

    def __init__(
        self,
        client: Any,
        *,
        queue: str = "tasks",
        prefix: str = "daimon:",
        result_ttl: float | None = 7 * _DAY,
        max_connections: int = 64,
    ) -> None:
        if not queue:
            raise BuilderError("queue must not be empty")
        self._owns = isinstance(client, str)
        self._client: Any = _connect(client, max_connections) if isinstance(client, str) else client
        self._base = f"{prefix}{{{queue}}}:"
        self._ttl_ms = round(result_ttl * 1000) if result_ttl else 0
        self._submit = self._client.register_script(_SUBMIT)
        self._begin = self._client.register_script(_BEGIN)
        self._heartbeat = self._client.register_script(_HEARTBEAT)
        self._settle = self._client.register_script(_SETTLE)
        self._cancel = self._client.register_script(_CANCEL)
        self._withdraw = self._client.register_script(_WITHDRAW)
        self._status = self._client.register_script(_STATUS)
        self._decide = self._client.register_script(_DECIDE)
        self._undecide = self._client.register_script(_UNDECIDE)
        self._closed = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisTaskStore:
        """A store on its own connection to ``url``."""
        return cls(url, **options)

    @property
    def client(self) -> Any:
        """The ``redis.asyncio.Redis`` client."""
        return self._client

    def key(self, task_id: str) -> str:
        """The hash that holds a task's state."""
        if not task_id:
            raise BuilderError("a task id must not be empty")
        return f"{self._base}t:{task_id}"

    async def __aenter__(self) -> RedisTaskStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection if this store opened it; safe to call again."""
        if self._owns and not self._closed:
            self._closed = True
            await self._client.aclose()

    async def create(self, task_id: str) -> bool:
        """Record a new pending task; ``False`` when the id is already known."""
        return bool(await self._submit(keys=[self.key(task_id)], args=[task_id, ""]))

    async def withdraw(self, task_id: str) -> bool:
        """Remove a pending record no attempt has begun (its submit failed); whether removed."""
        return bool(await self._withdraw(keys=[self.key(task_id)]))

    async def begin(
        self, task_id: str, *, lease: float, max_deliver: int, payload: str = ""
    ) -> tuple[str, float]:
        """Start an attempt: ``run`` (number), ``skip`` (ended), ``busy`` (lease left), ``dead``."""
        outcome, value = await self._begin(
            keys=[self.key(task_id)],
            args=[
                "",
                "",
                "",
                round(lease * 1000),
                max_deliver,
                self._ttl_ms,
                payload,
                task_id,
                f"{lease:g}",
            ],
        )
        return _text(outcome), float(value) / (1 if _text(outcome) == "run" else 1000)

    async def heartbeat(self, task_id: str, attempt: int, *, lease: float) -> str:
        """Renew the lease: ``ok``, ``cancelled`` or ``lost``."""
        code = await self._heartbeat(
            keys=[self.key(task_id)], args=["", "", "", attempt, round(lease * 1000)]
        )
        return {1: "ok", 2: "cancelled"}.get(int(code), "lost")

    async def settle(
        self,
        task_id: str,
        attempt: int,
        action: str,
        *,
        max_deliver: int,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        lease: float = 30.0,
        paused: TaskPause | None = None,
    ) -> str:
        """End an attempt, and say how it ended (see :func:`daimon.kit.task_records.settle`).

        ``action`` is ``complete`` (with ``result``), ``pause`` (with ``paused``), ``fail``,
        ``retry`` (with ``error``) or ``release``.
        """
        data = _settle_data(result, paused, error)
        outcome = await self._settle(
            keys=[self.key(task_id)],
            args=[
                "",
                "",
                "",
                attempt,
                action,
                data,
                max_deliver,
                round(delay * 1000),
                round(lease * 1000),
                self._ttl_ms,
                "",
                task_id,
            ],
        )
        return _text(outcome)

    async def decide(self, task_id: str) -> TaskPause | None:
        """Move a paused task to pending; the pause it waited with, or ``None`` if not paused."""
        reply = await self._decide(keys=[self.key(task_id)])
        if int(reply[0]) < 0:
            raise KeyError(task_id)
        return loads(reply[1], TaskPause) if int(reply[0]) == 1 else None

    async def undecide(self, task_id: str, attempt: int) -> bool:
        """Put a decided task back to paused, unless an attempt began since."""
        return bool(await self._undecide(keys=[self.key(task_id)], args=[attempt]))

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not ended; :class:`KeyError` when unknown."""
        code = int(await self._cancel(keys=[self.key(task_id)], args=["", self._ttl_ms]))
        if code < 0:
            raise KeyError(task_id)
        return code == 1

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when unknown."""
        return _to_status(task_id, await self._status(keys=[self.key(task_id)]))


def _settle_data(result: TaskResult | None, paused: TaskPause | None, error: str) -> str:
    """What a settle stores: the result, the pause, or the error (as the action says)."""
    if result is not None:
        return dumps(result)
    return dumps(paused) if paused is not None else error


def _to_status(task_id: str, row: list[Any]) -> TaskStatus:
    state, lease, result, error, now, *paused = row
    if state is None:
        raise KeyError(task_id)
    name = _text(state)
    if name == "running" and int(lease or 0) <= int(now):
        name = "pending"  # its worker is gone: the task waits for another one
    pause = paused[0] if paused and name == "paused" else None
    return TaskStatus(
        state=TaskState(name),
        result=loads(result, TaskResult) if result is not None else None,
        error=_text(error) if error is not None else None,
        approvals=loads(pause, TaskPause).approvals if pause is not None else (),
    )


class RedisBroker(SettleByTaskId):
    """Queues tasks in a Redis stream; see the module docstring.

    Args:
        client: A ``redis.asyncio.Redis`` (left open by :meth:`aclose`), or a URL such as
            ``"redis://localhost:6379/0"`` (the connection is then this broker's to close).
        queue: The queue's name.
        prefix: Prefix of every key.
        lease: Seconds a delivery stays leased without a heartbeat (the ``XAUTOCLAIM``
            min-idle time).
        max_deliver: Attempts a task gets before it is dead-lettered.
        result_ttl: Seconds an ended task's state and result are kept (``None``: forever).
        consumer: This handle's consumer name in the group (default: host, pid and a random
            suffix).
        max_connections: Connections opened to a URL at most (calls wait for a free one).
    """

    _service_errors = _SERVICE_ERRORS

    def __init__(
        self,
        client: Any,
        *,
        queue: str = "tasks",
        prefix: str = "daimon:",
        lease: float = 30.0,
        max_deliver: int = 5,
        result_ttl: float | None = 7 * _DAY,
        consumer: str | None = None,
        max_connections: int = 64,
    ) -> None:
        check_options(lease, max_deliver)
        self._store = RedisTaskStore(
            client,
            queue=queue,
            prefix=prefix,
            result_ttl=result_ttl,
            max_connections=max_connections,
        )
        self._client = self._store.client
        self._stream = f"{self._store._base}stream"
        self._dead = f"{self._store._base}dead"
        self._lease = float(lease)
        self._lease_ms = round(lease * 1000)
        self._max_deliver = max_deliver
        self._ttl_ms = self._store._ttl_ms
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        """This handle's consumer name in the group."""
        self._forget = self._client.register_script(_FORGET)
        self._group_ready = False
        self._cursor = "0-0"
        self._next_sweep = 0.0
        self._next_forget = 0.0
        self._held: dict[str, _RedisDelivery] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisBroker:
        """A broker on its own connection to ``url``."""
        return cls(url, **options)

    @property
    def stream(self) -> str:
        """The stream's key."""
        return self._stream

    async def setup(self) -> None:
        """Create the stream and its consumer group if they are missing."""
        try:
            await self._client.xgroup_create(self._stream, _GROUP, id="0", mkstream=True)
        except redis_exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    async def aclose(self) -> None:
        """Leave the group if nothing is pending here, and close the connection if it is ours.

        Deliveries this handle still holds stay leased until their lease runs out.
        """
        if self._store._closed:
            return
        try:
            if self._group_ready:
                await self._forget(keys=[self._stream], args=[_GROUP, self.consumer, 2**62])
        except redis_exceptions.RedisError:
            pass  # best effort: an idle consumer with nothing pending is harmless
        await self._store.aclose()

    async def submit(self, task: AgentTask) -> str:
        """Queue ``task`` (once Redis has it); a task id already known is not queued again."""
        payload = dumps(task)
        if not self._group_ready:
            await self.setup()
        await self._store._submit(
            keys=[self._store.key(task.task_id), self._stream], args=[task.task_id, payload]
        )
        return task.task_id

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when it is unknown (or its result expired)."""
        return await self._store.status(task_id)

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not ended; whether it was cancelled."""
        code = int(
            await self._store._cancel(
                keys=[self._store.key(task_id), self._stream], args=[_GROUP, self._ttl_ms]
            )
        )
        if code < 0:
            raise KeyError(task_id)
        return code == 1

    async def decide(self, task_id: str, decisions: Mapping[str, ApprovalDecision | bool]) -> bool:
        """Send decisions for a paused task: it is queued again to resume; whether it was paused.

        Raises:
            KeyError: The task is unknown.
            BrokerError: The decisions could not be queued; the task is still paused.
        """
        store = self._store

        async def send(payload: str) -> None:
            await self._client.xadd(self._stream, {"id": task_id, "task": payload})

        return await decide_through(task_id, decisions, store.decide, store.undecide, send)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks, by ``XRANGE`` of the dead stream (a read)."""
        entries = await self._client.xrange(self._dead, count=check_dead_letter_limit(limit))
        out = []
        for entry_id, fields in entries:
            reason = _text(fields.get(b"error", b""))
            attempts = fields.get(b"attempts")
            out.append(
                DeadLetter(
                    task=dead_letter_task(fields.get(b"task", b""), _text(fields.get(b"id", b""))),
                    reason=reason,
                    attempts=int(attempts)
                    if attempts is not None
                    else dead_letter_attempts(reason),
                    dead_at=int(_text(entry_id).split("-")[0]) / 1000,
                )
            )
        return out

    async def claim(self, wait: float = 1.0) -> _RedisDelivery | None:
        """The next task: a dead worker's (``XAUTOCLAIM``) or a new one (``XREADGROUP``)."""
        if not self._group_ready:
            await self.setup()
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            now = time.monotonic()
            entry = await self._sweep() if now >= self._next_sweep else None
            if entry is None:
                block = min(deadline - now, max(self._next_sweep - now, 0.001))
                entry = await self._read(block)
            if entry is not None:
                delivery = await self._begin(*entry)
                if delivery is not None:
                    return delivery
                continue
            if time.monotonic() >= deadline:
                return None

    async def _read(self, block: float) -> tuple[str, dict[bytes, bytes]] | None:
        try:
            reply = await self._client.xreadgroup(
                _GROUP,
                self.consumer,
                {self._stream: ">"},
                count=1,
                block=max(round(block * 1000), 1) if block > 0 else None,
            )
        except redis_exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.setup()  # the stream was deleted under us
            return None
        if not reply:
            return None
        entry_id, fields = reply[0][1][0]
        return _text(entry_id), fields

    async def _sweep(self) -> tuple[str, dict[bytes, bytes]] | None:
        """Take one entry idle for a lease from any consumer, walking the pending list."""
        for _ in range(10):
            try:
                cursor, claimed, *_ = await self._client.xautoclaim(
                    self._stream, _GROUP, self.consumer, self._lease_ms, self._cursor, count=1
                )
            except redis_exceptions.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                await self.setup()
                return None
            self._cursor = _text(cursor)
            if claimed:
                entry_id, fields = claimed[0]
                return _text(entry_id), fields
            if self._cursor == "0-0":
                break
        if self._cursor == "0-0":
            self._next_sweep = time.monotonic() + min(self._lease / 4, 1.0)
            if time.monotonic() >= self._next_forget:
                self._next_forget = time.monotonic() + max(self._lease * 10, 600.0)
                idle_ms = round(max(self._lease * 10, 600.0) * 1000)
                await self._forget(keys=[self._stream], args=[_GROUP, "", idle_ms])
        return None

    async def _begin(self, entry_id: str, fields: dict[bytes, bytes]) -> _RedisDelivery | None:
        if b"id" not in fields:  # not ours: drop it
            await self._client.xack(self._stream, _GROUP, entry_id)
            return None
        task_id = _text(fields[b"id"])
        payload = _text(fields.get(b"task", b""))
        try:
            task: AgentTask | None = loads(payload, AgentTask)
        except SerializationError as exc:
            task, error = None, f"SerializationError: {exc}"
        keys = [self._store.key(task_id), self._stream, self._dead]
        outcome, value = await self._store._begin(
            keys=keys,
            args=[
                _GROUP,
                entry_id,
                self.consumer,
                self._lease_ms,
                self._max_deliver,
                self._ttl_ms,
                payload,
                task_id,
                f"{self._lease:g}",
            ],
        )
        if _text(outcome) != "run":
            return None
        attempt = int(value)
        if task is None:  # undecodable: dead-letter it rather than fail on it forever
            _log.error("task %s cannot be read, dead-lettering it: %s", task_id, error)
            placeholder = AgentTask(task_id=task_id, input="", attempt=attempt)
            await _RedisDelivery(self, entry_id, keys, payload, placeholder).fail(error)
            return None
        task = dataclasses.replace(task, attempt=attempt)
        return _RedisDelivery(self, entry_id, keys, payload, task)


class _RedisDelivery(SettlingDelivery):
    __slots__ = ("_attempt", "_broker", "_entry", "_keys", "_payload", "task")

    _service_errors = _SERVICE_ERRORS

    def __init__(
        self, broker: RedisBroker, entry: str, keys: list[str], payload: str, task: AgentTask
    ) -> None:
        self._broker = broker
        self._entry = entry
        self._keys = keys
        self._payload = payload
        self._attempt = task.attempt
        self.task = task

    async def heartbeat(self) -> bool:
        broker = self._broker
        code = await broker._store._heartbeat(
            keys=self._keys[:2],
            args=[_GROUP, self._entry, broker.consumer, self._attempt, broker._lease_ms],
        )
        return int(code) == 1

    async def _settle(
        self,
        action: str,
        *,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        paused: TaskPause | None = None,
    ) -> str:
        data = _settle_data(result, paused, error)
        broker = self._broker
        outcome = await broker._store._settle(
            keys=self._keys,
            args=[
                _GROUP,
                self._entry,
                broker.consumer,
                self._attempt,
                action,
                data,
                broker._max_deliver,
                round(max(delay, 0.0) * 1000),
                broker._lease_ms,
                broker._ttl_ms,
                self._payload,
                self.task.task_id,
            ],
        )
        return _text(outcome)
