"""RunLogs: streamed runs as logs in the state store, read and cancelled from any replica."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from daimon.core.cancel import CancelToken
from daimon.core.state_store import StateStore
from daimon.server._run_log import REPLICA_KIND, EventId, RunLogs, RunLost, StreamGone
from daimon.server._sse import sse_frame
from daimon.server._state import ServerState
from daimon.serverstate import MemoryStateStore

Replica = Callable[..., Awaitable[RunLogs]]


@pytest.fixture
def store_factory(request: pytest.FixtureRequest) -> Callable[[], StateStore]:
    """Handles on one store: the same memory, or new clients of one Redis or PostgreSQL."""
    kind = request.node.callspec.params["replica"]
    if kind == "memory":
        memory = MemoryStateStore()
        return lambda: memory
    if kind == "redis":
        from daimon.serverstate.redis import RedisStateStore

        url, prefix = request.getfixturevalue("redis_url"), f"daimon-test:{uuid.uuid4().hex}:"
        return lambda: RedisStateStore.from_url(url, prefix=prefix)
    from daimon.serverstate.postgres import PostgresStateStore

    url, prefix = request.getfixturevalue("postgres_url"), f"t{uuid.uuid4().hex[:12]}_"
    request.addfinalizer(lambda: asyncio.run(_drop_tables(url, prefix)))
    return lambda: PostgresStateStore(url, prefix=prefix)


async def _drop_tables(url: str, prefix: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{prefix}%",)
        )
        for (table,) in await cursor.fetchall():
            await conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.service("redis")),
        pytest.param("postgres", marks=pytest.mark.service("postgres")),
    ]
)
async def replica(
    request: pytest.FixtureRequest, store_factory: Callable[[], StateStore]
) -> AsyncIterator[Replica]:
    """Makes RunLogs that share one store (one handle each, as replicas have)."""
    made: list[tuple[RunLogs, StateStore]] = []

    async def make(grace: float = 30.0, run_timeout: float = 30.0) -> RunLogs:
        store = store_factory()
        logs = RunLogs(ServerState(store), timeout=run_timeout, grace=grace, retention=60.0)
        made.append((logs, store))
        return logs

    yield make
    for logs, store in made:
        await logs.aclose()
        await store.aclose()


def numbered(
    count: int, gate: asyncio.Event | None = None, ran: list[int] | None = None
) -> Callable[[CancelToken], AsyncGenerator[bytes, None]]:
    """A source of ``count`` frames; past the first, it waits for ``gate`` (if given)."""

    async def source(token: CancelToken) -> AsyncGenerator[bytes, None]:
        for index in range(count):
            if index == 1 and gate is not None:
                await gate.wait()
            if ran is not None:
                ran.append(index)
            yield sse_frame(f'{{"n": {index}}}'.encode(), "tick")

    return source


async def eventually(condition: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - a plain condition: no event to wait on
            await asyncio.sleep(0.05)


def on_error(exc: BaseException) -> bytes:
    return sse_frame(f'{{"error": "{type(exc).__name__}"}}'.encode(), "error")


async def read_all(logs: RunLogs, at: EventId, stop_after: int | None = None) -> list[bytes]:
    frames: list[bytes] = []
    token = CancelToken()
    async with asyncio.timeout(10):
        async for frame in logs.follow(at, token):
            frames.append(frame)
            if stop_after is not None and len(frames) == stop_after:
                break
    return frames


async def test_every_frame_is_read_with_its_id_and_the_log_ends(replica: Replica) -> None:
    logs = await replica()
    await logs.start("s1", numbered(3), on_error)
    frames = await read_all(logs, EventId("s1", 0))
    assert frames == [
        f'id: s1:{n + 1}\nevent: tick\ndata: {{"n": {n}}}\n\n'.encode() for n in range(3)
    ]


async def test_another_replica_resumes_after_the_last_event_seen_once_each(
    replica: Replica,
) -> None:
    a, b = await replica(), await replica()
    gate = asyncio.Event()
    await a.start("s2", numbered(5, gate), on_error)
    first = await read_all(a, EventId("s2", 0), stop_after=1)
    assert first[0].startswith(b"id: s2:1\n")
    gate.set()
    await b.check(EventId("s2", 1))
    rest = await read_all(b, EventId("s2", 1))
    assert [f.split(b"\n")[0] for f in rest] == [f"id: s2:{n}".encode() for n in range(2, 6)]


async def test_a_place_no_longer_kept_is_refused(replica: Replica) -> None:
    logs = await replica()
    with pytest.raises(StreamGone, match="'nope'"):
        await logs.check(EventId("nope", 3))
    await logs.start("s3", numbered(2), on_error)
    await read_all(logs, EventId("s3", 0))
    with pytest.raises(StreamGone):
        await logs.check(EventId("s3", 9))


async def test_a_cancel_on_another_replica_stops_the_run(replica: Replica) -> None:
    a, b = await replica(), await replica()
    ran: list[int] = []
    await a.start("s4", numbered(3, asyncio.Event(), ran), on_error)  # waits forever after one
    await read_all(a, EventId("s4", 0), stop_after=1)
    await b.cancel("s4")
    frames = await read_all(b, EventId("s4", 1))
    assert frames[-1].endswith(b'data: {"error": "RunCancelled"}\n\n')
    assert ran == [0]
    await eventually(lambda: len(a) == 0)


async def test_a_run_nobody_reads_is_cancelled_after_the_grace(replica: Replica) -> None:
    logs = await replica(grace=0.3)
    ran: list[int] = []
    await logs.start("s5", numbered(3, asyncio.Event(), ran), on_error)
    await read_all(logs, EventId("s5", 0), stop_after=1)  # the client leaves
    await eventually(lambda: len(logs) == 0)
    frames = await read_all(logs, EventId("s5", 1))
    assert b"RunCancelled" in frames[-1] and ran == [0]


async def test_a_run_read_on_another_replica_is_not_cancelled(replica: Replica) -> None:
    a, b = await replica(grace=0.3), await replica(grace=0.3)
    gate = asyncio.Event()
    await a.start("s6", numbered(3, gate), on_error)
    await read_all(a, EventId("s6", 0), stop_after=1)  # the client moves to b

    async def release() -> None:
        await asyncio.sleep(1.0)  # three graces with nobody reading on a
        gate.set()

    releasing = asyncio.create_task(release())
    frames = await read_all(b, EventId("s6", 1))
    await releasing
    assert [f.split(b"\n")[1] for f in frames] == [b"event: tick", b"event: tick"]


async def test_a_background_run_goes_on_unread(replica: Replica) -> None:
    logs = await replica(grace=0.2)
    gate = asyncio.Event()
    await logs.start("s7", numbered(2, gate), on_error, background=True)
    await read_all(logs, EventId("s7", 0), stop_after=1)
    await asyncio.sleep(0.6)
    assert len(logs) == 1
    gate.set()
    frames = await read_all(logs, EventId("s7", 1))
    assert frames[-1].endswith(b'data: {"n": 1}\n\n')


async def test_a_run_past_its_timeout_ends_with_an_error(replica: Replica) -> None:
    logs = await replica(run_timeout=0.2)
    await logs.start("s8", numbered(2, asyncio.Event()), on_error)
    frames = await read_all(logs, EventId("s8", 0))
    assert frames[-1].endswith(b'data: {"error": "TimeoutError"}\n\n')


async def test_shutdown_lets_runs_finish_within_the_drain() -> None:
    state = ServerState(MemoryStateStore())
    logs = RunLogs(state, timeout=30, grace=30, retention=60)
    gate = asyncio.Event()
    await logs.start("d1", numbered(2, gate), on_error)
    asyncio.get_running_loop().call_later(0.1, gate.set)
    await logs.aclose(drain=5)
    frames = await read_all(logs, EventId("d1", 0))
    assert len(frames) == 2 and b"error" not in frames[-1]


def test_last_event_ids_are_parsed_or_refused() -> None:
    assert EventId.parse(None) is None and EventId.parse(" ") is None
    assert EventId.parse("run:a:12") == EventId("run:a", 12)
    assert str(EventId("x", 3)) == "x:3"
    for bad in ("12", "x:", "x:-1", ":3", "x:1e3"):
        with pytest.raises(ValueError, match="not an event id of this server"):
            EventId.parse(bad)


async def test_a_reader_learns_that_the_replica_running_the_run_died(replica: Replica) -> None:
    a, b = await replica(), await replica(grace=0.6)
    await a.start("s9", numbered(3, asyncio.Event()), on_error)
    await read_all(a, EventId("s9", 0), stop_after=1)
    assert await b.owner_alive("s9") is True
    # a dies: its tasks stop without ending the log, and its "alive" record goes.
    tasks = [*a._watchers, *(run.task for run in a._runs.values() if run.task is not None)]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    store = await b._state.open()
    await store.delete(REPLICA_KIND, a.replica)
    assert await b.owner_alive("s9") is False
    with pytest.raises(RunLost, match="'s9' stopped before its run ended"):
        await read_all(b, EventId("s9", 1))
    assert await b.owner_alive("never") is None


# --- Runs on workers: the log of a task a broker leases (``daimon serve --broker``).


def broker_logs(broker: Any, grace: float = 30.0) -> RunLogs:
    state = ServerState(MemoryStateStore())
    return RunLogs(state, timeout=30.0, grace=grace, retention=60.0, broker=broker)


async def test_a_broker_run_lives_while_its_task_does_and_is_lost_once_settled_unended() -> None:
    from daimon.distributed import new_task
    from daimon.distributed.brokers.memory import MemoryBroker

    broker = MemoryBroker(lease=5.0)
    logs = broker_logs(broker, grace=0.3)
    await logs.submit("w1", new_task("hi", task_id="w1", metadata=logs.task_metadata("w1")))
    try:
        assert await logs.owner_alive("w1") is True  # pending: a worker will take it
        delivery = await broker.claim(wait=1.0)
        assert delivery is not None and delivery.task.metadata["daimon.stream"] == "w1"
        assert await logs.owner_alive("w1") is True  # running
        await delivery.fail("the worker gave up", retry=False)  # and wrote no end
        assert await logs.owner_alive("w1") is False
        with pytest.raises(RunLost):
            await read_all(logs, EventId("w1", 0))
    finally:
        await logs.aclose()


async def test_cancelling_a_broker_run_ends_its_log_and_cancels_its_task() -> None:
    from daimon.core.tasks import TaskState
    from daimon.distributed import new_task
    from daimon.distributed.brokers.memory import MemoryBroker

    broker = MemoryBroker(lease=5.0)
    logs = broker_logs(broker)
    await logs.submit("w2", new_task("hi", task_id="w2", metadata=logs.task_metadata("w2")))
    try:
        assert await logs.known("w2") and not await logs.known("nope")
        await logs.cancel("w2")
        frames = await read_all(logs, EventId("w2", 0))
        assert len(frames) == 1 and b"event: error\n" in frames[0]
        assert b'"error_type":"RunCancelled"' in frames[0]
        assert (await broker.status("w2")).state is TaskState.CANCELLED
    finally:
        await logs.aclose()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"broker": "redis://localhost"}, "needs a store"),
        ({"queue": "q"}, "needs a broker"),
        ({"broker": "kafka://x", "store": "redis://localhost"}, "unknown broker URL"),
        ({"broker": object(), "store": "redis://localhost"}, "must be a Broker or a URL"),
    ],
)
def test_broker_settings_are_checked(options: dict[str, Any], words: str) -> None:
    from daimon.core.errors import BuilderError
    from daimon.server import ServerSettings

    with pytest.raises(BuilderError, match=words):
        ServerSettings(**options)


# --- POST /prompt on workers: the run is a task; the answer is its outcome.


async def _prompt_on_a_worker(
    agent: Any, request_timeout: float = 10.0, work: bool = True
) -> tuple[Any, Any]:
    """POST /prompt to an app with a broker, a worker running ``agent`` beside it (if ``work``);
    the answer and the broker."""
    import httpx

    from daimon.distributed import Worker
    from daimon.distributed.brokers.memory import MemoryBroker
    from daimon.server import ServerSettings, create_app

    broker, store = MemoryBroker(lease=5.0), MemoryStateStore()
    settings = ServerSettings(broker=broker, store=store, request_timeout=request_timeout)
    app = create_app(agent, settings=settings)
    worker = Worker(agent, broker.handle(), poll=0.05, store=store, should_retry=lambda e: False)
    running = asyncio.create_task(worker.run()) if work else None
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as c:
            answer = await c.post("/prompt", json={"input": "hi", "session_id": "s1"})
    finally:
        worker.stop()
        if running is not None:
            await asyncio.wait_for(running, 10)
    return answer, broker


async def test_a_prompt_on_a_worker_answers_with_the_tasks_result() -> None:
    from daimon import Agent
    from daimon.models import FunctionModel

    agent = Agent(FunctionModel(lambda r: f"echo: {r.messages[-1].text}"), name="echo")
    answer, broker = await _prompt_on_a_worker(agent)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["text"] == "echo: hi" and body["session_id"] == "s1"
    assert (await broker.status(body["run_id"])).state.value == "completed"


async def test_a_prompt_whose_task_failed_answers_with_its_error_typed() -> None:
    from daimon import Agent
    from daimon.core.errors import ModelError
    from daimon.models import FunctionModel

    def fail(request: Any) -> str:
        raise ModelError("the provider is down")

    answer, _ = await _prompt_on_a_worker(Agent(FunctionModel(fail), name="down"))
    assert answer.status_code == 502, answer.text
    assert answer.json()["error"]["type"] == "ModelError"
    assert "the provider is down" in answer.json()["error"]["message"]


async def test_a_prompt_no_worker_answers_in_time_is_504_and_its_task_cancelled() -> None:
    from daimon import Agent
    from daimon.models import FunctionModel

    agent = Agent(FunctionModel(lambda r: "never"), name="idle")
    answer, broker = await _prompt_on_a_worker(agent, request_timeout=0.3, work=False)
    assert answer.status_code == 504, answer.text
    (task_id,) = broker._queue.records  # the one task submitted (its id is not answered)
    assert (await broker.status(task_id)).state.value == "cancelled"
