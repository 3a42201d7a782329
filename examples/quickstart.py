"""An agent with two tools, on a FunctionModel standing in for an LLM (no API key needed)."""

import asyncio

from daimon import (
    Agent,
    ChatRequest,
    ChatResponse,
    Done,
    Role,
    ToolCall,
    ToolCallEnd,
    ToolResult,
    tool,
)
from daimon.models import FunctionModel


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


def calculator_model(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: calls add, then multiply, then answers."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(ToolCall(id="1", name="add", arguments={"a": 2, "b": 3}))
    if len(results) == 1:
        args = {"a": float(results[0]), "b": 4}
        return ChatResponse.tool_use(ToolCall(id="2", name="multiply", arguments=args))
    return ChatResponse.reply(f"(2 + 3) x 4 = {results[-1]}")


agent = Agent(FunctionModel(calculator_model), tools=[add, multiply], system_prompt="Calculate.")


async def main() -> None:
    async for event in agent.prompt_stream("What is (2 + 3) x 4?"):
        if isinstance(event, ToolCallEnd):
            print(f"-> {event.call.name}({event.call.arguments_json})")
        elif isinstance(event, ToolResult):
            print(f"<- {event.output.content}")
        elif isinstance(event, Done) and event.response is not None:
            print(event.response.text)


if __name__ == "__main__":
    asyncio.run(main())
