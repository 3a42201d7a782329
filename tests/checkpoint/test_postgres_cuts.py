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
import functools
import random
import time
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
    cuts: Counter[str] = field(default_factory=Counter)
    """Backends terminated, by what they were doing: ``mid-write`` (in the trigger's sleep, the
    row written and not committed), ``active``, ``idle in transaction``, ``idle``."""
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        query = (
            "SELECT CASE WHEN wait_event = 'PgSleep' THEN 'mid-write' ELSE state END, "
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

    def stop(self) -> None:
        self._stop.set()

    def summary(self) -> str:
        return ", ".join(f"{n} {what}" for what, n in sorted(self.cuts.items()))


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
    postgres_url: str, postgres_prefix: str, app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cut_url = f"{postgres_url}?application_name={app}"
    store = PostgresCheckpoint(cut_url, prefix=postgres_prefix, lease=60.0, max_size=RUNS)
    await store.setup()
    await slow_writes(postgres_url, postgres_prefix, ["checkpoints", "checkpoint_leases"])
    cutter, log = Cutter(postgres_url, app, random.Random(7)), SaveLog()
    runs = [f"run-{n}" for n in range(RUNS)]
    started = time.monotonic()
    cutting = asyncio.create_task(cutter.run())
    try:
        await asyncio.gather(*(saver(store, r, n % 2 == 0, log) for n, r in enumerate(runs)))
    finally:
        cutter.stop()
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
    assert sum(cutter.cuts.values()) >= 20, f"too few cuts to prove anything: {cutter.cuts}"
    with capsys.disabled():
        print(
            f"\n[postgres cuts, checkpoints] {RUNS * SAVES} saves in {elapsed:.1f}s, "
            f"{log.renewals} lease renewals; backends terminated: {cutter.summary()}; "
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
    postgres_url: str, postgres_prefix: str, app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cut_url = f"{postgres_url}?application_name={app}"
    queue = f"cuts-{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {
        "queue": queue,
        "prefix": postgres_prefix,
        "lease": 1.0,
        "max_deliver": 1000,
        "poll": 0.1,
        "connect_timeout": 2.0,
    }
    handles = [PostgresBroker(cut_url, **options) for _ in range(3)]
    client, workers = handles[0], handles[1:]
    await client.setup()
    await slow_writes(postgres_url, postgres_prefix, ["broker_tasks", "broker_dead"])
    cutter, log, stop = Cutter(postgres_url, app, random.Random(11)), BrokerLog(), asyncio.Event()
    ids = [f"task-{n}" for n in range(1, TASKS + 1)]
    started = time.monotonic()
    cutting = asyncio.create_task(cutter.run())
    consuming = [asyncio.create_task(consumer(w, log, stop)) for w in workers for _ in range(4)]
    try:
        await asyncio.gather(*(submitter(client, ids[k::4], log) for k in range(4)))
        deadline = time.monotonic() + 90
        while (ended := await ended_tasks(postgres_url, postgres_prefix, queue)) < TASKS:
            assert time.monotonic() < deadline, f"{TASKS - ended} submitted tasks never ended"
            await asyncio.sleep(0.2)
    finally:
        cutter.stop()
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
    retried = sum(1 for t in ids if number(t) % RETRY_EVERY == 0 and number(t) % DEAD_EVERY)
    assert set(delivered) == set(ids)
    mid = cutter.cuts["mid-write"] + cutter.cuts["active"] + cutter.cuts["idle in transaction"]
    assert mid >= 20, f"too few cuts mid-transaction to prove anything: {cutter.cuts}"
    with capsys.disabled():
        print(
            f"\n[postgres cuts, broker] {TASKS} tasks in {elapsed:.1f}s; backends terminated: "
            f"{cutter.summary()}; {log.submit_errors} submit calls raised and were sent again; "
            f"{len(log.deliveries)} deliveries ({retried} second ones of the retried tasks, "
            f"{len(log.deliveries) - TASKS - retried} after a claim or a lease was lost), "
            f"{log.claim_errors} claims raised; settles: "
            f"{sum(map(len, log.completed.values()))} completes, {len(log.requeued)} retries, "
            f"{len(log.dead)} dead-letterings returned, {log.refused} refused, "
            f"{log.settle_errors} raised and were sent again; all {TASKS} recorded whole"
        )
