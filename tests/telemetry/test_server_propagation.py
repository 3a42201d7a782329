"""The trace continues into daimon's HTTP server: ``/prompt``, ``/prompt/stream``, the OpenAI route.

A request carrying W3C trace headers (``traceparent``, ``tracestate``, ``baggage``) is handled
in that context, so an instrumented agent's run is a child of the caller's span, with the
caller's baggage, however it is asked (blocking, or streamed while the run goes on).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
pytest.importorskip("fastapi", reason="needs the server extra")
pytest.importorskip("uvicorn", reason="needs the server extra")

import httpx
from opentelemetry import baggage, trace

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.models import FunctionModel
from daimon.server import ServerSettings, create_app
from daimon.telemetry import inject_trace_context, instrument
from daimon.testing.servers import serving

from .conftest import REMOTE_SPAN, REMOTE_TRACE, TRACEPARENT, Spans

TOKEN = "test-token-0123456789"


def _served(spans: Spans) -> Agent:
    """An instrumented agent that calls ``look`` and answers with what it saw.

    ``look`` answers with the ``tenant`` baggage and the trace context current in the run.
    """

    @tool
    def look() -> str:
        """What this run can see of the caller's trace."""
        return json.dumps({"tenant": baggage.get_baggage("tenant"), **inject_trace_context({})})

    def model(request: ChatRequest) -> ChatResponse:
        results = [m.text for m in request.messages if m.role is Role.TOOL]
        if results:
            return ChatResponse.reply(results[-1])
        return ChatResponse.tool_use(ToolCall(id="look-1", name="look", arguments={}))

    return instrument(
        Agent(FunctionModel(model), name="inner", tools=[look]), tracer_provider=spans.provider
    )


async def _ask(base: str, route: str, headers: dict[str, str]) -> dict[str, Any]:
    """Ask over ``route``; what ``look`` saw in the run (from the answer's text)."""
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as http:
        if route == "/prompt":
            reply = await http.post("/prompt", json={"input": "go"})
            assert reply.status_code == 200, reply.text
            text: str = reply.json()["text"]
        elif route == "/prompt/stream":
            async with http.stream("POST", "/prompt/stream", json={"input": "go"}) as reply:
                assert reply.status_code == 200
                frames = [line async for line in reply.aiter_lines()]
            events = [line.removeprefix("event: ") for line in frames if line.startswith("event:")]
            assert events[-1] == "done", events
            data = [json.loads(line[6:]) for line in frames if line.startswith("data: ")]
            text = data[-1]["response"]["text"]
        else:
            body = {"model": "inner", "messages": [{"role": "user", "content": "go"}]}
            reply = await http.post("/v1/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
            text = reply.json()["choices"][0]["message"]["content"]
    seen: dict[str, Any] = json.loads(text)
    return seen


def _server(spans: Spans, **settings: Any) -> Any:
    """The agent of :func:`_served` behind daimon's HTTP server, on a port of its own."""
    return serving(
        app_for_port=lambda port: create_app(
            _served(spans), settings=ServerSettings(port=port, **settings)
        )
    )


ROUTES = ["/prompt", "/prompt/stream", "/v1/chat/completions"]


@pytest.mark.parametrize("route", ROUTES)
async def test_a_run_asked_over_http_continues_the_caller_s_trace(spans: Spans, route: str) -> None:
    headers = {"traceparent": TRACEPARENT, "baggage": "tenant=acme"}
    async with _server(spans) as base:
        seen = await _ask(base, route, headers)

    run = spans.one("invoke_agent inner")
    assert run.context.trace_id == int(REMOTE_TRACE, 16)
    assert run.parent is not None and run.parent.span_id == int(REMOTE_SPAN, 16)
    assert run.parent.is_remote
    assert [s for s in spans.all if spans.parent(s) is None] == [run]  # all else under it
    assert {s.context.trace_id for s in spans.all} == {int(REMOTE_TRACE, 16)}
    assert seen["tenant"] == "acme"  # the baggage crossed too
    assert seen["traceparent"].split("-")[1] == REMOTE_TRACE


async def test_behind_the_token_check_the_trace_continues_too(spans: Spans) -> None:
    async with _server(spans, token=TOKEN) as base, httpx.AsyncClient() as http:
        refused = await http.post(
            f"{base}/prompt", json={"input": "go"}, headers={"traceparent": TRACEPARENT}
        )
        assert refused.status_code == 401
        headers = {"traceparent": TRACEPARENT, "authorization": f"Bearer {TOKEN}"}
        await _ask(base, "/prompt", headers)

    run = spans.one("invoke_agent inner")
    assert run.parent is not None and run.parent.span_id == int(REMOTE_SPAN, 16)


@pytest.mark.parametrize(
    "traceparent",
    [
        "not a traceparent",
        f"00-{'0' * 32}-{REMOTE_SPAN}-01",  # all-zero trace id
        f"00-{REMOTE_TRACE}-{'0' * 16}-01",  # all-zero span id
    ],
)
@pytest.mark.parametrize("route", ["/prompt", "/prompt/stream"])
async def test_a_malformed_traceparent_starts_a_new_trace_and_is_no_error(
    spans: Spans, route: str, traceparent: str
) -> None:
    async with _server(spans) as base:
        seen = await _ask(base, route, {"traceparent": traceparent, "baggage": "tenant=acme"})

    run = spans.one("invoke_agent inner")
    assert run.parent is None and spans.roots() == [run]
    assert run.context.trace_id != int(REMOTE_TRACE, 16)
    assert seen["tenant"] == "acme"  # baggage stands on its own


@pytest.mark.parametrize("route", ["/prompt", "/prompt/stream"])
async def test_without_trace_headers_each_run_is_a_trace_of_its_own(
    spans: Spans, route: str
) -> None:
    assert trace.get_current_span() is trace.INVALID_SPAN
    async with _server(spans) as base:
        first = await _ask(base, route, {})
        second = await _ask(base, route, {})

    runs = spans.named("invoke_agent inner")
    assert len(runs) == 2 and all(run.parent is None for run in runs)
    assert sorted(spans.roots(), key=id) == sorted(runs, key=id)
    assert runs[0].context.trace_id != runs[1].context.trace_id
    assert first["tenant"] is None and second["tenant"] is None
