"""A DAG: three sources fetched in parallel, one of them failing, merged and summarized by an
agent; the failure is isolated to its branch (no API key needed)."""

import asyncio
from typing import Any

from daimon import Agent, ChatRequest, ChatResponse, Usage
from daimon.models import FunctionModel
from daimon.orchestration import DagBuilder, NodeContext


def summarizer_model(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: counts the facts it was given."""
    facts = request.messages[-1].text.count(";") + 1
    return ChatResponse.reply(f"{facts} facts agree", usage=Usage(input_tokens=40, output_tokens=4))


summarizer = Agent(FunctionModel(summarizer_model), name="summarizer")


async def fetch_wiki(inputs: dict[str, Any]) -> str:
    await asyncio.sleep(0.01)
    return f"{inputs['topic']} hunt at night"


async def fetch_news(inputs: dict[str, Any]) -> str:
    await asyncio.sleep(0.02)
    return f"{inputs['topic']} spotted downtown"


async def fetch_forum(inputs: dict[str, Any]) -> str:
    raise ConnectionError("forum is down")


def merge(inputs: dict[str, Any]) -> str:
    return "; ".join(inputs[name] for name in sorted(inputs))


async def summarize(inputs: dict[str, Any], ctx: NodeContext) -> str:
    response = await ctx.prompt(summarizer, f"Summarize: {inputs['merge']}")
    return response.text


dag = (
    DagBuilder("research")
    .add_node("wiki", fetch_wiki)
    .add_node("news", fetch_news)
    .add_node("forum", fetch_forum)
    .add_node("merge", merge, depends_on=["wiki", "news"])
    .add_node("summarize", summarize, depends_on=["merge"])
    .add_node("moderate", lambda inputs: "ok", depends_on=["forum"])
    .build()
)


async def main() -> None:
    print(dag.to_text())
    result = await dag.run({"topic": "owls"}, on_error="isolate", max_concurrency=4)
    print("merge:", result.outputs["merge"])
    print("summary:", result.outputs["summarize"])
    print("failed:", {name: repr(error) for name, error in result.failed.items()})
    print("skipped:", list(result.skipped))
    print("usage:", result.usage.total_tokens, "tokens")


if __name__ == "__main__":
    asyncio.run(main())
