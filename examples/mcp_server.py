"""Serve an agent over MCP: its tools, and the agent itself as the tool ``ask_calculator``.

    python examples/mcp_server.py                # stdio, for an MCP client that starts it
    python examples/mcp_server.py http 8000      # http://127.0.0.1:8000/mcp

The agent runs on a FunctionModel standing in for an LLM, so no API key is needed.
"""

import asyncio
import sys

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.mcp import serve_mcp
from daimon.models import FunctionModel


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


def calculator_model(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: adds the two numbers in the question with the add tool, then answers."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if results:
        return ChatResponse.reply(f"The sum is {results[-1]}.")
    numbers = [float(w) for w in request.messages[-1].text.split() if _is_number(w)][:2]
    call = ToolCall(id="1", name="add", arguments={"a": numbers[0], "b": numbers[1]})
    return ChatResponse.tool_use(call)


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


agent = Agent(FunctionModel(calculator_model), name="calculator", tools=[add, divide])

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        asyncio.run(serve_mcp(agent, transport="http", port=int(sys.argv[2])))
    else:
        asyncio.run(serve_mcp(agent))
