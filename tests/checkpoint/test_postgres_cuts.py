"""Connections cut mid-transaction lose no acknowledged write, in PostgresCheckpoint and
PostgresBroker.

Another connection calls ``pg_terminate_backend`` on the store's own backends (found by their
``application_name``) every few milliseconds while saves, lease renewals, submits, claims and
settles are in flight. A trigger on the test's tables sleeps a few milliseconds after each row
written, so most cuts land where it hurts: the row written, the transaction not yet committed.
Afterwards every write that returned must be in the database, intact, and none that raised
may be half-applied (a task failed without its dead letter, a checkpoint row altered).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
import urllib.parse
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
import pytest

from daimon.checkpoint.postgres import PostgresCheckpoint
from daimon.core import (
    AgentTask,
    CheckpointState,
    DaimonError,
    EffectRecord,
    Message,
    TaskResult,
)
from daimon.distributed.brokers.postgres import PostgresBroker

pytestmark = pytest.mark.service("postgres")

T = TypeVar("T")

SLOW_WRITE = 0.004
"""Seconds the trigger holds each written row's transaction open before it may commit."""


async def sql(url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(query, params or None)
        return list(await cursor.fetchall()) if cursor.description else []


async def slow_writes(url: str, prefix: str, tables: list[str]) -> None:
    """Make every row written to ``tables`` hold its transaction open ``SLOW_WRITE`` seconds."""
    await sql(
        url,
        f"CREATE OR REPLACE FUNCTION {prefix}slow() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN PERFORM pg_sleep({SLOW_WRITE}); RETURN NULL; END $$",
    )
    for table in tables:
        await sql(
            url,
            f"CREATE TRIGGER {prefix}slow AFTER INSERT OR UPDATE ON {prefix}{table} "
            f"FOR EACH ROW EXECUTE FUNCTION {prefix}slow()",
        )


@pytest.fixture
async def app(postgres_url: str, postgres_prefix: str) -> AsyncIterator[str]:
    """The ``application_name`` the cut connections carry; the trigger function is dropped."""
    yield f"cut_{uuid.uuid4().hex[:10]}"
    await sql(postgres_url, f"DROP FUNCTION IF EXISTS {postgres_prefix}slow() CASCADE")


@dataclass
class Cutter:
    """Terminates a random backend of ``app`` every 2 to 15 ms, mostly ones mid-transaction."""

    url: str
    app: str
    rng: random.Random
    name = "terminated"
    cuts: Counter[str] = field(default_factory=Counter)
    """Backends terminated, by what they were doing: ``mid-write`` (in the trigger's sleep, the
    row written and not committed), ``active``, ``idle in transaction``, ``idle``, ``starting``
    (a backend still logging in: PostgreSQL reports its state as null)."""
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        query = (
            "SELECT CASE WHEN wait_event = 'PgSleep' THEN 'mid-write' "
            "ELSE coalesce(state, 'starting') END, "
            "pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND (state <> 'idle' OR %s) ORDER BY random() LIMIT 1"
        )
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                await asyncio.sleep(self.rng.uniform(0.002, 0.015))
                idle_too = self.rng.random() < 0.1
                cursor = await conn.execute(query, (self.app, idle_too))
                for what, done in await cursor.fetchall():
                    self.cuts[what] += bool(done)

    @property
    def store_url(self) -> str:
        """The URL the stores under test use: their backends carry ``app``."""
        return f"{self.url}?application_name={self.app}"

    def stop(self) -> None:
        self._stop.set()

    def summary(self) -> str:
        return "backends terminated: " + ", ".join(
            f"{n} {what}" for what, n in sorted(self.cuts.items())
        )

    def check(self) -> None:
        """Enough cuts landed mid-transaction to prove anything."""
        mid = self.cuts["mid-write"] + self.cuts["active"] + self.cuts["idle in transaction"]
        assert mid >= 20, f"too few cuts mid-transaction: {self.cuts}"


@dataclass
class LostReplies:
    """A TCP proxy to PostgreSQL that now and then drops the server's reply and closes the
    connection: the server did the work (a write committed), the client never hears of it.

    A reply to a statement in autocommit comes after its commit (PostgreSQL flushes at the
    protocol's Sync), so a dropped reply to a write is an acknowledgement lost, the write done.
    """

    url: str
    rng: random.Random
    rate: float = 0.08
    """Chance that a reply (a chunk the server sent, after the connection's first) is dropped."""
    name = "lost replies"
    dropped: int = 0
    _active: bool = False
    _server: asyncio.Server | None = None
    _links: set[asyncio.Task[None]] = field(default_factory=set)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def store_url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return self.url.replace(f"{self._upstream[0]}:{self._upstream[1]}", f"127.0.0.1:{port}")

    @property
    def _upstream(self) -> tuple[str, int]:
        parts = urllib.parse.urlsplit(self.url)
        return parts.hostname or "127.0.0.1", parts.port or 5432

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def run(self) -> None:
        """Drop replies until :meth:`stop` (set-up before this is left alone)."""
        self._active = True
        await self._stop.wait()
        self._active = False

    def stop(self) -> None:
        self._stop.set()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in self._links:
            link.cancel()
        await asyncio.gather(*self._links, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = asyncio.current_task()
        assert link is not None
        self._links.add(link)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.close()
            self._links.discard(link)
            return
        try:
            pumps = [self._pump(reader, up_writer, False), self._pump(up_reader, writer, True)]
            await asyncio.gather(*pumps)
        finally:
            for end in (writer, up_writer):
                end.close()
            self._links.discard(link)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replies: bool
    ) -> None:
        """Copy ``reader`` to ``writer``; from the server, drop a reply now and then and hang up."""
        first = True
        with contextlib.suppress(OSError):
            while chunk := await reader.read(65536):
                lose = replies and not first and self._active
                if lose and self.rng.random() < self.rate:
                    self.dropped += 1
                    break  # both ends are closed: the client sees the connection lost
                first = False
                writer.write(chunk)
                await writer.drain()
        writer.close()

    def summary(self) -> str:
        return f"replies dropped (connection closed after the server answered): {self.dropped}"

    def check(self) -> None:
        assert self.dropped >= 20, f"too few replies dropped to prove anything: {self.dropped}"


Fault = Cutter | LostReplies


@pytest.fixture(params=["terminate", "lost-reply"])
async def fault(
    request: pytest.FixtureRequest, postgres_url: str, app: str
) -> AsyncIterator[Fault]:
    """What cuts the stores' connections: ``pg_terminate_backend``, or replies lost in a proxy."""
    if request.param == "terminate":
        yield Cutter(postgres_url, app, random.Random(7))
        return
    proxy = LostReplies(postgres_url, random.Random(7))
    await proxy.open()
    try:
        yield proxy
    finally:
        await proxy.aclose()


async def _until_it_works(call: Callable[[], Awaitable[T]], within: float = 30.0) -> T:
    """``await call()`` until it returns (what a client does when its connection is cut)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except (psycopg.Error, DaimonError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.005)


# --- Checkpoints.

RUNS, SAVES = 8, 40


def state_of(run_id: str, k: int) -> CheckpointState:
    """The ``k``-th state saved for a run: its own messages, ledger and a sizeable payload."""
    call = f"c{k}"
    record = EffectRecord(
        call_id=call,
        tool="charge",
        effect="keyed",
        status="completed" if k % 2 else "started",
        arguments_sha256=f"{k:064x}",
        idempotency_key=f"{run_id}:{call}",
        attempts=1 + k % 3,
    )
    return CheckpointState(
        run_id=run_id,
        messages=tuple(Message.user(f"{run_id} message {n}") for n in range(k % 5 + 1)),
        iteration=k,
        custom={"k": k, "blob": f"{run_id}/{k}:" + "x" * (1000 * (k % 40))},
        effects={call: record},
    )


@dataclass
class SaveLog:
    acked: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    raised: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    renewals: int = 0
    errors: Counter[str] = field(default_factory=Counter)


async def saver(store: PostgresCheckpoint, run_id: str, leased: bool, log: SaveLog) -> None:
    """Save ``SAVES`` states of one run, one after the other, noting which returned."""
    lease = await _until_it_works(lambda: store.acquire(run_id)) if leased else None
    for k in range(1, SAVES + 1):
        try:
            await store.save(state_of(run_id, k))
        except (psycopg.Error, DaimonError) as exc:
            log.raised[run_id].append(k)
            log.errors[type(exc).__name__] += 1
            await _until_it_works(lambda: store.load(run_id))  # learn where the run stands
            continue
        log.acked[run_id].append(k)
        if lease is not None and k % 5 == 0:
            lease = await _until_it_works(functools.partial(store.renew, lease))
            log.renewals += 1


async def test_no_acknowledged_checkpoint_is_lost_nor_a_failed_one_half_written(
    postgres_url: str, postgres_prefix: str, fault: Fault, capsys: pytest.CaptureFixture[str]
) -> None:
    store = PostgresCheckpoint(fault.store_url, prefix=postgres_prefix, lease=60.0, max_size=RUNS)
    await store.setup()
    await slow_writes(postgres_url, postgres_prefix, ["checkpoints", "checkpoint_leases"])
    log = SaveLog()
    runs = [f"run-{n}" for n in range(RUNS)]
    started = time.monotonic()
    cutting = asyncio.create_task(fault.run())
    try:
        await asyncio.gather(*(saver(store, r, n % 2 == 0, log) for n, r in enumerate(runs)))
    finally:
        fault.stop()
        await cutting
        await store.aclose()
    elapsed = time.monotonic() - started

    in_doubt_written = 0
    async with PostgresCheckpoint(postgres_url, prefix=postgres_prefix) as reader:
        for run in runs:
            history = await reader.history(run)
            table = f"{postgres_prefix}checkpoints"
            [(rows,)] = await sql(
                postgres_url, f"SELECT count(*) FROM {table} WHERE run_id = %s", run
            )
            assert rows == len(history), f"{run}: {rows - len(history)} damaged rows"
            found = [s.custom["k"] for s in history]
            assert found == sorted(found), f"{run}: states out of order {found}"
            for state in history:  # each stored state is one that was saved, whole
                assert state == state_of(run, state.custom["k"]), f"{run}: altered state"
            missing = set(log.acked[run]) - set(found)
            assert not missing, f"{run}: acknowledged saves {sorted(missing)} are gone"
            assert set(found) <= set(log.acked[run]) | set(log.raised[run])
            in_doubt_written += len(set(found) & set(log.raised[run]))
    acked = sum(map(len, log.acked.values()))
    raised = sum(map(len, log.raised.values()))
    assert acked + raised == RUNS * SAVES
    fault.check()
    with capsys.disabled():
        print(
            f"\n[postgres cuts, checkpoints: {fault.name}] {RUNS * SAVES} saves in "
            f"{elapsed:.1f}s, {log.renewals} lease renewals; {fault.summary()}; "
            f"{acked} acknowledged, all stored intact; {raised} raised ({dict(log.errors)}): "
            f"{in_doubt_written} of them stored whole (in doubt), the rest not at all"
        )


# --- The broker.

TASKS = 300
DEAD_EVERY, RETRY_EVERY = 7, 3
"""Task ``n`` is dead-lettered when ``n % 7 == 0``, else retried once when ``n % 3 == 0``."""


def number(task_id: str) -> int:
    return int(task_id.rpartition("-")[2])


@dataclass
class BrokerLog:
    submitted: set[str] = field(default_factory=set)
    submit_errors: int = 0
    deliveries: list[tuple[str, int]] = field(default_factory=list)
    completed: dict[str, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    """Per task, (attempt, output) of each ``complete`` that returned True."""
    requeued: list[tuple[str, int]] = field(default_factory=list)
    dead: set[str] = field(default_factory=set)
    refused: int = 0
    settle_errors: int = 0
    claim_errors: int = 0


async def submitter(client: PostgresBroker, ids: list[str], log: BrokerLog) -> None:
    for task_id in ids:
        task = AgentTask(task_id=task_id, input=f"{task_id}:" + "y" * 4000)
        while True:  # until PostgreSQL acknowledges it: only then is it submitted
            try:
                await client.submit(task)
            except (psycopg.Error, DaimonError):
                log.submit_errors += 1
                continue
            log.submitted.add(task_id)
            break


async def settle(
    log: BrokerLog, call: Callable[[], Awaitable[bool]], *, within: float = 10.0
) -> bool:
    """A settle, tried again until it answers: whether the broker accepted it."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except (psycopg.Error, DaimonError):
            log.settle_errors += 1
            assert time.monotonic() < deadline, "a settle never got through"


async def consumer(broker: PostgresBroker, log: BrokerLog, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            delivery = await broker.claim(wait=0.2)
        except (psycopg.Error, DaimonError):
            log.claim_errors += 1
            continue
        if delivery is not None:
            await handle(delivery, log)


async def handle(delivery: Any, log: BrokerLog) -> None:
    """Settle one delivery as its task's number says: dead-letter, retry once, or complete."""
    task_id, attempt = delivery.task.task_id, delivery.task.attempt
    log.deliveries.append((task_id, attempt))
    n = number(task_id)
    if n % DEAD_EVERY == 0:
        if await settle(log, functools.partial(delivery.fail, "ValueError: no")):
            log.dead.add(task_id)
    elif n % RETRY_EVERY == 0 and attempt == 1:
        if await settle(log, functools.partial(delivery.fail, "retry me", retry=True)):
            log.requeued.append((task_id, attempt))
    else:
        output = f"{task_id}@{attempt}"
        result = TaskResult(task_id=task_id, output=output)
        if await settle(log, functools.partial(delivery.complete, result)):
            log.completed[task_id].append((attempt, output))
        else:
            log.refused += 1


async def ended_tasks(url: str, prefix: str, queue: str) -> int:
    [(ended,)] = await sql(
        url,
        f"SELECT count(*) FROM {prefix}broker_tasks WHERE queue = %s "
        "AND state IN ('completed', 'failed')",
        queue,
    )
    return int(ended)


async def broker_rows(url: str, prefix: str, queue: str) -> tuple[dict[str, Any], Counter[str]]:
    tasks = await sql(
        url,
        f"SELECT task_id, state, attempt, result->'data'->>'output' FROM {prefix}broker_tasks "
        "WHERE queue = %s",
        queue,
    )
    dead = await sql(url, f"SELECT task_id FROM {prefix}broker_dead WHERE queue = %s", queue)
    return {t: (state, attempt, out) for t, state, attempt, out in tasks}, Counter(
        t for (t,) in dead
    )


async def test_no_acknowledged_submit_or_settle_is_lost_nor_a_failed_one_half_applied(
    postgres_url: str, postgres_prefix: str, fault: Fault, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = f"cuts-{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {
        "queue": queue,
        "prefix": postgres_prefix,
        "lease": 1.0,
        "max_deliver": 1000,
        "poll": 0.1,
        "connect_timeout": 2.0,
    }
    handles = [PostgresBroker(fault.store_url, **options) for _ in range(3)]
    client, workers = handles[0], handles[1:]
    await client.setup()
    await slow_writes(postgres_url, postgres_prefix, ["broker_tasks", "broker_dead"])
    log, stop = BrokerLog(), asyncio.Event()
    ids = [f"task-{n}" for n in range(1, TASKS + 1)]
    started = time.monotonic()
    cutting = asyncio.create_task(fault.run())
    consuming = [asyncio.create_task(consumer(w, log, stop)) for w in workers for _ in range(4)]
    try:
        await asyncio.gather(*(submitter(client, ids[k::4], log) for k in range(4)))
        deadline = time.monotonic() + 90
        while (ended := await ended_tasks(postgres_url, postgres_prefix, queue)) < TASKS:
            assert time.monotonic() < deadline, f"{TASKS - ended} submitted tasks never ended"
            await asyncio.sleep(0.2)
    finally:
        fault.stop()
        stop.set()
        await cutting
        await asyncio.gather(*consuming)
        for handle in handles:
            await handle.aclose()
    elapsed = time.monotonic() - started
    rows, dead_rows = await broker_rows(postgres_url, postgres_prefix, queue)

    assert log.submitted == set(ids)
    assert set(rows) == set(ids), f"submitted tasks missing: {sorted(set(ids) - set(rows))[:5]}"
    for task_id, accepted in log.completed.items():  # each complete that returned is recorded
        assert len({a for a, _ in accepted}) == 1, f"{task_id}: two attempts completed {accepted}"
        state, _attempt, output = rows[task_id]
        assert (state, output) == ("completed", accepted[0][1]), (task_id, rows[task_id])
    for task_id in log.dead:  # each dead-lettering that returned: the state and the letter
        assert rows[task_id][0] == "failed", (task_id, rows[task_id])
    for task_id, attempt in log.requeued:  # each retry that returned: a later attempt ran
        assert any(t == task_id and a > attempt for t, a in log.deliveries), task_id
    for task_id, (state, _attempt, _output) in rows.items():  # none half-applied
        assert dead_rows[task_id] == (state == "failed"), (task_id, state, dead_rows[task_id])
        expected = "failed" if number(task_id) % DEAD_EVERY == 0 else "completed"
        assert state == expected, (task_id, rows[task_id])
    delivered = Counter(t for t, _ in log.deliveries)
    attempts: dict[str, set[int]] = defaultdict(set)
    for task_id, attempt in log.deliveries:
        attempts[task_id].add(attempt)
    lost_claims = sum(max(seen) - len(seen) for seen in attempts.values())
    assert set(delivered) == set(ids)
    fault.check()
    with capsys.disabled():
        print(
            f"\n[postgres cuts, broker: {fault.name}] {TASKS} tasks in {elapsed:.1f}s; "
            f"{fault.summary()}; {log.submit_errors} submit calls raised and were sent again; "
            f"{len(log.deliveries)} deliveries ({lost_claims} attempts claimed but never "
            "heard of, delivered again after the lease), "
            f"{log.claim_errors} claims raised; settles: "
            f"{sum(map(len, log.completed.values()))} completes, {len(log.requeued)} retries, "
            f"{len(log.dead)} dead-letterings returned, {log.refused} refused, "
            f"{log.settle_errors} raised and were sent again; all {TASKS} recorded whole"
        )
