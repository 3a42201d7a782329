"""Vector stores: one module per backend, each loaded only when asked for.

``import daimon.rag.stores`` imports no backend library. :class:`InMemoryVectorStore` (extra
``rag``: numpy) searches exactly in process and saves to a file; :class:`QdrantVectorStore`
(extra ``qdrant``) talks to a Qdrant server or runs Qdrant's local mode;
:class:`PgVectorStore` (extra ``postgres``) keeps vectors in PostgreSQL with pgvector;
:class:`OpenSearchVectorStore` (extra ``opensearch``) uses an OpenSearch k-NN index.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'daimon.rag.stores' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
