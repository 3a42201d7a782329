"""A typed workflow: nodes declare their input and output fields, and the engine wires them by
name, checking each input has one producer of a fitting type (no API key needed)."""

import asyncio
from dataclasses import dataclass
from typing import TypedDict

from daimon import Agent, ChatRequest, ChatResponse, Usage
from daimon.models import FunctionModel
from daimon.orchestration import NodeContext, WiringError, WorkflowBuilder, workflow_node


def headline_model(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: a headline from the first words."""
    words = request.messages[-1].text.split(":", 1)[1].split()[:3]
    return ChatResponse.reply(
        " ".join(words).title(), usage=Usage(input_tokens=25, output_tokens=5)
    )


editor = Agent(FunctionModel(headline_model), name="editor")


class Stats(TypedDict):
    """Outputs of `measure`: each key is a field."""

    words: int
    reading_seconds: float


@dataclass
class Post:
    """Outputs of `publish`: each dataclass field is a field."""

    post: str
    long_read: bool


@workflow_node
def measure(text: str) -> Stats:
    words = len(text.split())
    return {"words": words, "reading_seconds": words / 4}


@workflow_node(output="headline")
async def headline(text: str, ctx: NodeContext) -> str:
    return (await ctx.prompt(editor, f"Headline for: {text}")).text


@workflow_node
def publish(headline: str, text: str, reading_seconds: float) -> Post:
    return Post(post=f"# {headline}\n{text}", long_read=reading_seconds > 60)


async def main() -> None:
    workflow = (
        WorkflowBuilder("blog", inputs={"text": str})
        .add(measure)
        .add(headline)
        .add(publish)
        .build()
    )
    print(workflow.to_text())
    result = await workflow.run({"text": "owls hunt at night and sleep all day"})
    for name, value in result.fields.items():
        print(f"{name} = {value!r}")
    print("usage:", result.usage.total_tokens, "tokens")

    @workflow_node(output="headline")
    def count_as_headline(words: int) -> int:
        return words

    try:
        WorkflowBuilder("broken", inputs={"text": str}).add(measure).add(count_as_headline).add(
            publish
        ).build()
    except WiringError as exc:
        print("refused:", exc)


if __name__ == "__main__":
    asyncio.run(main())
