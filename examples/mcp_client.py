"""Use an MCP server's tools from a daimon agent.

Starts examples/mcp_server.py as a stdio MCP server, gives its tools to an agent, and lets the
agent (a FunctionModel standing in for an LLM, so no API key is needed) call one of them.
"""

import asyncio
import sys
from pathlib import Path

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall
from daimon.mcp import MCPClient
from daimon.models import FunctionModel

SERVER = Path(__file__).with_name("mcp_server.py")


def model(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: asks the remote calculator agent, then reports its answer."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        call = ToolCall(id="1", name="calc_ask_calculator", arguments={"prompt": "add 2 and 40"})
        return ChatResponse.tool_use(call)
    return ChatResponse.reply(f"The remote agent says: {results[-1]}")


async def main() -> None:
    server = MCPClient.stdio(sys.executable, [str(SERVER)], tool_prefix="calc_")
    async with server:
        tools = await server.tools()
        print("tools:", ", ".join(t.name for t in tools))
        print("add(1, 2) =", (await server.call_tool("add", {"a": 1, "b": 2})).content)
        agent = Agent(FunctionModel(model), tools=tools)
        print((await agent.prompt("What is 2 + 40?")).text)


if __name__ == "__main__":
    asyncio.run(main())
