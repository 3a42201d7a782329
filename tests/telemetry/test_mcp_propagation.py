"""The trace continues across MCP: a daimon agent's tool call into a daimon MCP server.

The caller's W3C trace context travels in the request's ``_meta`` (SEP-414: ``traceparent``,
``tracestate``, ``baggage``), or in a ``traceparent`` header on streamable HTTP; the server's
spans (a traced tool, an instrumented agent behind ``ask_<name>``) join the caller's trace.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
pytest.importorskip("mcp", reason="needs the mcp extra")
pytest.importorskip("uvicorn", reason="needs the mcp extra")

from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.mcp import MCPClient, create_mcp_server, mcp_http_app
from daimon.models import FunctionModel
from daimon.telemetry import inject_trace_context, instrument
from daimon.testing.servers import serving
from daimon.tools import Tool
from mcp import Client

from .conftest import REMOTE_SPAN, REMOTE_TRACE, TRACEPARENT, Spans

TRACED_SERVER = Path(__file__).with_name("mcp_traced_server.py")


@pytest.fixture
def quiet() -> Iterator[TextIO]:
    """Where the stdio server's stderr goes."""
    with open(os.devnull, "w") as devnull:
        yield devnull


def _served(spans: Spans | None) -> Agent:
    """The agent behind the MCP server: instrumented when ``spans`` is given, with two tools.

    ``lookup`` opens a span of its own and answers with the ``tenant`` baggage it sees;
    ``trace_context`` answers with the trace context current inside it.
    """

    @tool
    def lookup() -> str:
        """Look something up, traced."""
        if spans is None:
            return str(baggage.get_baggage("tenant"))
        with spans.provider.get_tracer("test").start_as_current_span("lookup"):
            return str(baggage.get_baggage("tenant"))

    @tool
    def trace_context() -> str:
        """The trace context this tool runs in."""
        return json.dumps(dict(inject_trace_context({})))

    agent = Agent(
        FunctionModel(lambda request: ChatResponse.reply("inner done")),
        name="inner",
        tools=[lookup, trace_context],
    )
    return agent if spans is None else instrument(agent, tracer_provider=spans.provider)


def _caller(spans: Spans | None, tools: list[Tool], *calls: str) -> Agent:
    """An agent that calls ``calls`` (concurrently) in its first turn, then joins the results."""

    def model(request: ChatRequest) -> ChatResponse:
        results = [m.text for m in request.messages if m.role is Role.TOOL]
        if results:
            return ChatResponse.reply(" | ".join(results))
        arguments: dict[str, dict[str, Any]] = {"ask_inner": {"prompt": "hi"}}
        return ChatResponse.tool_use(
            *(
                ToolCall(id=str(i), name=n, arguments=arguments.get(n, {}))
                for i, n in enumerate(calls)
            )
        )

    agent = Agent(FunctionModel(model), name="caller", tools=tools)
    return agent if spans is None else instrument(agent, tracer_provider=spans.provider)


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content)


def _is_child(span: ReadableSpan, trace_id: str | int, parent_id: str | int) -> bool:
    """Whether ``span`` is in trace ``trace_id`` under the span ``parent_id`` (hex or int)."""
    ids = [int(i, 16) if isinstance(i, str) else i for i in (trace_id, parent_id)]
    return (
        span.context.trace_id == ids[0]
        and span.parent is not None
        and span.parent.span_id == ids[1]
    )


# ------------------------------------------------------------------------------ daimon to daimon


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_daimon_agent_s_trace_continues_in_a_daimon_server_over_http(
    spans: Spans, protocol: str
) -> None:
    async with (
        serving(mcp_http_app(_served(spans))) as base,
        MCPClient.http(f"{base}/mcp", protocol=protocol) as server,
    ):
        caller = _caller(spans, list(await server.tools()), "ask_inner", "lookup")
        token = context.attach(baggage.set_baggage("tenant", "acme"))
        try:
            response = await caller.prompt("go")
        finally:
            context.detach(token)

    assert response.text == "inner done | acme"  # baggage crossed too
    run = spans.one("invoke_agent caller")
    asked, looked = spans.one("execute_tool ask_inner"), spans.one("execute_tool lookup")
    inner, lookup = spans.one("invoke_agent inner"), spans.one("lookup")
    assert _is_child(inner, run.context.trace_id, asked.context.span_id)
    assert inner.parent is not None and inner.parent.is_remote  # it came over the wire
    assert _is_child(lookup, run.context.trace_id, looked.context.span_id)
    assert spans.roots() == [run]  # one trace, nothing started afresh


async def test_the_trace_continues_over_stdio_into_a_server_traced_globally(
    spans: Spans, tmp_path: Path, quiet: TextIO
) -> None:
    server_spans = tmp_path / "server-spans.jsonl"
    client = MCPClient.stdio(
        sys.executable, [str(TRACED_SERVER), str(server_spans)], stderr=quiet, connect_timeout=30
    )
    async with client:
        caller = _caller(spans, list(await client.tools()), "ask_inner")
        assert (await caller.prompt("go")).text == "done"

    run, asked = spans.one("invoke_agent caller"), spans.one("execute_tool ask_inner")
    records = [json.loads(line) for line in server_spans.read_text().splitlines()]
    by_id = {r["span_id"]: r for r in records}
    inner = next(r for r in records if r["name"] == "invoke_agent inner")
    # Up from the inner run through the server's own spans (the SDK's server span among them)
    # to the span it continued, which is the caller's tool call.
    chain = [inner]
    while chain[-1]["parent_id"] in by_id:
        chain.append(by_id[chain[-1]["parent_id"]])
    assert {r["trace_id"] for r in chain} == {f"{run.context.trace_id:032x}"}
    assert chain[-1]["parent_id"] == f"{asked.context.span_id:016x}"


# ------------------------------------------------------------------------------ other callers


async def test_the_sdk_client_s_hand_made_trace_context_is_honoured(spans: Spans) -> None:
    meta: Any = {"traceparent": TRACEPARENT, "baggage": "tenant=acme"}
    async with serving(mcp_http_app(_served(spans))) as base, Client(f"{base}/mcp") as client:
        asked = await client.call_tool("ask_inner", {"prompt": "hi"}, meta=meta)
        looked = await client.call_tool("lookup", {}, meta=meta)

    assert (_text(asked), _text(looked)) == ("inner done", "acme")
    inner = spans.one("invoke_agent inner")
    assert _is_child(inner, REMOTE_TRACE, REMOTE_SPAN)
    assert _is_child(spans.one("lookup"), REMOTE_TRACE, REMOTE_SPAN)


@pytest.mark.parametrize(
    "traceparent",
    [
        "not a traceparent",
        f"00-{'0' * 32}-{REMOTE_SPAN}-01",  # all-zero trace id
        f"00-{REMOTE_TRACE}-{REMOTE_SPAN}",  # no flags
    ],
)
async def test_a_malformed_traceparent_starts_a_new_trace_and_is_no_error(
    spans: Spans, traceparent: str
) -> None:
    meta: Any = {"traceparent": traceparent}
    async with serving(mcp_http_app(_served(spans))) as base, Client(f"{base}/mcp") as client:
        asked = await client.call_tool("ask_inner", {"prompt": "hi"}, meta=meta)

    assert (_text(asked), asked.is_error) == ("inner done", False)
    inner = spans.one("invoke_agent inner")
    assert inner.parent is None
    assert inner.context.trace_id != int(REMOTE_TRACE, 16)


async def test_a_traceparent_header_on_streamable_http_is_continued(spans: Spans) -> None:
    async with (
        serving(mcp_http_app(_served(spans))) as base,
        MCPClient.http(f"{base}/mcp", headers={"traceparent": TRACEPARENT}) as server,
    ):
        assert (await server.call_tool("ask_inner", {"prompt": "hi"})).content == "inner done"
    assert _is_child(spans.one("invoke_agent inner"), REMOTE_TRACE, REMOTE_SPAN)


async def test_the_meta_trace_context_takes_precedence_over_the_header(spans: Spans) -> None:
    async with (
        serving(mcp_http_app(_served(spans))) as base,
        MCPClient.http(f"{base}/mcp", headers={"traceparent": TRACEPARENT}) as server,
    ):
        with spans.provider.get_tracer("test").start_as_current_span("caller") as caller:
            await server.call_tool("ask_inner", {"prompt": "hi"})
    context_ = caller.get_span_context()
    assert _is_child(spans.one("invoke_agent inner"), context_.trace_id, context_.span_id)


async def test_the_server_continues_the_trace_without_the_sdk_s_own_span(spans: Spans) -> None:
    server = create_mcp_server(_served(spans))
    server.middleware.clear()  # the SDK's OpenTelemetry middleware, which users may drop
    meta: Any = {"traceparent": TRACEPARENT}
    async with Client(server) as client:  # in process: no JSON-RPC framing either
        asked = await client.call_tool("ask_inner", {"prompt": "hi"}, meta=meta)
    assert _text(asked) == "inner done"
    assert _is_child(spans.one("invoke_agent inner"), REMOTE_TRACE, REMOTE_SPAN)


# ------------------------------------------------------------------------------ tracing off


async def test_with_nothing_traced_no_trace_context_crosses_and_calls_work() -> None:
    assert trace.get_current_span() is trace.INVALID_SPAN
    async with (
        serving(mcp_http_app(_served(None))) as base,
        MCPClient.http(f"{base}/mcp") as server,
    ):
        caller = _caller(None, list(await server.tools()), "ask_inner", "trace_context")
        response = await caller.prompt("go")
    assert response.text == "inner done | {}"
