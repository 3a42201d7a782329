"""A vector store in Qdrant: a server, or Qdrant's local mode (in memory or in a folder).

One collection per store. A vector's string id becomes a UUID (uuid5 of the id) as Qdrant wants;
the payload keeps the id, the content and the metadata::

    {"id": "doc#0", "content": "...", "metadata": {...}}

Filters (:mod:`daimon.kit.filters`) become Qdrant filters on ``metadata.<field>``: strings and
booleans match by value, numbers (equality too) by range, so ``1 == 1.0`` and a boolean is never
a number. Qdrant reports Euclidean distance for ``l2``; it is negated here, so higher is closer
for every metric.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Self

from daimon.core.documents import Document, ScoredDocument
from daimon.core.errors import BuilderError, DimensionMismatchError, VectorStoreError
from daimon.core.optional import require
from daimon.kit.checks import check_positive
from daimon.kit.filters import Condition, parse_filter
from daimon.kit.vectors import (
    Metric,
    VectorStoreBase,
    check_batch,
    check_dimension,
    check_metric,
    check_top_k,
    check_vector,
)

qdrant_client = require("qdrant_client", extra="qdrant")
models = require("qdrant_client.models", extra="qdrant")

__all__ = ("QdrantVectorStore", "point_id")

_NAMESPACE = uuid.UUID("6f1d2a0e-5b7c-4e8a-9a43-3c1d0d6b7e21")
_DISTANCES = {"cosine": "Cosine", "dot": "Dot", "l2": "Euclid"}


def point_id(id: str) -> str:
    """The Qdrant point id (a UUID) of a vector id."""
    return str(uuid.uuid5(_NAMESPACE, id))


class QdrantVectorStore(VectorStoreBase):
    """Keeps vectors in a Qdrant collection.

    Give either ``client`` (an ``AsyncQdrantClient`` the caller keeps and closes) or the options
    to open one: ``url="http://localhost:6333"`` for a server, ``location=":memory:"`` or
    ``path="folder"`` for local mode. Call :meth:`setup` (or use ``async with``) before use.

    Args:
        collection: The collection's name.
        dimension: Length of every vector.
        metric: ``"cosine"``, ``"dot"`` or ``"l2"``.
        client: An open ``AsyncQdrantClient`` to use instead of opening one.
        batch_size: Most points sent per upsert request.
        **client_options: Passed to ``AsyncQdrantClient`` (``url``, ``location``, ``path``,
            ``api_key``, ``timeout``, ...).

    Raises:
        BuilderError: A setting is invalid.
    """

    def __init__(
        self,
        collection: str,
        dimension: int,
        *,
        metric: Metric = "cosine",
        client: Any = None,
        batch_size: int = 256,
        **client_options: Any,
    ) -> None:
        if not isinstance(collection, str) or not collection:
            raise BuilderError(f"collection must be a non-empty name, got {collection!r}")
        check_positive("batch_size", batch_size)
        if client is not None and client_options:
            raise BuilderError("give either client or the options to open one, not both")
        if client is None and not client_options:
            raise BuilderError('say where Qdrant is: url=..., location=":memory:" or path=...')
        self._collection = collection
        self._dimension = check_dimension(dimension)
        self._metric: Metric = check_metric(metric)
        self._batch_size = batch_size
        self._owns_client = client is None
        self._client: Any = client
        self._client_options = client_options
        self._ready = False

    @classmethod
    def from_url(
        cls, url: str, collection: str, dimension: int, *, metric: Metric = "cosine", **options: Any
    ) -> Self:
        """A store on a Qdrant server (``http://host:6333``)."""
        return cls(collection, dimension, metric=metric, url=url, **options)

    def __repr__(self) -> str:
        return (
            f"QdrantVectorStore({self._collection!r}, dimension={self._dimension}, "
            f"metric={self._metric!r})"
        )

    @property
    def collection(self) -> str:
        """The Qdrant collection."""
        return self._collection

    async def setup(self) -> None:
        """Create the collection if it is missing; safe to call again.

        Raises:
            DimensionMismatchError: The collection holds vectors of another length.
            VectorStoreError: The collection uses another metric, or Qdrant failed.
        """
        client = self._connect()
        try:
            if await client.collection_exists(self._collection):
                info = await client.get_collection(self._collection)
                self._check_existing(info.config.params.vectors)
            else:
                await client.create_collection(
                    self._collection,
                    vectors_config=models.VectorParams(
                        size=self._dimension, distance=_DISTANCES[self._metric]
                    ),
                )
        except (DimensionMismatchError, VectorStoreError):
            raise
        except Exception as exc:
            raise VectorStoreError(f"Qdrant setup of {self._collection!r} failed: {exc}") from exc
        self._ready = True

    def _check_existing(self, vectors: Any) -> None:
        if not hasattr(vectors, "size"):
            raise VectorStoreError(
                f"Qdrant collection {self._collection!r} has named vectors; "
                "this store needs one unnamed vector per point"
            )
        if vectors.size != self._dimension:
            raise DimensionMismatchError(
                vectors.size, self._dimension, f"Qdrant collection {self._collection!r}: a vector"
            )
        distance = getattr(vectors.distance, "value", vectors.distance)
        if distance != _DISTANCES[self._metric]:
            raise VectorStoreError(
                f"Qdrant collection {self._collection!r} measures {distance}, "
                f"but this store was opened with metric {self._metric!r}"
            )

    def _connect(self) -> Any:
        if self._client is None:
            self._client = qdrant_client.AsyncQdrantClient(**self._client_options)
        return self._client

    async def aclose(self) -> None:
        """Close the client if this store opened it; safe to call again."""
        client, self._ready = self._client, False
        if self._owns_client and client is not None:
            self._client = None
            await client.close()

    def _live(self) -> Any:
        if not self._ready or self._client is None:
            raise VectorStoreError(f"{self!r} is not set up: call setup() or use async with")
        return self._client

    # ------------------------------------------------------------------ writes

    async def upsert_many(
        self,
        ids: Sequence[str],
        embeddings: Sequence[Sequence[float]],
        documents: Sequence[Document],
    ) -> None:
        """Insert or replace many vectors, checked as a whole before any is sent.

        A batch larger than ``batch_size`` goes in several requests; against a server, a
        failure between them leaves the earlier requests written.
        """
        vectors = check_batch(ids, embeddings, documents, self._dimension)
        client = self._live()
        points = [
            models.PointStruct(
                id=point_id(key),
                vector=vector,
                payload={"id": key, "content": doc.content, "metadata": dict(doc.metadata)},
            )
            for key, vector, doc in zip(ids, vectors, documents, strict=True)
        ]
        for start in range(0, len(points), self._batch_size):
            await self._call(
                client.upsert(
                    self._collection, points=points[start : start + self._batch_size], wait=True
                )
            )

    async def delete(self, id: str) -> bool:
        """Remove one vector; whether it existed."""
        client = self._live()
        pid = point_id(id)
        found = await self._call(
            client.retrieve(self._collection, ids=[pid], with_payload=False, with_vectors=False)
        )
        if not found:
            return False
        await self._call(
            client.delete(
                self._collection, points_selector=models.PointIdsList(points=[pid]), wait=True
            )
        )
        return True

    async def delete_where(self, filter: Mapping[str, Any]) -> int:
        """Remove every vector whose metadata matches ``filter``; how many were removed.

        The count is taken just before the delete: a point another writer adds in between and
        that matches is removed without being counted.
        """
        conditions = parse_filter(filter)
        client = self._live()
        query_filter = _to_qdrant(conditions)
        count = await self.count(filter)
        if count:
            selector = models.FilterSelector(filter=query_filter or models.Filter())
            await self._call(client.delete(self._collection, points_selector=selector, wait=True))
        return count

    # ------------------------------------------------------------------ reads

    async def count(self, filter: Mapping[str, Any] | None = None) -> int:
        """How many vectors are stored (matching ``filter`` when given)."""
        conditions = parse_filter(filter)
        client = self._live()
        result = await self._call(
            client.count(self._collection, count_filter=_to_qdrant(conditions), exact=True)
        )
        return int(result.count)

    async def query(
        self,
        embedding: Sequence[float],
        top_k: int,
        filter: Mapping[str, Any] | None = None,
    ) -> list[ScoredDocument]:
        """The ``top_k`` nearest documents, closest first, matching ``filter`` when given."""
        check_top_k(top_k)
        vector = check_vector(embedding, self._dimension, "query vector")
        conditions = parse_filter(filter)
        client = self._live()
        result = await self._call(
            client.query_points(
                self._collection,
                query=vector,
                limit=top_k,
                query_filter=_to_qdrant(conditions),
                with_payload=True,
                with_vectors=False,
            )
        )
        sign = -1.0 if self._metric == "l2" else 1.0
        return [
            ScoredDocument(
                document=Document(
                    content=point.payload["content"],
                    id=point.payload["id"],
                    metadata=point.payload["metadata"],
                ),
                score=sign * float(point.score),
            )
            for point in result.points
        ]

    async def _call(self, request: Any) -> Any:
        try:
            return await request
        except VectorStoreError:
            raise
        except Exception as exc:
            raise VectorStoreError(f"Qdrant request on {self._collection!r} failed: {exc}") from exc


def _to_qdrant(conditions: tuple[Condition, ...]) -> Any:
    """A Qdrant ``Filter`` for the conditions, or ``None`` for no filter."""
    if not conditions:
        return None
    return models.Filter(must=[_condition(c) for c in conditions])


def _match(key: str, value: str | int | float | bool) -> Any:
    if isinstance(value, str | bool):
        return models.FieldCondition(key=key, match=models.MatchValue(value=value))
    return models.FieldCondition(key=key, range=models.Range(gte=value, lte=value))


def _condition(condition: Condition) -> Any:
    key = f"metadata.{condition.field}"
    value = condition.value
    if condition.op == "eq":
        assert not isinstance(value, tuple)
        return _match(key, value)
    if condition.op == "in":
        assert isinstance(value, tuple)
        return models.Filter(should=[_match(key, v) for v in value])
    bounds = {condition.op: value}
    return models.FieldCondition(key=key, range=models.Range(**bounds))
