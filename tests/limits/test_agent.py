"""Agent(limits=...): the model waits its turn, a streamed run says so, and traces show it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from daimon import Agent
from daimon.core import BuilderError
from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.events import Done, RateLimitWait, StreamEvent, TextDelta, UsageEvent
from daimon.extensions import CallModel, Extension
from daimon.limits import LimitedModel, Limiter, RateLimits
from daimon.models.function import FunctionModel
from daimon.state import RunState


def one_a_period(period: float = 0.3) -> Limiter:
    """One request per ``period`` seconds: a second call waits about ``period``."""
    return Limiter(RateLimits(requests_per_minute=1, period=period, max_wait=5))


def echo(model_name: str = "m-1", **options: Any) -> FunctionModel:
    return FunctionModel(lambda request: "ok", model_name=model_name, **options)


def test_limits_wrap_the_model_keyed_by_its_name() -> None:
    limiter = one_a_period()
    agent = Agent(echo(), limits=limiter)
    assert isinstance(agent.model, LimitedModel)
    assert agent.model.key == "m-1" and agent.model.limiter is limiter
    assert agent.limits is limiter
    assert agent.model.model_name == "m-1"


def test_the_wrapped_models_capabilities_still_count() -> None:
    agent = Agent(echo(supports_json_schema=True), limits=one_a_period())
    assert agent.native_output is True


def test_replace_wraps_once_and_limits_none_unwraps() -> None:
    limiter = one_a_period()
    inner = echo()
    agent = Agent(inner, limits=limiter)
    again = agent.replace(name="other")
    assert isinstance(again.model, LimitedModel) and again.model.model is inner
    assert Agent(again.model, limits=limiter).model is again.model  # not wrapped twice
    assert agent.replace(limits=None).model is inner


def test_a_model_limited_by_the_caller_keeps_its_key() -> None:
    limiter = one_a_period()
    mine = LimitedModel(echo(), limiter, key="team-a")
    agent = Agent(mine, limits=limiter)
    assert agent.model is mine
    assert agent.replace(name="b").model is mine


def test_limits_must_be_a_limiter() -> None:
    with pytest.raises(BuilderError, match="Limiter"):
        Agent(echo(), limits=RateLimits(concurrent=1))  # type: ignore[arg-type]


async def kinds(agent: Agent[Any, Any]) -> list[type[StreamEvent]]:
    return [type(event) async for event in agent.prompt_stream("hi")]


async def test_a_streamed_run_shows_the_wait_before_the_model_calls_events() -> None:
    agent = Agent(echo(), limits=one_a_period())
    assert await kinds(agent) == [TextDelta, UsageEvent, Done]
    events = [event async for event in agent.prompt_stream("hi")]
    assert [type(e) for e in events] == [RateLimitWait, TextDelta, UsageEvent, Done]
    wait = events[0]
    assert isinstance(wait, RateLimitWait) and wait.key == "m-1" and wait.waited > 0.15


class Passing(Extension):
    """Passes every model call on: the run then calls the model through the extension chain."""

    async def wrap_model_call(
        self, request: ChatRequest, ctx: RunState, call_next: CallModel
    ) -> ChatResponse:
        return await call_next(request)


async def test_the_wait_shows_through_extensions_too() -> None:
    agent = Agent(echo(), limits=one_a_period(), extensions=[Passing()])
    await kinds(agent)
    assert await kinds(agent) == [RateLimitWait, TextDelta, UsageEvent, Done]


async def test_a_plain_prompt_waits_too() -> None:
    agent = Agent(echo(), limits=one_a_period(0.2))
    await agent.prompt("a")
    started = time.monotonic()
    assert (await agent.prompt("b")).text == "ok"
    assert time.monotonic() - started >= 0.15


async def test_a_traced_call_that_waited_says_how_long_on_its_chat_span() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from daimon.telemetry import instrument

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = instrument(Agent(echo(), limits=one_a_period()), tracer_provider=provider)
    await agent.prompt("a")
    await agent.prompt("b")
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat")]
    assert len(chats) == 2
    assert "daimon.rate_limit.waited" not in (chats[0].attributes or {})
    attributes = chats[1].attributes or {}
    assert float(attributes["daimon.rate_limit.waited"]) > 0.15  # type: ignore[arg-type]
    assert attributes["daimon.rate_limit.key"] == "m-1"


async def test_a_stream_of_a_traced_agent_shows_the_wait_too() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from opentelemetry.sdk.trace import TracerProvider

    from daimon.telemetry import instrument

    agent = instrument(Agent(echo(), limits=one_a_period()), tracer_provider=TracerProvider())
    await kinds(agent)
    assert (await kinds(agent))[0] is RateLimitWait


def test_the_limiter_goes_inside_a_retrying_model() -> None:
    """Each retry waits its turn again (outside, a 429 was retried inside one reservation)."""
    from daimon.models import RetryingModel, ScriptedModel

    limiter = Limiter(RateLimits(requests_per_minute=10))
    retrying = RetryingModel(ScriptedModel(["hi"]), max_attempts=7)
    agent = Agent(retrying, limits=limiter)

    assert isinstance(agent.model, RetryingModel)
    assert isinstance(agent.model.model, LimitedModel)
    assert agent.model.model.limiter is limiter
    assert retrying.model.__class__ is ScriptedModel  # the caller's model is left as it was
    plain = agent.replace(limits=None).model
    assert isinstance(plain, RetryingModel) and isinstance(plain.model, ScriptedModel)
