"""GenAI client metrics of instrumented agents, read with the SDK's in-memory metric reader."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from daimon import Agent, ChatRequest, ChatResponse, ModelError, Role, ToolCall, Usage, tool
from daimon.models import FunctionModel
from daimon.telemetry import instrument

TOKENS = "gen_ai.client.token.usage"
DURATION = "gen_ai.client.operation.duration"


class Meters:
    """A meter provider whose measurements are read in memory."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """The data points of the histogram ``name``, with their attributes."""
        data = self.reader.get_metrics_data()
        found: list[tuple[dict[str, Any], Any]] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                assert scope.scope.name == "daimon"
                for metric in scope.metrics:
                    if metric.name == name:
                        found += [(dict(p.attributes or {}), p) for p in metric.data.data_points]
        return found

    def unit(self, name: str) -> str | None:
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        return metric.unit
        return None


@pytest.fixture
def meters() -> Iterator[Meters]:
    collected = Meters()
    yield collected
    collected.provider.shutdown()


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def adder(**response: Any) -> FunctionModel:
    """Calls ``add`` once, then answers; each call reports usage."""

    def model(request: ChatRequest) -> ChatResponse:
        if not any(m.role is Role.TOOL for m in request.messages):
            call = ToolCall(id="c", name="add", arguments={"a": 2, "b": 3})
            usage = Usage(input_tokens=10, output_tokens=5, requests=1)
            return ChatResponse.tool_use(call, usage=usage, **response)
        usage = Usage(input_tokens=30, output_tokens=7, requests=1)
        return ChatResponse.reply("5", usage=usage, **response)

    return FunctionModel(model, model_name="m")


class Hosted(FunctionModel):
    """A function model that says which provider it stands for."""

    provider = "gemini"


async def test_each_model_call_records_its_tokens_and_duration(meters: Meters) -> None:
    agent = instrument(
        Agent(adder(model="m-2025"), name="calc", tools=[add]), meter_provider=meters.provider
    )
    await agent.prompt("2 + 3?")
    tokens = {a["gen_ai.token.type"]: (p.count, p.sum) for a, p in meters.points(TOKENS)}
    assert tokens == {"input": (2, 40), "output": (2, 12)}
    for attributes, _ in meters.points(TOKENS):
        assert attributes == {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "gen_ai.response.model": "m-2025",
            "gen_ai.token.type": attributes["gen_ai.token.type"],
        }
    ((attributes, duration),) = meters.points(DURATION)
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "m-2025",
    }
    assert duration.count == 2 and 0 <= duration.sum < 5
    assert (meters.unit(TOKENS), meters.unit(DURATION)) == ("{token}", "s")


async def test_the_buckets_are_the_ones_the_conventions_advise(meters: Meters) -> None:
    agent = instrument(Agent(adder(), tools=[add]), meter_provider=meters.provider)
    await agent.prompt("2 + 3?")
    (_, point), *_ = meters.points(TOKENS)
    assert list(point.explicit_bounds) == [4**i for i in range(14)]
    ((_, duration),) = meters.points(DURATION)
    assert list(duration.explicit_bounds) == [0.01 * 2**i for i in range(14)]


async def test_the_provider_is_named_as_the_conventions_name_it(meters: Meters) -> None:
    model = Hosted(lambda request: ChatResponse.reply("hi", usage=Usage(requests=1)))
    await instrument(Agent(model), meter_provider=meters.provider).prompt("hi")
    for attributes, _ in [*meters.points(TOKENS), *meters.points(DURATION)]:
        assert attributes["gen_ai.provider.name"] == "gcp.gemini"
    # Reported usage of zero tokens is still usage: both token types are recorded.
    assert sorted(p.sum for _, p in meters.points(TOKENS)) == [0, 0]


async def test_a_model_that_reports_no_usage_records_no_tokens(meters: Meters) -> None:
    model = FunctionModel(lambda request: ChatResponse.reply("hi"), model_name="m")
    await instrument(Agent(model), meter_provider=meters.provider).prompt("hi")
    assert meters.points(TOKENS) == []
    assert len(meters.points(DURATION)) == 1


async def test_a_failed_call_records_its_duration_with_the_error_type(meters: Meters) -> None:
    def broken(request: ChatRequest) -> ChatResponse:
        raise ModelError("provider down", provider="test")

    agent = instrument(Agent(FunctionModel(broken, model_name="b")), meter_provider=meters.provider)
    with pytest.raises(ModelError):
        await agent.prompt("hi")
    assert meters.points(TOKENS) == []
    ((attributes, point),) = meters.points(DURATION)
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "b",
        "error.type": "daimon.core.errors.ModelError",
    }
    assert point.count == 1


async def test_a_call_cut_short_by_cancellation_records_its_duration(meters: Meters) -> None:
    started = asyncio.Event()

    async def stuck(request: ChatRequest) -> ChatResponse:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    agent = instrument(Agent(FunctionModel(stuck, model_name="s")), meter_provider=meters.provider)
    run = asyncio.create_task(agent.prompt("hi"))
    await started.wait()
    await asyncio.sleep(0.02)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    ((attributes, point),) = meters.points(DURATION)
    assert attributes["error.type"] == "asyncio.exceptions.CancelledError"
    assert point.sum >= 0.02
