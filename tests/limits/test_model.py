"""LimitedModel: what a call reserves, how it settles, and what a provider's answer teaches."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from daimon.core import BuilderError, ModelError, RateLimitedError
from daimon.core.chat import ChatRequest, ChatResponse, ResponseFormat, Usage
from daimon.core.events import Done, RateLimitWait, StreamEvent, TextDelta, UsageEvent
from daimon.core.limits import RateLimits, Remaining, Ticket
from daimon.core.messages import Message, ToolCall
from daimon.core.tools import ToolSpec
from daimon.limits import LimitedModel, Limiter, MemoryLimitStore
from daimon.limits._model import estimate_tokens, watching_waits
from daimon.models import RetryingModel
from daimon.models.function import FunctionModel
from daimon.models.scripted import ScriptedModel

REQUEST = ChatRequest(messages=(Message.user("x" * 400),))  # 100 tokens by the estimate


class Recording(MemoryLimitStore):
    """The in-process store, keeping what it was asked (the limiter's side of the contract)."""

    def __init__(self) -> None:
        super().__init__()
        self.reserved: list[Ticket] = []
        self.settled: list[tuple[int, int]] = []
        self.learned: list[tuple[float | None, Remaining | None]] = []

    async def reserve(self, key: str, limits: RateLimits, ticket: Ticket) -> float:
        wait = await super().reserve(key, limits, ticket)
        if wait <= 0:
            self.reserved.append(ticket)
        return wait

    async def settle(
        self, key: str, limits: RateLimits, ticket: Ticket, input_tokens: int, output_tokens: int
    ) -> None:
        self.settled.append((input_tokens, output_tokens))
        await super().settle(key, limits, ticket, input_tokens, output_tokens)

    async def learn(
        self,
        key: str,
        limits: RateLimits,
        *,
        pause: float | None = None,
        remaining: Remaining | None = None,
    ) -> None:
        self.learned.append((pause, remaining))
        await super().learn(key, limits, pause=pause, remaining=remaining)


def limited(
    model: Any, limits: RateLimits | None = None, **kwargs: Any
) -> tuple[LimitedModel, Recording]:
    store = Recording()
    limiter = Limiter(limits or RateLimits(requests_per_minute=1000), store)
    return LimitedModel(model, limiter, **kwargs), store


def used(input_tokens: int, output_tokens: int) -> Usage:
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1)


def test_the_estimate_counts_utf8_bytes_over_four_and_max_tokens() -> None:
    assert estimate_tokens(REQUEST) == (100, 1024)
    assert estimate_tokens(ChatRequest(messages=(Message.user(""),), max_tokens=50)) == (1, 50)
    assert estimate_tokens(ChatRequest(messages=(Message.user("é" * 400),)))[0] == 200
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    tool = ToolSpec(name="search", description="Search the web.", parameters=schema)
    call = ToolCall(id="c1", name="search", arguments={"q": "y" * 100})
    fuller = ChatRequest(
        messages=(Message.user("x" * 400), Message.assistant("", [call]), Message.tool("c1", "r")),
        tools=(tool,),
        response_format=ResponseFormat(name="answer", schema=schema),
    )
    assert estimate_tokens(fuller)[0] > 100 + 25 + 2 * 10  # the call, the tool, the schema


async def test_a_call_reserves_its_estimate_and_settles_with_the_reported_usage() -> None:
    model, store = limited(ScriptedModel([ChatResponse.reply("ok", usage=used(120, 7))]))
    response = await model.generate(REQUEST.__class__(messages=REQUEST.messages, max_tokens=64))
    assert response.text == "ok"
    ticket = store.reserved[0]
    assert (ticket.input_tokens, ticket.output_tokens) == (100, 64)
    assert store.settled == [(120, 7)]


async def test_a_reply_without_usage_keeps_the_estimate() -> None:
    model, store = limited(ScriptedModel(["ok"]))
    await model.generate(REQUEST)
    assert store.settled == [(100, 1024)]


async def test_the_reported_usage_makes_the_next_call_wait() -> None:
    model, _ = limited(
        ScriptedModel([ChatResponse.reply("a", usage=used(1000, 0)), "b"]),
        RateLimits(input_tokens_per_minute=1000, period=1.0),
    )
    await model.generate(REQUEST)  # 100 reserved, 1000 used: the bucket is empty
    started = time.monotonic()
    await model.generate(REQUEST)
    assert time.monotonic() - started >= 0.08  # 100 tokens refill in 0.1 s


def rate_limited(retry_after: float | None, remaining: Remaining | None = None) -> ModelError:
    error = ModelError(
        "slow down", status_code=429, retryable=True, retry_after=retry_after, provider="fake"
    )
    error.rate_limits = remaining  # type: ignore[attr-defined]  # as sdk_support sets it
    return error


class Refusing:
    """Answers 429 the first ``times`` calls (before any stream event), then "ok"."""

    model_name = "refusing"

    def __init__(self, error: ModelError, times: int = 1) -> None:
        self.error, self.times, self.calls = error, times, 0

    async def generate(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return ChatResponse.reply("ok", usage=used(3, 4))

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        response = await self.generate(request)
        yield TextDelta(text=response.text)
        yield UsageEvent(usage=response.usage)
        yield Done()


async def test_a_429_pauses_the_key_and_is_raised_again() -> None:
    left = Remaining(requests=0, reset=0.2)
    model, store = limited(Refusing(rate_limited(0.3, left)))
    with pytest.raises(ModelError) as caught:
        await model.generate(REQUEST)
    assert caught.value.status_code == 429
    assert store.learned == [(0.3, left)]
    assert store.settled == [(0, 0)]  # a refused request used no tokens
    started = time.monotonic()
    assert (await model.generate(REQUEST)).text == "ok"
    assert time.monotonic() - started >= 0.25


async def test_a_429_without_retry_after_pauses_one_second() -> None:
    model, store = limited(Refusing(rate_limited(None)))
    with pytest.raises(ModelError):
        await model.generate(REQUEST)
    assert store.learned == [(1.0, None)]


async def test_other_errors_teach_nothing() -> None:
    error = ModelError("down", status_code=503, retryable=True, provider="fake")
    model, store = limited(Refusing(error))
    with pytest.raises(ModelError):
        await model.generate(REQUEST)
    assert store.learned == []
    assert store.settled == [(100, 1024)]


async def test_rate_limit_headers_on_a_response_lower_the_buckets() -> None:
    left = Remaining(requests=3, tokens=10, reset=5.0)
    model, store = limited(
        ScriptedModel([ChatResponse(message=Message.assistant("ok"), rate_limits=left), "b"]),
        RateLimits(input_tokens_per_minute=100, period=1.0),  # 100 a second
    )
    await model.generate(REQUEST)
    assert store.learned == [(None, left)]  # nothing ran out: no pause
    started = time.monotonic()
    await model.generate(REQUEST)
    assert time.monotonic() - started >= 0.02  # 10 tokens left of the bucket: the rest refills


async def test_retrying_outside_waits_its_turn_again_on_each_retry() -> None:
    refusing = Refusing(rate_limited(0.2), times=2)
    inner, store = limited(refusing)
    model = RetryingModel(inner, max_attempts=3, jitter=False)
    started = time.monotonic()
    assert (await model.generate(REQUEST)).text == "ok"
    # each retry sleeps retry_after (0.2), then waits for the key's pause to end again
    assert time.monotonic() - started >= 0.4
    assert len(store.reserved) == 3


async def test_a_stream_that_waited_says_so_before_its_first_event() -> None:
    limits = RateLimits(requests_per_minute=1, period=0.3, max_wait=5)
    model, _ = limited(FunctionModel(stream_function=lambda r: ["a", "b"]), limits)
    first = [event async for event in model.generate_stream(REQUEST)]
    assert [type(e) for e in first] == [TextDelta, TextDelta, Done]
    second = [event async for event in model.generate_stream(REQUEST)]
    wait = second[0]
    assert isinstance(wait, RateLimitWait)
    assert wait.key == "function" and 0.15 < wait.waited < 1.0
    assert [type(e) for e in second[1:]] == [TextDelta, TextDelta, Done]


async def test_a_stream_settles_with_its_usage_and_learns_from_its_done() -> None:
    left = Remaining(input_tokens=5, output_tokens=5)

    def stream(request: ChatRequest) -> Iterable[Any]:
        yield "hi"
        yield UsageEvent(usage=used(40, 2))
        yield Done(rate_limits=left)

    model, store = limited(FunctionModel(stream_function=stream))
    events = [event async for event in model.generate_stream(REQUEST)]
    assert [type(e) for e in events] == [TextDelta, UsageEvent, Done]
    assert store.settled == [(40, 2)]
    assert store.learned == [(None, left)]


async def test_a_stream_refused_before_its_first_event_is_retried() -> None:
    inner, store = limited(Refusing(rate_limited(0.05)))
    model = RetryingModel(inner, max_attempts=2, jitter=False)
    events = [event async for event in model.generate_stream(REQUEST)]
    assert [type(e) for e in events] == [TextDelta, UsageEvent, Done]
    assert store.learned == [(0.05, None)]
    assert store.settled == [(0, 0), (3, 4)]


async def test_watchers_in_context_hear_of_each_wait() -> None:
    limits = RateLimits(requests_per_minute=1, period=0.2, max_wait=5)
    model, _ = limited(ScriptedModel(["a", "b"]), limits, key="team-a")
    heard: list[tuple[str, float]] = []
    with watching_waits(lambda key, waited: heard.append((key, waited))):
        await model.generate(REQUEST)
        assert heard == []
        await model.generate(REQUEST)
    assert [key for key, _ in heard] == ["team-a"] and heard[0][1] > 0.1


async def test_a_call_that_waits_past_max_wait_fails() -> None:
    limits = RateLimits(requests_per_minute=1, period=60, max_wait=0.2)
    model, _ = limited(ScriptedModel(["a", "b"]), limits)
    await model.generate(REQUEST)
    with pytest.raises(RateLimitedError):
        await model.generate(REQUEST)


async def test_it_passes_the_wrapped_models_name_capabilities_and_close_through() -> None:
    closed: list[bool] = []

    class Closable(FunctionModel):
        __slots__ = ()

        async def aclose(self) -> None:
            closed.append(True)

    inner = Closable(lambda r: "ok", model_name="m1", supports_json_schema=True)
    model, _ = limited(inner)
    assert model.model_name == "m1" and model.key == "m1"
    assert model.supports_json_schema is True
    assert getattr(model, "prompt_cache", "off") == "off"
    async with model:
        pass
    assert closed == [True]
    assert "key='m1'" in repr(model)


def test_bad_arguments_are_builder_errors() -> None:
    limiter = Limiter(RateLimits(concurrent=1))
    with pytest.raises(BuilderError, match="wraps a Model"):
        LimitedModel("gpt", limiter)  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match="Limiter"):
        LimitedModel(ScriptedModel([]), RateLimits())  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match="key"):
        LimitedModel(ScriptedModel([]), limiter, key="")


async def test_a_provider_that_says_something_ran_out_pauses_the_key_until_its_reset() -> None:
    """Its buckets refill at its own rate, which may be slower than the configured one."""
    left = Remaining(requests=0, reset=0.3)
    model, store = limited(
        ScriptedModel([ChatResponse(message=Message.assistant("ok"), rate_limits=left), "b"]),
        RateLimits(requests_per_minute=1000),
    )
    await model.generate(REQUEST)
    assert store.learned == [(0.3, left)]
    started = time.monotonic()
    await model.generate(REQUEST)
    assert time.monotonic() - started >= 0.25


@pytest.mark.parametrize(("charges", "settled"), [(True, (90, 1024)), (False, (90, 7))])
async def test_a_provider_that_charges_max_tokens_keeps_the_reserved_output(
    charges: bool, settled: tuple[int, int]
) -> None:
    """OpenAI counts max_tokens when it admits a call and gives none back for a short answer."""
    answer = ChatResponse(message=Message.assistant("ok"), usage=used(90, 7))
    model, store = limited(ScriptedModel([answer]), charges_max_tokens=charges)
    await model.generate(REQUEST)
    assert store.settled == [settled]


def test_openai_models_charge_max_tokens_by_default() -> None:
    from daimon.models.openai import OpenAIModel

    limiter = Limiter(RateLimits(requests_per_minute=10))
    openai = LimitedModel(OpenAIModel("gpt-test", api_key="k"), limiter)
    assert openai.charges_max_tokens is True
    assert LimitedModel(ScriptedModel(["x"]), limiter).charges_max_tokens is False
