"""A supervisor routing a support request to two specialists at once (no API key needed).

The supervisor delegates to billing and tech in one turn (they run concurrently), then gives a
typed answer (structured output together with tools). Usage and cost include the specialists'.
"""

import asyncio
from dataclasses import dataclass

from daimon import (
    Agent,
    ChatRequest,
    ChatResponse,
    ModelPrice,
    PriceTable,
    Role,
    ToolCall,
    Usage,
)
from daimon.models import FunctionModel
from daimon.multiagent import Supervisor

PRICES = PriceTable({"demo": ModelPrice(input=1.0, output=4.0)}, as_of="2025-01-01")


@dataclass
class Resolution:
    """What the supervisor answers with."""

    teams: list[str]
    summary: str
    refund: bool


def specialist(name: str, answer: str) -> Agent:
    """An agent whose LLM always gives ``answer``, logging when it starts and finishes."""

    async def model(request: ChatRequest) -> ChatResponse:
        print(f"{name} started: {request.messages[-1].text}")
        await asyncio.sleep(0)  # a real model call would wait on the network here
        print(f"{name} finished")
        return ChatResponse.reply(
            answer, usage=Usage(input_tokens=50, output_tokens=10, requests=1), model="demo"
        )

    return Agent(FunctionModel(model), cost_model=PRICES)


def supervisor_model(request: ChatRequest) -> ChatResponse:
    """Plays the supervisor's LLM: delegates both parts, then gives its final, typed answer."""
    usage = Usage(input_tokens=200, output_tokens=30, requests=1)
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(
            ToolCall(id="1", name="delegate", arguments={"agent": "billing", "task": "refund #7"}),
            ToolCall(id="2", name="delegate", arguments={"agent": "tech", "task": "wifi drops"}),
            usage=usage,
            model="demo",
        )
    answer = {"teams": ["billing", "tech"], "summary": " / ".join(results), "refund": True}
    return ChatResponse.tool_use(
        ToolCall(id="3", name="final_result", arguments=answer),
        usage=usage,
        model="demo",
    )


async def main() -> None:
    supervisor = Supervisor(
        FunctionModel(supervisor_model),
        {
            "billing": specialist("billing", "refund of $12 issued"),
            "tech": specialist("tech", "router firmware updated"),
        },
        descriptions={"billing": "invoices and refunds", "tech": "connection problems"},
        output_type=Resolution,
        cost_model=PRICES,
    )
    response = await supervisor.prompt("I was double-charged and my wifi keeps dropping")
    print("output:", response.output)
    usage = response.usage
    print(f"usage: {usage.input_tokens} in, {usage.output_tokens} out, {usage.requests} requests")
    print(f"cost: ${response.cost:.6f}")


if __name__ == "__main__":
    asyncio.run(main())
