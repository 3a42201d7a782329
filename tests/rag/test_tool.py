from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daimon import Agent, ChatResponse, Role, ToolCall
from daimon.core import BuilderError, Document, KnowledgeBaseError
from daimon.models.scripted import ScriptedModel
from daimon.rag import RetrieverTool, SimpleKnowledgeBase, TextSplitter, read_documents
from daimon.tools import RunContext, Tool

from .conftest import HashingEmbedder


async def _kb(open_store: Any) -> SimpleKnowledgeBase:
    kb = SimpleKnowledgeBase(
        await open_store(256), HashingEmbedder(256), splitter=TextSplitter(200, 20)
    )
    await kb.ingest(
        [
            Document(
                id="guide.md", content="The office opens at nine.", metadata={"source": "guide.md"}
            ),
            Document(id="faq", content="Parking is free on weekends.", metadata={"team": "ops"}),
        ]
    )
    return kb


async def test_results_are_formatted_with_their_sources(open_store: Any) -> None:
    tool = RetrieverTool(await _kb(open_store), top_k=2, max_chars=15)
    assert isinstance(tool, Tool)
    output = await tool.execute(
        {"query": "when does the office open"}, RunContext(run_id="r", deps=None)
    )
    first, second = output.content.split("\n\n")
    assert first.startswith("[1] source: guide.md (score ")
    assert first.endswith("\nThe office open [...]")
    assert second.startswith("[2] source: faq (score ")
    assert [d["source"] for d in output.data] == ["guide.md", "faq"]
    assert output.data[0]["id"] == "guide.md#0"
    assert not output.is_error


async def test_a_fixed_filter_and_no_results(open_store: Any) -> None:
    tool = RetrieverTool(await _kb(open_store), filter={"team": "nobody"})
    output = await tool.execute({"query": "parking"}, RunContext(run_id="r", deps=None))
    assert (output.content, output.data) == ("No relevant passages found.", [])
    blank = await tool.execute({"query": "  "}, RunContext(run_id="r", deps=None))
    assert blank.is_error


async def test_an_agent_searches_through_the_tool(open_store: Any) -> None:
    model = ScriptedModel(
        [
            ChatResponse.tool_use(
                ToolCall(id="c1", name="search_docs", arguments={"query": "parking weekends"})
            ),
            "Parking is free on weekends (source: faq).",
        ]
    )
    tool = RetrieverTool(await _kb(open_store), name="search_docs", top_k=1)
    agent = Agent(model, tools=[tool])
    response = await agent.prompt("Is parking free on weekends?")
    assert response.text == "Parking is free on weekends (source: faq)."
    [result] = [m for m in model.requests[1].messages if m.role is Role.TOOL]
    assert result.text.startswith("[1] source: faq (score ")
    assert "Parking is free on weekends." in result.text
    [spec] = model.requests[0].tools
    assert spec.name == "search_docs"
    assert spec.parameters["required"] == ["query"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "has space"}, "tool name"),
        ({"top_k": 0}, "top_k"),
        ({"max_chars": -1}, "max_chars"),
        ({"filter": {"a": {"$nope": 1}}}, "unknown operator"),
    ],
)
def test_bad_settings(options: dict[str, Any], message: str) -> None:
    with pytest.raises(BuilderError, match=message):
        RetrieverTool(SimpleKnowledgeBase.__new__(SimpleKnowledgeBase), **options)


def test_read_documents(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "b.md").write_text("Bee ünï", encoding="utf-8")
    (tmp_path / "sub" / "a.md").write_text("Ay", encoding="utf-8")
    (tmp_path / "skip.txt").write_text("not markdown", encoding="utf-8")
    assert read_documents(tmp_path) == [
        Document(content="Bee ünï", id="b.md", metadata={"source": "b.md"}),
        Document(content="Ay", id="sub/a.md", metadata={"source": "sub/a.md"}),
    ]
    (tmp_path / "bad.md").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(KnowledgeBaseError, match=r"cannot read 'bad\.md'"):
        read_documents(tmp_path)
    with pytest.raises(KnowledgeBaseError, match="not a folder"):
        read_documents(tmp_path / "missing")
