"""ScriptedModel: canned answers in order, with every request recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TypeAlias

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.errors import ModelError
from daimon.core.events import StreamEvent
from daimon.kit.streaming import events_from_response

__all__ = ("ScriptedModel",)

Scripted: TypeAlias = ChatResponse | str


class ScriptedModel:
    """Answers each call with the next scripted response (plain strings are text answers).

    Every request is kept in :attr:`requests`, so tests can check what the model was shown.
    Running out of responses raises :class:`ModelError`.
    """

    __test__ = False

    __slots__ = ("_next", "_responses", "model_name", "requests")

    def __init__(self, responses: Iterable[Scripted], *, model_name: str = "scripted") -> None:
        self._responses: list[ChatResponse] = [
            ChatResponse.reply(r, model=model_name) if isinstance(r, str) else r for r in responses
        ]
        self._next = 0
        self.model_name = model_name
        self.requests: list[ChatRequest] = []

    @property
    def remaining(self) -> int:
        """How many scripted responses are left."""
        return len(self._responses) - self._next

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """The next scripted response."""
        return self._take(request)

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """The next scripted response, as stream events."""
        for event in events_from_response(self._take(request)):
            yield event

    def _take(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if self._next >= len(self._responses):
            raise ModelError(
                f"ScriptedModel ran out of responses after {len(self._responses)} call(s)",
                provider="scripted",
            )
        response = self._responses[self._next]
        self._next += 1
        return response
