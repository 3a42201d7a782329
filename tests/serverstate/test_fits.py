"""The contract fits its users: the MCP SDK's EventStore and the a2a-sdk's TaskStore on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2
from a2a.utils.errors import UnsupportedOperationError
from mcp.server.streamable_http import EventMessage
from mcp.types import JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from daimon.core import StateStore
from daimon.serverstate.a2a_tasks import StateTaskStore
from daimon.serverstate.mcp_events import StateEventStore, stream_key
from daimon.serverstate.memory import MemoryStateStore

Handles = Callable[[], Awaitable[StateStore]]


@pytest.fixture
def memory_handles() -> Handles:
    """Handles on one store in memory: the one object."""
    memory = MemoryStateStore()

    async def same() -> StateStore:
        return memory

    return same


@pytest.fixture
async def redis_handles(redis_url: str, redis_prefix: str) -> AsyncIterator[Handles]:
    """Handles on one store in Redis, each on its own connection (a replica's)."""
    from daimon.serverstate.redis import RedisStateStore

    opened: list[RedisStateStore] = []

    async def new() -> StateStore:
        opened.append(RedisStateStore(redis_url, prefix=redis_prefix))
        return opened[-1]

    yield new
    for handle in opened:
        await handle.aclose()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.service("redis"))])
def handles(request: pytest.FixtureRequest) -> Handles:
    """Opens handles on one store, in memory or in Redis."""
    found: Handles = request.getfixturevalue(f"{request.param}_handles")
    return found


def _messages() -> list[JSONRPCRequest | JSONRPCNotification | JSONRPCResponse]:
    return [
        JSONRPCNotification(
            jsonrpc="2.0",
            method="notifications/progress",
            params={"progressToken": "t", "progress": 1, "message": "Ünï 🧪"},
        ),
        JSONRPCRequest(jsonrpc="2.0", id=7, method="sampling/createMessage", params={"a": [1]}),
        JSONRPCResponse(
            jsonrpc="2.0", id="req-1", result={"content": [{"type": "text", "text": "ok"}]}
        ),
    ]


class _Sent:
    def __init__(self) -> None:
        self.events: list[EventMessage] = []

    async def __call__(self, event: EventMessage) -> None:
        self.events.append(event)


@pytest.mark.parametrize(
    "stream_id", ["req-1", "_GET_stream", "an id\nwith a newline " + "x" * 300]
)
async def test_mcp_events_replay_on_another_replica(handles: Handles, stream_id: str) -> None:
    first, second = StateEventStore(await handles()), StateEventStore(await handles())
    messages = _messages()
    priming = await first.store_event(stream_id, None)
    ids = [await first.store_event(stream_id, message) for message in messages]
    other = await first.store_event("other", messages[0])  # another stream, interleaved
    assert len({priming, *ids, other}) == 5
    assert all("\n" not in event_id and len(event_id) < 300 for event_id in ids)

    sent = _Sent()
    assert await second.replay_events_after(priming, sent) == stream_id
    assert [e.event_id for e in sent.events] == ids
    assert [e.message for e in sent.events] == messages  # the SDK's own types, equal
    sent = _Sent()
    assert await second.replay_events_after(ids[1], sent) == stream_id
    assert [(e.event_id, e.message) for e in sent.events] == [(ids[2], messages[2])]
    sent = _Sent()
    assert await second.replay_events_after(ids[2], sent) == stream_id
    assert sent.events == []


async def test_mcp_unknown_event_ids_replay_nothing(handles: Handles) -> None:
    events = StateEventStore(await handles())
    known = await events.store_event("s1", _messages()[0])
    sent = _Sent()
    for unknown in ("", "s1", "s1/", "s1/x", "s1/2", "nope/1", "s1/\u0661", "a\nb/1", known + "0"):
        assert await events.replay_events_after(unknown, sent) is None, unknown
    assert sent.events == []
    assert stream_key("s1") == "s1" and stream_key("a b").startswith("h")


def _task(task_id: str) -> a2a_pb2.Task:
    return a2a_pb2.Task(
        id=task_id,
        context_id="ctx-1",
        status=a2a_pb2.TaskStatus(state=a2a_pb2.TASK_STATE_INPUT_REQUIRED),
        history=[
            a2a_pb2.Message(
                message_id="m1",
                role=a2a_pb2.ROLE_USER,
                parts=[a2a_pb2.Part(text="Ünï 🧪")],
            )
        ],
        artifacts=[a2a_pb2.Artifact(artifact_id="a1", parts=[a2a_pb2.Part(text="result")])],
    )


class _Named(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


async def test_a2a_tasks_on_another_replica(handles: Handles) -> None:
    first, second = StateTaskStore(await handles()), StateTaskStore(await handles())
    alice, bob = ServerCallContext(user=_Named("alice")), ServerCallContext(user=_Named("bob"))
    task = _task("task-1")
    await first.save(task, alice)
    assert await second.get("task-1", alice) == task
    assert await second.get("task-1", bob) is None  # tasks are their owner's
    assert await second.get("task-2", alice) is None
    task.status.state = a2a_pb2.TASK_STATE_COMPLETED
    await second.save(task, alice)
    found = await first.get("task-1", alice)
    assert found is not None and found.status.state == a2a_pb2.TASK_STATE_COMPLETED
    long_id = "t" * 2000  # longer than a key: stored under its hash
    await first.save(_task(long_id), alice)
    assert await second.get(long_id, alice) == _task(long_id)
    await second.delete("task-1", alice)
    assert await first.get("task-1", alice) is None
    with pytest.raises(UnsupportedOperationError):
        await first.list(a2a_pb2.ListTasksRequest(), alice)
