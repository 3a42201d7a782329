"""The trace continues across A2A: a daimon agent's tool call into a daimon A2A server.

:class:`~daimon.a2a.RemoteA2AAgent` sends the caller's W3C trace context as HTTP headers
(``traceparent``, ``tracestate``, ``baggage``) on every request, blocking or streaming; the
server's run (an instrumented agent's ``invoke_agent``) joins the caller's trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
pytest.importorskip("a2a", reason="needs the a2a extra")
pytest.importorskip("uvicorn", reason="needs the a2a extra")

import httpx
from a2a.client import ClientConfig, create_client
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import Message, Part, SendMessageRequest, TaskState
from a2a.types import Role as A2ARole
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.a2a import DaimonAgentExecutor, RemoteA2AAgent, a2a_app, agent_card
from daimon.models import FunctionModel
from daimon.telemetry import inject_trace_context, instrument
from daimon.testing.servers import serving

from .conftest import REMOTE_SPAN, REMOTE_TRACE, TRACEPARENT, Spans

TRACED_SERVER = Path(__file__).with_name("a2a_traced_server.py")
TRACE_HEADERS = ("traceparent", "tracestate", "baggage")


class HeaderLog:
    """An ASGI app in front of another, keeping the headers of every HTTP request it passes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: list[dict[str, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.requests.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)

    def traced(self) -> list[dict[str, str]]:
        """The trace headers each request carried."""
        return [{k: v for k, v in r.items() if k in TRACE_HEADERS} for r in self.requests]


def _served(spans: Spans | None) -> Agent:
    """The agent behind the A2A server: it calls ``look`` first, then answers with its result.

    ``look`` answers with the ``tenant`` baggage and the trace context it runs in (and opens a
    span of its own when ``spans`` is given).
    """

    @tool
    def look() -> str:
        """What this run can see of the caller's trace."""
        seen = {"tenant": baggage.get_baggage("tenant"), **inject_trace_context({})}
        if spans is None:
            return json.dumps(seen)
        with spans.provider.get_tracer("test").start_as_current_span("look"):
            return json.dumps(seen)

    def model(request: ChatRequest) -> ChatResponse:
        results = [m.text for m in request.messages if m.role is Role.TOOL]
        if results:
            return ChatResponse.reply(results[-1])
        return ChatResponse.tool_use(ToolCall(id="look-1", name="look", arguments={}))

    agent = Agent(FunctionModel(model), name="inner", tools=[look])
    return agent if spans is None else instrument(agent, tracer_provider=spans.provider)


def _caller(spans: Spans | None, remote: RemoteA2AAgent) -> Agent:
    """An agent that asks ``remote`` once, then answers with what it said."""

    def model(request: ChatRequest) -> ChatResponse:
        results = [m.text for m in request.messages if m.role is Role.TOOL]
        if results:
            return ChatResponse.reply(results[-1])
        call = ToolCall(id="ask-1", name=remote.name, arguments={"prompt": "hi"})
        return ChatResponse.tool_use(call)

    agent = Agent(FunctionModel(model), name="caller", tools=[remote])
    return agent if spans is None else instrument(agent, tracer_provider=spans.provider)


def _app(spans: Spans | None) -> Any:
    return lambda port: a2a_app(_served(spans), port=port)


def _is_child(span: ReadableSpan, trace_id: str | int, parent_id: str | int) -> bool:
    """Whether ``span`` is in trace ``trace_id`` under the span ``parent_id`` (hex or int)."""
    ids = [int(i, 16) if isinstance(i, str) else i for i in (trace_id, parent_id)]
    return (
        span.context.trace_id == ids[0]
        and span.parent is not None
        and span.parent.span_id == ids[1]
    )


@pytest.fixture
def tenant() -> Iterator[None]:
    """``tenant=acme`` in the current baggage for the test."""
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    yield
    context.detach(token)


# ------------------------------------------------------------------------------ daimon to daimon


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "blocking"])
async def test_a_daimon_agent_s_trace_continues_in_a_daimon_a2a_server(
    spans: Spans, tenant: None, streaming: bool
) -> None:
    log: HeaderLog | None = None

    def app(port: int) -> HeaderLog:
        nonlocal log
        log = HeaderLog(a2a_app(_served(spans), port=port))
        return log

    async with (
        serving(app_for_port=app) as base,
        RemoteA2AAgent(base, name="inner", streaming=streaming) as remote,
    ):
        response = await _caller(spans, remote).prompt("go")

    assert json.loads(response.text)["tenant"] == "acme"  # the baggage crossed too
    run, asked = spans.one("invoke_agent caller"), spans.one("execute_tool inner")
    inner = spans.one("invoke_agent inner")
    assert _is_child(inner, run.context.trace_id, asked.context.span_id)
    assert inner.parent is not None and inner.parent.is_remote  # it came over the wire
    look = spans.one("look")
    assert look.context.trace_id == run.context.trace_id
    assert spans.parent(look) == spans.one("execute_tool look")
    assert spans.roots() == [run]  # one trace, nothing started afresh
    # On the wire: the message request carried the tool call's span and the baggage.
    assert log is not None
    sent = [h for h in log.traced() if "traceparent" in h]
    assert sent, log.traced()
    for headers in sent:
        assert headers["traceparent"].split("-")[1:3] == [
            f"{run.context.trace_id:032x}",
            f"{asked.context.span_id:016x}",
        ]
        assert headers["baggage"] == "tenant=acme"


async def test_a_daimon_agent_s_trace_continues_over_grpc(spans: Spans, tenant: None) -> None:
    pytest.importorskip("grpc", reason="needs the grpc extra")
    from daimon.a2a import serve_a2a

    ports = []
    for _ in range(2):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    port, grpc_port = ports
    server = asyncio.create_task(serve_a2a(_served(spans), port=port, grpc_port=grpc_port))
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(400):
                with contextlib.suppress(httpx.TransportError):
                    await http.get(f"{base}/.well-known/agent-card.json")
                    break
                await asyncio.sleep(0.05)
        async with RemoteA2AAgent(base, name="inner", bindings=["GRPC"]) as remote:
            assert remote.interface is not None and remote.interface.protocol_binding == "GRPC"
            response = await _caller(spans, remote).prompt("go")
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server

    assert json.loads(response.text)["tenant"] == "acme"  # the baggage crossed in the metadata
    run, asked = spans.one("invoke_agent caller"), spans.one("execute_tool inner")
    inner = spans.one("invoke_agent inner")
    assert _is_child(inner, run.context.trace_id, asked.context.span_id)
    assert inner.parent is not None and inner.parent.is_remote  # it came over the wire
    assert spans.roots() == [run]


async def test_trace_headers_the_caller_set_are_sent_as_they_are(spans: Spans) -> None:
    log: HeaderLog | None = None

    def app(port: int) -> HeaderLog:
        nonlocal log
        log = HeaderLog(a2a_app(_served(spans), port=port))
        return log

    given = {"traceparent": TRACEPARENT, "baggage": "tenant=given"}
    async with (
        serving(app_for_port=app) as base,
        RemoteA2AAgent(base, name="inner", headers=given) as remote,
    ):
        token = context.attach(baggage.set_baggage("tenant", "acme"))
        try:
            response = await _caller(spans, remote).prompt("go")
        finally:
            context.detach(token)

    assert log is not None and log.requests
    assert all(h == given for h in log.traced())  # no tracestate of ours next to theirs either
    assert json.loads(response.text)["tenant"] == "given"
    assert _is_child(spans.one("invoke_agent inner"), REMOTE_TRACE, REMOTE_SPAN)


# ------------------------------------------------------------------------------ other callers


def _message(text: str) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=A2ARole.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=message)


async def _ask_with_sdk(base: str, headers: dict[str, str], streaming: bool) -> tuple[Any, str]:
    """Ask through the official SDK client sending ``headers``; the final state and answer."""
    async with httpx.AsyncClient(headers=headers) as http:
        client = await create_client(base, ClientConfig(streaming=streaming, httpx_client=http))
        try:
            events = [event async for event in client.send_message(_message("hi"))]
        finally:
            await client.close()
    tasks = [e.task for e in events if e.HasField("task")]
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    artifacts += [a for t in tasks for a in t.artifacts]
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    states += [t.status.state for t in tasks]
    final = TaskState.TASK_STATE_COMPLETED if TaskState.TASK_STATE_COMPLETED in states else None
    return final, artifacts[-1].parts[0].text


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "blocking"])
async def test_the_sdk_client_s_hand_made_traceparent_is_honoured(
    spans: Spans, streaming: bool
) -> None:
    headers = {"traceparent": TRACEPARENT, "baggage": "tenant=acme"}
    async with serving(app_for_port=_app(spans)) as base:
        state, answer = await _ask_with_sdk(base, headers, streaming)

    assert state == TaskState.TASK_STATE_COMPLETED
    assert json.loads(answer)["tenant"] == "acme"
    inner = spans.one("invoke_agent inner")
    assert _is_child(inner, REMOTE_TRACE, REMOTE_SPAN)
    assert spans.one("look").context.trace_id == int(REMOTE_TRACE, 16)


@pytest.mark.parametrize(
    "traceparent",
    [
        "not a traceparent",
        f"00-{'0' * 32}-{REMOTE_SPAN}-01",  # all-zero trace id
        f"00-{REMOTE_TRACE}-{REMOTE_SPAN}",  # no flags
        f"00-{REMOTE_TRACE}-{'0' * 16}-01",  # all-zero span id
    ],
)
async def test_a_malformed_traceparent_starts_a_new_trace_and_is_no_error(
    spans: Spans, traceparent: str
) -> None:
    async with serving(app_for_port=_app(spans)) as base:
        state, answer = await _ask_with_sdk(base, {"traceparent": traceparent}, False)

    assert state == TaskState.TASK_STATE_COMPLETED
    assert json.loads(answer)["tenant"] is None
    inner = spans.one("invoke_agent inner")
    assert inner.parent is None
    assert inner.context.trace_id != int(REMOTE_TRACE, 16)
    assert spans.roots() == [inner]


async def test_a_run_already_in_the_caller_s_trace_keeps_its_parent(spans: Spans) -> None:
    """A span in front of the executor (an instrumented ASGI stack) that continued the caller's
    trace stays the run's parent; the run still gets the caller's baggage."""
    front: list[trace.SpanContext] = []  # the request span's

    def app(port: int) -> ASGIApp:
        inner_app = a2a_app(_served(spans), port=port)
        tracer = spans.provider.get_tracer("front")

        async def traced(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                await inner_app(scope, receive, send)
                return
            remote = trace.set_span_in_context(
                trace.NonRecordingSpan(
                    trace.SpanContext(
                        int(REMOTE_TRACE, 16),
                        int(REMOTE_SPAN, 16),
                        is_remote=True,
                        trace_flags=trace.TraceFlags(1),
                    )
                )
            )
            with tracer.start_as_current_span("POST /", context=remote) as span:
                front.append(span.get_span_context())
                await inner_app(scope, receive, send)

        return traced

    headers = {"traceparent": TRACEPARENT, "baggage": "tenant=acme"}
    async with serving(app_for_port=app) as base:
        state, answer = await _ask_with_sdk(base, headers, False)

    assert state == TaskState.TASK_STATE_COMPLETED
    assert json.loads(answer)["tenant"] == "acme"
    (request_span,) = front
    assert _is_child(spans.one("invoke_agent inner"), REMOTE_TRACE, request_span.span_id)


async def test_an_executor_in_a_request_handler_of_your_own_continues_the_trace(
    spans: Spans,
) -> None:
    """Without a2a_app's middleware in front, the executor reads the headers itself."""

    def app(port: int) -> ASGIApp:
        agent = _served(spans)
        card = agent_card(agent, url=f"http://127.0.0.1:{port}/")
        handler = DefaultRequestHandler(DaimonAgentExecutor(agent), InMemoryTaskStore(), card)
        routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
        return Starlette(routes=routes)

    headers = {"traceparent": TRACEPARENT, "baggage": "tenant=acme"}
    async with serving(app_for_port=app) as base:
        state, answer = await _ask_with_sdk(base, headers, True)

    assert state == TaskState.TASK_STATE_COMPLETED
    assert json.loads(answer)["tenant"] == "acme"
    assert _is_child(spans.one("invoke_agent inner"), REMOTE_TRACE, REMOTE_SPAN)


# ------------------------------------------------------------------------------ the SDK's spans


@contextlib.asynccontextmanager
async def _globally_traced_server(spans_file: Path) -> AsyncIterator[str]:
    """A daimon A2A server in a process of its own with a global tracer provider, so a2a-sdk
    makes its spans too; they are all in ``spans_file`` once the block ends (server stopped)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        str(TRACED_SERVER),
        str(spans_file),
        str(port),
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(300):
                assert server.returncode is None, "the traced A2A server exited"
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get(f"{base}/.well-known/agent-card.json")).is_success:
                        break
                await asyncio.sleep(0.05)
        yield base
    finally:
        server.terminate()  # a graceful stop: the spans still open end, and are written
        await asyncio.wait_for(server.wait(), 30)


def _records(spans_file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in spans_file.read_text().splitlines()]


def _chain(record: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """``record`` and its ancestors in the file, up to the one whose parent is elsewhere."""
    chain = [record]
    while chain[-1]["parent_id"] in by_id:
        chain.append(by_id[chain[-1]["parent_id"]])
    return chain


def _request_spans(spans_file: Path) -> list[dict[str, Any]]:
    """The spans of the requests: without the request handler's ``aclose``, which the server
    calls as it shuts down (in no request, so in a trace of its own)."""
    return [r for r in _records(spans_file) if not r["name"].endswith("RequestHandlerV2.aclose")]


async def test_the_sdk_s_own_server_spans_join_the_caller_s_trace(tmp_path: Path) -> None:
    """Blocking and streaming: every server span, the SDK's first, continues the caller's."""
    spans_file = tmp_path / "spans.jsonl"
    callers = {False: "1111111111111111", True: "2222222222222222"}  # span id per request
    async with _globally_traced_server(spans_file) as base:
        for streaming, caller in callers.items():
            headers = {"traceparent": f"00-{REMOTE_TRACE}-{caller}-01"}
            state, answer = await _ask_with_sdk(base, headers, streaming)
            assert (state, answer) == (TaskState.TASK_STATE_COMPLETED, "done")

    records = _request_spans(spans_file)
    by_id = {r["span_id"]: r for r in records}
    assert {r["trace_id"] for r in records} == {REMOTE_TRACE}  # no trace of its own
    tops = {r["parent_id"] for r in records if r["parent_id"] not in by_id}
    assert tops == set(callers.values())  # every chain ends at a caller's span: one root each
    for caller in callers.values():
        names = {r["name"] for r in records if r["parent_id"] == caller}
        assert any(n.endswith("JsonRpcDispatcher.handle_requests") for n in names), names
    runs = [r for r in records if r["name"] == "invoke_agent inner"]
    assert len(runs) == 2
    for run in runs:
        chain = _chain(run, by_id)
        # The run is under the SDK's spans, not hung off the caller's span past them.
        assert chain[1]["name"].startswith("a2a.server."), chain[1]
        assert chain[-1]["name"].endswith("JsonRpcDispatcher.handle_requests")
    assert {_chain(run, by_id)[-1]["parent_id"] for run in runs} == set(callers.values())


async def test_the_sdk_s_spans_start_a_new_trace_without_a_valid_traceparent(
    tmp_path: Path,
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    async with _globally_traced_server(spans_file) as base:
        for headers in ({"traceparent": f"00-{'0' * 32}-{REMOTE_SPAN}-01"}, {}):
            state, answer = await _ask_with_sdk(base, headers, False)
            assert (state, answer) == (TaskState.TASK_STATE_COMPLETED, "done")

    records = _request_spans(spans_file)
    by_id = {r["span_id"]: r for r in records}
    roots = [r for r in records if r["parent_id"] is None]
    assert all(r["parent_id"] in by_id for r in records if r["parent_id"] is not None)
    assert [r["name"].rsplit(".", 1)[-1] for r in roots] == ["handle_requests"] * 2
    assert len({r["trace_id"] for r in records}) == 2  # one trace per request
    assert REMOTE_TRACE not in {r["trace_id"] for r in records}
    runs = [r for r in records if r["name"] == "invoke_agent inner"]
    assert sorted(_chain(run, by_id)[-1]["span_id"] for run in runs) == sorted(
        r["span_id"] for r in roots
    )


# ------------------------------------------------------------------------------ tracing off


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "blocking"])
async def test_with_nothing_traced_no_trace_context_crosses_and_calls_work(
    streaming: bool,
) -> None:
    assert trace.get_current_span() is trace.INVALID_SPAN
    log: HeaderLog | None = None

    def app(port: int) -> HeaderLog:
        nonlocal log
        log = HeaderLog(a2a_app(_served(None), port=port))
        return log

    async with (
        serving(app_for_port=app) as base,
        RemoteA2AAgent(base, name="inner", streaming=streaming) as remote,
    ):
        response = await _caller(None, remote).prompt("go")

    assert json.loads(response.text) == {"tenant": None}  # no trace context inside the run
    assert log is not None and len(log.requests) >= 2  # the card, then the message
    assert all(h == {} for h in log.traced())
