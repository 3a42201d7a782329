"""Checks every vector store applies to its input before writing anything.

Stores share them so that the same bad input fails the same way everywhere, with nothing of the
refused call written. Scores follow one convention across stores (higher is closer):

* ``"cosine"``: the cosine similarity, in [-1, 1];
* ``"dot"``: the dot product;
* ``"l2"``: the Euclidean distance, negated (so ``0.0`` is an exact match).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from daimon.core.documents import Document
from daimon.core.errors import (
    BuilderError,
    DimensionMismatchError,
    SerializationError,
    VectorStoreError,
)
from daimon.kit.checks import check_positive
from daimon.kit.lifecycle import SetupOnEnter

__all__ = (
    "METRICS",
    "Metric",
    "VectorStoreBase",
    "check_batch",
    "check_dimension",
    "check_metadata",
    "check_metric",
    "check_records",
    "check_top_k",
    "check_vector",
)

Metric = Literal["cosine", "dot", "l2"]
"""How a store measures closeness: cosine similarity, dot product or Euclidean distance."""

METRICS: tuple[Metric, ...] = ("cosine", "dot", "l2")
"""Every metric, in the order documented."""


def check_metric(metric: str) -> Metric:
    """``metric`` if it is one of :data:`METRICS`, else :class:`BuilderError`."""
    if metric not in METRICS:
        raise BuilderError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")
    return metric


def check_dimension(dimension: int) -> int:
    """``dimension`` if it is a positive int, else :class:`BuilderError`."""
    return check_positive("dimension", dimension)


def check_top_k(top_k: int) -> int:
    """``top_k`` if it is a positive int, else :class:`VectorStoreError`."""
    if type(top_k) is not int or top_k < 1:
        raise VectorStoreError(f"top_k must be a positive integer, got {top_k!r}")
    return top_k


def check_vector(embedding: Sequence[float], dimension: int, what: str = "vector") -> list[float]:
    """The embedding as a list of floats, once its length and values are right.

    Raises:
        DimensionMismatchError: Its length is not ``dimension``.
        VectorStoreError: It holds a value that is not a finite number.
    """
    try:
        size = len(embedding)
    except TypeError:
        raise VectorStoreError(f"{what} must be a sequence of numbers, got {embedding!r}") from None
    if size != dimension:
        raise DimensionMismatchError(dimension, size, what)
    try:
        values = [float(v) for v in embedding]
    except (TypeError, ValueError):
        raise VectorStoreError(f"{what} holds a value that is not a number") from None
    if not all(map(math.isfinite, values)):
        raise VectorStoreError(f"{what} holds NaN or an infinity")
    return values


def check_metadata(metadata: Mapping[str, Any], what: str = "metadata") -> str:
    """The metadata as strict JSON text.

    Raises:
        SerializationError: It holds a value JSON cannot carry (an object, NaN, a non-str key).
    """
    try:
        return json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-serializable: {exc}") from None


def check_records(ids: Sequence[str], documents: Sequence[Document], embeddings: int) -> list[str]:
    """Check a batch's ids and documents; each document's metadata as JSON text.

    Raises:
        VectorStoreError: ``ids``, ``documents`` and the ``embeddings`` count differ, or an id
            is empty, not a str or repeated.
        SerializationError: A document's metadata is not JSON.
    """
    if not len(ids) == embeddings == len(documents):
        raise VectorStoreError(
            f"upsert_many needs as many ids, embeddings and documents; got {len(ids)}, "
            f"{embeddings} and {len(documents)}"
        )
    seen: set[str] = set()
    for key in ids:
        if not isinstance(key, str) or not key:
            raise VectorStoreError(f"a vector key must be a non-empty str, got {key!r}")
        if key in seen:
            raise VectorStoreError(f"vector key {key!r} appears twice in one batch")
        seen.add(key)
    texts = []
    for key, document in zip(ids, documents, strict=True):
        if not isinstance(document, Document):
            raise VectorStoreError(f"vector {key!r}: expected a Document, got {document!r}")
        texts.append(check_metadata(document.metadata, f"metadata of vector {key!r}"))
    return texts


def check_batch(
    ids: Sequence[str],
    embeddings: Sequence[Sequence[float]],
    documents: Sequence[Document],
    dimension: int,
) -> list[list[float]]:
    """Check a whole batch for ``upsert_many``; the embeddings as lists of floats.

    Raises:
        VectorStoreError: See :func:`check_records`; or a value is not a finite number.
        DimensionMismatchError: A vector has the wrong length.
        SerializationError: A document's metadata is not JSON.
    """
    check_records(ids, documents, len(embeddings))
    return [
        check_vector(e, dimension, f"vector {key!r}")
        for key, e in zip(ids, embeddings, strict=True)
    ]


class VectorStoreBase(SetupOnEnter):
    """A convenience base for stores: ``dimension`` and ``metric``, and ``async with``.

    ``async with store`` runs :meth:`setup` on entry and :meth:`aclose` on exit. Subclasses set
    ``_dimension`` and ``_metric`` and override :meth:`setup` and :meth:`aclose` when they have
    something to create or release.
    """

    _dimension: int
    _metric: Metric

    @property
    def dimension(self) -> int:
        """Length of every vector stored."""
        return self._dimension

    @property
    def metric(self) -> Metric:
        """How closeness is measured."""
        return self._metric

    async def setup(self) -> None:
        """Create what the store needs (nothing here); safe to call again."""

    async def aclose(self) -> None:
        """Release what the store holds (nothing here); safe to call again."""

    async def upsert(self, id: str, embedding: Sequence[float], document: Document) -> None:
        """Insert or replace one vector."""
        await self.upsert_many([id], [embedding], [document])

    async def upsert_many(
        self,
        ids: Sequence[str],
        embeddings: Sequence[Sequence[float]],
        documents: Sequence[Document],
    ) -> None:
        """Insert or replace many vectors; the whole batch is checked before any is written."""
        raise NotImplementedError
