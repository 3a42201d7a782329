"""Spans and metrics exported over real OTLP/HTTP, configured by OTEL_* variables, to a receiver.

The receiver is a small Starlette app under uvicorn on 127.0.0.1 that accepts ``POST /v1/traces``
and ``POST /v1/metrics`` and decodes the protobuf payloads; the traced program runs in a fresh
interpreter, as a user's would, configured only by its environment.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra is missing")
pytest.importorskip("uvicorn")

import uvicorn
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

PROGRAM = textwrap.dedent(
    """
    import asyncio

    from daimon import Agent, ChatRequest, ChatResponse, ModelError, Role, ToolCall, Usage
    from daimon.models import FunctionModel
    from daimon.multiagent import AgentTool
    from daimon.telemetry import configure_otlp, instrument

    provider = configure_otlp(service_name="not-used: OTEL_SERVICE_NAME wins")


    def researcher(request: ChatRequest) -> ChatResponse:
        usage = Usage(input_tokens=3, output_tokens=2)
        return ChatResponse.reply("owls hunt at night", usage=usage)


    def writer(request: ChatRequest) -> ChatResponse:
        if not any(m.role is Role.TOOL for m in request.messages):
            call = ToolCall(id="call-1", name="research", arguments={"task": "owls"})
            usage = Usage(input_tokens=10, output_tokens=4)
            return ChatResponse.tool_use(call, usage=usage, model="w-1")
        usage = Usage(input_tokens=20, output_tokens=6)
        return ChatResponse.reply("Owls hunt at night.", usage=usage, model="w-1")


    def broken(request: ChatRequest) -> ChatResponse:
        raise ModelError("provider down", provider="test")


    async def main() -> None:
        sub = instrument(Agent(FunctionModel(researcher, model_name="r"), name="researcher"))
        tool = AgentTool(sub, name="research", description="Finds facts")
        model = FunctionModel(writer, model_name="w")
        agent = instrument(Agent(model, name="writer", tools=[tool]))
        await agent.prompt("Write about owls", session_id="conversation-1")
        failing = instrument(Agent(FunctionModel(broken, model_name="b"), name="failing"))
        try:
            await failing.prompt("hi")
        except ModelError:
            pass


    asyncio.run(main())
    provider.shutdown()  # flushes the batch; the meter provider exports when the process exits
    """
)


class Receiver:
    """An OTLP/HTTP trace receiver on a free loopback port."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.metric_requests: list[ExportMetricsServiceRequest] = []
        self.paths: list[str] = []
        app = Starlette(
            routes=[
                Route("/v1/traces", self._traces, methods=["POST"]),
                Route("/v1/metrics", self._metrics, methods=["POST"]),
            ]
        )
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    async def _traces(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        self.requests.append(message)
        self.paths.append(request.url.path)
        reply = ExportTraceServiceResponse().SerializeToString()
        return Response(reply, media_type="application/x-protobuf")

    async def _metrics(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportMetricsServiceRequest()
        message.ParseFromString(body)
        self.metric_requests.append(message)
        self.paths.append(request.url.path)
        reply = ExportMetricsServiceResponse().SerializeToString()
        return Response(reply, media_type="application/x-protobuf")

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "the OTLP receiver did not start"
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every span received, with its resource's attributes."""
        found = []
        for message in self.requests:
            for resource_spans in message.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    assert scope_spans.scope.name == "daimon"
                    found += [(resource, span) for span in scope_spans.spans]
        return found

    def histograms(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Every histogram data point received, with its attributes, by metric name."""
        found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        for message in self.metric_requests:
            for resource_metrics in message.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    assert scope_metrics.scope.name == "daimon"
                    for metric in scope_metrics.metrics:
                        assert metric.WhichOneof("data") == "histogram", metric.name
                        found.setdefault(f"{metric.name} [{metric.unit}]", []).extend(
                            (_attributes(point), point) for point in metric.histogram.data_points
                        )
        return found


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, kind)


def _attributes(span: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in span.attributes}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.start()
    yield server
    server.stop()


def test_spans_reach_an_otlp_http_receiver_configured_by_the_environment(
    receiver: Receiver,
) -> None:
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_SERVICE_NAME": "owl-writer",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
    }
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    env.pop("OTEL_SDK_DISABLED", None)
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert set(receiver.paths) == {"/v1/traces", "/v1/metrics"}
    received = receiver.spans()
    resource = received[0][0]
    assert resource["service.name"] == "owl-writer"
    assert resource["deployment.environment"] == "test"
    spans = [span for _, span in received]
    by_id = {span.span_id: span for span in spans}

    def parent(span: Any) -> str | None:
        return by_id[span.parent_span_id].name if span.parent_span_id else None

    names = sorted((span.name, parent(span)) for span in spans)
    assert names == sorted(
        [
            ("invoke_agent writer", None),
            ("chat w", "invoke_agent writer"),
            ("execute_tool research", "invoke_agent writer"),
            ("invoke_agent researcher", "execute_tool research"),
            ("chat r", "invoke_agent researcher"),
            ("chat w", "invoke_agent writer"),
            ("invoke_agent failing", None),
            ("chat b", "invoke_agent failing"),
        ]
    )
    writer = next(s for s in spans if s.name == "invoke_agent writer")
    assert _attributes(writer)["gen_ai.conversation.id"] == "conversation-1"
    assert _attributes(writer)["gen_ai.usage.input_tokens"] == 33
    tool = next(s for s in spans if s.name == "execute_tool research")
    assert _attributes(tool)["gen_ai.tool.call.id"] == "call-1"
    failing = [s for s in spans if s.name in ("invoke_agent failing", "chat b")]
    assert len({s.trace_id for s in spans if s not in failing}) == 1  # sub-agent: same trace
    assert len({s.trace_id for s in failing}) == 1
    for span in failing:
        assert span.status.code == span.status.STATUS_CODE_ERROR
        assert _attributes(span)["error.type"] == "daimon.core.errors.ModelError"
        assert [e.name for e in span.events] == ["exception"]

    histograms = receiver.histograms()
    assert set(histograms) == {
        "gen_ai.client.token.usage [{token}]",
        "gen_ai.client.operation.duration [s]",
    }
    tokens = {
        (a["gen_ai.request.model"], a.get("gen_ai.response.model"), a["gen_ai.token.type"]): (
            point.count,
            point.sum,
        )
        for a, point in histograms["gen_ai.client.token.usage [{token}]"]
    }
    assert tokens == {
        ("w", "w-1", "input"): (2, 30),
        ("w", "w-1", "output"): (2, 10),
        ("r", None, "input"): (1, 3),
        ("r", None, "output"): (1, 2),
    }  # the failed call to "b" used no tokens it could report
    token_points = histograms["gen_ai.client.token.usage [{token}]"]
    assert all(a["gen_ai.operation.name"] == "chat" for a, _ in token_points)
    assert list(token_points[0][1].explicit_bounds) == [4**i for i in range(14)]
    durations = {
        (a["gen_ai.request.model"], a.get("error.type")): point
        for a, point in histograms["gen_ai.client.operation.duration [s]"]
    }
    assert {key: point.count for key, point in durations.items()} == {
        ("w", None): 2,
        ("r", None): 1,
        ("b", "daimon.core.errors.ModelError"): 1,
    }
    assert all(0 < point.sum < 10 for point in durations.values())
    assert list(durations["b", "daimon.core.errors.ModelError"].explicit_bounds)[:3] == [
        0.01,
        0.02,
        0.04,
    ]


CONFIGURE = textwrap.dedent(
    """
    import asyncio, json, os

    from daimon import Agent, ChatResponse
    from daimon.core import BuilderError
    from daimon.models import FunctionModel
    from daimon.telemetry import configure_otlp, instrument

    from opentelemetry import metrics

    refused = {}
    for key, value in [
        ("OTEL_TRACES_EXPORTER", "zipkin"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_METRICS_EXPORTER", "prometheus"),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json"),
    ]:
        os.environ[key] = value
        try:
            configure_otlp()
        except BuilderError as exc:
            refused[value] = str(exc)
        del os.environ[key]
    os.environ["OTEL_TRACES_EXPORTER"] = "console"
    os.environ["OTEL_METRICS_EXPORTER"] = "console"
    provider = configure_otlp(service_name="console-service")
    agent = instrument(Agent(FunctionModel(lambda request: ChatResponse.reply("hi")), name="a"))
    asyncio.run(agent.prompt("hello"))
    provider.shutdown()
    metrics.get_meter_provider().shutdown()
    print(json.dumps(refused))
    """
)


def test_the_environment_picks_the_exporter_and_bad_choices_are_refused() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", CONFIGURE], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    *console, last = result.stdout.strip().splitlines()
    refused = json.loads(last)
    assert "configure_otlp offers otlp, console and none" in refused["zipkin"]
    assert "OTLP protocol 'grpc' is not offered" in refused["grpc"]
    assert "OTEL_METRICS_EXPORTER names ['prometheus']" in refused["prometheus"]
    assert "OTLP protocol 'http/json' is not offered" in refused["http/json"]
    printed = "\n".join(console)
    assert '"name": "invoke_agent a"' in printed
    assert '"service.name": "console-service"' in printed
    assert '"name": "gen_ai.client.operation.duration"' in printed
