"""An agent that uses another agent as a tool (no API key needed).

A writer asks a researcher (an AgentTool) for facts, then writes; the researcher's usage and cost
roll up into the writer's response. A second researcher is broken: the writer is told, and goes on.
"""

import asyncio

from daimon import (
    Agent,
    ChatRequest,
    ChatResponse,
    Done,
    ModelPrice,
    PriceTable,
    Role,
    ToolCall,
    ToolResult,
    Usage,
)
from daimon.models import FunctionModel
from daimon.multiagent import AgentTool

PRICES = PriceTable({"demo": ModelPrice(input=1.0, output=4.0)}, as_of="2025-01-01")


def researcher_model(request: ChatRequest) -> ChatResponse:
    """Plays the researcher's LLM: it sees only the task it was given."""
    task = request.messages[-1].text
    return ChatResponse.reply(
        f"Facts on {task}: they hunt at night; they swallow prey whole.",
        usage=Usage(input_tokens=300, output_tokens=40, requests=1),
        model="demo",
    )


def broken_model(request: ChatRequest) -> ChatResponse:
    """Plays an LLM whose provider is down."""
    raise ConnectionError("archive service unreachable")


def writer_model(request: ChatRequest) -> ChatResponse:
    """Plays the writer's LLM: asks both researchers, then writes from what came back."""
    results = [m for m in request.messages if m.role is Role.TOOL]
    usage = Usage(input_tokens=100, output_tokens=20, requests=1)
    if not results:
        return ChatResponse.tool_use(
            ToolCall(id="1", name="research", arguments={"task": "owls"}),
            ToolCall(id="2", name="archive", arguments={"task": "owls in old books"}),
            usage=usage,
            model="demo",
        )
    facts = next(m.text for m in results if not m.is_error)
    return ChatResponse.reply(f"Owls: {facts.split(': ', 1)[1]}", usage=usage, model="demo")


async def main() -> None:
    researcher = Agent(FunctionModel(researcher_model), name="researcher", cost_model=PRICES)
    archivist = Agent(FunctionModel(broken_model), name="archivist")
    writer = Agent(
        FunctionModel(writer_model),
        name="writer",
        cost_model=PRICES,
        tools=[
            AgentTool(researcher, name="research", description="Finds facts on a topic."),
            AgentTool(archivist, name="archive", description="Searches old books."),
        ],
    )
    response = None
    async for event in writer.prompt_stream("Write two lines on owls"):
        if isinstance(event, ToolResult):
            print(f"{event.name}: {event.output.content}")
        elif isinstance(event, Done):
            response = event.response
    assert response is not None
    print("answer:", response.text)
    usage = response.usage
    print(f"usage: {usage.input_tokens} in, {usage.output_tokens} out, {usage.requests} requests")
    print(f"cost: ${response.cost:.6f}")


if __name__ == "__main__":
    asyncio.run(main())
