"""daimon.rag: retrieval-augmented generation.

:class:`SimpleKnowledgeBase` splits documents (:class:`TextSplitter`), embeds them with any
:class:`~daimon.core.EmbeddingModel` and keeps them in any :class:`~daimon.core.VectorStore`;
:class:`RetrieverTool` lets an agent search it. The stores live in :mod:`daimon.rag.stores`, one
module per backend. ``import daimon.rag`` imports no optional library: stores load when named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports
from daimon.rag._files import read_documents
from daimon.rag._knowledge import RESERVED_METADATA, SimpleKnowledgeBase, chunk_id
from daimon.rag._splitter import DEFAULT_SEPARATORS, TextChunk, TextSplitter

if TYPE_CHECKING:
    from daimon.rag._tool import RetrieverTool
    from daimon.rag.stores.memory import InMemoryVectorStore
    from daimon.rag.stores.opensearch import OpenSearchVectorStore
    from daimon.rag.stores.pgvector import PgVectorStore
    from daimon.rag.stores.qdrant import QdrantVectorStore

__all__ = (
    "DEFAULT_SEPARATORS",
    "InMemoryVectorStore",
    "OpenSearchVectorStore",
    "PgVectorStore",
    "QdrantVectorStore",
    "RESERVED_METADATA",
    "RetrieverTool",
    "SimpleKnowledgeBase",
    "TextChunk",
    "TextSplitter",
    "chunk_id",
    "read_documents",
)

# RetrieverTool pulls in daimon.tools; stores pull in their libraries: both load on first use.
_LAZY = {
    "InMemoryVectorStore": "daimon.rag.stores.memory",
    "OpenSearchVectorStore": "daimon.rag.stores.opensearch",
    "PgVectorStore": "daimon.rag.stores.pgvector",
    "QdrantVectorStore": "daimon.rag.stores.qdrant",
    "RetrieverTool": "daimon.rag._tool",
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
