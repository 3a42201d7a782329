"""Shared fakes for the orchestration tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from daimon.core import AgentResponse, CancelToken, Usage


class FakeAgent:
    """A Promptable that answers ``reply(text)`` and records prompts and cancel tokens."""

    def __init__(
        self,
        reply: Callable[[str], str] = lambda text: f"<{text}>",
        *,
        tokens: int = 10,
        cost: float = 0.5,
        name: str = "fake",
    ) -> None:
        self.reply = reply
        self.tokens = tokens
        self.price = cost
        self.name = name
        self.prompts: list[str] = []
        self.cancels: list[CancelToken | None] = []

    async def prompt(self, text: str, *, cancel: CancelToken | None = None) -> AgentResponse:
        self.prompts.append(text)
        self.cancels.append(cancel)
        usage = Usage(input_tokens=self.tokens, output_tokens=self.tokens // 2, requests=1)
        return AgentResponse(text=self.reply(text), usage=usage, cost=self.price)


@pytest.fixture
def fake_agent() -> type[FakeAgent]:
    """The FakeAgent class (test modules cannot import conftest directly)."""
    return FakeAgent
