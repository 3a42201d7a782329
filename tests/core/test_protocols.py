"""The plugin protocols are structural: any object with the right members plugs in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from daimon.core import (
    ChatRequest,
    ChatResponse,
    EmbeddingModel,
    Message,
    Model,
    StreamEvent,
    TokenCounter,
)
from daimon.kit.streaming import stream_from_response


class EchoModel:
    """No base class: matching members are enough."""

    model_name = "echo"

    async def generate(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(message=Message.assistant(request.messages[-1].text))

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        async for event in stream_from_response(await self.generate(request)):
            yield event


class Embedder:
    dimensions = 2

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(len(t)), 1.0] for t in texts]


class Chars:
    def count_tokens(self, text: str) -> int:
        return len(text)


def test_runtime_checkable_protocols() -> None:
    assert isinstance(EchoModel(), Model)
    assert isinstance(Embedder(), EmbeddingModel)
    assert isinstance(Chars(), TokenCounter)
    assert not isinstance(object(), Model)
    assert not isinstance(Chars(), EmbeddingModel)


async def test_a_structural_model_works() -> None:
    model: Model = EchoModel()
    request = ChatRequest(messages=(Message.user("ping"),))
    assert (await model.generate(request)).text == "ping"
    kinds = [event.kind async for event in model.generate_stream(request)]
    assert kinds == ["text_delta", "usage", "done"]
