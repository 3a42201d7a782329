"""A fleet's limits in PostgreSQL: :class:`PostgresLimitStore`, shared by every process.

Tables (``daimon_`` prefix by default; versioned by :mod:`daimon.kit.sql_schema` as component
``limits``; UNLOGGED: the state is short-lived, and after a crash the buckets start full)::

    <prefix>limit_keys     key PRIMARY KEY, levels and stamps (one per bucket: requests, input,
                           output; NULL: full), paused_until, expires (seconds since the epoch)
    <prefix>limit_waiters  (key, id) PRIMARY KEY, arrived, seen: the queue
    <prefix>limit_tickets  (key, id) PRIMARY KEY, shares, slot, expires: admitted, unsettled

Each operation is one statement: a call of a PL/pgSQL function that locks the key's row
(``SELECT ... FOR UPDATE``), so the operations on one key take turns while different keys go
in parallel, and applies the same rules as :class:`~daimon.limits.memory.MemoryLimitStore`,
by the database's clock (``clock_timestamp()``). A reserve deletes its key's stale waiters and
expired admissions, and a few keys whose state has all expired (their waiters and tickets go
with them): nothing needs a sweeper.
"""

from __future__ import annotations

import math
from typing import Any, Self

from daimon.core.limits import RateLimits, Remaining, Ticket
from daimon.core.optional import require
from daimon.kit.lifecycle import SetupOnEnter
from daimon.kit.sql_pool import Connections
from daimon.kit.sql_schema import DEFAULT_PREFIX, Schema
from daimon.limits.memory import (
    WAITER_TTL,
    check_key,
    check_ticket,
    check_usage,
    check_waiter_ttl,
    shares,
    slot_ttl,
)

require("psycopg", extra="postgres")

__all__ = ("PostgresLimitStore", "SCHEMA")

_SOON = 0.05
"""The wait to report when only another ticket's turn or end can let this one go."""

_TABLES = """
CREATE UNLOGGED TABLE {prefix}limit_keys (
    key text PRIMARY KEY,
    levels float8[] NOT NULL DEFAULT ARRAY[NULL, NULL, NULL]::float8[],
    stamps float8[] NOT NULL DEFAULT ARRAY[NULL, NULL, NULL]::float8[],
    paused_until float8 NOT NULL DEFAULT 0,
    expires float8 NOT NULL);
CREATE INDEX {prefix}limit_keys_expiry ON {prefix}limit_keys (expires);
CREATE UNLOGGED TABLE {prefix}limit_waiters (
    key text NOT NULL REFERENCES {prefix}limit_keys (key) ON DELETE CASCADE,
    id text NOT NULL, arrived float8 NOT NULL, seen float8 NOT NULL,
    PRIMARY KEY (key, id));
CREATE INDEX {prefix}limit_waiters_order ON {prefix}limit_waiters (key, arrived, id);
CREATE UNLOGGED TABLE {prefix}limit_tickets (
    key text NOT NULL REFERENCES {prefix}limit_keys (key) ON DELETE CASCADE,
    id text NOT NULL, shares float8[] NOT NULL, slot boolean NOT NULL, expires float8 NOT NULL,
    PRIMARY KEY (key, id));

-- a bucket's tokens now: what it had, refilled at cap / period a second (NULL: full)
CREATE FUNCTION {prefix}limits_level(
    p_level float8, p_stamp float8, p_cap float8, p_period float8, p_now float8)
RETURNS float8 LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_level IS NULL THEN p_cap
        ELSE least(p_cap, p_level + (p_now - p_stamp) * p_cap / p_period) END
$$;

-- until when a bucket must be kept: one period after it is full again
CREATE FUNCTION {prefix}limits_keep(p_level float8, p_cap float8, p_period float8, p_now float8)
RETURNS float8 LANGUAGE sql IMMUTABLE AS $$
    SELECT p_now + p_period + greatest(0, p_cap - p_level) * p_period / p_cap
$$;

-- the key's row, created if missing, locked until the transaction ends
CREATE FUNCTION {prefix}limits_lock(p_key text, p_now float8)
RETURNS {prefix}limit_keys LANGUAGE plpgsql AS $$
DECLARE
    k {prefix}limit_keys;
BEGIN
    LOOP  -- until the row is ours (a sweeper may delete it between two tries)
        SELECT * INTO k FROM {prefix}limit_keys WHERE key = p_key FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO {prefix}limit_keys (key, expires) VALUES (p_key, p_now)
            ON CONFLICT (key) DO NOTHING;
    END LOOP;
    RETURN k;
END
$$;
"""

_RESERVE = """
CREATE FUNCTION {prefix}limits_reserve(
    p_key text, p_id text, p_arrived float8, p_caps float8[], p_shares float8[],
    p_concurrent integer, p_period float8, p_waiter_ttl float8, p_slot_ttl float8)
RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
    now_ float8 := extract(epoch FROM clock_timestamp());
    k {prefix}limit_keys := {prefix}limits_lock(p_key, now_);
    lv float8[] := k.levels;
    st float8[] := k.stamps;
    keep float8 := now_ + greatest(2 * p_period, p_slot_ttl);
    wait float8 := 0;
    level float8;
BEGIN
    DELETE FROM {prefix}limit_keys WHERE key IN (
        SELECT key FROM {prefix}limit_keys WHERE expires < now_ AND key <> p_key
        ORDER BY expires LIMIT 8 FOR UPDATE SKIP LOCKED);
    DELETE FROM {prefix}limit_waiters WHERE key = p_key AND seen < now_ - p_waiter_ttl;
    DELETE FROM {prefix}limit_tickets WHERE key = p_key AND expires <= now_;
    IF EXISTS (SELECT 1 FROM {prefix}limit_tickets WHERE key = p_key AND id = p_id) THEN
        RETURN 0;  -- admitted already: this call was sent again
    END IF;
    INSERT INTO {prefix}limit_waiters AS w (key, id, arrived, seen)
        VALUES (p_key, p_id, p_arrived, now_)
        ON CONFLICT (key, id) DO UPDATE SET arrived = EXCLUDED.arrived, seen = EXCLUDED.seen;
    IF now_ < k.paused_until THEN
        wait := k.paused_until - now_;
    ELSIF (SELECT id FROM {prefix}limit_waiters WHERE key = p_key
           ORDER BY arrived, id LIMIT 1) <> p_id THEN
        wait := __SOON__;
    ELSE
        FOR i IN 1..3 LOOP
            CONTINUE WHEN p_caps[i] IS NULL;
            level := {prefix}limits_level(lv[i], st[i], p_caps[i], p_period, now_);
            wait := greatest(wait, (p_shares[i] - level) * p_period / p_caps[i]);
            lv[i] := level - p_shares[i];
            st[i] := now_;
            keep := greatest(keep, {prefix}limits_keep(lv[i], p_caps[i], p_period, now_));
        END LOOP;
        IF wait <= 0 AND p_concurrent IS NOT NULL AND (SELECT count(*) FROM {prefix}limit_tickets
                WHERE key = p_key AND slot) >= p_concurrent THEN
            wait := __SOON__;
        END IF;
    END IF;
    IF wait > 0 THEN
        UPDATE {prefix}limit_keys SET expires = greatest(expires, now_ + p_waiter_ttl)
            WHERE key = p_key;
        RETURN wait;
    END IF;
    DELETE FROM {prefix}limit_waiters WHERE key = p_key AND id = p_id;
    INSERT INTO {prefix}limit_tickets (key, id, shares, slot, expires)
        VALUES (p_key, p_id, p_shares, p_concurrent IS NOT NULL, now_ + p_slot_ttl);
    UPDATE {prefix}limit_keys SET levels = lv, stamps = st, expires = greatest(expires, keep)
        WHERE key = p_key;
    RETURN 0;
END
$$;
""".replace("__SOON__", repr(_SOON))

_SETTLE = """
CREATE FUNCTION {prefix}limits_settle(
    p_key text, p_id text, p_caps float8[], p_used float8[], p_period float8)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    now_ float8 := extract(epoch FROM clock_timestamp());
    k {prefix}limit_keys;
    lv float8[];
    st float8[];
    taken float8[];
    keep float8 := now_ + 2 * p_period;
BEGIN
    SELECT * INTO k FROM {prefix}limit_keys WHERE key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    DELETE FROM {prefix}limit_tickets WHERE key = p_key AND id = p_id
        RETURNING CASE WHEN expires > now_ THEN shares END INTO taken;
    IF taken IS NULL THEN
        RETURN;
    END IF;
    lv := k.levels;
    st := k.stamps;
    FOR i IN 2..3 LOOP
        CONTINUE WHEN p_caps[i] IS NULL OR taken[i] IS NULL;
        lv[i] := {prefix}limits_level(lv[i], st[i], p_caps[i], p_period, now_)
            - (p_used[i] - taken[i]);
        st[i] := now_;
        keep := greatest(keep, {prefix}limits_keep(lv[i], p_caps[i], p_period, now_));
    END LOOP;
    UPDATE {prefix}limit_keys SET levels = lv, stamps = st, expires = greatest(expires, keep)
        WHERE key = p_key;
END
$$;
"""

_CANCEL = """
CREATE FUNCTION {prefix}limits_cancel(p_key text, p_id text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    now_ float8 := extract(epoch FROM clock_timestamp());
    k {prefix}limit_keys;
    lv float8[];
    taken float8[];
BEGIN
    SELECT * INTO k FROM {prefix}limit_keys WHERE key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    DELETE FROM {prefix}limit_waiters WHERE key = p_key AND id = p_id;
    DELETE FROM {prefix}limit_tickets WHERE key = p_key AND id = p_id
        RETURNING CASE WHEN expires > now_ THEN shares END INTO taken;
    IF taken IS NULL THEN
        RETURN;
    END IF;
    lv := k.levels;
    FOR i IN 1..3 LOOP
        CONTINUE WHEN taken[i] IS NULL OR lv[i] IS NULL;
        lv[i] := lv[i] + taken[i];
    END LOOP;
    UPDATE {prefix}limit_keys SET levels = lv WHERE key = p_key;
END
$$;
"""

_LEARN = """
CREATE FUNCTION {prefix}limits_learn(
    p_key text, p_caps float8[], p_pause float8, p_left float8[], p_period float8)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    now_ float8 := extract(epoch FROM clock_timestamp());
    k {prefix}limit_keys := {prefix}limits_lock(p_key, now_);
    lv float8[] := k.levels;
    st float8[] := k.stamps;
    paused float8 := greatest(k.paused_until, now_ + coalesce(p_pause, 0));
    keep float8 := greatest(now_ + 2 * p_period, paused);
BEGIN
    FOR i IN 1..3 LOOP
        CONTINUE WHEN p_caps[i] IS NULL OR p_left[i] IS NULL;
        lv[i] := least({prefix}limits_level(lv[i], st[i], p_caps[i], p_period, now_), p_left[i]);
        st[i] := now_;
        keep := greatest(keep, {prefix}limits_keep(lv[i], p_caps[i], p_period, now_));
    END LOOP;
    UPDATE {prefix}limit_keys SET levels = lv, stamps = st, paused_until = paused,
        expires = greatest(expires, keep) WHERE key = p_key;
END
$$;
"""

SCHEMA = Schema(component="limits", steps=(_TABLES + _RESERVE + _SETTLE + _CANCEL + _LEARN,))
"""The tables and functions, versioned (one step so far)."""

_CALLS = {
    "reserve": "SELECT {p}limits_reserve(%s, %s, %s, %s::float8[], %s::float8[], %s, %s, %s, %s)",
    "settle": "SELECT {p}limits_settle(%s, %s, %s::float8[], %s::float8[], %s)",
    "cancel": "SELECT {p}limits_cancel(%s, %s)",
    "learn": "SELECT {p}limits_learn(%s, %s::float8[], %s, %s::float8[], %s)",
}


def _caps(limits: RateLimits) -> list[float | None]:
    """Each bucket's capacity (requests, input, output); None: not limited."""
    return [
        None if cap is None else float(cap)
        for cap in (
            limits.requests_per_minute,
            limits.input_tokens_per_minute,
            limits.output_tokens_per_minute,
        )
    ]


def _left(remaining: Remaining | None) -> list[float | None]:
    """What the provider says remains, per bucket (a total token count counts as input)."""
    if remaining is None:
        return [None, None, None]
    input_left = remaining.input_tokens if remaining.input_tokens is not None else remaining.tokens
    found = (remaining.requests, input_left, remaining.output_tokens)
    return [None if n is None else float(n) for n in found]


class PostgresLimitStore(SetupOnEnter):
    """A :class:`~daimon.core.LimitStore` in PostgreSQL, shared by a fleet.

    Args:
        url_or_pool: A PostgreSQL connection string (the handle then owns its pool), or a
            ``psycopg_pool.AsyncConnectionPool`` in autocommit (left open by :meth:`aclose`).
        prefix: Prefix of every table (see :mod:`daimon.kit.sql_schema`).
        waiter_ttl: Seconds a waiting ticket blocks the queue without asking again.
        min_size: Connections an owned pool keeps open.
        max_size: Connections an owned pool opens at most.

    Raises:
        BuilderError: A bad URL, pool, prefix, size or ``waiter_ttl``.
    """

    __slots__ = ("_db", "_sql", "_waiter_ttl")

    def __init__(
        self,
        url_or_pool: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        waiter_ttl: float = WAITER_TTL,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        self._waiter_ttl = check_waiter_ttl(waiter_ttl)
        self._db = Connections(
            url_or_pool,
            schema=SCHEMA,
            prefix=prefix,
            min_size=min_size,
            max_size=max_size,
            name="PostgresLimitStore",
        )
        self._sql = {name: sql.replace("{p}", self._db.prefix) for name, sql in _CALLS.items()}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """A handle on its own connection pool to ``url``."""
        return cls(url, **options)

    @property
    def prefix(self) -> str:
        """Prefix of this store's table names."""
        return self._db.prefix

    async def setup(self) -> None:
        """Open the pool and bring the tables to this daimon's version; safe to call again.

        Raises:
            SchemaVersionError: The database's tables were written by a newer daimon.
        """
        await self._db.pool()

    async def aclose(self) -> None:
        """Close the pool if this handle opened it; safe to call again."""
        await self._db.aclose()

    async def _call(self, name: str, params: tuple[Any, ...]) -> Any:
        """One function call; its value."""

        async def work(conn: Any) -> Any:
            cursor = await conn.execute(self._sql[name], params)
            row = await cursor.fetchone()
            return row[0]

        return await self._db.run(work)

    async def reserve(self, key: str, limits: RateLimits, ticket: Ticket) -> float:
        """See :meth:`daimon.core.LimitStore.reserve`."""
        check_key(key)
        check_ticket(ticket)
        wanted = shares(limits, ticket)
        takes = [
            float(wanted[name][1]) if name in wanted else None
            for name in ("requests", "input", "output")
        ]
        params = (
            key,
            ticket.id,
            float(ticket.arrived),
            _caps(limits),
            takes,
            limits.concurrent,
            limits.period,
            self._waiter_ttl,
            slot_ttl(limits),
        )
        return float(await self._call("reserve", params))

    async def settle(
        self, key: str, limits: RateLimits, ticket: Ticket, input_tokens: int, output_tokens: int
    ) -> None:
        """See :meth:`daimon.core.LimitStore.settle`."""
        check_key(key)
        check_ticket(ticket)
        used = [None, *(float(n) for n in check_usage(input_tokens, output_tokens))]
        await self._call("settle", (key, ticket.id, _caps(limits), used, limits.period))

    async def cancel(self, key: str, ticket: Ticket) -> None:
        """See :meth:`daimon.core.LimitStore.cancel`."""
        check_key(key)
        check_ticket(ticket)
        await self._call("cancel", (key, ticket.id))

    async def learn(
        self,
        key: str,
        limits: RateLimits,
        *,
        pause: float | None = None,
        remaining: Remaining | None = None,
    ) -> None:
        """See :meth:`daimon.core.LimitStore.learn`."""
        check_key(key)
        paused = float(pause) if pause is not None and 0 < pause < math.inf else None
        params = (key, _caps(limits), paused, _left(remaining), limits.period)
        await self._call("learn", params)
