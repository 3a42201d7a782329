"""A task broker on PostgreSQL: a queue table claimed with ``FOR UPDATE SKIP LOCKED``.

Tables, under ``prefix`` (``daimon_`` by default; created on first use by
:func:`daimon.kit.sql_schema.migrate`, component ``broker``): ``{prefix}broker_tasks``, one row
per task and queue holding its state, the task (versioned JSON in ``jsonb``), attempt counters,
the time it is next due, and its result, pause or error; ``{prefix}broker_dead``, the dead
letters. A row's ``due`` is when a worker may take it: for a pending task, when it was queued
(or when its retry delay ends); for a running one, when its lease ends. All times are the
database's (``now()``), never a worker's clock.

A claim is one statement: it picks the oldest due row (``SKIP LOCKED``, so workers never wait
for each other) and starts an attempt on it (``UPDATE ... RETURNING``), or dead-letters it when
its attempts are spent. Every other change is one statement too, or one transaction following
:mod:`daimon.kit.task_records`: only the newest attempt may settle a task, and it settles once.
A submit, a hand-back, a retry and a decision ``NOTIFY`` the channel ``{prefix}broker`` with the
queue's name; each handle listens (``LISTEN``) on a connection of its own and wakes one waiting
claim per notification. A lost notification costs a short poll (``poll`` seconds), never a task.

Durability is the server's: with ``synchronous_commit = on`` (the default) a task is on disk
before ``submit`` returns. Ended tasks are kept ``result_ttl`` seconds (then read as unknown and
deleted by a later claim); dead letters are kept until deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, TypeVar

from daimon.core.codec import dumps, loads
from daimon.core.errors import BuilderError, SerializationError
from daimon.core.optional import require
from daimon.core.results import ApprovalDecision
from daimon.core.tasks import AgentTask, DeadLetter, TaskPause, TaskResult, TaskState, TaskStatus
from daimon.kit.sql_schema import DEFAULT_PREFIX, Schema, check_prefix, migrate
from daimon.kit.task_records import (
    SettleByTaskId,
    SettlingDelivery,
    TaskRecord,
    as_decisions,
    check_dead_letter_limit,
    check_options,
    dead_letter_task,
    resumed_payload,
    settle,
)

psycopg = require("psycopg", extra="postgres")

__all__ = ("PostgresBroker", "SCHEMA")

_log = logging.getLogger("daimon.distributed")

T = TypeVar("T")

_DAY = 86_400.0
_SERVICE_ERRORS = (psycopg.Error, OSError)
"""What psycopg raises when PostgreSQL fails or cannot be reached: raised as BrokerError."""

SCHEMA = Schema(
    "broker",
    (
        """
        CREATE TABLE {prefix}broker_tasks (
            queue text NOT NULL,
            task_id text NOT NULL,
            state text NOT NULL CHECK (state IN
                ('pending', 'running', 'paused', 'completed', 'failed', 'cancelled')),
            payload jsonb NOT NULL,
            attempt integer NOT NULL DEFAULT 0,
            released integer NOT NULL DEFAULT 0,
            due timestamptz,
            result jsonb,
            error text,
            paused jsonb,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz,
            PRIMARY KEY (queue, task_id)
        );
        CREATE INDEX {prefix}broker_tasks_due ON {prefix}broker_tasks (queue, due)
            WHERE state IN ('pending', 'running');
        CREATE INDEX {prefix}broker_tasks_expires ON {prefix}broker_tasks (expires_at)
            WHERE expires_at IS NOT NULL;
        CREATE TABLE {prefix}broker_dead (
            id bigserial PRIMARY KEY,
            queue text NOT NULL,
            task_id text NOT NULL,
            payload jsonb NOT NULL,
            reason text NOT NULL,
            attempts integer NOT NULL,
            dead_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX {prefix}broker_dead_queue ON {prefix}broker_dead (queue, id);
        """,
    ),
)
"""The broker's tables (:mod:`daimon.kit.sql_schema` component ``broker``)."""

# --- Statements. {t} is the tasks table, {d} the dead letters; %(q)s is the queue.

_LIVE = "(expires_at IS NULL OR expires_at > now())"
"""A row whose retention has not run out (an expired one reads as unknown)."""

_TTL = "CASE WHEN %(ttl)s > 0 THEN now() + make_interval(secs => %(ttl)s) END"

_SUBMIT = """
WITH added AS (
    INSERT INTO {t} AS t (queue, task_id, state, payload, due)
    VALUES (%(q)s, %(id)s, 'pending', %(payload)s::jsonb, now())
    ON CONFLICT (queue, task_id) DO UPDATE SET
        state = 'pending', payload = EXCLUDED.payload, attempt = 0, released = 0,
        due = now(), result = NULL, error = NULL, paused = NULL, created_at = now(),
        expires_at = NULL
    WHERE t.expires_at <= now()
    RETURNING 1
)
SELECT pg_notify(%(channel)s, %(q)s) FROM added
"""

# Picks the oldest due task and starts an attempt, or dead-letters it when its attempts are
# spent (as kit.task_records.begin). With nothing due: when the next task will be, if any.
_CLAIM = """
WITH picked AS (
    SELECT task_id, attempt - released >= %(max)s AS spent FROM {t}
    WHERE queue = %(q)s AND state IN ('pending', 'running') AND due <= now()
    ORDER BY due LIMIT 1
    FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE {t} AS t SET
        attempt = CASE WHEN p.spent THEN t.attempt ELSE t.attempt + 1 END,
        state = CASE WHEN p.spent THEN 'failed' ELSE 'running' END,
        due = CASE WHEN p.spent THEN NULL ELSE now() + make_interval(secs => %(lease)s) END,
        paused = CASE WHEN p.spent THEN t.paused END,
        expires_at = CASE WHEN p.spent THEN {ttl} END,
        error = CASE WHEN NOT p.spent THEN t.error
            ELSE 'dead-lettered after ' || (t.attempt - t.released) || ' attempts; ' ||
                CASE WHEN t.state = 'running'
                THEN 'attempt ' || t.attempt || ' was lost: no heartbeat within the ' ||
                    %(lease_text)s || 's lease (its worker crashed or hung)'
                ELSE 'last error: ' || coalesce(t.error, '') END
            END
    FROM picked p
    WHERE t.queue = %(q)s AND t.task_id = p.task_id
    RETURNING t.task_id, t.state, t.attempt, t.released, t.payload, t.error
), dead AS (
    INSERT INTO {d} (queue, task_id, payload, reason, attempts)
    SELECT %(q)s, task_id, payload, error, attempt - released FROM moved WHERE state = 'failed'
)
SELECT task_id, state, attempt, payload::text, NULL::float8 FROM moved
UNION ALL
SELECT NULL, NULL, NULL, NULL, extract(epoch FROM min(due) - now())::float8 FROM {t}
WHERE queue = %(q)s AND state IN ('pending', 'running') AND due > now()
    AND NOT EXISTS (SELECT 1 FROM moved)
"""

_HEARTBEAT = """
WITH found AS (
    SELECT state, attempt FROM {t} WHERE queue = %(q)s AND task_id = %(id)s
), renewed AS (
    UPDATE {t} SET due = now() + make_interval(secs => %(lease)s)
    WHERE queue = %(q)s AND task_id = %(id)s AND attempt = %(attempt)s AND state = 'running'
    RETURNING 1
)
SELECT (SELECT state FROM found), (SELECT attempt FROM found), EXISTS (SELECT 1 FROM renewed)
"""

_COMPLETE = f"""
UPDATE {{t}} SET state = 'completed', result = %(result)s::jsonb, error = NULL, due = NULL,
    expires_at = {_TTL}
WHERE queue = %(q)s AND task_id = %(id)s AND attempt = %(attempt)s AND state = 'running'
RETURNING 1
"""

_RECORD = """
SELECT state, attempt, released, error, result::text, paused::text, payload::text FROM {t}
WHERE queue = %(q)s AND task_id = %(id)s FOR UPDATE
"""

_STORE = f"""
UPDATE {{t}} SET state = %(state)s, released = %(released)s, error = %(error)s,
    result = %(result)s::jsonb, paused = %(paused)s::jsonb,
    due = CASE WHEN %(state)s = 'pending' THEN now() + make_interval(secs => %(delay)s) END,
    expires_at = CASE WHEN %(state)s IN ('completed', 'failed', 'cancelled') THEN {_TTL} END
WHERE queue = %(q)s AND task_id = %(id)s
"""

_DEAD_LETTER = """
INSERT INTO {d} (queue, task_id, payload, reason, attempts)
VALUES (%(q)s, %(id)s, %(payload)s::jsonb, %(reason)s, %(attempts)s)
"""

_NOTIFY = "SELECT pg_notify(%(channel)s, %(q)s)"

_CANCEL = f"""
WITH found AS (
    SELECT state FROM {{t}} WHERE queue = %(q)s AND task_id = %(id)s AND {_LIVE}
), cancelled AS (
    UPDATE {{t}} SET state = 'cancelled', due = NULL, expires_at = {_TTL}
    WHERE queue = %(q)s AND task_id = %(id)s AND state IN ('pending', 'running', 'paused')
    RETURNING 1
)
SELECT (SELECT state FROM found), EXISTS (SELECT 1 FROM cancelled)
"""

_STATUS = f"""
SELECT state, due <= now(), result::text, error, paused::text FROM {{t}}
WHERE queue = %(q)s AND task_id = %(id)s AND {_LIVE}
"""

_PAUSED = f"""
SELECT state, attempt, paused::text FROM {{t}} WHERE queue = %(q)s AND task_id = %(id)s AND {_LIVE}
"""

# Queues a paused task again carrying its decisions, unless another decide or a cancel came
# first (the same attempt still paused is the same pause).
_DECIDE = """
WITH decided AS (
    UPDATE {t} SET state = 'pending', payload = %(payload)s::jsonb, due = now()
    WHERE queue = %(q)s AND task_id = %(id)s AND state = 'paused' AND attempt = %(attempt)s
    RETURNING 1
)
SELECT pg_notify(%(channel)s, %(q)s) FROM decided
"""

_DEAD_LETTERS = """
SELECT task_id, payload::text, reason, attempts, extract(epoch FROM dead_at)::float8 FROM {d}
WHERE queue = %(q)s ORDER BY id LIMIT %(limit)s
"""

_PURGE = "DELETE FROM {t} WHERE queue = %(q)s AND expires_at <= now()"

_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""An escaped NUL character in JSON text: PostgreSQL's jsonb cannot hold one."""


def _json(value: Any) -> str:
    """``value`` as versioned JSON that jsonb can hold; :class:`SerializationError` if not."""
    return _storable(dumps(value), type(value).__name__)


def _storable(text: str, what: str) -> str:
    """JSON ``text`` unless it holds a NUL character; :class:`SerializationError` if it does."""
    if _NUL.search(text):
        raise SerializationError(
            f"{what} holds a NUL character (\\u0000), which PostgreSQL's jsonb cannot store"
        )
    return text


# --- Connections.


class _Pool:
    """Up to ``size`` connections, opened when needed and kept while they work.

    Opening fails at once when the server cannot be reached (no waiting in the background for
    it to come back). A connection that raised a service error, was cancelled mid-call or is
    left inside a transaction is closed; one broken connection drops the idle ones too (a
    server restart breaks them all).
    """

    def __init__(self, url: str, size: int, connect_timeout: float) -> None:
        self._url = url
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Any] = []
        self._connect_timeout = max(2, round(connect_timeout))
        self._closed = False

    async def _open(self) -> Any:
        return await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=self._connect_timeout
        )

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A connection in autocommit mode, for one operation."""
        async with self._slots:
            conn = self._idle.pop() if self._idle else await self._open()
            try:
                yield conn
            except BaseException as exc:
                if isinstance(exc, _SERVICE_ERRORS):
                    await self._drop_idle()
                if isinstance(exc, _SERVICE_ERRORS) or not self._reusable(conn):
                    await _close(conn)
                else:
                    self._idle.append(conn)
                raise
            if self._reusable(conn):
                self._idle.append(conn)
            else:
                await _close(conn)

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    def _reusable(self, conn: Any) -> bool:
        idle = psycopg.pq.TransactionStatus.IDLE
        return not (self._closed or conn.closed or conn.broken) and (
            conn.info.transaction_status == idle
        )

    async def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await _close(conn)

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their call ends."""
        self._closed = True
        await self._drop_idle()


async def _fetch(conn: Any, statement: str, args: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    cursor = await conn.execute(statement, args)
    return list(await cursor.fetchall()) if cursor.description else []


async def _uninterrupted(conn: Any, work: Awaitable[T]) -> T:
    """Await ``work`` on ``conn``; when cancelled, close ``conn`` at once and leave.

    psycopg answers a cancelled call by asking the server to cancel the query and waiting for
    it (up to 10 s): over a cut network that outlasts a lease. Closing the connection ends the
    call now; whatever the server did with it, a settle's retry finds (idempotently).
    """
    inner = asyncio.ensure_future(work)
    inner.add_done_callback(_consume)
    try:
        return await asyncio.shield(inner)
    except asyncio.CancelledError:
        conn.pgconn.finish()
        inner.cancel()
        raise


def _consume(done: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned call's outcome, so that asyncio does not log it as lost."""
    if not done.cancelled():
        done.exception()


async def _close(conn: Any) -> None:
    with contextlib.suppress(Exception):
        await conn.close()


class _Wakeups:
    """Claims waiting for work: a notification wakes one, a reconnection all.

    A notification that finds no claim waiting (it came while the claim's query ran) is
    remembered: the next wait returns at once, and that claim looks again.
    """

    def __init__(self) -> None:
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._missed = False

    async def wait(self, seconds: float) -> None:
        """Return when woken (or a wakeup came while none waited), or after ``seconds``."""
        if self._missed:
            self._missed = False
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await asyncio.wait_for(waiter, max(seconds, 0.0))
        except TimeoutError:
            pass
        finally:
            with contextlib.suppress(ValueError):
                self._waiting.remove(waiter)

    def wake_one(self, *, remember: bool = True) -> None:
        """Wake the longest-waiting claim; with none waiting, the next wait (if ``remember``)."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._missed = self._missed or remember

    def wake_all(self) -> None:
        """Wake every waiting claim."""
        self._missed = True
        while self._waiting:
            self.wake_one()


# --- The broker.


class PostgresBroker(SettleByTaskId):
    """Queues tasks in a PostgreSQL table; see the module docstring.

    Args:
        url: A libpq URL such as ``"postgresql://user@localhost:5432/db"``.
        queue: The queue's name: tasks of different queues never meet.
        prefix: Prefix of the table names (lowercase letters, digits, ``_``).
        lease: Seconds a delivery stays leased without a heartbeat.
        max_deliver: Attempts a task gets before it is dead-lettered.
        result_ttl: Seconds an ended task's state and result are kept (``None``: forever).
        max_connections: Connections to the database at most, besides the one that listens
            (calls wait for a free one).
        poll: Seconds a waiting claim looks again without a notification.
        connect_timeout: Seconds to wait for a new connection (libpq counts whole seconds,
            2 at least).
    """

    _service_errors = _SERVICE_ERRORS

    def __init__(
        self,
        url: str,
        *,
        queue: str = "tasks",
        prefix: str = DEFAULT_PREFIX,
        lease: float = 30.0,
        max_deliver: int = 5,
        result_ttl: float | None = 7 * _DAY,
        max_connections: int = 10,
        poll: float = 0.5,
        connect_timeout: float = 5.0,
    ) -> None:
        check_options(lease, max_deliver)
        if not isinstance(url, str) or not url:
            raise BuilderError(f"url must be a PostgreSQL URL, got {url!r}")
        if not queue:
            raise BuilderError("queue must not be empty")
        if type(max_connections) is not int or max_connections < 1:
            raise BuilderError(
                f"max_connections must be a positive integer, got {max_connections!r}"
            )
        if not poll > 0:
            raise BuilderError(f"poll must be positive, got {poll!r}")
        self._url = url
        self._queue = queue
        self._prefix = check_prefix(prefix)
        self._lease = float(lease)
        self._max_deliver = max_deliver
        self._ttl = float(result_ttl) if result_ttl else 0.0
        self._poll = float(poll)
        self._channel = f"{prefix}broker"
        names = {"t": f"{prefix}broker_tasks", "d": f"{prefix}broker_dead"}
        self._sql = {
            name: sql.replace("{ttl}", _TTL).format(**names) for name, sql in _STATEMENTS.items()
        }
        self._pool = _Pool(url, max_connections, connect_timeout)
        self._connect_timeout = connect_timeout
        self._ready = False
        self._setting_up = asyncio.Lock()
        self._wakeups = _Wakeups()
        self._listener: asyncio.Task[None] | None = None
        self._next_purge = 0.0
        self._held: dict[str, _PostgresDelivery] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresBroker:
        """A broker on ``url`` (``postgresql://`` or ``postgres://``)."""
        return cls(url, **options)

    @property
    def queue(self) -> str:
        """The queue's name."""
        return self._queue

    @property
    def prefix(self) -> str:
        """The prefix of the table names."""
        return self._prefix

    def _args(self, **values: Any) -> dict[str, Any]:
        return {"q": self._queue, "channel": self._channel, "ttl": self._ttl, **values}

    async def _run(self, name: str, **values: Any) -> list[tuple[Any, ...]]:
        """Run one statement on a connection of the pool; its rows."""
        await self.setup()
        async with self._pool.connection() as conn:
            return await _uninterrupted(conn, _fetch(conn, self._sql[name], self._args(**values)))

    async def setup(self) -> None:
        """Create the tables, or bring them to this version, unless done already."""
        if self._ready:
            return
        async with self._setting_up:
            await self._migrate_once()

    async def _migrate_once(self) -> None:
        """Migrate, unless this handle or another of this process did it (on this database)."""
        key = (self._url, self._prefix)
        if not self._ready and key not in _MIGRATED:
            async with self._pool.connection() as conn:
                await migrate(conn, SCHEMA, self._prefix)
            _MIGRATED.add(key)
        self._ready = True

    async def aclose(self) -> None:
        """Stop listening and close the connections; leases held here are left to expire."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener
        await self._pool.aclose()

    async def submit(self, task: AgentTask) -> str:
        """Queue ``task`` (committed when this returns); a task id already known is kept as is."""
        await self._run("submit", id=task.task_id, payload=_json(task))
        return task.task_id

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` when it is unknown (or its retention ran out)."""
        rows = await self._run("status", id=task_id)
        if not rows:
            raise KeyError(task_id)
        state, lapsed, result, error, paused = rows[0]
        if state == "running" and lapsed:
            state = "pending"  # its worker is gone: the task waits for another one
        approvals = loads(paused, TaskPause).approvals if state == "paused" and paused else ()
        return TaskStatus(
            state=TaskState(state),
            result=loads(result, TaskResult) if result is not None else None,
            error=error,
            approvals=approvals,
        )

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task that has not ended; whether it was cancelled."""
        [(state, cancelled)] = await self._run("cancel", id=task_id)
        if state is None:
            raise KeyError(task_id)
        return bool(cancelled)

    async def decide(self, task_id: str, decisions: Mapping[str, ApprovalDecision | bool]) -> bool:
        """Queue a paused task again with ``decisions``; whether it was paused.

        Raises:
            KeyError: The task is unknown.
        """
        rows = await self._run("paused", id=task_id)
        if not rows:
            raise KeyError(task_id)
        state, attempt, paused = rows[0]
        if state != "paused" or paused is None:
            return False
        payload = _storable(
            resumed_payload(loads(paused, TaskPause), as_decisions(decisions)), "a decision"
        )
        return bool(await self._run("decide", id=task_id, attempt=attempt, payload=payload))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` dead-lettered tasks of this queue (a read: nothing is removed)."""
        rows = await self._run("dead_letters", limit=check_dead_letter_limit(limit))
        return [
            DeadLetter(
                task=dead_letter_task(payload, task_id),
                reason=reason,
                attempts=attempts,
                dead_at=dead_at,
            )
            for task_id, payload, reason, attempts, dead_at in rows
        ]

    async def claim(self, wait: float = 1.0) -> _PostgresDelivery | None:
        """The next due task, waiting up to ``wait`` seconds (woken by ``NOTIFY``)."""
        deadline = time.monotonic() + max(wait, 0.0)
        self._listen()
        await self._purge()
        while True:
            rows = await self._run(
                "claim",
                max=self._max_deliver,
                lease=self._lease,
                lease_text=f"{self._lease:g}",
            )
            task_row = next((row for row in rows if row[0] is not None), None)
            if task_row is not None:
                self._wakeups.wake_one(remember=False)  # there may be more: a waiting claim looks
                delivery = await self._begin(*task_row[:4])
                if delivery is not None:
                    return delivery
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            next_due = rows[0][4] if rows and rows[0][4] is not None else self._poll
            await self._wakeups.wait(min(left, self._poll, max(next_due, 0.001)))

    async def _begin(
        self, task_id: str, state: str, attempt: int, payload: str
    ) -> _PostgresDelivery | None:
        """The delivery of a claimed row (``None`` if it was dead-lettered, or unreadable)."""
        if state != "running":
            return None
        try:
            task = loads(payload, AgentTask)
        except SerializationError as exc:  # dead-letter it rather than fail on it forever
            error = f"SerializationError: {exc}"
            _log.error("task %s cannot be read, dead-lettering it: %s", task_id, error)
            placeholder = AgentTask(task_id=task_id, input="", attempt=attempt)
            await _PostgresDelivery(self, placeholder).fail(error)
            return None
        return _PostgresDelivery(self, dataclasses.replace(task, attempt=attempt))

    async def _purge(self) -> None:
        """Delete this queue's ended tasks whose retention ran out (once a minute at most)."""
        if time.monotonic() < self._next_purge:
            return
        self._next_purge = time.monotonic() + 60.0
        await self._run("purge")

    def _listen(self) -> None:
        """Start listening for notifications, unless this handle does already."""
        if not self._pool.closed and (self._listener is None or self._listener.done()):
            self._listener = asyncio.get_running_loop().create_task(self._listening())

    async def _listening(self) -> None:
        """Wake a waiting claim per notification for this queue; reconnect when cut off."""
        backoff = 0.1
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, connect_timeout=max(2, round(self._connect_timeout))
                )
                async with conn:
                    await conn.execute(f'LISTEN "{self._channel}"')
                    backoff = 0.1
                    self._wakeups.wake_all()  # what came while no one listened
                    await self._relay(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _log.debug(
                    "listening on %s failed, again in %.1fs: %s", self._channel, backoff, exc
                )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _relay(self, conn: Any) -> None:
        """Pass notifications on; check the connection after 30 s without one."""
        while True:
            async for note in conn.notifies(timeout=30.0):
                if note.payload == self._queue:
                    self._wakeups.wake_one()
            await asyncio.wait_for(conn.execute("SELECT 1"), 5.0)  # a dead link raises

    async def _settle(
        self,
        task_id: str,
        attempt: int,
        action: str,
        *,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        paused: TaskPause | None = None,
    ) -> str:
        """End an attempt, and say how it ended (see :func:`daimon.kit.task_records.settle`)."""
        result_json = _json(result) if result is not None else None
        if action == "complete" and await self._run(
            "complete", id=task_id, attempt=attempt, result=result_json
        ):
            return "ok"  # the usual case, in one statement; anything else as the kit says
        paused_json = _json(paused) if paused is not None else None
        await self.setup()
        async with self._pool.connection() as conn:
            return await _uninterrupted(
                conn,
                self._settle_in(
                    conn, task_id, attempt, action, result, result_json, error, delay,
                    paused, paused_json,
                ),
            )  # fmt: skip

    async def _settle_in(
        self,
        conn: Any,
        task_id: str,
        attempt: int,
        action: str,
        result: TaskResult | None,
        result_json: str | None,
        error: str,
        delay: float,
        paused: TaskPause | None,
        paused_json: str | None,
    ) -> str:
        """The settle of one attempt as a transaction on ``conn``, following the kit's rules."""
        async with conn.transaction():
            cursor = await conn.execute(self._sql["record"], self._args(id=task_id))
            row = await cursor.fetchone()
            if row is None:
                return "stale"
            state, stored, released, stored_error, stored_result, stored_paused, payload = row
            record = TaskRecord(
                state=state,
                attempt=stored,
                released=released,
                error=stored_error,
                result=loads(stored_result, TaskResult) if stored_result else None,
                paused=loads(stored_paused, TaskPause) if stored_paused else None,
            )
            outcome = settle(
                record,
                attempt,
                action,
                self._max_deliver,
                result=result,
                error=error,
                paused=paused,
            )
            if state != "running" or outcome == "stale":
                return outcome  # nothing changed: stale, ended, or the same settle again
            await conn.execute(
                self._sql["store"],
                self._args(
                    id=task_id,
                    state=record.state,
                    released=record.released,
                    error=record.error,
                    result=result_json if record.result is not None else None,
                    paused=paused_json if record.paused is not None else None,
                    delay=max(delay, 0.0) if outcome == "requeued" else 0.0,
                ),
            )
            if outcome == "dead":
                await conn.execute(
                    self._sql["dead_letter"],
                    self._args(
                        id=task_id,
                        payload=payload,
                        reason=record.error or "",
                        attempts=record.attempt - record.released,
                    ),
                )
            if outcome in ("requeued", "released"):
                await conn.execute(self._sql["notify"], self._args())
        return outcome

    async def _heartbeat(self, task_id: str, attempt: int) -> bool:
        [(_state, _attempt, renewed)] = await self._run(
            "heartbeat", id=task_id, attempt=attempt, lease=self._lease
        )
        return bool(renewed)


_STATEMENTS = {
    "submit": _SUBMIT,
    "claim": _CLAIM,
    "heartbeat": _HEARTBEAT,
    "complete": _COMPLETE,
    "record": _RECORD,
    "store": _STORE,
    "dead_letter": _DEAD_LETTER,
    "notify": _NOTIFY,
    "cancel": _CANCEL,
    "status": _STATUS,
    "paused": _PAUSED,
    "decide": _DECIDE,
    "dead_letters": _DEAD_LETTERS,
    "purge": _PURGE,
}

_MIGRATED: set[tuple[str, str]] = set()
"""Databases (URL, prefix) whose tables this process brought to :data:`SCHEMA`'s version."""


class _PostgresDelivery(SettlingDelivery):
    __slots__ = ("_broker", "task")

    _service_errors = _SERVICE_ERRORS

    def __init__(self, broker: PostgresBroker, task: AgentTask) -> None:
        self._broker = broker
        self.task = task

    async def heartbeat(self) -> bool:
        return await self._broker._heartbeat(self.task.task_id, self.task.attempt)

    async def _settle(
        self,
        action: str,
        *,
        result: TaskResult | None = None,
        error: str = "",
        delay: float = 0.0,
        paused: TaskPause | None = None,
    ) -> str:
        return await self._broker._settle(
            self.task.task_id,
            self.task.attempt,
            action,
            result=result,
            error=error,
            delay=delay,
            paused=paused,
        )
