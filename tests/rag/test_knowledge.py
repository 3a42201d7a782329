from __future__ import annotations

from typing import Any

import pytest

from daimon.core import (
    DimensionMismatchError,
    Document,
    EmptyDocumentError,
    FilterError,
    KnowledgeBase,
    KnowledgeBaseError,
    ModelError,
    Retriever,
)
from daimon.core.errors import BuilderError
from daimon.rag import SimpleKnowledgeBase, TextSplitter, chunk_id

from .conftest import HashingEmbedder

LONG = "\n\n".join(f"Paragraph {n} talks about topic{n} at some length." for n in range(10))


async def _kb(open_store: Any, **options: Any) -> SimpleKnowledgeBase:
    return SimpleKnowledgeBase(
        await open_store(256), HashingEmbedder(256), splitter=TextSplitter(60, 0), **options
    )


async def test_satisfies_the_protocols(open_store: Any) -> None:
    kb: KnowledgeBase = await _kb(open_store)
    assert isinstance(kb, Retriever)
    for name in ("ingest", "search", "remove", "count"):
        assert callable(getattr(kb, name))


async def test_ingest_search_and_metadata(open_store: Any) -> None:
    kb = await _kb(open_store)
    written = await kb.ingest(
        [
            Document(id="long", content=LONG, metadata={"lang": "en", "year": 2024}),
            Document(id="cats", content="Cats purr and sleep.", metadata={"lang": "de"}),
        ]
    )
    assert written == 11
    assert await kb.count() == 11
    [best] = await kb.search("topic7", top_k=1)
    assert best.document.id == chunk_id("long", 7)
    assert best.document.content == "Paragraph 7 talks about topic7 at some length."
    assert best.document.metadata == {
        "lang": "en",
        "year": 2024,
        "document_id": "long",
        "chunk_index": 7,
        "chunk_start": LONG.index("Paragraph 7"),
    }
    found = await kb.search("cats purr", top_k=3, filter={"lang": "de"})
    assert [f.document.id for f in found] == ["cats#0"]
    assert await kb.retrieve("cats purr", top_k=1) == await kb.search("cats purr", top_k=1)


async def test_reingest_replaces_and_drops_surplus_chunks(open_store: Any) -> None:
    kb = await _kb(open_store)
    await kb.ingest([Document(id="d", content=LONG), Document(id="other", content="Keep me.")])
    assert await kb.count() == 11
    await kb.ingest([Document(id="d", content="Now only topic3 here.")])
    assert await kb.count() == 2
    found = await kb.search("topic3", top_k=5, filter={"document_id": "d"})
    assert [(f.document.id, f.document.content) for f in found] == [
        ("d#0", "Now only topic3 here.")
    ]
    await kb.ingest([Document(id="d", content=LONG)])  # longer again
    assert await kb.count() == 11


async def test_remove(open_store: Any) -> None:
    kb = await _kb(open_store)
    await kb.ingest([Document(id="d", content=LONG), Document(id="e", content="Other text.")])
    assert await kb.remove("d") == 10
    assert await kb.remove("d") == 0
    assert await kb.count() == 1


async def test_bad_documents_write_nothing(open_store: Any) -> None:
    kb = await _kb(open_store)
    good = Document(id="good", content="Fine text.")
    with pytest.raises(EmptyDocumentError, match="'blank' is empty"):
        await kb.ingest([good, Document(id="blank", content=" \n\t ")])
    with pytest.raises(KnowledgeBaseError, match="needs an id"):
        await kb.ingest([good, Document(content="no id")])
    with pytest.raises(KnowledgeBaseError, match="twice"):
        await kb.ingest([good, Document(id="good", content="again")])
    with pytest.raises(KnowledgeBaseError, match=r"\['chunk_index'\] are set by"):
        await kb.ingest([good, Document(id="x", content="x", metadata={"chunk_index": 1})])
    with pytest.raises(KnowledgeBaseError, match="not JSON"):
        await kb.ingest([good, Document(id="x", content="x", metadata={"f": object()})])
    assert await kb.count() == 0
    assert isinstance(EmptyDocumentError("x"), ValueError)


async def test_an_embedder_failure_writes_nothing(open_store: Any) -> None:
    class Failing(HashingEmbedder):
        async def embed(self, texts: Any) -> list[list[float]]:
            if len(self.calls) == 1:
                raise ModelError("embedding service down")
            return await super().embed(texts)

    store = await open_store(64)
    kb = SimpleKnowledgeBase(store, Failing(64), splitter=TextSplitter(60, 0), batch_size=4)
    with pytest.raises(ModelError, match="down"):
        await kb.ingest([Document(id="d", content=LONG)])  # the second batch fails
    assert await kb.count() == 0


async def test_an_embedder_returning_too_few_vectors(open_store: Any) -> None:
    class Short(HashingEmbedder):
        async def embed(self, texts: Any) -> list[list[float]]:
            return (await super().embed(texts))[:-1]

    kb = SimpleKnowledgeBase(await open_store(64), Short(64))
    with pytest.raises(ModelError, match="0 vectors for 1 texts"):
        await kb.ingest([Document(id="d", content="text")])


async def test_store_and_embedder_dimensions_must_agree(open_store: Any) -> None:
    store = await open_store(32)
    with pytest.raises(DimensionMismatchError) as caught:
        SimpleKnowledgeBase(store, HashingEmbedder(64))
    assert (caught.value.expected, caught.value.actual) == (32, 64)
    assert "'hashing-test'" in str(caught.value)
    assert "64" in str(caught.value) and "32" in str(caught.value)


async def test_bad_searches(open_store: Any) -> None:
    kb = await _kb(open_store)
    await kb.ingest([Document(id="d", content="text")])
    with pytest.raises(KnowledgeBaseError, match="non-blank query"):
        await kb.search("  ")
    with pytest.raises(FilterError, match="unknown operator"):
        await kb.search("text", filter={"lang": {"$like": "e%"}})
    with pytest.raises(BuilderError, match="batch_size"):
        SimpleKnowledgeBase(kb.store, kb.embedder, batch_size=0)


async def test_async_with_sets_up_and_closes(open_store: Any) -> None:
    store = await open_store(64)
    async with SimpleKnowledgeBase(store, HashingEmbedder(64)) as kb:
        assert await kb.ingest([Document(id="a", content="alpha")]) == 1
