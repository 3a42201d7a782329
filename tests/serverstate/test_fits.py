"""The contract fits its users: the MCP SDK's EventStore on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from mcp.server.streamable_http import EventMessage
from mcp.types import JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from daimon.core import StateStore
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
