"""Providers' rate-limit headers: read on answers, streams and 429s, and taught to a limiter."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from daimon.core.chat import ChatRequest
from daimon.core.errors import ModelError
from daimon.core.events import Done
from daimon.core.limits import RateLimits, Remaining
from daimon.core.messages import Message
from daimon.kit.sdk_support import rate_limits, rate_limits_of
from daimon.limits import LimitedModel, Limiter, MemoryLimitStore
from daimon.models.anthropic import AnthropicModel
from daimon.models.openai import OpenAIModel, OpenAIResponsesModel
from daimon.testing.models import SSE, WireServer

REQUEST = ChatRequest(messages=(Message.user("hi"),))

OPENAI_HEADERS = {
    "x-ratelimit-limit-requests": "10000",
    "x-ratelimit-remaining-requests": "9999",
    "x-ratelimit-limit-tokens": "2000000",
    "x-ratelimit-remaining-tokens": "1999000",
    "x-ratelimit-reset-requests": "6ms",
    "x-ratelimit-reset-tokens": "6m0s",
}
OPENAI_LEFT = Remaining(
    requests=9999,
    tokens=1_999_000,
    reset=360.0,
    extra={k: v for k, v in OPENAI_HEADERS.items() if "-limit-" not in k},
)


def anthropic_headers(reset_in: float = 30.0) -> dict[str, str]:
    reset = (datetime.now(UTC) + timedelta(seconds=reset_in)).isoformat().replace("+00:00", "Z")
    return {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": reset,
        "anthropic-ratelimit-input-tokens-remaining": "39000",
        "anthropic-ratelimit-output-tokens-remaining": "8000",
    }


@pytest.fixture(scope="module")
def server() -> Iterator[WireServer]:
    with WireServer() as running:
        yield running


@pytest.fixture
def wire(server: WireServer) -> Iterator[WireServer]:
    server.reset()
    yield server
    assert server.pending == 0, "a scripted reply was not used"


# ------------------------------------------------------------------------------ the parsing
@pytest.mark.parametrize(
    ("value", "seconds"),
    [("6m0s", 360.0), ("1s", 1.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5", 0.5)],
)
def test_openai_resets_are_go_durations(value: str, seconds: float) -> None:
    left = rate_limits({"x-ratelimit-remaining-requests": "1", "x-ratelimit-reset-requests": value})
    assert left is not None and left.reset == pytest.approx(seconds)


def test_openai_headers_say_requests_and_tokens_left_and_the_latest_reset() -> None:
    assert rate_limits(OPENAI_HEADERS) == OPENAI_LEFT


def test_anthropic_headers_say_what_is_left_of_each_and_when_it_resets() -> None:
    left = rate_limits(anthropic_headers(30.0))
    assert left is not None
    assert (left.requests, left.input_tokens, left.output_tokens, left.tokens) == (
        49,
        39000,
        8000,
        None,
    )
    assert left.reset == pytest.approx(30.0, abs=2.0)


def test_no_headers_or_unreadable_values_say_nothing() -> None:
    assert rate_limits({"content-type": "application/json"}) is None
    left = rate_limits(
        {"x-ratelimit-remaining-requests": "many", "x-ratelimit-reset-requests": "soon"}
    )
    assert left is not None and left.requests is None and left.reset is None


# ------------------------------------------------------------------------------- OpenAI
def completion() -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }


def chunks() -> list[SSE]:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test"}
    delta = {"index": 0, "delta": {"content": "hi"}, "finish_reason": None}
    end = {"index": 0, "delta": {}, "finish_reason": "stop"}
    usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    return [
        SSE(data={**base, "choices": [delta]}),
        SSE(data={**base, "choices": [end]}),
        SSE(data={**base, "choices": [], "usage": usage}),
        SSE(data="[DONE]"),
    ]


def too_many(wire: WireServer, headers: dict[str, str]) -> None:
    error = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit"}}
    wire.reply_json(error, status=429, headers={"retry-after": "0.2", **headers})


async def test_an_openai_answer_carries_its_rate_limits(wire: WireServer) -> None:
    wire.reply_json(completion(), headers=OPENAI_HEADERS)
    async with OpenAIModel("gpt-test", api_key="k", base_url=f"{wire.url}/v1") as model:
        response = await model.generate(REQUEST)
    assert response.text == "hi" and response.rate_limits == OPENAI_LEFT


async def test_an_openai_stream_ends_with_its_rate_limits(wire: WireServer) -> None:
    wire.reply_sse(chunks(), headers=OPENAI_HEADERS)
    async with OpenAIModel("gpt-test", api_key="k", base_url=f"{wire.url}/v1") as model:
        events = [event async for event in model.generate_stream(REQUEST)]
    done = events[-1]
    assert isinstance(done, Done) and done.rate_limits == OPENAI_LEFT


async def test_an_openai_429_carries_its_rate_limits(wire: WireServer) -> None:
    too_many(wire, {**OPENAI_HEADERS, "x-ratelimit-remaining-requests": "0"})
    async with OpenAIModel("gpt-test", api_key="k", base_url=f"{wire.url}/v1") as model:
        with pytest.raises(ModelError) as caught:
            await model.generate(REQUEST)
    left = rate_limits_of(caught.value)
    assert caught.value.status_code == 429 and caught.value.retry_after == 0.2
    assert left is not None and left.requests == 0 and left.tokens == 1_999_000


async def test_a_responses_api_answer_carries_its_rate_limits(wire: WireServer) -> None:
    body = {
        "id": "r",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-test",
        "output": [
            {
                "type": "message",
                "id": "m",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "hi", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6},
    }
    wire.reply_json(body, headers=OPENAI_HEADERS)
    async with OpenAIResponsesModel("gpt-test", api_key="k", base_url=f"{wire.url}/v1") as model:
        response = await model.generate(REQUEST)
    assert response.text == "hi" and response.rate_limits == OPENAI_LEFT


# ---------------------------------------------------------------------------- Anthropic
def message() -> dict[str, Any]:
    return {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }


def anthropic_events() -> list[SSE]:
    start = {**message(), "content": [], "stop_reason": None}
    return [
        SSE(event=kind, data={"type": kind, **fields})
        for kind, fields in (
            ("message_start", {"message": start}),
            ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "hi"}}),
            ("content_block_stop", {"index": 0}),
            (
                "message_delta",
                {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
            ),
            ("message_stop", {}),
        )
    ]


def claude(wire: WireServer) -> AnthropicModel:
    return AnthropicModel("claude-test", api_key="k", base_url=wire.url)


async def test_an_anthropic_answer_and_stream_carry_their_rate_limits(wire: WireServer) -> None:
    wire.reply_json(message(), headers=anthropic_headers())
    wire.reply_sse(anthropic_events(), headers=anthropic_headers())
    async with claude(wire) as model:
        response = await model.generate(REQUEST)
        events = [event async for event in model.generate_stream(REQUEST)]
    assert response.text == "hi"
    assert response.rate_limits is not None and response.rate_limits.input_tokens == 39000
    done = events[-1]
    assert isinstance(done, Done) and done.rate_limits is not None
    assert done.rate_limits.output_tokens == 8000


async def test_an_anthropic_429_carries_its_rate_limits(wire: WireServer) -> None:
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    headers = {**anthropic_headers(), "anthropic-ratelimit-requests-remaining": "0"}
    wire.reply_json(error, status=429, headers={"retry-after": "1", **headers})
    async with claude(wire) as model:
        with pytest.raises(ModelError) as caught:
            await model.generate(REQUEST)
    left = rate_limits_of(caught.value)
    assert caught.value.retry_after == 1.0 and left is not None and left.requests == 0


# ------------------------------------------------------------------ what a limiter learns
class Learning(MemoryLimitStore):
    def __init__(self) -> None:
        super().__init__()
        self.learned: list[tuple[float | None, Remaining | None]] = []

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


async def test_a_limited_openai_model_learns_from_headers_and_429s(wire: WireServer) -> None:
    too_many(wire, {**OPENAI_HEADERS, "x-ratelimit-remaining-requests": "0"})
    wire.reply_json(completion(), headers=OPENAI_HEADERS)
    store = Learning()
    limiter = Limiter(RateLimits(requests_per_minute=1000), store)
    inner = OpenAIModel("gpt-test", api_key="k", base_url=f"{wire.url}/v1")
    async with LimitedModel(inner, limiter) as model:
        with pytest.raises(ModelError):
            await model.generate(REQUEST)
        started = time.monotonic()
        await model.generate(REQUEST)
    assert time.monotonic() - started >= 0.15  # the 429's retry-after held the key back
    (pause, refused), (no_pause, answered) = store.learned
    assert pause == 0.2 and refused is not None and refused.requests == 0
    assert no_pause is None and answered == OPENAI_LEFT


def test_the_reset_is_when_what_ran_out_comes_back() -> None:
    """Requests ran out (back in 6 ms); tokens reset in 6 minutes but are not what ran out."""
    from daimon.kit.sdk_support import rate_limits

    empty = rate_limits({**OPENAI_HEADERS, "x-ratelimit-remaining-requests": "0"})
    assert empty is not None and empty.requests == 0 and empty.reset == pytest.approx(0.006)
    full = rate_limits(OPENAI_HEADERS)
    assert full is not None and full.reset == 360.0  # nothing ran out: the latest reset
