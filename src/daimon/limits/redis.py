"""A fleet's limits in Redis: :class:`RedisLimitStore`, shared by every process that uses it.

Keys of one limit key ``K``, under a prefix (``daimon:limits:`` by default); the braces make a
Redis Cluster hash tag, so every script touches one slot::

    <prefix>{K}:b   hash: each bucket's level and when it was true (``<name>@``, ms), the pause
    <prefix>{K}:w   sorted set: waiting tickets by arrival (ties by id): the queue
    <prefix>{K}:r   sorted set: waiting tickets by when they last asked (ms)
    <prefix>{K}:a   sorted set: admitted, unsettled tickets by when they expire (ms)
    <prefix>{K}:t   hash: admitted ticket -> the shares it took (JSON)
    <prefix>{K}:c   sorted set: tickets holding a concurrency slot, by when the slot expires

Each operation is one Lua script (atomic), judged by Redis's clock (``TIME``), and the same
rules as :class:`~daimon.limits.memory.MemoryLimitStore`. Every key carries a ``PEXPIRE``: the
buckets live until they are full again (at least two periods) and the pause is over, the queue
``waiter_ttl`` after the last ask, the admissions ``5 * period`` after the last one: state
nobody uses goes away on its own. Redis 7.0 or later (scripts replicated by their effects).
"""

from __future__ import annotations

import math
from typing import Any, Self

from daimon.core.limits import RateLimits, Remaining, Ticket
from daimon.core.optional import require
from daimon.kit.lifecycle import SetupOnEnter
from daimon.limits.memory import (
    WAITER_TTL,
    check_key,
    check_ticket,
    check_usage,
    check_waiter_ttl,
    shares,
    slot_ttl,
)

aioredis = require("redis.asyncio", extra="redis")

__all__ = ("RedisLimitStore",)

_SOON = 0.05
"""The wait to report when only another ticket's turn or end can let this one go."""

# Shared by every script: the clock, a bucket's level now, and the bucket hash's expiry.
_LIB = """
local NAMES = {'requests', 'input', 'output'}
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local function level(b, name, cap, period, now)
  local found = redis.call('HMGET', b, name, name .. '@')
  if not found[1] then return cap end
  return math.min(cap, tonumber(found[1]) + (now - tonumber(found[2])) * cap / period)
end
local function keep(b, caps, period, now)
  local ms = 2 * period
  for name, cap in pairs(caps) do
    ms = math.max(ms, (cap - level(b, name, cap, period, now)) * period / cap + period)
  end
  ms = math.max(ms, tonumber(redis.call('HGET', b, 'pause') or '0') - now)
  redis.call('PEXPIRE', b, math.ceil(ms))
end
local function admitted(a, t, id, now)
  local taken = redis.call('HGET', t, id)
  local expiry = tonumber(redis.call('ZSCORE', a, id) or '0')
  if taken and expiry > now then return cjson.decode(taken) end
  return nil
end
"""

# KEYS: b w r c a t. ARGV: id, arrived, period ms, waiter ttl ms, slot ttl ms, concurrent (''),
# then per bucket (requests, input, output): capacity ('' = no limit), share. The wait (s).
_RESERVE = (
    _LIB
    + """
local b, w, r, c, a, t = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, period, wttl, sttl = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', r, '-inf', '(' .. (now - wttl))) do
  redis.call('ZREM', w, gone)
  redis.call('ZREM', r, gone)
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', a, '-inf', now)) do
  redis.call('HDEL', t, gone)
  redis.call('ZREM', c, gone)
  redis.call('ZREM', a, gone)
end
if admitted(a, t, id, now) then return '0' end
redis.call('ZADD', w, ARGV[2], id)
redis.call('ZADD', r, now, id)
redis.call('PEXPIRE', w, wttl)
redis.call('PEXPIRE', r, wttl)
local pause = tonumber(redis.call('HGET', b, 'pause') or '0')
if now < pause then return tostring((pause - now) / 1000) end
if redis.call('ZRANGE', w, 0, 0)[1] ~= id then return 'SOON' end
local caps, takes, wait = {}, {}, 0
for i, name in ipairs(NAMES) do
  if ARGV[5 + 2 * i] ~= '' then
    caps[name], takes[name] = tonumber(ARGV[5 + 2 * i]), tonumber(ARGV[6 + 2 * i])
    local missing = takes[name] - level(b, name, caps[name], period, now)
    if missing > 0 then wait = math.max(wait, missing * period / caps[name]) end
  end
end
if wait > 0 then return tostring(wait / 1000) end
if ARGV[6] ~= '' and redis.call('ZCARD', c) >= tonumber(ARGV[6]) then return 'SOON' end
for name, cap in pairs(caps) do
  local left = level(b, name, cap, period, now) - takes[name]
  redis.call('HSET', b, name, left, name .. '@', now)
end
keep(b, caps, period, now)
redis.call('ZREM', w, id)
redis.call('ZREM', r, id)
redis.call('HSET', t, id, cjson.encode(takes))
redis.call('ZADD', a, now + sttl, id)
redis.call('PEXPIRE', t, sttl)
redis.call('PEXPIRE', a, sttl)
if ARGV[6] ~= '' then
  redis.call('ZADD', c, now + sttl, id)
  redis.call('PEXPIRE', c, sttl)
end
return '0'
"""
)

# KEYS: b c a t. ARGV: id, period ms, then for input and output: capacity (''), tokens used.
_SETTLE = (
    _LIB
    + """
local b, c, a, t, id, period = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local taken = admitted(a, t, id, now)
redis.call('HDEL', t, id)
redis.call('ZREM', a, id)
redis.call('ZREM', c, id)
if not taken then return 0 end
local caps = {}
for i, name in ipairs({'input', 'output'}) do
  if ARGV[1 + 2 * i] ~= '' and taken[name] then
    caps[name] = tonumber(ARGV[1 + 2 * i])
    local left = level(b, name, caps[name], period, now) - (tonumber(ARGV[2 + 2 * i]) - taken[name])
    redis.call('HSET', b, name, left, name .. '@', now)
  end
end
keep(b, caps, period, now)
return 1
"""
)

# KEYS: b w r c a t. ARGV: id.
_CANCEL = (
    _LIB
    + """
local b, w, r, c, a, t, id = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1]
local taken = admitted(a, t, id, now_ms())
redis.call('ZREM', w, id)
redis.call('ZREM', r, id)
redis.call('HDEL', t, id)
redis.call('ZREM', a, id)
redis.call('ZREM', c, id)
if not taken then return 0 end
for name, share in pairs(taken) do
  if redis.call('HEXISTS', b, name) == 1 then redis.call('HINCRBYFLOAT', b, name, share) end
end
return 1
"""
)

# KEYS: b. ARGV: period ms, pause ms (''), then per bucket: capacity (''), what remains ('').
_LEARN = (
    _LIB
    + """
local b, period = KEYS[1], tonumber(ARGV[1])
local now = now_ms()
if ARGV[2] ~= '' then
  local pause = now + tonumber(ARGV[2])
  if pause > tonumber(redis.call('HGET', b, 'pause') or '0') then
    redis.call('HSET', b, 'pause', pause)
  end
end
local caps = {}
for i, name in ipairs(NAMES) do
  if ARGV[1 + 2 * i] ~= '' then
    caps[name] = tonumber(ARGV[1 + 2 * i])
    if ARGV[2 + 2 * i] ~= '' then
      local left = math.min(level(b, name, caps[name], period, now), tonumber(ARGV[2 + 2 * i]))
      redis.call('HSET', b, name, left, name .. '@', now)
    end
  end
end
keep(b, caps, period, now)
return 1
"""
)


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def _text(value: int | float | None) -> str:
    """A script argument: a number, or '' for none."""
    return "" if value is None else repr(value)


def _wait(reply: bytes | str) -> float:
    """A reserve script's reply as seconds to wait."""
    text = reply.decode() if isinstance(reply, bytes) else reply
    return _SOON if text == "SOON" else float(text)


def _caps(limits: RateLimits) -> tuple[int | None, int | None, int | None]:
    return (
        limits.requests_per_minute,
        limits.input_tokens_per_minute,
        limits.output_tokens_per_minute,
    )


def _left(remaining: Remaining) -> tuple[int | None, int | None, int | None]:
    """What the provider says remains, per bucket (a total token count counts as input)."""
    input_left = remaining.input_tokens if remaining.input_tokens is not None else remaining.tokens
    return remaining.requests, input_left, remaining.output_tokens


class RedisLimitStore(SetupOnEnter):
    """A :class:`~daimon.core.LimitStore` in Redis (7.0 or later), shared by a fleet.

    Args:
        client: A ``redis.asyncio.Redis`` (left open by :meth:`aclose`), or a URL such as
            ``"redis://localhost:6379/0"`` (the connection is then this handle's to close).
        prefix: Prefix of every key.
        waiter_ttl: Seconds a waiting ticket blocks the queue without asking again.

    Raises:
        BuilderError: A bad ``waiter_ttl``.
    """

    def __init__(
        self, client: Any, *, prefix: str = "daimon:limits:", waiter_ttl: float = WAITER_TTL
    ) -> None:
        self._waiter_ttl = check_waiter_ttl(waiter_ttl)
        self._owned = isinstance(client, str)
        self._client: Any = aioredis.Redis.from_url(client) if self._owned else client
        self._prefix = prefix
        self._reserve = self._client.register_script(_RESERVE)
        self._settle = self._client.register_script(_SETTLE)
        self._cancel = self._client.register_script(_CANCEL)
        self._learn = self._client.register_script(_LEARN)
        self._closed = False

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "daimon:limits:", waiter_ttl: float = WAITER_TTL
    ) -> Self:
        """A store on its own connection to ``url``."""
        return cls(url, prefix=prefix, waiter_ttl=waiter_ttl)

    @property
    def prefix(self) -> str:
        """Prefix of every key."""
        return self._prefix

    async def setup(self) -> None:
        """Check that the server answers (Redis needs no schema)."""
        await self._client.ping()

    async def aclose(self) -> None:
        """Close the connection if this store opened it; safe to call again."""
        if self._owned and not self._closed:
            self._closed = True
            await self._client.aclose()

    def _keys(self, key: str, *names: str) -> list[str]:
        tag = f"{self._prefix}{{{check_key(key)}}}:"
        return [tag + name for name in names]

    async def reserve(self, key: str, limits: RateLimits, ticket: Ticket) -> float:
        """See :meth:`daimon.core.LimitStore.reserve`."""
        check_ticket(ticket)
        wanted = shares(limits, ticket)
        args: list[str | int] = [
            ticket.id,
            repr(float(ticket.arrived)),
            repr(limits.period * 1000),
            _ms(self._waiter_ttl),
            _ms(slot_ttl(limits)),
            _text(limits.concurrent),
        ]
        for name in ("requests", "input", "output"):
            cap, share = wanted.get(name, (None, 0))
            args += [_text(None if cap is None else int(cap)), share]
        reply = await self._reserve(keys=self._keys(key, "b", "w", "r", "c", "a", "t"), args=args)
        return _wait(reply)

    async def settle(
        self, key: str, limits: RateLimits, ticket: Ticket, input_tokens: int, output_tokens: int
    ) -> None:
        """See :meth:`daimon.core.LimitStore.settle`."""
        check_ticket(ticket)
        used_in, used_out = check_usage(input_tokens, output_tokens)
        args = [
            ticket.id,
            repr(limits.period * 1000),
            _text(limits.input_tokens_per_minute),
            used_in,
            _text(limits.output_tokens_per_minute),
            used_out,
        ]
        await self._settle(keys=self._keys(key, "b", "c", "a", "t"), args=args)

    async def cancel(self, key: str, ticket: Ticket) -> None:
        """See :meth:`daimon.core.LimitStore.cancel`."""
        check_ticket(ticket)
        await self._cancel(keys=self._keys(key, "b", "w", "r", "c", "a", "t"), args=[ticket.id])

    async def learn(
        self,
        key: str,
        limits: RateLimits,
        *,
        pause: float | None = None,
        remaining: Remaining | None = None,
    ) -> None:
        """See :meth:`daimon.core.LimitStore.learn`."""
        keys = self._keys(key, "b")
        paused = pause * 1000 if pause is not None and 0 < pause < math.inf else None
        args = [repr(limits.period * 1000), _text(paused)]
        left = _left(remaining) if remaining is not None else (None, None, None)
        for cap, found in zip(_caps(limits), left, strict=True):
            args += [_text(cap), _text(found)]
        await self._learn(keys=keys, args=args)
