"""Resumable streams: MCPEventStore, and a client resuming a lost stream with Last-Event-ID."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import mcp_types
import pytest
from mcp.server.streamable_http import EventMessage

from daimon import tool
from daimon.core.errors import BuilderError
from daimon.mcp import MCPEventStore, MCPServer, mcp_http_app

from .conftest import serving
from .test_server import _legacy_session


def _message(n: int) -> mcp_types.JSONRPCMessage:
    return mcp_types.JSONRPCNotification(jsonrpc="2.0", method=f"m{n}")  # type: ignore[return-value]


async def _replayed(store: MCPEventStore, after: str) -> tuple[str | None, list[str]]:
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    stream = await store.replay_events_after(after, send)
    return stream, [str(e.event_id) for e in sent]


async def test_the_store_replays_one_streams_later_events_and_stays_bounded() -> None:
    store = MCPEventStore(max_events=4)
    assert store  # an empty store still counts as a store
    priming = await store.store_event("a", None)
    a1 = await store.store_event("a", _message(1))
    b1 = await store.store_event("b", _message(2))
    a2 = await store.store_event("a", _message(3))
    assert await _replayed(store, priming) == ("a", [a1, a2])  # priming events are not replayed
    assert await _replayed(store, b1) == ("b", [])
    assert await _replayed(store, "no-such-id") == (None, [])

    for n in range(4):
        await store.store_event("c", _message(n))
    assert store.count == 4  # the oldest went
    assert await _replayed(store, a1) == (None, [])


async def test_the_store_keeps_at_most_max_bytes_of_json() -> None:
    size = len(_message(1).model_dump_json(by_alias=True))
    store = MCPEventStore(max_bytes=2 * size)
    first = await store.store_event("a", _message(1))
    for n in (2, 3):
        await store.store_event("a", _message(n))
    assert store.count == 2
    assert await _replayed(store, first) == (None, [])
    small = MCPEventStore(max_bytes=size - 1)
    await small.store_event("a", _message(1))  # too large to keep at all
    assert small.count == 0


@pytest.mark.parametrize("limits", [{"max_events": 0}, {"max_bytes": 0}])
def test_the_store_needs_room_for_one_event(limits: dict[str, int]) -> None:
    with pytest.raises(BuilderError, match="must be at least 1"):
        MCPEventStore(**limits)


async def _events(response: httpx.Response, wanted: int) -> list[dict[str, str]]:
    """The first ``wanted`` SSE events of a streaming response (fields by name)."""
    events: list[dict[str, str]] = []
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if event:
                events.append(event)
                event = {}
                if len(events) == wanted:
                    break
            continue
        field, _, value = line.partition(":")
        event[field] = value.removeprefix(" ")
    return events


@tool
async def slow_echo(text: str) -> str:
    """Answers after a pause."""
    await asyncio.sleep(0.5)
    return text


def _call(text: str) -> dict[str, Any]:
    params = {"name": "slow_echo", "arguments": {"text": text}}
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


async def test_a_client_that_loses_its_stream_resumes_it_with_last_event_id() -> None:
    app = mcp_http_app(MCPServer([slow_echo], name="echo"), retry_ms=250)
    async with serving(app) as base, httpx.AsyncClient(timeout=30) as http:
        url = f"{base}/mcp"
        session = await _legacy_session(http, url)
        async with http.stream("POST", url, json=_call("hello"), headers=session) as posted:
            (priming,) = await _events(posted, 1)
        # the stream opened with a priming event: an id, no data, the retry interval
        assert priming.get("data", "") == "" and priming["retry"] == "250" and priming["id"]
        await asyncio.sleep(1.0)  # the answer comes while no stream is open
        resume = {**session, "accept": "text/event-stream", "last-event-id": priming["id"]}
        async with http.stream("GET", url, headers=resume) as resumed:
            assert resumed.status_code == 200
            answers = [e for e in await _events(resumed, 2) if e.get("data")]
        reply = json.loads(answers[0]["data"])
        assert reply["id"] == 7
        assert reply["result"]["content"][0]["text"] == "hello"


async def test_without_resumability_streams_have_no_priming_event() -> None:
    app = mcp_http_app(MCPServer([slow_echo], name="echo"), resumable=False)
    async with serving(app) as base, httpx.AsyncClient(timeout=30) as http:
        url = f"{base}/mcp"
        session = await _legacy_session(http, url)
        async with http.stream("POST", url, json=_call("hi"), headers=session) as posted:
            (first,) = await _events(posted, 1)
        assert "id" not in first and json.loads(first["data"])["id"] == 7


def test_a_negative_retry_is_refused() -> None:
    with pytest.raises(BuilderError, match="retry_ms must be 0 or more"):
        mcp_http_app(MCPServer([slow_echo], name="echo"), retry_ms=-1)
