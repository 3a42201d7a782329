"""FallbackModel: backups on transient failures only, streams before their first event."""

from __future__ import annotations

import logging

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
from daimon.models import FallbackModel, RetryingModel, ScriptedModel
from daimon.models.openai import OpenAIModel
from daimon.testing.models import WireServer

REQUEST = ChatRequest(messages=(Message.user("hi"),))


class Failing:
    """Always fails with ``error``; a stream may yield some text first."""

    def __init__(self, name: str, error: Exception, *, events_first: int = 0) -> None:
        self.model_name = name
        self.error = error
        self.events_first = events_first
        self.calls = 0
        self.closed = False

    async def generate(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        raise self.error

    async def generate_stream(self, request: ChatRequest):  # type: ignore[no-untyped-def]
        self.calls += 1
        for _ in range(self.events_first):
            yield TextDelta(text="partial ")
        raise self.error

    async def aclose(self) -> None:
        self.closed = True


def busy() -> ModelError:
    return ModelError("overloaded", status_code=529, retryable=True)


async def test_falls_back_on_transient_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "daimon.models.fallback")
    primary = Failing("primary", busy())
    backup = ScriptedModel([ChatResponse.reply("from backup", model="backup-1")])
    model = FallbackModel([primary, backup])
    assert isinstance(model, Model)
    response = await model.generate(REQUEST)
    assert (response.text, response.model) == ("from backup", "backup-1")
    assert model.model_name == "primary"
    assert "primary failed, falling back" in caplog.text


async def test_non_retryable_errors_raise_at_once() -> None:
    primary = Failing("primary", ModelError("invalid key", status_code=401))
    backup = ScriptedModel(["unused"])
    with pytest.raises(ModelError, match="invalid key"):
        await FallbackModel([primary, backup]).generate(REQUEST)
    assert backup.remaining == 1


async def test_the_last_error_raises_when_all_fail() -> None:
    models = [Failing("a", busy()), Failing("b", ModelError("b down", retryable=True))]
    with pytest.raises(ModelError, match="b down"):
        await FallbackModel(models).generate(REQUEST)
    assert [m.calls for m in models] == [1, 1]


async def test_stream_falls_back_before_its_first_event() -> None:
    model = FallbackModel([Failing("a", StreamClosedError("cut")), ScriptedModel(["streamed"])])
    events: list[StreamEvent] = [e async for e in model.generate_stream(REQUEST)]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["streamed"]
    assert isinstance(events[-1], Done)


async def test_stream_never_falls_back_after_yielding() -> None:
    backup = ScriptedModel(["unused"])
    model = FallbackModel([Failing("a", busy(), events_first=1), backup])
    with pytest.raises(ModelError, match="overloaded"):
        [e async for e in model.generate_stream(REQUEST)]
    assert backup.remaining == 1


async def test_needs_a_model_and_closes_them_all() -> None:
    with pytest.raises(BuilderError):
        FallbackModel([])
    models = [Failing("a", busy()), Failing("b", busy())]
    async with FallbackModel(models):
        pass
    assert all(m.closed for m in models)


async def test_falls_back_from_a_rate_limited_provider_over_http() -> None:
    """A 429 from one OpenAI-compatible server sends the call to the next, retried first."""
    answer = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "backup-model",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
    }
    limited = {"error": {"message": "quota exhausted", "type": "insufficient_quota"}}
    with WireServer() as first, WireServer() as second:
        primary = RetryingModel(
            OpenAIModel("m", api_key="k", base_url=first.url), max_attempts=2, initial_backoff=0
        )
        model = FallbackModel([primary, OpenAIModel("m", api_key="k", base_url=second.url)])
        first.reply_json(limited, status=429)
        first.reply_json(limited, status=429)
        second.reply_json(answer)
        response = await model.generate(REQUEST)
        await model.aclose()
        assert (len(first.requests), len(second.requests)) == (2, 1)
    assert response.model == "backup-model"
