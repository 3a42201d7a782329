"""A knowledge base over any vector store and embedding model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from daimon.core.documents import Document, ScoredDocument
from daimon.core.errors import (
    DimensionMismatchError,
    EmptyDocumentError,
    KnowledgeBaseError,
    ModelError,
)
from daimon.core.protocols import EmbeddingModel, VectorStore
from daimon.kit.checks import check_positive
from daimon.kit.vectors import check_metadata, check_top_k
from daimon.rag._splitter import TextSplitter

__all__ = ("RESERVED_METADATA", "SimpleKnowledgeBase", "chunk_id")

RESERVED_METADATA = frozenset({"document_id", "chunk_index", "chunk_start"})
"""Metadata keys the knowledge base sets on every chunk (documents may not use them)."""


def chunk_id(document_id: str, index: int) -> str:
    """The vector id of a document's chunk: stable, so re-ingesting replaces it."""
    return f"{document_id}#{index}"


class SimpleKnowledgeBase:
    """Splits documents into chunks, embeds them and keeps them in a vector store.

    Every chunk is stored under :func:`chunk_id` with the document's metadata plus
    ``document_id``, ``chunk_index`` and ``chunk_start`` (its offset in the document), so
    searches can filter on any of them. Ingesting a document again replaces its chunks,
    removing those the new version no longer has. A batch is checked, split and embedded
    before anything is written.

    Args:
        store: Where chunks are kept; its dimension must be the embedder's.
        embedder: Turns chunks and queries into vectors.
        splitter: How documents are cut; 1,000 characters with 200 of overlap by default.
        batch_size: Most chunks embedded per call to the embedder.

    Raises:
        DimensionMismatchError: The store holds vectors of another length than the embedder's.
        BuilderError: ``batch_size`` is not a positive integer.
    """

    def __init__(
        self,
        store: VectorStore,
        embedder: EmbeddingModel,
        *,
        splitter: TextSplitter | None = None,
        batch_size: int = 64,
    ) -> None:
        check_positive("batch_size", batch_size)
        if store.dimension != embedder.dimensions:
            name = getattr(embedder, "model_name", type(embedder).__name__)
            raise DimensionMismatchError(
                store.dimension,
                embedder.dimensions,
                f"embedding model {name!r} (for {type(store).__name__})",
            )
        self.store = store
        """The vector store."""
        self.embedder = embedder
        """The embedding model."""
        self.splitter = splitter or TextSplitter()
        """How documents are cut into chunks."""
        self._batch_size = batch_size

    def __repr__(self) -> str:
        return f"SimpleKnowledgeBase({self.store!r}, {self.embedder!r})"

    async def __aenter__(self) -> Self:
        await self.store.setup()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.store.aclose()

    async def ingest(self, documents: Sequence[Document]) -> int:
        """Add documents, replacing earlier versions with the same id; how many chunks written.

        Raises:
            KnowledgeBaseError: A document has no id, an id repeats, or its metadata uses a
                reserved key or is not JSON.
            EmptyDocumentError: A document has no text.
        """
        ids: list[str] = []
        texts: list[str] = []
        chunks: list[Document] = []
        counts: dict[str, int] = {}
        for document in documents:
            self._check(document, counts)
            pieces = self.splitter.split(document.content)
            counts[document.id] = len(pieces)
            for piece in pieces:
                ids.append(chunk_id(document.id, piece.index))
                texts.append(piece.text)
                metadata = {
                    **document.metadata,
                    "document_id": document.id,
                    "chunk_index": piece.index,
                    "chunk_start": piece.start,
                }
                chunks.append(Document(content=piece.text, id=ids[-1], metadata=metadata))
        vectors = await self._embed(texts)
        if ids:
            await self.store.upsert_many(ids, vectors, chunks)
        for document_id, count in counts.items():  # drop chunks of longer earlier versions
            await self.store.delete_where(
                {"document_id": document_id, "chunk_index": {"$gte": count}}
            )
        return len(ids)

    def _check(self, document: Document, seen: Mapping[str, int]) -> None:
        if not isinstance(document, Document):
            raise KnowledgeBaseError(f"expected a Document, got {document!r}")
        if not isinstance(document.id, str) or not document.id:
            raise KnowledgeBaseError(
                "a document needs an id (Document(id=...)) so that ingesting it again replaces it"
            )
        if document.id in seen:
            raise KnowledgeBaseError(f"document id {document.id!r} appears twice in one batch")
        if not document.content.strip():
            raise EmptyDocumentError(document.id)
        reserved = sorted(RESERVED_METADATA & set(document.metadata))
        if reserved:
            raise KnowledgeBaseError(
                f"document {document.id!r}: metadata keys {reserved} are set by the knowledge base"
            )
        try:
            check_metadata(document.metadata, f"metadata of document {document.id!r}")
        except ValueError as exc:
            raise KnowledgeBaseError(str(exc)) from None

    async def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = texts[start : start + self._batch_size]
            found = await self.embedder.embed(batch)
            if len(found) != len(batch):
                raise ModelError(
                    f"embedding model returned {len(found)} vectors for {len(batch)} texts"
                )
            vectors.extend(found)
        return vectors

    async def search(
        self, query: str, top_k: int = 4, filter: Mapping[str, Any] | None = None
    ) -> list[ScoredDocument]:
        """The chunks nearest to ``query``, best first, matching ``filter`` when given.

        Raises:
            KnowledgeBaseError: The query is blank.
            FilterError: The filter is outside daimon's filter language.
        """
        check_top_k(top_k)
        if not isinstance(query, str) or not query.strip():
            raise KnowledgeBaseError(f"a search needs a non-blank query, got {query!r}")
        [vector] = await self._embed([query])
        return await self.store.query(vector, top_k, filter)

    async def retrieve(
        self, query: str, top_k: int = 4, filter: Mapping[str, Any] | None = None
    ) -> list[ScoredDocument]:
        """The same as :meth:`search`: a knowledge base is a retriever."""
        return await self.search(query, top_k, filter)

    async def remove(self, document_id: str) -> int:
        """Forget a document; how many of its chunks were removed."""
        return await self.store.delete_where({"document_id": document_id})

    async def count(self) -> int:
        """How many chunks are stored."""
        return await self.store.count()
