"""Checkpoints in Redis: a hash per run, written by Lua scripts so every save is atomic.

Keys, under ``prefix``: ``run:<run_id>``, a hash of checkpoint number to record plus a ``head``
field naming the newest; ``runs``, a sorted set of run ids by their last save time;
``lease:<run_id>``, a hash of the run's lease (``token``, ``owner``) that expires by the server's
clock (``PEXPIRE``); and ``lease-tokens``, the counter that numbers leases. Meant for one Redis
server (not Redis Cluster: the keys of a save live in different slots).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any, cast

from daimon.core.checkpoints import CheckpointState, Lease
from daimon.core.errors import CheckpointCorruptError, DaimonError, RunLeasedError
from daimon.core.optional import require
from daimon.kit import checkpoint_records as _base
from daimon.kit.checkpoint_records import BaseCheckpoint

aioredis = require("redis.asyncio", extra="redis")
redis_retry = require("redis.asyncio.retry", extra="redis")
redis_backoff = require("redis.backoff", extra="redis")

__all__ = ("RedisCheckpoint",)

_log = logging.getLogger("daimon.checkpoint")

# KEYS: run hash, runs index, lease hash. ARGV: expected seq (0: none), record, now ms, ttl ms
# (0: none), keep_last (0: all), run id, this save's token, the saver's lease token ('': none).
# Returns 0 when written, -1 when the saver's lease is no longer the run's, else the newest seq in
# the store. A save retried after its reply was lost finds its own token beside the head: two
# handles saving byte-equal records in one millisecond (two resumers claiming one run) used to
# pass that test both, so each thought it had claimed the run.
_SAVE = """
if ARGV[8] ~= '' and redis.call('HGET', KEYS[3], 'token') ~= ARGV[8] then return -1 end
local head = tonumber(redis.call('HGET', KEYS[1], 'head') or '0')
local expected = tonumber(ARGV[1])
local seq = expected + 1
if head == seq and redis.call('HGET', KEYS[1], 'saved-by') == ARGV[7] then
  return 0 -- this very save, retried after its reply was lost
end
if head ~= 0 and head ~= expected then return head end
redis.call('HSET', KEYS[1], tostring(seq), ARGV[2], 'head', tostring(seq), 'saved-by', ARGV[7])
local keep = tonumber(ARGV[5])
if keep > 0 then
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    local n = tonumber(field)
    if n and n <= seq - keep then redis.call('HDEL', KEYS[1], field) end
  end
end
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[6])
return 0
"""

# KEYS: lease hash, token counter. ARGV: owner, lease ms. A live lease (its key has not expired)
# is left alone; otherwise the next token is taken. Returns {1 when taken else 0, token, owner,
# ms left, server time ms} of the lease held after the call.
_ACQUIRE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local held = redis.call('HMGET', KEYS[1], 'token', 'owner')
if held[1] then return {0, tonumber(held[1]), held[2], redis.call('PTTL', KEYS[1]), now} end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'token', token, 'owner', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token, ARGV[1], tonumber(ARGV[2]), now}
"""

# KEYS: lease hash. ARGV: token, lease ms. Returns 1 when extended, 0 when the lease is not held.
_RENEW = """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: lease hash. ARGV: token. Deletes the lease if it is still this one.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: run hash, runs index. ARGV: ttl ms, now ms, run id, then seq/record pairs, oldest first.
# Returns 0 when written, 1 when the run already exists.
_FORK = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 1 end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'head', ARGV[#ARGV - 1])
if tonumber(ARGV[1]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
return 0
"""

# KEYS: run hash. ARGV: keep_last. Returns how many checkpoints were dropped.
_TRIM = """
local head = tonumber(redis.call('HGET', KEYS[1], 'head') or '0')
local dropped = 0
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local n = tonumber(field)
  if n and n <= head - tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], field)
    dropped = dropped + 1
  end
end
return dropped
"""


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def _as_str(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _connect(url: str) -> Any:
    """A client that reconnects and retries a command up to 3 times when the connection drops."""
    backoff = redis_backoff.ExponentialWithJitterBackoff(cap=1.0, base=0.05)
    return aioredis.Redis.from_url(url, retry=redis_retry.Retry(backoff, 3))


class RedisCheckpoint(BaseCheckpoint):
    """Stores checkpoints in Redis, shared by every process that uses the same ``prefix``.

    ``save`` refuses (:class:`~daimon.core.errors.DaimonError`) to write over checkpoints this
    handle has not seen: ``load`` a run before continuing it from another handle or process.
    ``load`` verifies each record's checksum and falls back to the newest intact one.

    Args:
        client: A ``redis.asyncio.Redis`` (left open by :meth:`aclose`), or a URL such as
            ``"redis://localhost:6379/0"`` (the connection is then this handle's to close).
        prefix: Prefix of every key this handle uses.
        keep_last: Keep at most this many checkpoints per run (``None``: all).
        ttl: Seconds a checkpoint is kept after it was saved (``None``: forever); a run's keys
            expire ``ttl`` seconds after its last save.
        lease: Seconds a run's lease lasts unless renewed (see :meth:`acquire`), by the Redis
            server's clock.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "daimon:ckpt:",
        keep_last: int | None = None,
        ttl: float | None = None,
        lease: float = _base.DEFAULT_LEASE,
    ) -> None:
        super().__init__(keep_last=keep_last, ttl=ttl, lease=lease)
        self._owned = isinstance(client, str)
        self._client: Any = _connect(client) if self._owned else client
        self._prefix = prefix
        self._save_script = self._client.register_script(_SAVE)
        self._fork_script = self._client.register_script(_FORK)
        self._trim_script = self._client.register_script(_TRIM)
        self._acquire_script = self._client.register_script(_ACQUIRE)
        self._renew_script = self._client.register_script(_RENEW)
        self._release_script = self._client.register_script(_RELEASE)
        self._closed = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisCheckpoint:
        """A handle on its own connection to ``url``."""
        return cls(url, **options)

    @property
    def prefix(self) -> str:
        """Prefix of every key this handle uses."""
        return self._prefix

    async def aclose(self) -> None:
        """Close the connection if this handle opened it; safe to call again."""
        if self._owned and not self._closed:
            self._closed = True
            await self._client.aclose()

    def _key(self, run_id: str) -> str:
        return f"{self._prefix}run:{_base.check_run_id(run_id)}"

    @property
    def _index(self) -> str:
        return f"{self._prefix}runs"

    def _lease_key(self, run_id: str) -> str:
        return f"{self._prefix}lease:{_base.check_run_id(run_id)}"

    async def _acquire(self, run_id: str, owner: str) -> Lease:
        keys = [self._lease_key(run_id), f"{self._prefix}lease-tokens"]
        taken, token, holder, left, now = await self._acquire_script(
            keys=keys, args=[owner, self._lease_ms]
        )
        expires_at = int(now) + max(int(left), 0)
        if not int(taken):
            raise RunLeasedError(run_id, _as_str(holder), expires_at)
        return Lease(run_id=run_id, owner=owner, token=int(token), expires_at=expires_at)

    async def _renew(self, lease: Lease) -> Lease:
        args = [lease.token, self._lease_ms]
        now = _base.now_ms()
        if not int(await self._renew_script(keys=[self._lease_key(lease.run_id)], args=args)):
            raise _base.lease_lost(lease.run_id, f"(token {lease.token}) expired or was taken over")
        return dataclasses.replace(lease, expires_at=now + self._lease_ms)

    async def _release(self, lease: Lease) -> None:
        await self._release_script(keys=[self._lease_key(lease.run_id)], args=[lease.token])

    async def save(self, state: CheckpointState) -> None:
        """Store ``state`` as the next checkpoint of its run."""
        run_id = state.run_id
        key = self._key(run_id)
        expected = self._seen.get(run_id)
        seq = (expected or 0) + 1
        now = _base.now_ms()
        record = _base.encode(state, seq, now)
        token = uuid.uuid4().hex
        lease = self.fence(run_id)
        held = "" if lease is None else str(lease.token)
        args = [expected or 0, record, now, self._ttl_ms, self._keep_last or 0, run_id, token, held]
        keys = [key, self._index, self._lease_key(run_id)]
        head = int(await self._save_script(keys=keys, args=args))
        if head == -1:
            raise _base.lease_lost(run_id, f"(token {held}) expired or was taken over")
        if head:
            raise _base.conflict(run_id, expected, head)
        self._seen[run_id] = seq

    async def load(self, run_id: str) -> CheckpointState | None:
        """The newest intact checkpoint of the run, or ``None`` when it has none."""
        key = self._key(run_id)
        head = await self._client.hget(key, "head")
        if head is None:
            self._seen.pop(run_id, None)
            return None
        self._seen[run_id] = int(head)
        fields = cast(list[bytes | str], await self._client.hkeys(key))
        seqs = sorted((int(f) for f in fields if _as_str(f).isdigit()), reverse=True)
        now = _base.now_ms()
        damaged: CheckpointCorruptError | None = None
        for seq in seqs:
            data = await self._client.hget(key, str(seq))
            if data is None:  # trimmed meanwhile
                continue
            try:
                record = _base.decode(_as_bytes(data), run_id=run_id, seq=seq)
            except CheckpointCorruptError as exc:
                _log.warning("skipping a damaged checkpoint: %s", exc)
                damaged = damaged or exc
                continue
            if _base.expired(record, self._ttl, now):
                break
            return record.state
        if damaged is not None:
            raise CheckpointCorruptError(
                f"run {run_id!r} has no intact checkpoint: {damaged}"
            ) from damaged
        return None

    async def history(self, run_id: str) -> list[CheckpointState]:
        """Every intact, unexpired checkpoint of the run, newest last."""
        return [r.state for r in await self._intact(run_id)]

    async def _intact(self, run_id: str) -> list[_base.Record]:
        raw = cast(dict[bytes | str, bytes | str], await self._client.hgetall(self._key(run_id)))
        now = _base.now_ms()
        records: list[_base.Record] = []
        for seq, data in sorted((int(k), v) for k, v in raw.items() if _as_str(k).isdigit()):
            try:
                record = _base.decode(_as_bytes(data), run_id=run_id, seq=seq)
            except CheckpointCorruptError as exc:
                _log.warning("skipping a damaged checkpoint: %s", exc)
                continue
            if not _base.expired(record, self._ttl, now):
                records.append(record)
        return records

    async def list_runs(self) -> list[str]:
        """Ids of the runs that have checkpoints, sorted."""
        runs = [_as_str(r) for r in await self._client.zrange(self._index, 0, -1)]
        async with self._client.pipeline(transaction=False) as pipe:
            for run_id in runs:
                pipe.exists(self._key(run_id))
            alive = await pipe.execute()
        gone = [run_id for run_id, n in zip(runs, alive, strict=True) if not n]
        if gone:  # their keys expired
            await self._client.zrem(self._index, *gone)
        return sorted(run_id for run_id, n in zip(runs, alive, strict=True) if n)

    async def delete(self, run_id: str) -> None:
        """Remove every checkpoint of the run and its lease (nothing happens if it has none).

        The id can be run again at once; a holder of the deleted lease can no longer save.
        """
        key = self._key(run_id)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(key, self._lease_key(run_id))
            pipe.zrem(self._index, run_id)
            await pipe.execute()
        self._seen.pop(run_id, None)

    async def fork(self, run_id: str, new_run_id: str) -> None:
        """Copy the run's intact checkpoints to a new run, all at once.

        Raises:
            DaimonError: ``run_id`` has no checkpoint, or ``new_run_id`` already has some.
        """
        target = self._key(new_run_id)
        records = (await self._intact(run_id))[-(self._keep_last or 0) :]
        if not records:
            raise DaimonError(f"cannot fork run {run_id!r}: it has no intact checkpoint")
        args: list[Any] = [self._ttl_ms, _base.now_ms(), new_run_id]
        for r in records:
            args += [r.seq, _base.encode(_base.rebind(r.state, new_run_id), r.seq, r.saved_at)]
        if int(await self._fork_script(keys=[target, self._index], args=args)):
            raise DaimonError(f"cannot fork into run {new_run_id!r}: it already has checkpoints")
        self._seen[new_run_id] = records[-1].seq

    async def prune(self) -> int:
        """Apply ``keep_last`` to every run and forget runs whose keys expired.

        Redis deletes expired runs by itself.

        Returns:
            How many checkpoints were deleted.
        """
        runs = await self.list_runs()
        if self._keep_last is None:
            return 0
        dropped = 0
        for run_id in runs:
            dropped += int(
                await self._trim_script(keys=[self._key(run_id)], args=[self._keep_last])
            )
        return dropped

    @property
    def _ttl_ms(self) -> int:
        return 0 if self._ttl is None else max(1, round(self._ttl * 1000))
