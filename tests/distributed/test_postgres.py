from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest

from daimon.core import (
    AgentTask,
    ApprovalDecision,
    SchemaVersionError,
    SerializationError,
    TaskState,
)
from daimon.distributed import Broker, broker_from_url
from daimon.distributed.brokers.postgres import SCHEMA, PostgresBroker, _Wakeups
from daimon.kit.sql_schema import schema_version
from daimon.testing.brokers import (
    BrokerConformance,
    broker_handles,
    sample_pause,
    sample_result,
    sample_task,
)

from ._postgres import PrivatePostgres, private_postgres
from .conftest import ServiceOutage

pytestmark = pytest.mark.service("postgres")


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def make(postgres_url: str, postgres_prefix: str, queue: str) -> AsyncIterator[Any]:
    """Opens handles on one queue under this test's table prefix; closes them afterwards."""
    async with broker_handles(
        lambda **options: PostgresBroker(
            postgres_url, queue=queue, prefix=postgres_prefix, **options
        )
    ) as opened:
        yield opened


async def sql(url: str, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(statement, args or None)
        return list(await cursor.fetchall()) if cursor.description else []


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    with private_postgres() as server:
        yield server


class TestPostgresBroker(BrokerConformance):
    @pytest.fixture
    async def make_broker(self, make: Any) -> Any:
        return make

    @pytest.fixture
    async def outage(self, private_pg: PrivatePostgres) -> AsyncIterator[ServiceOutage]:
        async with broker_handles(
            lambda **options: PostgresBroker(private_pg.url, connect_timeout=2, **options)
        ) as opened:
            yield ServiceOutage(opened, private_pg.stop, private_pg.start)


async def test_is_a_core_broker_by_either_scheme(postgres_url: str, postgres_prefix: str) -> None:
    for url in (postgres_url, postgres_url.replace("postgresql://", "postgres://")):
        made = broker_from_url(url, prefix=postgres_prefix, queue="q", lease=3.0)
        assert isinstance(made, PostgresBroker) and isinstance(made, Broker)
        assert (made.lease, made.queue, made.prefix) == (3.0, "q", postgres_prefix)
        await made.aclose()


async def test_tables_are_made_on_first_use_under_the_prefix(
    make: Any, postgres_url: str, postgres_prefix: str
) -> None:
    broker = await make()
    await broker.submit(sample_task())
    tables = await sql(
        postgres_url,
        "SELECT tablename FROM pg_tables WHERE tablename LIKE %s ORDER BY 1",
        f"{postgres_prefix}%",
    )
    assert [t for (t,) in tables] == [
        f"{postgres_prefix}{name}" for name in ("broker_dead", "broker_tasks", "schema_versions")
    ]
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        assert await schema_version(conn, "broker", postgres_prefix) == SCHEMA.version
    [(kind, payload)] = await sql(
        postgres_url,
        f"SELECT jsonb_typeof(payload), payload FROM {postgres_prefix}broker_tasks",
    )
    assert kind == "object" and payload["daimon"] == 1  # versioned JSON, in jsonb


async def test_a_newer_schema_is_refused(
    make: Any, postgres_url: str, postgres_prefix: str
) -> None:
    await (await make()).submit(sample_task())
    await sql(
        postgres_url,
        f"UPDATE {postgres_prefix}schema_versions SET version = 99 WHERE component = 'broker'",
    )
    other = PostgresBroker(postgres_url + "?application_name=newer", prefix=postgres_prefix)
    try:
        with pytest.raises(SchemaVersionError):
            await other.status("task-1")
    finally:
        await other.aclose()


async def test_results_expire_after_their_retention(
    make: Any, postgres_url: str, postgres_prefix: str
) -> None:
    broker = await make(result_ttl=0.5)
    await broker.submit(sample_task())
    await broker.submit(sample_task("kept"))
    delivery = await broker.claim(wait=2)
    assert delivery is not None and await delivery.complete(sample_result())
    assert (await broker.status("task-1")).result == sample_result()
    await asyncio.sleep(0.7)
    with pytest.raises(KeyError):
        await broker.status("task-1")
    assert await (await make()).claim(wait=0) is not None  # a new handle purges on its first claim
    rows = await sql(postgres_url, f"SELECT task_id FROM {postgres_prefix}broker_tasks")
    assert rows == [("kept",)]
    await broker.submit(sample_task())  # an expired id is a new task
    again = await broker.claim(wait=2)
    assert again is not None and again.task.attempt == 1


async def test_dead_letters_are_kept_with_why(make: Any) -> None:
    broker = await make()
    await broker.submit(sample_task())
    delivery = await broker.claim(wait=2)
    assert delivery is not None
    await delivery.fail("ValueError: nope")
    [dead] = await broker.dead_letters()
    assert (dead.task, dead.reason, dead.attempts) == (sample_task(), "ValueError: nope", 1)
    assert abs(dead.dead_at - time.time()) < 60


async def test_an_unreadable_task_is_dead_lettered(
    make: Any, postgres_url: str, postgres_prefix: str, queue: str
) -> None:
    broker = await make()
    await broker.setup()
    await sql(
        postgres_url,
        f"INSERT INTO {postgres_prefix}broker_tasks (queue, task_id, state, payload, due) "
        "VALUES (%s, 'evil', 'pending', %s::jsonb, now())",
        queue,
        '{"py/object": "os"}',
    )
    assert await broker.claim(wait=0.5) is None
    status = await broker.status("evil")
    assert status.state is TaskState.FAILED
    assert status.error is not None and status.error.startswith("SerializationError")


async def test_a_nul_character_is_refused_before_sending(make: Any) -> None:
    broker = await make()
    with pytest.raises(SerializationError, match="NUL"):
        await broker.submit(AgentTask(task_id="nul", input="a\0b"))
    with pytest.raises(KeyError):
        await broker.status("nul")
    await broker.submit(AgentTask(task_id="slash", input="a\\u0000b"))  # text, not a NUL
    delivery = await broker.claim(wait=2)
    assert delivery is not None and delivery.task.input == "a\\u0000b"
    assert await delivery.pause(sample_pause(delivery.task))
    with pytest.raises(SerializationError, match="NUL"):
        await broker.decide("slash", {"c1": ApprovalDecision.reject("a\0b")})
    assert (await broker.status("slash")).state is TaskState.PAUSED


async def test_a_notification_wakes_a_waiting_claim(make: Any) -> None:
    """With a long poll, a submit still reaches a waiting claim at once (LISTEN/NOTIFY)."""
    worker, client = await make(poll=30.0), await make()
    assert await worker.claim(wait=0.1) is None  # listening from now on
    await asyncio.sleep(0.3)
    waiting = asyncio.create_task(worker.claim(wait=10))
    await asyncio.sleep(0.2)
    started = time.monotonic()
    await client.submit(sample_task())
    delivery = await waiting
    assert delivery is not None
    assert time.monotonic() - started < 1.0


async def test_a_wakeup_while_no_claim_waits_is_kept_for_the_next_wait() -> None:
    """A notification that comes while the claim's query runs wakes its next wait at once."""
    wakeups = _Wakeups()
    wakeups.wake_one()
    started = time.monotonic()
    await wakeups.wait(5.0)
    assert time.monotonic() - started < 0.5
    wakeups.wake_one(remember=False)  # a claim's "there may be more" is for waiting claims only
    started = time.monotonic()
    await wakeups.wait(0.2)
    assert time.monotonic() - started >= 0.19


async def test_a_task_without_notification_is_found_by_the_poll(
    make: Any, postgres_url: str, postgres_prefix: str, queue: str
) -> None:
    """A task queued with no NOTIFY (a notification lost) waits at most a poll."""
    broker = await make(poll=0.3)
    await broker.submit(sample_task("first"))
    assert await broker.claim(wait=1) is not None
    waiting = asyncio.create_task(broker.claim(wait=10))
    await asyncio.sleep(0.2)
    await sql(
        postgres_url,
        f"INSERT INTO {postgres_prefix}broker_tasks (queue, task_id, state, payload, due) "
        "VALUES (%s, 'quiet', 'pending', %s::jsonb, now())",
        queue,
        '{"daimon": 1, "data": {"task_id": "quiet", "input": "x"}}',
    )
    started = time.monotonic()
    delivery = await waiting
    assert delivery is not None and delivery.task.task_id == "quiet"
    assert time.monotonic() - started < 1.0


async def test_a_locked_task_is_skipped_not_waited_for(
    make: Any, postgres_url: str, postgres_prefix: str, queue: str
) -> None:
    """A claim passes over a row another transaction holds (SKIP LOCKED) and takes the next."""
    broker = await make()
    await broker.submit(sample_task("held"))
    await broker.submit(sample_task("free"))
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        await conn.execute(
            f"SELECT 1 FROM {postgres_prefix}broker_tasks WHERE queue = %s AND task_id = 'held' "
            "FOR UPDATE",
            (queue,),
        )
        started = time.monotonic()
        delivery = await asyncio.wait_for(broker.claim(wait=0.5), 3)  # a wait for the lock hangs
        assert delivery is not None and delivery.task.task_id == "free"
        assert time.monotonic() - started < 0.4
        await conn.rollback()
    held = await broker.claim(wait=1)
    assert held is not None and held.task.task_id == "held"


async def test_lease_runs_on_the_database_clock(
    make: Any, postgres_url: str, postgres_prefix: str
) -> None:
    broker = await make(lease=30.0)
    await broker.submit(sample_task())
    assert await broker.claim(wait=2) is not None
    [(seconds,)] = await sql(
        postgres_url,
        f"SELECT extract(epoch FROM due - now())::float8 FROM {postgres_prefix}broker_tasks",
    )
    assert 29.0 < seconds <= 30.0


async def test_queues_do_not_meet(postgres_url: str, postgres_prefix: str) -> None:
    a = PostgresBroker(postgres_url, queue="a", prefix=postgres_prefix)
    b = PostgresBroker(postgres_url, queue="b", prefix=postgres_prefix)
    try:
        await a.submit(sample_task())
        assert await b.claim(wait=0.3) is None
        with pytest.raises(KeyError):
            await b.status("task-1")
        assert await a.claim(wait=1) is not None
    finally:
        await a.aclose()
        await b.aclose()
