"""W3C trace context across transports: inject_trace_context and extract_trace_context."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry import trace

from daimon import Agent, ChatResponse
from daimon.models import FunctionModel
from daimon.telemetry import extract_trace_context, inject_trace_context, instrument

from .conftest import REMOTE_SPAN, REMOTE_TRACE, TRACEPARENT, Spans


def test_inject_writes_the_current_span_as_a_traceparent(spans: Spans) -> None:
    tracer = spans.provider.get_tracer("test")
    with tracer.start_as_current_span("send") as span:
        carrier = inject_trace_context({})
    context = span.get_span_context()
    version, trace_id, span_id, flags = carrier["traceparent"].split("-")
    assert (version, trace_id, span_id) == (
        "00",
        f"{context.trace_id:032x}",
        f"{context.span_id:016x}",
    )
    assert int(flags, 16) & 1  # sampled


def test_inject_without_a_current_span_leaves_the_carrier_alone() -> None:
    carrier = {"other": "header"}
    assert inject_trace_context(carrier) is carrier
    assert carrier == {"other": "header"}


async def test_extract_continues_the_senders_trace_in_an_agent_run(spans: Spans) -> None:
    agent = instrument(
        Agent(FunctionModel(lambda r: ChatResponse.reply("ok")), name="worker"),
        tracer_provider=spans.provider,
    )
    with extract_trace_context({"TraceParent": TRACEPARENT}):  # header names in any case
        await agent.prompt("task from the broker")
    assert trace.get_current_span() is trace.INVALID_SPAN  # let go after the block
    run = spans.one("invoke_agent worker")
    assert run.context.trace_id == int(REMOTE_TRACE, 16)
    assert run.parent is not None and run.parent.span_id == int(REMOTE_SPAN, 16)
    assert run.parent.is_remote


def test_a_carrier_without_trace_context_keeps_the_current_one(spans: Spans) -> None:
    tracer = spans.provider.get_tracer("test")
    with tracer.start_as_current_span("local") as local:
        for carrier in ({}, None, {"content-type": "json"}):
            with extract_trace_context(carrier):
                assert trace.get_current_span() is local


def test_a_round_trip_through_a_carrier_keeps_trace_and_parent(spans: Spans) -> None:
    tracer = spans.provider.get_tracer("test")
    with tracer.start_as_current_span("producer"):
        headers = inject_trace_context({})
    with extract_trace_context(headers), tracer.start_as_current_span("consumer"):
        pass
    producer, consumer = spans.one("producer"), spans.one("consumer")
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None
    assert consumer.parent.span_id == producer.context.span_id
