"""An agent with known answers, played by a FunctionModel, for the eval tests."""

from __future__ import annotations

import asyncio
import json

from daimon import (
    Agent,
    ChatRequest,
    ChatResponse,
    ModelError,
    ModelPrice,
    PriceTable,
    Role,
    ToolCall,
    Usage,
    tool,
)
from daimon.models import FunctionModel

PRICES = PriceTable({"quiz": ModelPrice(input=1.0, output=2.0)}, as_of="2025-01-01")
"""$1 per million input tokens, $2 per million output tokens."""

CALL_COST = (100 * 1.0 + 10 * 2.0) / 1_000_000
"""What one model call of the quiz agent costs."""


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class Quiz:
    """Plays an LLM with fixed answers; counts how many calls run at once."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.running = 0
        self.most = 0

    async def __call__(self, request: ChatRequest) -> ChatResponse:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            question = next(m.text for m in request.messages if m.role is Role.USER)
            if self.delay or "slow" in question:
                await asyncio.sleep(self.delay or 5)
            return self.answer(question, request)
        finally:
            self.running -= 1

    @staticmethod
    def answer(question: str, request: ChatRequest) -> ChatResponse:
        usage = Usage(input_tokens=100, output_tokens=10, requests=1)
        results = [m.text for m in request.messages if m.role is Role.TOOL]
        if "boom" in question:
            raise ModelError("the provider is down", provider="quiz")
        if "add" in question and not results:
            call = ToolCall(id="c1", name="add", arguments={"a": 2, "b": 2})
            return ChatResponse.tool_use(call, usage=usage, model="quiz")
        if results:
            text = f"The sum is {results[0]}."
        elif "capital" in question:
            text = "Paris"
        elif "json" in question:
            text = "```json\n" + json.dumps({"answer": 4}) + "\n```"
        else:
            text = "I do not know."
        return ChatResponse.reply(text, usage=usage, model="quiz")


def quiz_agent(delay: float = 0.0) -> tuple[Agent, Quiz]:
    quiz = Quiz(delay)
    agent = Agent(
        FunctionModel(quiz, model_name="quiz"), name="quiz", tools=[add], cost_model=PRICES
    )
    return agent, quiz


agent = quiz_agent()[0]
"""For ``module:agent`` paths."""
