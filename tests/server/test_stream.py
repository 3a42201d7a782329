"""POST /prompt/stream: events, heartbeats, terminal events, and cancel once nobody listens."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable

from daimon import Agent, ChatRequest, ChatResponse, ModelError, tool
from daimon.core import codec
from daimon.core.events import Done, ErrorEvent, StreamEvent, TextDelta
from daimon.models import FunctionModel

from .conftest import Calls, LiveServer, calculator, sse_events, streaming

Live = Callable[..., LiveServer]


async def eventually(condition: Callable[[], bool], within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        await asyncio.sleep(0.02)


def stream_lines(server: LiveServer, body: dict[str, object]) -> list[str]:
    with server.client() as client, client.stream("POST", "/prompt/stream", json=body) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert reply.headers["cache-control"] == "no-store"
        return list(reply.iter_lines())


def test_events_stream_as_sse_and_end_with_done(live: Live) -> None:
    server = live(calculator(Calls()))
    frames = [f for f in sse_events(stream_lines(server, {"input": "2 + 3?"})) if f[0] != ":"]
    kinds = [kind for kind, _ in frames]
    assert kinds == [
        "tool_call_start",
        "tool_call_delta",
        "tool_call_end",
        "usage",
        "tool_result",
        "text_delta",
        "usage",
        "done",
    ]
    events = [codec.from_data(StreamEvent, json.loads(data)) for _, data in frames]
    assert [e.kind for e in events] == kinds  # each event is its codec encoding
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert done.response.text == "The answer is 5."
    assert done.response.iterations == 2


def test_a_failed_run_ends_with_an_error_event(live: Live) -> None:
    def failing(request: ChatRequest) -> ChatResponse:
        raise ModelError("provider down", status_code=503)

    server = live(Agent(FunctionModel(failing)))
    frames = sse_events(stream_lines(server, {"input": "x"}))
    kind, data = frames[-1]
    assert kind == "error"
    error = codec.from_data(ErrorEvent, json.loads(data))
    assert (error.error_type, error.message) == ("ModelError", "provider down")
    assert "done" not in [k for k, _ in frames]


def test_heartbeat_comments_keep_an_idle_stream_alive(live: Live) -> None:
    model = streaming(["late answer"], delay=0.5)
    server = live(Agent(model), heartbeat_interval=0.05)
    started = time.monotonic()
    lines = stream_lines(server, {"input": "x"})
    assert time.monotonic() - started >= 0.5
    frames = sse_events(lines)
    pings = [f for f in frames if f[0] == ":"]
    assert len(pings) >= 4, frames
    assert all(text == "ping" for _, text in pings)
    assert frames[-1][0] == "done"


def test_a_stream_past_the_request_timeout_ends_with_a_timeout_error(live: Live) -> None:
    events: list[str] = []

    @tool
    async def slow() -> str:
        """Take long."""
        events.append("start")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        return "done"

    server = live(Agent(streaming([], then_call="slow"), tools=[slow]), request_timeout=0.3)
    frames = sse_events(stream_lines(server, {"input": "x"}))
    kind, data = frames[-1]
    assert kind == "error"
    assert json.loads(data)["error_type"] == "TimeoutError"
    assert events == ["start", "cancelled"]


def test_an_unknown_agent_is_a_404_before_any_stream(live: Live) -> None:
    server = live(calculator(Calls()))
    reply = server.client().post("/prompt/stream", json={"input": "x", "agent": "nobody"})
    assert reply.status_code == 404
    assert reply.json()["error"]["type"] == "not_found"


async def test_a_run_nobody_reads_is_cancelled_after_the_grace_and_leaks_no_task(
    live: Live,
) -> None:
    starts: list[float] = []
    cancelled: list[float] = []

    @tool
    async def slow() -> str:
        """Take long; the model calls it again after every result."""
        starts.append(time.monotonic())
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(time.monotonic())
            raise
        return "done"

    server = live(Agent(streaming(["working"], then_call="slow"), tools=[slow]), stream_grace=0.3)
    baseline = server.task_count()
    async with server.async_client() as client:
        async with client.stream("POST", "/prompt/stream", json={"input": "go"}) as reply:
            async for line in reply.aiter_lines():
                if line == "event: tool_call_end":
                    break
            await eventually(lambda: len(starts) == 1)
            assert server.task_count() > baseline  # the run is alive
        closed = time.monotonic()
    await eventually(lambda: len(cancelled) == 1)
    assert cancelled[0] - closed < 1.0
    await asyncio.sleep(0.3)
    assert len(starts) == 1  # no tool call started after the client left
    await eventually(lambda: server.task_count() == baseline)


async def test_a_client_leaving_while_the_model_streams_starts_no_tool(live: Live) -> None:
    starts: list[str] = []
    model_closed: list[str] = []

    @tool
    def act() -> str:
        """Act."""
        starts.append("act")
        return "acted"

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        try:
            for n in range(20):
                await asyncio.sleep(0.05)
                yield TextDelta(text=f"part {n} ")
            from daimon import ToolCall
            from daimon.core.events import ToolCallEnd

            yield ToolCallEnd(call=ToolCall(id="a", name="act", arguments={}))
        finally:
            model_closed.append("closed")

    server = live(Agent(FunctionModel(stream_function=stream), tools=[act]), stream_grace=0.3)
    baseline = server.task_count()
    async with (
        server.async_client() as client,
        client.stream("POST", "/prompt/stream", json={"input": "go"}) as reply,
    ):
        async for line in reply.aiter_lines():
            if line == "event: text_delta":
                break
    await eventually(lambda: model_closed == ["closed"])
    await asyncio.sleep(1.2)  # longer than the model would have needed to call the tool
    assert starts == []
    await eventually(lambda: server.task_count() == baseline)


async def test_a_client_leaving_a_plain_prompt_cancels_its_run_too(live: Live) -> None:
    starts: list[float] = []
    cancelled: list[float] = []

    @tool
    async def slow() -> str:
        """Take long; the model calls it again after every result."""
        starts.append(time.monotonic())
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(time.monotonic())
            raise
        return "done"

    server = live(Agent(streaming([], then_call="slow"), tools=[slow]))
    baseline = server.task_count()
    async with server.async_client() as client:
        request = asyncio.create_task(client.post("/prompt", json={"input": "go"}))
        await eventually(lambda: len(starts) == 1)
        request.cancel()  # httpx drops the connection
        with contextlib.suppress(asyncio.CancelledError):
            await request
        left = time.monotonic()
    await eventually(lambda: len(cancelled) == 1)
    assert cancelled[0] - left < 1.0
    await asyncio.sleep(0.3)
    assert len(starts) == 1
    await eventually(lambda: server.task_count() == baseline)
