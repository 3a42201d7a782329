"""A conformance suite for task brokers (:class:`daimon.distributed.Broker`).

Subclass :class:`BrokerConformance` in a test module and provide a ``make_broker`` fixture: an
async callable that opens a new handle on one queue, fresh for each test, taking the options
``lease`` and ``max_deliver`` as keywords, and closes its handles at teardown
(:func:`broker_handles` makes one from a function that opens a handle)::

    class TestRedisBroker(BrokerConformance):
        @pytest.fixture
        async def make_broker(self, redis_url):
            queue = f"test-{uuid.uuid4().hex}"
            async with broker_handles(
                lambda **options: RedisBroker.from_url(redis_url, queue=queue, **options)
            ) as make:
                yield make

Closing a handle that holds deliveries stands for a crashed worker: the suite does so to check
that its tasks come back. The suite checks the contract a worker relies on: at-least-once
delivery, attempt numbers and fencing (one visible result per task), heartbeats, hand-back,
retries up to ``max_deliver`` then dead-lettering (and listing dead letters without consuming
them), cancellation, that no task stays ``running`` once its lease has run out, and (given an
``outage`` fixture, an :class:`Outage`) that a broker whose service is down raises
:class:`~daimon.core.errors.BrokerError`, quickly, and keeps no task whose submit failed.
:class:`TaskStoreConformance` does the same for the task stores that RabbitMQ, SQS, Pub/Sub and
Service Bus keep their records in.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar, Protocol

import pytest

from daimon.core.chat import Usage
from daimon.core.checkpoints import CheckpointState
from daimon.core.errors import BrokerError, BuilderError, InvalidIdError, SerializationError
from daimon.core.messages import Message, ToolCall
from daimon.core.results import ApprovalDecision, ApprovalRequest
from daimon.core.tasks import AgentTask, TaskPause, TaskResult, TaskResume, TaskState
from daimon.distributed import Broker, Delivery
from daimon.kit.task_records import TaskStore

__all__ = (
    "BrokerConformance",
    "BrokerFactory",
    "Outage",
    "TaskStoreConformance",
    "TaskStoreFactory",
    "broker_handles",
    "sample_pause",
    "sample_result",
    "sample_task",
)


class BrokerFactory(Protocol):
    """Opens a new handle on the queue under test."""

    def __call__(self, **options: Any) -> Awaitable[Broker]:
        """A handle with these options (``lease``, ``max_deliver``)."""
        ...


class Outage(Protocol):
    """The service of the broker under test, taken away and given back (the ``outage`` fixture).

    Stop a private instance of the service (never one other tests share), or, where none can be
    started, have handles opened while it is "stopped" point at a closed port. Handles should be
    made with short timeouts: the suite expects each failing call to end within
    :attr:`BrokerConformance.outage_limit` seconds.
    """

    async def open(self, **options: Any) -> Broker:
        """A handle on the queue under test, closed at teardown."""
        ...

    async def stop(self) -> None:
        """Make the service unreachable (for handles opened from now on, at least)."""
        ...

    async def start(self) -> None:
        """Bring the service back, with the task records it held."""
        ...


@contextlib.asynccontextmanager
async def broker_handles(open_handle: Callable[..., Broker]) -> AsyncIterator[BrokerFactory]:
    """A ``make_broker`` factory over ``open_handle``; every handle it opened is closed on exit."""
    handles: list[Broker] = []

    async def make(**options: Any) -> Broker:
        handles.append(open_handle(**options))
        return handles[-1]

    try:
        yield make
    finally:
        # Every handle is closed even when one fails to close; then the first failure is raised.
        failure: BaseException | None = None
        for handle in handles:
            try:
                await handle.aclose()
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


def sample_task(task_id: str = "task-1", input: str = "Hello, 世界 🧪") -> AgentTask:
    """A task using every field."""
    return AgentTask(
        task_id=task_id,
        input=input,
        run_id=f"run-{task_id}",
        session_id="session-1",
        metadata={
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "nested": {"list": [1, 2.5, None, True], "text": "ünï"},
        },
    )


def sample_result(task_id: str = "task-1", output: str = "done ✓") -> TaskResult:
    """A result using every field."""
    return TaskResult(
        task_id=task_id,
        output=output,
        iterations=3,
        cost=0.0125,
        usage=Usage(input_tokens=120, output_tokens=45, cached_tokens=10, requests=3),
    )


def sample_pause(task: AgentTask) -> TaskPause:
    """A pause of ``task``'s run: two tool calls wait for approval (call ids ``c1``, ``c2``)."""
    run_id = task.run_id or task.task_id
    calls = (
        ToolCall(id="c1", name="refund", arguments={"order": "A-1", "amount": 12.5}),
        ToolCall(id="c2", name="refund", arguments={"order": "B-2", "note": "ünï"}),
    )
    state = CheckpointState(
        run_id=run_id,
        messages=(Message.user(task.input), Message.assistant("", tool_calls=calls)),
        iteration=1,
        usage=Usage(input_tokens=10, output_tokens=5, requests=1),
        pending_tool_calls=calls,
        session_id=task.session_id,
    )
    approvals = tuple(ApprovalRequest(id=c.id, call=c, run_id=run_id) for c in calls)
    return TaskPause(task=task, approvals=approvals, state=state)


async def _calls_during_outage(broker: Broker, task_id: str, limit: float) -> bool:
    """Call every operation on ``broker``; whether its submit of ``task_id`` raised BrokerError.

    Each call must end within ``limit`` seconds, by succeeding, by ``KeyError`` (an unknown
    task, read from a store that is still up) or by ``BrokerError``: nothing else may escape.
    """
    refused = False
    calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("submit", lambda: broker.submit(sample_task(task_id))),
        ("status", lambda: broker.status("before")),
        ("cancel", lambda: broker.cancel("never-submitted")),
        ("decide", lambda: broker.decide("before", {"c1": True})),
        ("claim", lambda: broker.claim(wait=0.1)),
        ("dead_letters", lambda: broker.dead_letters()),
    ]
    for name, call in calls:
        started = time.monotonic()
        try:
            await asyncio.wait_for(call(), limit)
        except BrokerError as exc:
            refused = refused or name == "submit"
            if name == "submit":
                assert exc.task_id == task_id, exc
        except KeyError:
            pass
        took = time.monotonic() - started
        assert took < limit, f"{name} took {took:.1f}s with the service down"
    return refused


async def _claim(broker: Broker, wait: float = 2.0) -> Delivery:
    delivery = await broker.claim(wait=wait)
    assert delivery is not None, f"no task was delivered within {wait}s"
    return delivery


class BrokerConformance:
    """Tests every daimon task broker must pass."""

    lease: ClassVar[float] = 0.6
    """The short lease the lease tests use, in seconds."""
    redelivers_when_lease_expires: ClassVar[bool] = True
    """Whether a delivery whose worker is alive but silent is redelivered after the lease.

    RabbitMQ redelivers only when the worker's connection closes; then this is ``False`` and
    the stale-attempt test is skipped.
    """
    outage_limit: ClassVar[float] = 4.0
    """Seconds one call to a broker whose service is down may take before it raises."""

    @pytest.fixture
    async def broker(self, make_broker: BrokerFactory) -> Broker:
        """A handle with default options on the queue under test."""
        return await make_broker()

    async def test_unknown_task_is_a_key_error(self, broker: Broker) -> None:
        """``status`` and ``cancel`` of a task never submitted raise ``KeyError``."""
        with pytest.raises(KeyError):
            await broker.status("no-such-task")
        with pytest.raises(KeyError):
            await broker.cancel("no-such-task")

    async def test_submitted_task_is_pending(self, broker: Broker) -> None:
        """A submitted task is pending until a worker claims it."""
        assert await broker.submit(sample_task()) == "task-1"
        status = await broker.status("task-1")
        assert status.state is TaskState.PENDING
        assert status.result is None

    async def test_task_and_result_round_trip(self, make_broker: BrokerFactory) -> None:
        """The delivered task equals the submitted one (attempt 1); its result reads back equal."""
        client, worker = await make_broker(), await make_broker()
        await client.submit(sample_task())
        delivery = await _claim(worker)
        assert delivery.task == dataclasses.replace(sample_task(), attempt=1)
        assert (await client.status("task-1")).state is TaskState.RUNNING
        assert await delivery.complete(sample_result()) is True
        status = await client.status("task-1")
        assert status.state is TaskState.COMPLETED
        assert status.result == sample_result()
        assert await worker.claim(wait=0.2) is None

    async def test_submit_is_idempotent(self, broker: Broker) -> None:
        """Submitting a task id again queues nothing more."""
        await broker.submit(sample_task())
        await broker.submit(sample_task())
        delivery = await _claim(broker)
        assert await broker.claim(wait=0.3) is None
        assert await delivery.complete(sample_result())
        await broker.submit(sample_task())  # an ended task is not run again either
        assert await broker.claim(wait=0.3) is None
        assert (await broker.status("task-1")).result == sample_result()

    async def test_a_task_settles_once(self, broker: Broker) -> None:
        """After a result is recorded, no other result or failure is accepted."""
        await broker.submit(sample_task())
        delivery = await _claim(broker)
        assert await delivery.complete(sample_result()) is True
        assert await delivery.complete(sample_result()) is True  # a retry whose answer was lost
        assert await delivery.complete(sample_result(output="second")) is False
        assert await delivery.fail("late failure") is False
        assert await delivery.heartbeat() is False
        status = await broker.status("task-1")
        assert status.state is TaskState.COMPLETED
        assert status.result == sample_result()

    async def test_fail_without_retry_ends_the_task(self, broker: Broker) -> None:
        """A failure without retry is final: status failed, with the error; no redelivery."""
        await broker.submit(sample_task())
        delivery = await _claim(broker)
        assert await delivery.fail("ValueError: bad input") is True
        status = await broker.status("task-1")
        assert status.state is TaskState.FAILED
        assert status.error is not None and "ValueError: bad input" in status.error
        assert await broker.claim(wait=0.3) is None

    async def test_retries_until_max_deliver_then_dead_letters(
        self, make_broker: BrokerFactory
    ) -> None:
        """A task failing every attempt runs ``max_deliver`` times, then is dead-lettered."""
        broker = await make_broker(max_deliver=3)
        await broker.submit(sample_task())
        attempts = []
        for _ in range(3):
            delivery = await _claim(broker)
            attempts.append(delivery.task.attempt)
            assert await delivery.fail(f"boom {delivery.task.attempt}", retry=True) is True
            if delivery.task.attempt < 3:
                status = await broker.status("task-1")
                assert status.state is TaskState.PENDING
        assert attempts == [1, 2, 3]
        assert await broker.claim(wait=0.3) is None
        status = await broker.status("task-1")
        assert status.state is TaskState.FAILED
        assert status.error is not None
        assert "dead-lettered after 3 attempts" in status.error
        assert "boom 3" in status.error

    async def test_retry_waits_for_its_delay(self, broker: Broker) -> None:
        """A retried task is not delivered again before its delay."""
        await broker.submit(sample_task())
        delivery = await _claim(broker)
        start = time.monotonic()
        await delivery.fail("transient", retry=True, delay=0.5)
        again = await _claim(broker, wait=5.0)
        assert time.monotonic() - start >= 0.45
        assert again.task.attempt == 2
        assert await again.complete(sample_result())

    async def test_release_hands_back_without_counting(self, make_broker: BrokerFactory) -> None:
        """A released task comes back at once, and the released attempt does not count."""
        broker = await make_broker(max_deliver=1)
        await broker.submit(sample_task())
        first = await _claim(broker)
        await first.release()
        assert (await broker.status("task-1")).state is TaskState.PENDING
        second = await _claim(broker)
        assert second.task.attempt == 2
        assert await first.complete(sample_result(output="stale")) is False
        assert await second.complete(sample_result()) is True
        assert (await broker.status("task-1")).result == sample_result()

    async def test_lost_worker_task_runs_again(self, make_broker: BrokerFactory) -> None:
        """A crashed worker's task leaves ``running`` once its lease ends and runs again."""
        lease = self.lease
        client = await make_broker(lease=lease)
        crashed = await make_broker(lease=lease)
        await client.submit(sample_task())
        first = await _claim(crashed)
        assert first.task.attempt == 1
        await crashed.aclose()  # the worker dies holding the task
        await asyncio.sleep(lease + 0.3)
        assert (await client.status("task-1")).state is TaskState.PENDING
        rescuer = await make_broker(lease=lease)
        second = await _claim(rescuer, wait=lease * 6)
        assert second.task.attempt == 2
        assert await second.complete(sample_result()) is True
        assert (await client.status("task-1")).result == sample_result()

    async def test_stale_attempt_cannot_write(self, make_broker: BrokerFactory) -> None:
        """A silent worker loses its lease; its later writes are refused (attempt fencing)."""
        if not self.redelivers_when_lease_expires:
            pytest.skip("this broker redelivers only when the worker's connection closes")
        lease = self.lease
        slow, fast = await make_broker(lease=lease), await make_broker(lease=lease)
        await slow.submit(sample_task())
        first = await _claim(slow)
        second = await _claim(fast, wait=lease * 6)
        assert second.task.attempt == 2
        assert await first.heartbeat() is False
        assert await first.complete(sample_result(output="stale")) is False
        assert await first.fail("stale failure", retry=True) is False
        assert (await fast.status("task-1")).state is TaskState.RUNNING
        assert await second.complete(sample_result()) is True
        assert (await fast.status("task-1")).result == sample_result()

    async def test_heartbeats_keep_the_lease(self, make_broker: BrokerFactory) -> None:
        """While heartbeats renew it, a lease outlives its length and no one else gets the task."""
        lease = self.lease
        holder, other = await make_broker(lease=lease), await make_broker(lease=lease)
        await holder.submit(sample_task())
        delivery = await _claim(holder)

        async def beat() -> None:
            for _ in range(9):
                await asyncio.sleep(lease / 3)
                assert await delivery.heartbeat() is True

        beating = asyncio.create_task(beat())
        assert await other.claim(wait=lease * 2.5) is None
        await beating
        assert (await other.status("task-1")).state is TaskState.RUNNING
        assert await delivery.complete(sample_result()) is True

    async def test_cancel_a_pending_task(self, broker: Broker) -> None:
        """A cancelled pending task is never delivered; cancelling again says ``False``."""
        await broker.submit(sample_task())
        assert await broker.cancel("task-1") is True
        assert (await broker.status("task-1")).state is TaskState.CANCELLED
        assert await broker.claim(wait=0.3) is None
        assert await broker.cancel("task-1") is False

    async def test_cancel_a_running_task(self, make_broker: BrokerFactory) -> None:
        """Cancelling a running task reaches its worker through the next heartbeat."""
        client, worker = await make_broker(), await make_broker()
        await client.submit(sample_task())
        delivery = await _claim(worker)
        assert await client.cancel("task-1") is True
        assert (await client.status("task-1")).state is TaskState.CANCELLED
        assert await delivery.heartbeat() is False
        assert await delivery.complete(sample_result()) is False
        assert (await client.status("task-1")).state is TaskState.CANCELLED
        assert await worker.claim(wait=0.3) is None

    async def test_cancel_an_ended_task(self, broker: Broker) -> None:
        """An ended task cannot be cancelled."""
        await broker.submit(sample_task())
        assert await (await _claim(broker)).complete(sample_result())
        assert await broker.cancel("task-1") is False
        assert (await broker.status("task-1")).state is TaskState.COMPLETED

    async def test_poison_task_dead_lettered_after_max_deliver(
        self, make_broker: BrokerFactory
    ) -> None:
        """A task whose worker dies on every attempt runs exactly ``max_deliver`` times."""
        lease = self.lease
        client = await make_broker(lease=lease, max_deliver=2)
        await client.submit(sample_task())
        attempts = []
        for _ in range(2):
            worker = await make_broker(lease=lease, max_deliver=2)
            attempts.append((await _claim(worker, wait=lease * 6)).task.attempt)
            await worker.aclose()  # dies on it
        survivor = await make_broker(lease=lease, max_deliver=2)
        assert await survivor.claim(wait=lease * 4) is None
        assert attempts == [1, 2]
        status = await client.status("task-1")
        assert status.state is TaskState.FAILED
        assert status.error is not None
        assert "dead-lettered after 2 attempts" in status.error
        assert "lost" in status.error

    async def test_dead_letters_are_listed_without_consuming(
        self, make_broker: BrokerFactory
    ) -> None:
        """Dead letters are listed once each, oldest first, with why; listing consumes nothing."""
        broker = await make_broker(max_deliver=2)
        for bad in (0, 10_001, 1.5):
            with pytest.raises(BuilderError, match="limit"):
                await broker.dead_letters(bad)  # type: ignore[arg-type]
        assert await broker.dead_letters() == []
        await broker.submit(sample_task("poison"))
        for attempt in (1, 2):
            delivery = await _claim(broker)
            assert delivery.task.attempt == attempt
            assert await delivery.fail(f"boom {attempt}", retry=True) is True
        await broker.submit(sample_task("healthy"))
        assert await (await _claim(broker)).complete(sample_result("healthy"))
        await broker.submit(sample_task("later"))
        assert await (await _claim(broker)).fail("ValueError: nope") is True

        listed = await broker.dead_letters()
        assert [d.task.task_id for d in listed] == ["poison", "later"]
        poison, later = listed
        assert poison.task == sample_task("poison")
        assert poison.attempts == 2
        assert "dead-lettered after 2 attempts" in poison.reason
        assert "boom 2" in poison.reason
        assert "ValueError: nope" in later.reason
        assert later.attempts in (0, 1)  # brokers that keep no count say 0
        if poison.dead_at and later.dead_at:
            assert abs(poison.dead_at - time.time()) < 300
            assert poison.dead_at <= later.dead_at
        assert await broker.dead_letters() == listed  # nothing was consumed
        assert await broker.dead_letters(limit=1) == listed[:1]
        assert await broker.claim(wait=0.3) is None  # nor queued again
        assert (await broker.status("poison")).state is TaskState.FAILED
        assert await (await make_broker(max_deliver=2)).dead_letters() == listed

    async def test_concurrent_workers_get_each_task_once(self, make_broker: BrokerFactory) -> None:
        """Tasks claimed by several workers at once are each delivered to one of them."""
        client = await make_broker()
        workers = [await make_broker() for _ in range(4)]
        ids = [f"t{n}" for n in range(24)]
        for task_id in ids:
            await client.submit(sample_task(task_id, input=task_id))
        seen: list[str] = []

        async def work(handle: Broker) -> None:
            while (delivery := await handle.claim(wait=0.5)) is not None:
                seen.append(delivery.task.task_id)
                assert await delivery.complete(sample_result(delivery.task.task_id))

        await asyncio.gather(*(work(w) for w in workers))
        assert sorted(seen) == sorted(ids)
        for task_id in ids:
            status = await client.status(task_id)
            assert status.result == sample_result(task_id)

    async def test_unstorable_task_is_refused(self, broker: Broker) -> None:
        """A task the codec cannot carry raises ``SerializationError`` and is not queued."""
        bad = AgentTask(task_id="bad", input="x", metadata={"x": object()})
        with pytest.raises(SerializationError):
            await broker.submit(bad)
        with pytest.raises(KeyError):
            await broker.status("bad")
        assert await broker.claim(wait=0.2) is None

    @pytest.mark.parametrize("bad", ["", "\ud800", "nul\0", "x" * 1025])
    async def test_an_invalid_task_id_is_refused(self, broker: Broker, bad: str) -> None:
        """An id that is empty, not valid Unicode, holds NUL or is too long: ``InvalidIdError``.

        Every operation that takes a task id refuses it the same way, before sending anything.
        """
        with pytest.raises(InvalidIdError) as raised:
            await broker.submit(AgentTask(task_id=bad, input="x"))
        assert raised.value.id_kind == "task"
        calls = (broker.status, broker.cancel, lambda task_id: broker.decide(task_id, {}))
        for call in calls:
            with pytest.raises(InvalidIdError):
                await call(bad)
        assert await broker.claim(wait=0.2) is None

    async def test_settle_by_task_id(self, broker: Any) -> None:
        """The seed's by-id loop, ``receive``/``complete``/``fail``, works too."""
        await broker.submit(sample_task("a"))
        await broker.submit(sample_task("b"))
        got = [await broker.receive(), await broker.receive()]
        assert sorted(t.task_id for t in got if t is not None) == ["a", "b"]
        await broker.complete("a", sample_result("a"))
        await broker.fail("b", "broken")
        assert (await broker.status("a")).result == sample_result("a")
        assert (await broker.status("b")).state is TaskState.FAILED

    async def test_a_paused_task_waits_for_decisions(self, make_broker: BrokerFactory) -> None:
        """A paused task reads ``PAUSED`` with its approvals and runs nothing until ``decide``.

        Decisions queue it again, once, carrying the run's state and the decisions; the pause
        used up no attempt (``max_deliver=1`` here).
        """
        client, worker = await make_broker(max_deliver=1), await make_broker(max_deliver=1)
        await client.submit(sample_task())
        first = await _claim(worker)
        pause = sample_pause(first.task)
        assert await first.pause(pause) is True
        assert await first.pause(pause) is True  # a retry whose first answer was lost
        status = await client.status("task-1")
        assert (status.state, status.approvals, status.result) == (
            TaskState.PAUSED,
            pause.approvals,
            None,
        )
        assert await worker.claim(wait=0.3) is None  # nothing runs while it waits
        assert await first.complete(sample_result()) is False  # the paused attempt has ended
        assert await first.heartbeat() is False
        decisions = {"c1": ApprovalDecision.approve(), "c2": ApprovalDecision.reject("no")}
        assert await client.decide("task-1", decisions) is True
        assert await client.decide("task-1", {"c1": True}) is False  # decided once
        assert (await client.status("task-1")).state is TaskState.PENDING
        resumed = await _claim(worker)
        assert resumed.task == dataclasses.replace(
            sample_task(), attempt=2, resume=TaskResume(state=pause.state, decisions=decisions)
        )
        assert await worker.claim(wait=0.3) is None
        assert await resumed.complete(sample_result()) is True
        assert (await client.status("task-1")).result == sample_result()
        assert await client.decide("task-1", decisions) is False  # it has ended
        with pytest.raises(KeyError):
            await client.decide("no-such-task", decisions)

    async def test_a_paused_task_can_be_cancelled(self, broker: Broker) -> None:
        """Cancelling a paused task ends it: decisions come too late."""
        await broker.submit(sample_task())
        delivery = await _claim(broker)
        assert await delivery.pause(sample_pause(delivery.task)) is True
        assert await broker.cancel("task-1") is True
        assert (await broker.status("task-1")).state is TaskState.CANCELLED
        assert await broker.decide("task-1", {"c1": True, "c2": True}) is False
        assert await broker.claim(wait=0.3) is None

    async def test_an_unreachable_service_is_a_broker_error(self, outage: Outage) -> None:
        """With its service down, every operation raises ``BrokerError`` (nothing else), fast.

        A submit that raised leaves no record behind; one made before the outage is kept. A
        handle opened before the outage may also find the service still there (a closed port
        stands for the outage): then its calls succeed.
        """
        early = await outage.open()
        await early.submit(sample_task("before"))
        await outage.stop()
        late = await outage.open()
        early_refused = await _calls_during_outage(early, "lost-early", self.outage_limit)
        assert await _calls_during_outage(late, "lost-late", self.outage_limit), (
            "a submit to a broker whose service is down did not raise BrokerError"
        )
        await outage.start()
        after = await outage.open()
        for task_id in ["lost-late", "lost-early"] if early_refused else ["lost-late"]:
            with pytest.raises(KeyError):
                await after.status(task_id)
        # (A handle that still reached the service may have claimed it.)
        assert (await after.status("before")).state in (TaskState.PENDING, TaskState.RUNNING)


class TaskStoreFactory(Protocol):
    """Opens the task store under test, empty for each test."""

    def __call__(self) -> Awaitable[TaskStore]:
        """A store on a fresh queue."""
        ...


class TaskStoreConformance:
    """Tests every :class:`~daimon.kit.task_records.TaskStore` must pass.

    Subclass it and provide a ``make_store`` fixture (a :class:`TaskStoreFactory`) that closes
    its stores at teardown. The brokers that keep records in a store rely on these rules.
    """

    @pytest.fixture
    async def store(self, make_store: TaskStoreFactory) -> TaskStore:
        """The store under test."""
        return await make_store()

    async def test_create_once(self, store: TaskStore) -> None:
        """A new id makes a pending record; the same id again is refused."""
        assert await store.create("t") is True
        assert await store.create("t") is False
        assert (await store.status("t")).state is TaskState.PENDING
        with pytest.raises(KeyError):
            await store.status("unknown")

    async def test_withdraw_a_pending_task(self, store: TaskStore) -> None:
        """A record no attempt has begun is removed; the id can then be created again."""
        await store.create("t")
        assert await store.withdraw("t") is True
        with pytest.raises(KeyError):
            await store.status("t")
        assert await store.withdraw("t") is False
        assert await store.create("t") is True

    async def test_withdraw_keeps_a_started_or_ended_task(self, store: TaskStore) -> None:
        """A record an attempt has begun stays (its message was sent after all), as does an end."""
        await store.create("run")
        assert await store.begin("run", lease=30.0, max_deliver=3) == ("run", 1.0)
        assert await store.withdraw("run") is False
        assert (await store.status("run")).state is TaskState.RUNNING
        await store.settle("run", 1, "release", max_deliver=3)  # pending again, but started once
        assert await store.withdraw("run") is False
        await store.create("gone")
        assert await store.cancel("gone") is True
        assert await store.withdraw("gone") is False
        assert (await store.status("gone")).state is TaskState.CANCELLED

    async def test_only_the_newest_attempt_settles_once(self, store: TaskStore) -> None:
        """A stale attempt is refused, and a task settles once."""
        await store.create("t")
        await store.begin("t", lease=0.2, max_deliver=3)
        await asyncio.sleep(0.3)  # the lease runs out: the next begin is attempt 2
        assert await store.begin("t", lease=30.0, max_deliver=3) == ("run", 2.0)
        assert await store.settle("t", 1, "complete", max_deliver=3, result=sample_result("t")) == (
            "stale"
        )
        assert await store.settle("t", 2, "complete", max_deliver=3, result=sample_result("t")) == (
            "ok"
        )
        assert await store.settle("t", 2, "complete", max_deliver=3, result=sample_result("t")) == (
            "ok"  # the same result again: a retry whose first answer was lost
        )
        assert await store.settle("t", 2, "fail", max_deliver=3, error="late") == "ended"
        assert (await store.status("t")).result == sample_result("t")
