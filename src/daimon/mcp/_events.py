"""Resumable streamable HTTP: :class:`MCPEventStore`, the bounded in-memory event store.

With an event store the SDK's streamable HTTP transport numbers every SSE event, opens each
stream with a priming event (an id, empty data, and the ``retry`` interval) for clients of
protocol 2025-11-25 or later, and replays what a client missed when it reconnects with
``GET`` and ``Last-Event-ID`` (SEP-1699). The store keeps the latest events of all streams
together, at most ``max_events`` of them and ``max_bytes`` of JSON, so memory stays bounded
however long the server runs and however large its tool results; a client that comes back
after its events were dropped gets nothing replayed, as if the store never had them. One
server process only: a server behind a load balancer needs a shared store (any
``mcp.server.streamable_http.EventStore``).
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import itertools
from collections import OrderedDict

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

from daimon.core.errors import BuilderError

__all__ = ("MCPEventStore",)


class MCPEventStore(EventStore):
    """The latest SSE events of an MCP HTTP server, kept to replay when a client reconnects.

    Args:
        max_events: The most events kept.
        max_bytes: The most JSON kept, summed over the events (an event larger than this
            alone is not kept at all).

    Raises:
        BuilderError: A limit is below 1.
    """

    def __init__(self, max_events: int = 1024, max_bytes: int = 16 * 1024 * 1024) -> None:
        if max_events < 1 or max_bytes < 1:
            raise BuilderError(
                f"MCPEventStore: max_events and max_bytes must be at least 1, got "
                f"{max_events} and {max_bytes}"
            )
        self.max_events = max_events
        self.max_bytes = max_bytes
        # event id -> (stream, message or None for a priming event, its size), oldest first
        self._events: OrderedDict[EventId, tuple[StreamId, JSONRPCMessage | None, int]] = (
            OrderedDict()
        )
        self._bytes = 0
        self._ids = itertools.count(1)

    @property
    def count(self) -> int:
        """How many events are kept now (a store is never falsy: the SDK tests it for truth)."""
        return len(self._events)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Keep ``message`` (``None``: a priming event) as the next event of ``stream_id``."""
        event_id = str(next(self._ids))
        size = 0 if message is None else len(message.model_dump_json(by_alias=True))
        if size > self.max_bytes:
            return event_id  # numbered, so the stream goes on; never replayed
        self._events[event_id] = (stream_id, message, size)
        self._bytes += size
        while len(self._events) > self.max_events or self._bytes > self.max_bytes:
            self._bytes -= self._events.popitem(last=False)[1][2]
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send the events of ``last_event_id``'s stream that came after it; that stream.

        ``None`` (nothing sent) when the id is unknown or already dropped.
        """
        found = self._events.get(last_event_id)
        if found is None:
            return None
        stream_id = found[0]
        after = False
        for event_id, (stream, message, _size) in list(self._events.items()):
            if after and stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream_id
