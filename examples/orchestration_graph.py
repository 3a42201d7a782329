"""A research graph: fan-out to two searches, fan-in to a writer, a review loop, and a crash
that resumes from a checkpoint without redoing finished work (no API key needed)."""

import asyncio
from collections import Counter
from typing import Any

from daimon import Agent, ChatRequest, ChatResponse, OrchestrationError, Usage
from daimon.core import CheckpointState
from daimon.models import FunctionModel
from daimon.orchestration import END, START, GraphBuilder, GraphContext, append

calls: Counter[str] = Counter()


class MemoryCheckpoint:
    """The daimon.core Checkpoint protocol in memory; in production use a persistent one, such
    as daimon.checkpoint.file.FileCheckpoint, so a new process can resume the run."""

    def __init__(self) -> None:
        self.runs: dict[str, CheckpointState] = {}

    async def save(self, state: CheckpointState) -> None:
        self.runs[state.run_id] = state

    async def load(self, run_id: str) -> CheckpointState | None:
        return self.runs.get(run_id)

    async def list_runs(self) -> list[str]:
        return list(self.runs)

    async def delete(self, run_id: str) -> None:
        self.runs.pop(run_id, None)


def writer_model(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: a draft that grows with each revision."""
    drafts = request.messages[-1].text.count("draft")
    return ChatResponse.reply(
        f"draft v{drafts + 1}", usage=Usage(input_tokens=50, output_tokens=20)
    )


writer = Agent(FunctionModel(writer_model), name="writer")


async def plan(ctx: GraphContext) -> dict[str, Any]:
    calls["plan"] += 1
    return {"notes": [f"plan: {ctx.state['topic']}"]}


async def search_web(ctx: GraphContext) -> dict[str, Any]:
    calls["search_web"] += 1
    return {"notes": ["web: 3 articles"]}


async def search_papers(ctx: GraphContext) -> dict[str, Any]:
    calls["search_papers"] += 1
    if calls["search_papers"] == 1:
        raise ConnectionError("paper index unreachable")  # the first run crashes here
    return {"notes": ["papers: 2 studies"]}


async def write(ctx: GraphContext) -> dict[str, Any]:
    calls["write"] += 1
    previous = " ".join(ctx.state.get("drafts", []))
    response = await ctx.prompt(writer, f"Write from {ctx.state['notes']}. Before: {previous}")
    return {"drafts": [response.text]}


def review(state: Any) -> str:
    return "accept" if len(state["drafts"]) >= 2 else "revise"


graph = (
    GraphBuilder("research", reducers={"notes": append, "drafts": append})
    .add_node("plan", plan)
    .add_node("search_web", search_web)
    .add_node("search_papers", search_papers)
    .add_node("write", write)
    .add_edge(START, "plan")
    .add_edge("plan", "search_web")
    .add_edge("plan", "search_papers")
    .add_edge("search_web", "write")
    .add_edge("search_papers", "write")
    .add_router("write", review, {"revise": "write", "accept": END})
    .build()
)


async def main() -> None:
    print(graph.to_text())
    checkpoint = MemoryCheckpoint()
    try:
        await graph.run({"topic": "owls"}, run_id="owls", checkpoint=checkpoint)
    except OrchestrationError as exc:
        print("first run:", exc)
    print("calls after the crash:", dict(sorted(calls.items())))
    # The same run_id resumes where the run stopped: plan and search_web do not run again.
    result = await graph.run({"topic": "owls"}, run_id="owls", checkpoint=checkpoint)
    print("resumed:", result.resumed, "| supersteps run now:", [list(s) for s in result.history])
    print("calls in total:", dict(sorted(calls.items())))
    print("notes:", result.state["notes"])
    print("drafts:", result.state["drafts"])
    print(f"usage: {result.usage.total_tokens} tokens over {result.steps} supersteps")


if __name__ == "__main__":
    asyncio.run(main())
