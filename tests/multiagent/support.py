"""Shared helpers for the multi-agent tests: scripted turns, a simple price table, task checks."""

from __future__ import annotations

import asyncio
from typing import Any

from daimon import Agent, ChatResponse, ModelPrice, PriceTable, ToolCall, Usage
from daimon.models import ScriptedModel

PRICES = PriceTable({"m": ModelPrice(input=1_000_000, output=2_000_000)}, as_of="2025-01-01")
"""$1 per input token and $2 per output token of model "m", so costs are easy to check."""


def used(input_tokens: int, output_tokens: int) -> Usage:
    """One model call's usage."""
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1)


def reply(text: str, input_tokens: int = 1, output_tokens: int = 1) -> ChatResponse:
    """A final text answer from model "m"."""
    return ChatResponse.reply(text, usage=used(input_tokens, output_tokens), model="m")


def calls(
    *named: tuple[str, dict[str, Any]],
    text: str = "",
    input_tokens: int = 1,
    output_tokens: int = 1,
) -> ChatResponse:
    """A turn calling tools ``(name, arguments)``; call ids are ``c0``, ``c1``, ..."""
    return ChatResponse.tool_use(
        *(ToolCall(id=f"c{i}", name=name, arguments=args) for i, (name, args) in enumerate(named)),
        text=text,
        usage=used(input_tokens, output_tokens),
        model="m",
    )


def scripted(*responses: ChatResponse | str, name: str = "agent", **options: Any) -> Agent:
    """An agent on a ScriptedModel priced by PRICES (reach the model as ``agent.model``)."""
    return Agent(ScriptedModel(responses, model_name="m"), name=name, cost_model=PRICES, **options)


def requests_of(agent: Agent) -> list[Any]:
    """The requests a scripted agent's model received."""
    model = agent.model
    assert isinstance(model, ScriptedModel)
    return model.requests


def other_tasks() -> set[asyncio.Task[Any]]:
    """Tasks still alive besides the test's own."""
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}
