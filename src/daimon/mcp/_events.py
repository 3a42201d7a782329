"""Resumable streamable HTTP: :class:`MCPEventStore`, the bounded in-memory event store.

With an event store the SDK's streamable HTTP transport numbers every SSE event, opens each
stream with a priming event (an id, empty data, and the ``retry`` interval) for clients of
protocol 2025-11-25 or later, and replays what a client missed when it reconnects with
``GET`` and ``Last-Event-ID`` (SEP-1699). The store keeps the last ``max_events`` events of
all streams together, so memory stays bounded however long the server runs; a client that
comes back after its events were dropped gets nothing replayed (and the stream it missed is
gone), as if the store never had them. One server process only: a server behind a load
balancer needs a shared store (any ``mcp.server.streamable_http.EventStore``).
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
    """The last ``max_events`` SSE events of an MCP HTTP server, kept to replay on reconnect.

    Raises:
        BuilderError: ``max_events`` is below 1.
    """

    def __init__(self, max_events: int = 1024) -> None:
        if max_events < 1:
            raise BuilderError(f"MCPEventStore: max_events must be at least 1, got {max_events}")
        self.max_events = max_events
        # event id -> (stream, message or None for a priming event), oldest first
        self._events: OrderedDict[EventId, tuple[StreamId, JSONRPCMessage | None]] = OrderedDict()
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._events)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Keep ``message`` (``None``: a priming event) as the next event of ``stream_id``."""
        event_id = str(next(self._ids))
        self._events[event_id] = (stream_id, message)
        while len(self._events) > self.max_events:
            self._events.popitem(last=False)
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
        for event_id, (stream, message) in list(self._events.items()):
            if after and stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream_id
