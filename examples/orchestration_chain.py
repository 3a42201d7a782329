"""A chain: outline with one agent, write with another, then count the words (no API key needed)."""

import asyncio

from daimon import Agent, ChatRequest, ChatResponse, Usage
from daimon.models import FunctionModel
from daimon.orchestration import AgentStep, Chain, TransformStep


def outliner(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: an outline of the topic."""
    topic = request.messages[-1].text
    return ChatResponse.reply(
        f"1. What {topic} are 2. Why they matter",
        usage=Usage(input_tokens=12, output_tokens=9, requests=1),
    )


def writer(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: a paragraph following the outline."""
    return ChatResponse.reply(
        "Owls are night hunters. They keep rodents in check.",
        usage=Usage(input_tokens=30, output_tokens=11, requests=1),
    )


async def main() -> None:
    chain = Chain(
        [
            AgentStep(Agent(FunctionModel(outliner), name="outliner"), output_key="outline"),
            AgentStep(
                Agent(FunctionModel(writer), name="writer"),
                prompt_template="Write a paragraph on {{topic}} following: {{outline}}",
            ),
            TransformStep(lambda text: f"{text} ({len(text.split())} words)", name="count"),
        ]
    )
    result = await chain.run("owls", values={"topic": "owls"})
    print("outline:", result.values["outline"])
    print("result:", result.value)
    print("steps:", ", ".join(t.name for t in result.timings))
    usage = result.usage
    print(f"usage: {usage.input_tokens} in, {usage.output_tokens} out, {usage.requests} requests")


if __name__ == "__main__":
    asyncio.run(main())
