"""Test kit for model providers: a wire-format server and a conformance suite.

:class:`WireServer` is a small Starlette app under uvicorn on loopback that replays scripted
replies (JSON bodies, server-sent event streams, error bodies with headers, a connection cut
mid-stream) and records every request body, so a provider's official SDK can be pointed at it
with ``base_url`` and nothing inside the client is patched. It runs on :class:`LoopbackServer`,
which serves any ASGI app the same way (for wire-format fakes of other services).

:class:`ModelConformance` is a base class of provider-neutral tests: a provider's test module
subclasses it, says how to build the model and how its wire format encodes a response, and
inherits the whole suite::

    class TestOpenAIModel(ModelConformance):
        provider = "openai"

        def make_model(self, base_url):
            return OpenAIModel("gpt-test", api_key="test", base_url=base_url + "/v1")

        def encode_response(self, response): ...  # a chat.completion body
        def encode_stream(self, response, *, finished=True): ...  # chat.completion.chunk SSEs
        def encode_error(self, status, message): ...  # an error body
        def decode_request(self, body): ...  # the JSON request back into a ChatRequest

Each test then talks to the model over real HTTP, for real.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, ClassVar, Self

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from daimon.agent import Agent
from daimon.core.chat import ChatRequest, ChatResponse, ResponseFormat, StopReason, Usage
from daimon.core.errors import ModelError, StreamClosedError
from daimon.core.events import (
    Done,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from daimon.core.messages import ImagePart, Message, Role, TextPart, ToolCall
from daimon.core.protocols import Model
from daimon.core.tools import ToolSpec
from daimon.kit.streaming import StreamAccumulator
from daimon.tools import tool

__all__ = (
    "LoopbackServer",
    "ModelConformance",
    "RecordedRequest",
    "SSE",
    "ScriptedReply",
    "WireServer",
    "iter_chunks",
    "sample_request",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SSE:
    """One server-sent event: ``data`` is text, or a JSON value sent as JSON."""

    data: Any
    event: str | None = None

    def encode(self) -> bytes:
        """The event as it goes on the wire."""
        data = self.data if isinstance(self.data, str) else json.dumps(self.data)
        head = f"event: {self.event}\n" if self.event is not None else ""
        body = "".join(f"data: {line}\n" for line in data.split("\n"))
        return (head + body + "\n").encode()


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """A request the server received."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    """Header names lower-cased."""
    body: Any
    """The JSON body, or ``None`` when there was none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedReply:
    """What the server answers to the next request."""

    status: int = 200
    body: Any = None
    """A JSON body (or text, sent as is)."""
    events: Sequence[SSE] | None = None
    """Server-sent events: the reply is an SSE stream when set."""
    cut: bool = False
    """Close the connection after the events, without ending the response."""
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    delay: float = 0.0
    """Seconds to wait before answering."""


class _ConnectionCut(Exception):
    """Raised inside the app to make uvicorn drop the connection mid-response."""


class _DropCutErrors(logging.Filter):
    """Keeps uvicorn from logging the connection cuts tests ask for."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, _ConnectionCut):
                return False
            exc = exc.__cause__ or exc.__context__
        return True


class LoopbackServer:
    """An ASGI app served by uvicorn on a free ``127.0.0.1`` port, in a background thread.

    Use it as a context manager (or :meth:`start` and :meth:`stop`).

    Args:
        app: The ASGI application to serve.
        name: What the server is, for its thread and the error when it does not start.
    """

    def __init__(self, app: Any, *, name: str = "loopback server") -> None:
        self._app = app
        self._name = name
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.url = ""
        """``http://127.0.0.1:<port>``, once started."""

    def start(self) -> None:
        """Start serving on a free loopback port (nothing if already serving).

        Raises:
            RuntimeError: The server did not start within five seconds.
        """
        if self._server is not None:
            return
        # IPPROTO_TCP spelled out: asyncio turns Nagle off only for sockets that say they are TCP,
        # and with Nagle on every small response waits ~40 ms for an ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._socket = sock
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self._app,
            log_config=None,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = server = uvicorn.Server(config)
        self._thread = thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name=self._name, daemon=True
        )
        thread.start()
        for _ in range(500):
            if server.started or not thread.is_alive():
                break
            time.sleep(0.01)
        if not server.started:
            self.stop()
            raise RuntimeError(f"the {self._name} did not start")

    def stop(self) -> None:
        """Stop serving. Idempotent."""
        server, thread, sock = self._server, self._thread, self._socket
        self._server = self._thread = self._socket = None
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(timeout=5)
        if sock is not None:
            sock.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class WireServer(LoopbackServer):
    """Replays scripted replies over real HTTP on ``127.0.0.1`` and records the requests.

    Replies are answered in order, whatever the path. Use it as a context manager (or
    :meth:`start` and :meth:`stop`); it runs in a background thread.
    """

    def __init__(self) -> None:
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])
        super().__init__(app, name="wire server")
        self._lock = threading.Lock()
        self._replies: collections.deque[ScriptedReply] = collections.deque()
        self._requests: list[RecordedRequest] = []
        self._filter = _DropCutErrors()

    # ------------------------------------------------------------------ scripting
    def reply(self, reply: ScriptedReply) -> None:
        """Queue a reply."""
        with self._lock:
            self._replies.append(reply)

    def reply_json(
        self,
        body: Any,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue a JSON reply."""
        self.reply(ScriptedReply(status=status, body=body, headers=headers or {}, delay=delay))

    def reply_sse(
        self,
        events: Sequence[SSE],
        *,
        cut: bool = False,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Queue an SSE stream; ``cut`` drops the connection after the events."""
        self.reply(ScriptedReply(events=tuple(events), cut=cut, headers=headers or {}, delay=delay))

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def last(self) -> RecordedRequest:
        """The latest request."""
        with self._lock:
            if not self._requests:
                raise AssertionError("the wire server has received no request")
            return self._requests[-1]

    @property
    def pending(self) -> int:
        """Replies queued and not yet used."""
        with self._lock:
            return len(self._replies)

    def reset(self) -> None:
        """Forget queued replies and recorded requests."""
        with self._lock:
            self._replies.clear()
            self._requests.clear()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start serving on a free loopback port (nothing if already serving)."""
        logging.getLogger("uvicorn.error").addFilter(self._filter)
        super().start()

    def stop(self) -> None:
        """Stop serving. Idempotent."""
        super().stop()
        logging.getLogger("uvicorn.error").removeFilter(self._filter)

    # ------------------------------------------------------------------ serving
    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        recorded = RecordedRequest(
            method=request.method,
            path=request.url.path,
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
        )
        with self._lock:
            self._requests.append(recorded)
            reply = self._replies.popleft() if self._replies else None
        if reply is None:
            return JSONResponse(
                {"error": {"message": "wire server: no scripted reply", "type": "test_error"}},
                status_code=418,
            )
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.events is None:
            if isinstance(reply.body, str):
                return Response(reply.body, status_code=reply.status, headers=dict(reply.headers))
            return JSONResponse(reply.body, status_code=reply.status, headers=dict(reply.headers))
        return StreamingResponse(
            _stream(reply.events, cut=reply.cut),
            status_code=reply.status,
            headers={"cache-control": "no-cache", **reply.headers},
            media_type="text/event-stream",
        )


async def _stream(events: Sequence[SSE], *, cut: bool) -> AsyncIterator[bytes]:
    for event in events:
        yield event.encode()
        await asyncio.sleep(0)
    if cut:
        raise _ConnectionCut("connection cut on purpose")


def iter_chunks(text: str, parts: int = 2) -> Iterator[str]:
    """Split ``text`` into ``parts`` non-empty pieces (fewer when it is short)."""
    if not text:
        return
    size = max(1, -(-len(text) // parts))
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _closed_port_url() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


_WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


def sample_request() -> ChatRequest:
    """A request using every feature a chat provider maps: roles, tools, images, options."""
    return ChatRequest(
        messages=(
            Message.system("You are terse."),
            Message.user(
                [
                    TextPart(text="Weather here and in these pictures?"),
                    ImagePart(url="https://example.com/cat.png"),
                    ImagePart(data=b"\x89PNG\r\n\x1a\n\x00\xff", media_type="image/png"),
                ]
            ),
            Message.assistant(
                "Checking.",
                [
                    ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
                    ToolCall(id="call_2", name="get_weather", arguments={"city": "Oslo"}),
                ],
            ),
            Message.tool("call_1", "sunny", name="get_weather"),
            Message.tool("call_2", "no such city", name="get_weather", is_error=True),
            Message.assistant("Paris is sunny."),
            Message.user("And Rome?"),
        ),
        tools=(_WEATHER,),
        temperature=0.25,
        max_tokens=321,
        tool_choice="get_weather",
        response_format=ResponseFormat(
            name="answer",
            schema={"type": "object", "properties": {"text": {"type": "string"}}},
        ),
    )


_PROMPT = ChatRequest(messages=(Message.user("Hi"),))
_USAGE = Usage(input_tokens=12, output_tokens=4, requests=1)


@tool(name="add_numbers")
def _add_numbers(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool(name="multiply_numbers")
def _multiply_numbers(a: int, b: int) -> int:
    """Multiply two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a * b


def _canonical(value: Any) -> str:
    """``value`` as JSON text in its own key order: equal text means equal bytes on the wire."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def _collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in stream]


class ModelConformance:
    """Provider-neutral tests of a chat :class:`~daimon.core.protocols.Model` over real HTTP.

    A subclass supplies :meth:`make_model` and the provider's wire format through
    :meth:`encode_response`, :meth:`encode_stream`, :meth:`encode_error` and
    :meth:`decode_request`. One :class:`WireServer` serves the whole class.
    """

    provider: ClassVar[str] = ""
    """What the provider's :class:`ModelError` report as ``provider``."""
    served_model: ClassVar[str] = "served-model-1"
    """The model id the fake server reports in its responses."""
    keeps_tool_errors: ClassVar[bool] = True
    """Whether the wire format carries a tool result's error flag."""
    keeps_call_ids: ClassVar[bool] = True
    """Whether the wire format carries tool-call ids (if not, the model makes fresh ones)."""
    turns_key: ClassVar[str] = "messages"
    """The request body's field holding the conversation, the part of the prefix that grows."""

    # ------------------------------------------------------------ what a provider supplies
    def make_model(self, base_url: str) -> Model:
        """The model under test, talking to the server at ``base_url``."""
        raise NotImplementedError

    def encode_response(self, response: ChatResponse) -> Any:
        """The JSON body the provider sends for ``response``."""
        raise NotImplementedError

    def encode_stream(self, response: ChatResponse, *, finished: bool = True) -> list[SSE]:
        """The events the provider streams for ``response``, text and arguments in pieces.

        ``finished=False`` leaves out what marks the end (finish reason, ``message_stop``, ...).
        """
        raise NotImplementedError

    def encode_error(self, status: int, message: str) -> Any:
        """The JSON body of an error reply."""
        raise NotImplementedError

    def decode_request(self, body: Any) -> ChatRequest:
        """Read a JSON request body back into the request it encodes (data URLs as bytes)."""
        raise NotImplementedError

    def cache_neutral(self, body: Any) -> Any:
        """``body`` without the provider's cache breakpoints.

        They move as a conversation grows; they mark where to cache and are not part of the prompt.
        """
        return body

    # ------------------------------------------------------------ fixtures
    @pytest.fixture(scope="class")
    @classmethod
    def wire_server(cls) -> Iterator[WireServer]:
        """The fake provider, one per test class."""
        with WireServer() as server:
            yield server

    @pytest.fixture
    async def model(self, wire_server: WireServer) -> AsyncIterator[Model]:
        """A fresh model on the fake provider; every scripted reply must be used."""
        wire_server.reset()
        model = self.make_model(wire_server.url)
        yield model
        aclose = getattr(model, "aclose", None)
        if aclose is not None:
            await aclose()
        assert wire_server.pending == 0, "scripted replies were left unused"

    def _response(self, response: ChatResponse) -> ChatResponse:
        return ChatResponse(
            message=response.message,
            stop_reason=response.stop_reason,
            usage=response.usage,
            model=self.served_model,
        )

    def _text(self, text: str = "Hello there, friend!") -> ChatResponse:
        return self._response(ChatResponse.reply(text, usage=_USAGE))

    def _calls(self, *calls: ToolCall, text: str = "") -> ChatResponse:
        return self._response(ChatResponse.tool_use(*calls, text=text, usage=_USAGE))

    async def _ask(
        self, model: Model, server: WireServer, scripted: ChatResponse, *, stream: bool
    ) -> ChatResponse:
        if not stream:
            server.reply_json(self.encode_response(scripted))
            return await model.generate(_PROMPT)
        server.reply_sse(self.encode_stream(scripted))
        events = await _collect(model.generate_stream(_PROMPT))
        assert isinstance(events[-1], Done), events[-1]
        assert sum(isinstance(e, Done) for e in events) == 1
        accumulator = StreamAccumulator()
        for event in events:
            accumulator.add(event)
        return accumulator.response()

    # ------------------------------------------------------------ responses
    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_text(self, model: Model, wire_server: WireServer, stream: bool) -> None:
        """A plain answer: text, stop reason, usage and the model id."""
        response = await self._ask(model, wire_server, self._text(), stream=stream)
        assert response.text == "Hello there, friend!"
        assert response.stop_reason is StopReason.END_TURN
        assert not response.has_tool_calls
        assert response.usage == _USAGE
        assert response.model == self.served_model

    async def test_text_streams_in_pieces(self, model: Model, wire_server: WireServer) -> None:
        """Text arrives as several deltas, then usage, then one ``Done``."""
        wire_server.reply_sse(self.encode_stream(self._text()))
        events = await _collect(model.generate_stream(_PROMPT))
        deltas = [e.text for e in events if isinstance(e, TextDelta)]
        assert len(deltas) >= 2
        assert "".join(deltas) == "Hello there, friend!"
        usage = [e for e in events if isinstance(e, UsageEvent)]
        assert usage
        assert usage[-1].usage == _USAGE
        assert events[-1] == Done(stop_reason=StopReason.END_TURN, model=self.served_model)

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_one_tool_call(self, model: Model, wire_server: WireServer, stream: bool) -> None:
        """A tool call keeps its id (or gets a fresh one), name and parsed arguments."""
        call = ToolCall(id="call_abc", name="get_weather", arguments={"city": "Paris"})
        response = await self._ask(model, wire_server, self._calls(call), stream=stream)
        self._check_calls(response.message.tool_calls, (call,))
        assert response.stop_reason is StopReason.TOOL_USE

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_parallel_tool_calls(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """Several calls in one turn, in order, with the text before them."""
        calls = (
            ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(id="call_2", name="get_weather", arguments={"city": "Oslo", "days": [1, 2]}),
        )
        scripted = self._calls(*calls, text="Checking both.")
        response = await self._ask(model, wire_server, scripted, stream=stream)
        self._check_calls(response.message.tool_calls, calls)
        assert response.text == "Checking both."
        assert response.stop_reason is StopReason.TOOL_USE

    def _check_calls(self, got: Sequence[ToolCall], sent: Sequence[ToolCall]) -> None:
        """``got`` are the ``sent`` calls in order; with fresh, distinct ids unless ids are kept."""
        if self.keeps_call_ids:
            assert tuple(got) == tuple(sent)
            return
        assert [(c.name, c.arguments) for c in got] == [(c.name, c.arguments) for c in sent]
        ids = [c.id for c in got]
        assert all(ids) and len(set(ids)) == len(ids)
        assert not set(ids) & {c.id for c in sent}

    async def test_tool_calls_stream_as_start_delta_end(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Each call streams a start, argument pieces, then an end with the parsed call."""
        calls = (
            ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(id="call_2", name="get_weather", arguments={"city": "Oslo"}),
        )
        wire_server.reply_sse(self.encode_stream(self._calls(*calls)))
        events = await _collect(model.generate_stream(_PROMPT))
        for index, call in enumerate(calls):
            mine = [
                e
                for e in events
                if (isinstance(e, ToolCallStart | ToolCallDelta) and e.call_id == call.id)
                or (isinstance(e, ToolCallEnd) and e.call.id == call.id)
            ]
            assert isinstance(mine[0], ToolCallStart)
            assert (mine[0].name, mine[0].index) == (call.name, index)
            assert isinstance(mine[-1], ToolCallEnd)
            assert (mine[-1].call, mine[-1].index) == (call, index)
            pieces = [e.arguments_delta for e in mine if isinstance(e, ToolCallDelta)]
            assert len(pieces) >= 2
            assert ToolCall.from_json(call.id, call.name, "".join(pieces)) == call
        assert events[-1] == Done(stop_reason=StopReason.TOOL_USE, model=self.served_model)

    async def test_invalid_arguments_stay_raw(self, model: Model, wire_server: WireServer) -> None:
        """Arguments that are not a JSON object reach the agent as the model's raw text."""
        raw = '{"city": "Par'
        wire_server.reply_sse(
            self.encode_stream(self._calls(ToolCall(id="c1", name="get_weather", arguments=raw)))
        )
        events = await _collect(model.generate_stream(_PROMPT))
        ends = [e for e in events if isinstance(e, ToolCallEnd)]
        assert [e.call.arguments for e in ends] == [raw]

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_usage_with_cached_tokens(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """Cached input tokens are reported, as part of the input tokens."""
        usage = Usage(input_tokens=1000, output_tokens=50, cached_tokens=800, requests=1)
        scripted = self._response(ChatResponse.reply("ok", usage=usage))
        response = await self._ask(model, wire_server, scripted, stream=stream)
        assert response.usage == usage

    @pytest.mark.parametrize("stop", [StopReason.MAX_TOKENS, StopReason.CONTENT_FILTER])
    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_stop_reasons(
        self, model: Model, wire_server: WireServer, stream: bool, stop: StopReason
    ) -> None:
        """Why the model stopped survives the mapping."""
        scripted = ChatResponse(message=Message.assistant("cut sh"), stop_reason=stop, usage=_USAGE)
        response = await self._ask(model, wire_server, self._response(scripted), stream=stream)
        assert response.stop_reason is stop
        assert response.text == "cut sh"

    # ------------------------------------------------------------ requests
    def round_trip_request(self) -> ChatRequest:
        """The request the round-trip test sends (default :func:`sample_request`)."""
        return sample_request()

    def expected_request(self, request: ChatRequest) -> ChatRequest:
        """What :meth:`decode_request` should give back for ``request``: its lossless part."""
        messages = []
        for message in request.messages:
            if message.role is Role.TOOL:
                message = Message.tool(
                    message.tool_call_id or "",
                    message.text,
                    is_error=message.is_error and self.keeps_tool_errors,
                )
            messages.append(message)
        return ChatRequest(
            messages=tuple(messages),
            tools=tuple(request.tools),
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            response_format=request.response_format,
            tool_choice=request.tool_choice,
        )

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_request_mapping_round_trips(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """Roles, images, tool calls and results, tools and options all reach the wire."""
        request = self.round_trip_request()
        if stream:
            wire_server.reply_sse(self.encode_stream(self._text()))
            await _collect(model.generate_stream(request))
        else:
            wire_server.reply_json(self.encode_response(self._text()))
            await model.generate(request)
        decoded = self.decode_request(wire_server.last.body)
        expected = self.expected_request(request)
        assert list(decoded.messages) == list(expected.messages)
        assert list(decoded.tools) == list(expected.tools)
        assert decoded.tool_choice == expected.tool_choice
        assert decoded.temperature == expected.temperature
        assert decoded.max_tokens == expected.max_tokens
        assert decoded.response_format == expected.response_format

    @pytest.mark.parametrize("choice", ["auto", "none", "required"])
    async def test_tool_choice_modes(
        self, model: Model, wire_server: WireServer, choice: str
    ) -> None:
        """The named tool-choice modes round-trip."""
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(
            ChatRequest(messages=_PROMPT.messages, tools=(_WEATHER,), tool_choice=choice)
        )
        assert self.decode_request(wire_server.last.body).tool_choice == choice

    async def test_settings_are_sent_as_extra_fields(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Provider settings reach the request body untouched."""
        wire_server.reply_json(self.encode_response(self._text()))
        settings = {"x_daimon_probe": {"deep": [1, 2]}}
        await model.generate(ChatRequest(messages=_PROMPT.messages, settings=settings))
        assert wire_server.last.body["x_daimon_probe"] == {"deep": [1, 2]}

    async def test_per_call_timeout(self, model: Model, wire_server: WireServer) -> None:
        """``settings["timeout"]`` bounds one call; a timeout is retryable."""
        wire_server.reply_json(self.encode_response(self._text()), delay=2.0)
        started = time.monotonic()
        with pytest.raises(ModelError) as caught:
            await model.generate(ChatRequest(messages=_PROMPT.messages, settings={"timeout": 0.2}))
        assert time.monotonic() - started < 1.5
        assert caught.value.retryable
        assert caught.value.status_code is None

    # ------------------------------------------------------------ errors
    @pytest.mark.parametrize(
        ("status", "retryable"),
        [(400, False), (401, False), (403, False), (404, False), (429, True), (500, True)],
    )
    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_http_errors(
        self, model: Model, wire_server: WireServer, status: int, retryable: bool, stream: bool
    ) -> None:
        """Error replies become :class:`ModelError` with the status and the provider's message."""
        body = self.encode_error(status, "the provider says no")
        wire_server.reply_json(body, status=status)
        with pytest.raises(ModelError) as caught:
            if stream:
                await _collect(model.generate_stream(_PROMPT))
            else:
                await model.generate(_PROMPT)
        error = caught.value
        assert not isinstance(error, StreamClosedError)
        assert (error.status_code, error.retryable) == (status, retryable)
        assert error.provider == self.provider
        assert "the provider says no" in str(error)

    @pytest.mark.parametrize(
        ("headers", "expected"),
        [
            ({"retry-after": "7"}, 7.0),
            ({"retry-after-ms": "1500"}, 1.5),
            ({"retry-after": "<30 s from now, as an HTTP date>"}, 30.0),
        ],
        ids=["seconds", "milliseconds", "http-date"],
    )
    async def test_retry_after(
        self,
        model: Model,
        wire_server: WireServer,
        headers: dict[str, str],
        expected: float,
    ) -> None:
        """A 429's ``retry-after`` (seconds, milliseconds or a date) becomes ``retry_after``."""
        if headers.get("retry-after", "").startswith("<"):
            headers = {"retry-after": formatdate(time.time() + 30, usegmt=True)}
        wire_server.reply_json(self.encode_error(429, "slow down"), status=429, headers=headers)
        with pytest.raises(ModelError) as caught:
            await model.generate(_PROMPT)
        assert caught.value.retryable
        assert caught.value.retry_after == pytest.approx(expected, abs=2.0)

    async def test_unreachable_server_is_retryable(self) -> None:
        """A refused connection is a retryable error without a status."""
        model = self.make_model(_closed_port_url())
        try:
            with pytest.raises(ModelError) as caught:
                await model.generate(_PROMPT)
        finally:
            aclose = getattr(model, "aclose", None)
            if aclose is not None:
                await aclose()
        assert caught.value.retryable
        assert caught.value.status_code is None

    async def test_stream_cut_mid_way(self, model: Model, wire_server: WireServer) -> None:
        """A connection lost mid-stream raises :class:`StreamClosedError`, never truncates."""
        events = self.encode_stream(self._text())
        wire_server.reply_sse(events[: max(1, len(events) // 2)], cut=True)
        with pytest.raises(StreamClosedError) as caught:
            await _collect(model.generate_stream(_PROMPT))
        assert caught.value.retryable

    async def test_stream_without_its_end(self, model: Model, wire_server: WireServer) -> None:
        """A stream that ends cleanly but without its final event is still an error."""
        wire_server.reply_sse(self.encode_stream(self._text(), finished=False))
        with pytest.raises(StreamClosedError):
            await _collect(model.generate_stream(_PROMPT))

    # ------------------------------------------------------------ the agent loop
    async def test_request_prefix_is_byte_stable(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """An agent's second call starts with the bytes of its first.

        The same system prompt and tool definitions in the same order, and the earlier turns
        unchanged, so a provider's prompt cache can serve them.
        """
        call = ToolCall(id="call_add", name="add_numbers", arguments={"a": 2, "b": 3})
        for scripted in (self._calls(call), self._text("2 + 3 = 5")):
            wire_server.reply_json(self.encode_response(scripted))
        agent = Agent(
            model,
            system_prompt="You add and multiply numbers.",
            tools=[_add_numbers, _multiply_numbers],
        )
        await agent.prompt("What is 2 + 3?")
        first, second = (self.cache_neutral(r.body) for r in wire_server.requests)
        key = self.turns_key
        assert set(first) == set(second), "the second call sends other fields"
        for field_name in first:
            if field_name != key:
                assert _canonical(first[field_name]) == _canonical(second[field_name]), field_name
        earlier, later = first[key], second[key]
        assert len(later) > len(earlier)
        assert _canonical(later[: len(earlier)]) == _canonical(earlier)

    @pytest.mark.parametrize("stream", [False, True], ids=["prompt", "prompt_stream"])
    async def test_agent_tool_loop(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """An agent on this model calls a tool, reads its result and answers."""
        call = ToolCall(id="call_add", name="add_numbers", arguments={"a": 2, "b": 3})
        for scripted in (self._calls(call), self._text("2 + 3 = 5")):
            if stream:
                wire_server.reply_sse(self.encode_stream(scripted))
            else:
                wire_server.reply_json(self.encode_response(scripted))
        agent = Agent(model, tools=[_add_numbers])
        if stream:
            events = await _collect(agent.prompt_stream("What is 2 + 3?"))
            done = events[-1]
            assert isinstance(done, Done)
            assert done.response is not None
            result = done.response
        else:
            result = await agent.prompt("What is 2 + 3?")
        assert result.text == "2 + 3 = 5"
        assert result.iterations == 2
        second = self.decode_request(wire_server.requests[1].body)
        tool_message = [m for m in second.messages if m.role is Role.TOOL]
        (sent_call,) = [c for m in second.messages for c in m.tool_calls]
        assert [(m.tool_call_id, m.text) for m in tool_message] == [(sent_call.id, "5")]
        assert sent_call.id == "call_add" or not self.keeps_call_ids
        assert second.tools[0].name == "add_numbers"
