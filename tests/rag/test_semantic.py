"""The knowledge base with the real local MiniLM embedder: search finds meaning, not words."""

from __future__ import annotations

from typing import Any

import pytest

from daimon.core import Document
from daimon.rag import SimpleKnowledgeBase


@pytest.fixture(scope="module")
def embedder(minilm: Any) -> Any:
    return minilm


DOCS = [
    Document(id="cats.md", content="Cats are small felines that purr and chase mice."),
    Document(id="tax.md", content="Income tax returns are due on the fifteenth of April."),
    Document(id="rust.md", content="The borrow checker enforces ownership rules at compile time."),
    Document(id="bread.md", content="Knead the dough, let it rise, then bake it at 220 degrees."),
]


@pytest.mark.parametrize(
    ("question", "source"),
    [
        ("when must I file my taxes?", "tax.md"),
        ("how do I make a loaf?", "bread.md"),
        ("pets that hunt rodents", "cats.md"),
        ("memory safety in a systems programming language", "rust.md"),
    ],
)
async def test_paraphrased_questions_find_their_document(
    embedder: Any, open_store: Any, question: str, source: str
) -> None:
    kb = SimpleKnowledgeBase(await open_store(384), embedder)
    assert await kb.ingest(DOCS) == 4
    [best, *_] = await kb.search(question, top_k=4)
    assert best.document.metadata["document_id"] == source
    assert 0.2 < best.score <= 1.0
