"""Vector stores: one module per backend, each loaded only when asked for.

``import daimon.rag.stores`` imports no backend library. :class:`InMemoryVectorStore` (extra
``rag``: numpy) searches exactly in process and saves to a file; :class:`QdrantVectorStore`
(extra ``qdrant``) talks to a Qdrant server or runs Qdrant's local mode;
:class:`PgVectorStore` (extra ``postgres``) keeps vectors in PostgreSQL with pgvector;
:class:`OpenSearchVectorStore` (extra ``opensearch``) uses an OpenSearch k-NN index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.rag.stores.memory import InMemoryVectorStore
    from daimon.rag.stores.opensearch import OpenSearchVectorStore
    from daimon.rag.stores.pgvector import PgVectorStore
    from daimon.rag.stores.qdrant import QdrantVectorStore

__all__ = (
    "InMemoryVectorStore",
    "OpenSearchVectorStore",
    "PgVectorStore",
    "QdrantVectorStore",
)

_LAZY = {
    "InMemoryVectorStore": "daimon.rag.stores.memory",
    "OpenSearchVectorStore": "daimon.rag.stores.opensearch",
    "PgVectorStore": "daimon.rag.stores.pgvector",
    "QdrantVectorStore": "daimon.rag.stores.qdrant",
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
