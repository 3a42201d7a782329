"""MCP resumable streams on a :class:`~daimon.core.StateStore`: :class:`StateEventStore`.

The MCP SDK's streamable HTTP transport numbers its SSE events through an ``EventStore`` and,
when a client reconnects with ``Last-Event-ID``, asks it to replay what came after. This one
keeps each SSE stream as a stream of the state store, so any replica can replay events another
replica sent. An event id is ``<stream key>/<number>``; each event is stored as versioned JSON::

    {"v": 1, "stream": "<the SDK's stream id>", "message": <the JSON-RPC message, or null>}

(``null``: a priming event, numbered but never replayed). A stream id that is not a short
plain name (the SDK uses JSON-RPC request ids) is stored under its SHA-256, so that every event
id is safe in an SSE ``id:`` line.
"""

from __future__ import annotations

import hashlib
import json
import re

from daimon.core.optional import require
from daimon.core.state_store import StateStore, check_ttl

require("mcp", extra="mcp")  # first: a missing SDK names its extra

from mcp.server.streamable_http import EventCallback, EventMessage, EventStore  # noqa: E402
from mcp.types import JSONRPCMessage, jsonrpc_message_adapter  # noqa: E402

__all__ = ("FORMAT_VERSION", "StateEventStore")

FORMAT_VERSION = 1
"""The version of the stored event format."""

_PLAIN = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def stream_key(stream_id: str) -> str:
    """The state store's name for an SDK stream: itself if plain, else ``h`` and its SHA-256."""
    if _PLAIN.fullmatch(stream_id):
        return stream_id
    return "h" + hashlib.sha256(stream_id.encode("utf-8", "surrogatepass")).hexdigest()


class StateEventStore(EventStore):
    """An MCP ``EventStore`` whose events are in a :class:`~daimon.core.StateStore`.

    Args:
        store: Where the events are kept (shared by the replicas).
        kind: The kind of state the streams are kept under.
        ttl: Seconds a stream is kept after its last event (``None``: until the store drops it).
        page: Events read at a time while replaying.
    """

    def __init__(
        self,
        store: StateStore,
        *,
        kind: str = "mcp_event",
        ttl: float | None = 3600.0,
        page: int = 500,
    ) -> None:
        self._store = store
        self._kind = kind
        self._ttl = check_ttl(ttl)
        self._page = page

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        """Keep ``message`` (``None``: a priming event) as the next event of ``stream_id``."""
        body = (
            "null"
            if message is None
            else message.model_dump_json(by_alias=True, exclude_unset=True)
        )
        value = f'{{"v": {FORMAT_VERSION}, "stream": {json.dumps(stream_id)}, "message": {body}}}'
        key = stream_key(stream_id)
        number = await self._store.append(self._kind, key, value, ttl=self._ttl)
        return f"{key}/{number}"

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        """Send the events of ``last_event_id``'s stream that came after it; that stream's id.

        ``None`` (nothing sent) when the id is not one of this store's, or its event is gone.
        """
        key, _, number = last_event_id.rpartition("/")
        if not key or not number.isdigit() or not number.isascii() or stream_key(key) != key:
            return None
        after = int(number)
        events = await self._store.read_after(self._kind, key, max(after - 1, 0), self._page)
        if not events or events[0][0] != after:
            return None  # unknown, expired, or dropped: as if never stored
        stream_id: str = json.loads(events[0][1])["stream"]
        events = events[1:]
        while events:
            for seq, value in events:
                await self._send(key, seq, value, send_callback)
            events = await self._store.read_after(self._kind, key, events[-1][0], self._page)
        return stream_id

    async def _send(self, key: str, seq: int, value: str, send_callback: EventCallback) -> None:
        """Send one stored event, unless it is a priming event."""
        stored = json.loads(value)
        if stored["message"] is None:
            return
        message = jsonrpc_message_adapter.validate_python(stored["message"], by_name=False)
        await send_callback(EventMessage(message, f"{key}/{seq}"))
