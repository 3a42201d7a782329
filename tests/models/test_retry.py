"""RetryingModel: which errors it retries, how long it waits, and when it gives up."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from daimon import (
    BuilderError,
    ChatRequest,
    ChatResponse,
    Done,
    Message,
    ModelError,
    StreamClosedError,
    TextDelta,
)
from daimon.core.events import StreamEvent
from daimon.core.protocols import Model
from daimon.models import RetryingModel
from daimon.models.openai import OpenAIModel
from daimon.testing.models import SSE, WireServer

REQUEST = ChatRequest(messages=(Message.user("hi"),))


def transient(**kwargs: Any) -> ModelError:
    return ModelError("busy", status_code=503, retryable=True, provider="fake", **kwargs)


class Flaky:
    """Fails with the given errors, in order, then answers; a stream may fail mid-way."""

    model_name = "flaky"

    def __init__(self, errors: Iterable[Exception], *, fail_after_events: int = 0) -> None:
        self.errors = list(errors)
        self.calls = 0
        self.fail_after_events = fail_after_events
        self.closed = False

    async def generate(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return ChatResponse.reply("ok")

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        for index in range(self.fail_after_events):
            yield TextDelta(text=f"part{index} ")
        if self.errors:
            raise self.errors.pop(0)
        yield TextDelta(text="ok")
        yield Done()

    async def aclose(self) -> None:
        self.closed = True


def waits(caplog: pytest.LogCaptureFixture) -> list[float]:
    return [
        float(re.search(r"retrying in ([\d.]+)s", r.getMessage()).group(1))  # type: ignore[union-attr]
        for r in caplog.records
        if r.name == "daimon.models.retry"
    ]


async def test_retries_transient_errors_with_exponential_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "daimon.models.retry")
    flaky = Flaky([transient(), transient(), transient()])
    model = RetryingModel(flaky, initial_backoff=0.01, max_backoff=0.03, jitter=False)
    assert isinstance(model, Model)
    assert (await model.generate(REQUEST)).text == "ok"
    assert flaky.calls == 4
    assert waits(caplog) == [0.01, 0.02, 0.03]
    assert model.model_name == "flaky"


async def test_full_jitter_stays_under_the_backoff(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "daimon.models.retry")
    model = RetryingModel(Flaky([transient()] * 3), initial_backoff=0.01, max_attempts=4)
    await model.generate(REQUEST)
    caps = [0.01, 0.02, 0.04]
    assert all(0 <= wait <= cap for wait, cap in zip(waits(caplog), caps, strict=True))


async def test_gives_up_after_max_attempts() -> None:
    errors = [transient(), transient(), ModelError("last", retryable=True)]
    flaky = Flaky(errors)
    model = RetryingModel(flaky, max_attempts=3, initial_backoff=0)
    with pytest.raises(ModelError, match="last"):
        await model.generate(REQUEST)
    assert flaky.calls == 3


@pytest.mark.parametrize(
    "error",
    [
        ModelError("bad request", status_code=400),
        ValueError("not a model error"),
    ],
)
async def test_other_errors_raise_at_once(error: Exception) -> None:
    flaky = Flaky([error])
    with pytest.raises(type(error)):
        await RetryingModel(flaky, initial_backoff=0).generate(REQUEST)
    assert flaky.calls == 1


async def test_honours_retry_after(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "daimon.models.retry")
    flaky = Flaky([transient(retry_after=0.05)])
    model = RetryingModel(flaky, initial_backoff=10, max_backoff=10)
    assert (await model.generate(REQUEST)).text == "ok"
    assert waits(caplog) == [0.05]


async def test_retry_after_beyond_the_limit_fails_fast() -> None:
    flaky = Flaky([transient(retry_after=120.0)])
    with pytest.raises(ModelError) as caught:
        await RetryingModel(flaky, max_retry_after=60).generate(REQUEST)
    assert caught.value.retry_after == 120.0
    assert flaky.calls == 1


async def test_stream_retried_before_its_first_event() -> None:
    flaky = Flaky([StreamClosedError("cut")])
    model = RetryingModel(flaky, initial_backoff=0)
    events = [e async for e in model.generate_stream(REQUEST)]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["ok"]
    assert flaky.calls == 2


async def test_stream_not_retried_once_it_yielded() -> None:
    flaky = Flaky([StreamClosedError("cut")], fail_after_events=1)
    model = RetryingModel(flaky, initial_backoff=0)
    seen: list[StreamEvent] = []
    with pytest.raises(StreamClosedError):
        async for event in model.generate_stream(REQUEST):
            seen.append(event)
    assert seen == [TextDelta(text="part0 ")]
    assert flaky.calls == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"initial_backoff": -1}, {"max_backoff": "x"}, {"max_retry_after": -2}],
)
def test_bad_configuration(kwargs: dict[str, Any]) -> None:
    with pytest.raises(BuilderError):
        RetryingModel(Flaky([]), **kwargs)


async def test_closes_the_wrapped_model() -> None:
    flaky = Flaky([])
    async with RetryingModel(flaky):
        pass
    assert flaky.closed


async def test_retries_a_real_rate_limit_over_http() -> None:
    """A 429 with retry-after, a 500, a stream cut before its first event: all retried."""
    answer = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "fine"},
                "finish_reason": "stop",
            }
        ],
    }
    answer["choices"][0]["finish_reason"] = "stop"
    chunk = {**answer, "object": "chat.completion.chunk"}
    chunk["choices"] = [{"index": 0, "delta": {"content": "fine"}, "finish_reason": "stop"}]
    error = {"error": {"message": "slow down", "type": "rate_limit_exceeded"}}
    with WireServer() as server:
        model = RetryingModel(
            OpenAIModel("gpt-test", api_key="k", base_url=server.url), initial_backoff=0.01
        )
        server.reply_json(error, status=429, headers={"retry-after-ms": "20"})
        server.reply_json(answer)
        assert (await model.generate(REQUEST)).text == "fine"
        server.reply_json({"error": {"message": "oops"}}, status=500)
        server.reply_sse([], cut=True)  # dropped before the first event: safe to retry
        server.reply_sse([SSE(data=chunk), SSE(data="[DONE]")])
        events = [e async for e in model.generate_stream(REQUEST)]
        await model.aclose()
        assert len(server.requests) == 5
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["fine"]
