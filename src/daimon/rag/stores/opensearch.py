"""A vector store in an OpenSearch k-NN index.

**Not yet run against a live cluster.** No OpenSearch server can be installed where daimon is
built, so this adapter is tested through the official ``opensearch-py`` client against a local
HTTP server written from OpenSearch's REST API reference (``tests/rag/stores/opensearch_fake.py``).
Report what a real cluster does differently.

One index per store, created by :meth:`OpenSearchVectorStore.setup`::

    settings  index.knn: true, knn.algo_param.ef_search
    embedding knn_vector, dimension, method hnsw (space_type per metric, engine lucene or faiss)
    content   text, not indexed          metadata  object, "enabled": false (kept verbatim)
    f_s.*     keyword   f_n.*  double    f_b.*     boolean

The metadata is kept verbatim in ``_source``; its scalar values with identifier keys are also
indexed under a field per JSON type (``f_s.lang``, ``f_n.year``, ``f_b.draft``). A field mapped
per type is what keeps :mod:`daimon.kit.filters`' rules (a string never equals a number, a bool
never equals ``1``) on an engine whose dynamic mapping would coerce one into the other, and lets
documents disagree about a field's type. Filters become an efficient k-NN ``filter`` (a ``bool``
query of ``term``/``terms``/``range`` clauses), applied during the search, so ``top_k`` results
come back when that many match.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, Self

from daimon.core.documents import Document, ScoredDocument
from daimon.core.errors import BuilderError, DimensionMismatchError, VectorStoreError
from daimon.core.optional import require
from daimon.kit.checks import check_positive
from daimon.kit.filters import Condition, parse_filter
from daimon.kit.vectors import (
    Metric,
    VectorStoreBase,
    check_dimension,
    check_metric,
    check_records,
    check_top_k,
    check_vector,
)

opensearchpy = require("opensearchpy", extra="opensearch")
require("aiohttp", extra="opensearch")  # AsyncOpenSearch's transport

__all__ = ("OpenSearchVectorStore",)

_SPACES: dict[str, str] = {"cosine": "cosinesimil", "dot": "innerproduct", "l2": "l2"}
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPED = (("f_s", "keyword"), ("f_n", "double"), ("f_b", "boolean"))
_RANGES = ("gt", "gte", "lt", "lte")
_MAX_ID_BYTES = 512
_FLOAT32_MAX = 3.4028234663852886e38
_INDEX = re.compile(r"[a-z0-9][a-z0-9_.+-]{0,254}")

Refresh = bool | Literal["wait_for"]
"""When writes become searchable: at once (``True``), at the next refresh, waited for
(``"wait_for"``), or eventually (``False``; call :meth:`OpenSearchVectorStore.refresh`)."""


def _check_float32(what: str, vector: list[float]) -> None:
    """Refuse values a ``knn_vector`` (float32) cannot hold: they would be infinite."""
    if any(abs(v) > _FLOAT32_MAX for v in vector):
        raise VectorStoreError(f"{what}: a value is too large for float32 (knn_vector's type)")


def _score(metric: Metric, score: float) -> float:
    """OpenSearch's ``_score`` turned back into daimon's score for ``metric``.

    OpenSearch scores ``cosinesimil`` as ``(1 + cos) / 2``, ``l2`` as ``1 / (1 + d²)`` and
    ``innerproduct`` as ``dot + 1`` when ``dot > 0``, else ``1 / (1 - dot)``.
    """
    if metric == "cosine":
        return 2.0 * score - 1.0
    if metric == "dot":
        return score - 1.0 if score > 1.0 else 1.0 - 1.0 / score
    return -math.sqrt(max(0.0, 1.0 / score - 1.0))


def _typed_fields(metadata: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The filterable part of the metadata: scalars with identifier keys, by JSON type."""
    typed: dict[str, dict[str, Any]] = {"f_s": {}, "f_n": {}, "f_b": {}}
    for key, value in metadata.items():
        if not isinstance(key, str) or not _FIELD.fullmatch(key):
            continue
        if isinstance(value, bool):
            typed["f_b"][key] = value
        elif isinstance(value, int | float):
            typed["f_n"][key] = value
        elif isinstance(value, str):
            typed["f_s"][key] = value
    return typed


def _typed(value: Any) -> str:
    if isinstance(value, bool):
        return "f_b"
    if isinstance(value, int | float):
        return "f_n"
    return "f_s"


def _filter_query(conditions: tuple[Condition, ...]) -> dict[str, Any] | None:
    """An OpenSearch ``bool`` filter for the conditions; ``None`` when there are none."""
    clauses: list[dict[str, Any]] = []
    for condition in conditions:
        field, op, value = condition.field, condition.op, condition.value
        if op == "eq":
            clauses.append({"term": {f"{_typed(value)}.{field}": value}})
        elif op == "in":
            by_type: dict[str, list[Any]] = {}
            for item in value:  # type: ignore[union-attr]
                by_type.setdefault(_typed(item), []).append(item)
            clauses.append(
                {
                    "bool": {
                        "should": [
                            {"terms": {f"{kind}.{field}": items}}
                            for kind, items in sorted(by_type.items())
                        ],
                        "minimum_should_match": 1,
                    }
                }
            )
        else:
            clauses.append({"range": {f"f_n.{field}": {op: value}}})
    if not clauses:
        return None
    return {"bool": {"filter": clauses}}


class OpenSearchVectorStore(VectorStoreBase):
    """Stores vectors in an OpenSearch k-NN index (HNSW, Lucene or Faiss engine).

    Not yet run against a live cluster: see the module's docstring.

    A write is checked whole before anything is sent. OpenSearch's ``_bulk`` applies documents
    one by one, so if the cluster itself refuses some of a batch (a full disk, the mapping's
    field limit) the others stay written; the error names the refused ids.

    Args:
        client: An ``http(s)://`` URL, or an ``opensearchpy.AsyncOpenSearch`` client (which the
            store then does not close).
        dimension: Length of every vector.
        index: The index's name (created by :meth:`setup`).
        metric: ``"cosine"``, ``"dot"`` or ``"l2"`` (see :mod:`daimon.kit.vectors`).
        engine: The k-NN engine, ``"lucene"`` or ``"faiss"`` (both filter during the search).
        hnsw_m: HNSW ``m``: links per node.
        hnsw_ef_construction: HNSW ``ef_construction``: candidates kept while building.
        ef_search: ``index.knn.algo_param.ef_search``: candidates kept while searching.
        refresh: When writes become searchable (see :data:`Refresh`).
        batch_size: Documents per ``_bulk`` request.
        client_options: Keyword arguments for ``AsyncOpenSearch`` when ``client`` is a URL
            (``http_auth``, ``verify_certs``, ``timeout``, ...).
    """

    def __init__(
        self,
        client: Any,
        *,
        dimension: int,
        index: str = "daimon-vectors",
        metric: Metric = "cosine",
        engine: Literal["lucene", "faiss"] = "lucene",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 128,
        ef_search: int = 100,
        refresh: Refresh = "wait_for",
        batch_size: int = 500,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._dimension = check_dimension(dimension)
        self._metric = check_metric(metric)
        if not isinstance(index, str) or not _INDEX.fullmatch(index):
            raise BuilderError(
                f"index name {index!r} must be lowercase letters, digits, '_', '-', '.' or '+', "
                "not starting with '_', '-' or '+'"
            )
        if engine not in ("lucene", "faiss"):
            raise BuilderError(f"engine must be 'lucene' or 'faiss', got {engine!r}")
        if refresh not in (True, False, "wait_for"):
            raise BuilderError(f"refresh must be True, False or 'wait_for', got {refresh!r}")
        self._index = index
        self._engine = engine
        self._m = check_positive("hnsw_m", hnsw_m)
        self._ef_construction = check_positive("hnsw_ef_construction", hnsw_ef_construction)
        self._ef_search = check_positive("ef_search", ef_search)
        self._refresh: Refresh = refresh
        self._batch_size = check_positive("batch_size", batch_size)
        if isinstance(client, str):
            self._owned = True
            self._client: Any = opensearchpy.AsyncOpenSearch(
                hosts=[client], **dict(client_options or {})
            )
        else:
            if client_options:
                raise BuilderError("client_options apply only when client is a URL")
            self._owned = False
            self._client = client
        self._lock = asyncio.Lock()
        self._ready = False
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        dimension: int,
        index: str = "daimon-vectors",
        metric: Metric = "cosine",
        engine: Literal["lucene", "faiss"] = "lucene",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 128,
        ef_search: int = 100,
        refresh: Refresh = "wait_for",
        batch_size: int = 500,
        **client_options: Any,
    ) -> Self:
        """A store on its own client to ``url``; extra keywords go to ``AsyncOpenSearch``."""
        return cls(
            url,
            dimension=dimension,
            index=index,
            metric=metric,
            engine=engine,
            hnsw_m=hnsw_m,
            hnsw_ef_construction=hnsw_ef_construction,
            ef_search=ef_search,
            refresh=refresh,
            batch_size=batch_size,
            client_options=client_options,
        )

    @property
    def index(self) -> str:
        """The index's name."""
        return self._index

    # ------------------------------------------------------------------ lifecycle
    def mapping(self) -> dict[str, Any]:
        """The settings and mappings :meth:`setup` creates the index with."""
        return {
            "settings": {
                "index": {"knn": True, "knn.algo_param.ef_search": self._ef_search},
            },
            "mappings": {
                "dynamic": "strict",
                "properties": {
                    "content": {"type": "text", "index": False},
                    "metadata": {"type": "object", "enabled": False},
                    "embedding": {
                        "type": "knn_vector",
                        "dimension": self._dimension,
                        "method": {
                            "name": "hnsw",
                            "space_type": _SPACES[self._metric],
                            "engine": self._engine,
                            "parameters": {"m": self._m, "ef_construction": self._ef_construction},
                        },
                    },
                    **{
                        name: {"type": "object", "dynamic": True, "properties": {}}
                        for name, _ in _TYPED
                    },
                },
                "dynamic_templates": [
                    {
                        f"{name}_as_{kind}": {
                            "path_match": f"{name}.*",
                            "mapping": {"type": kind},
                        }
                    }
                    for name, kind in _TYPED
                ],
            },
        }

    async def setup(self) -> None:
        """Create the k-NN index unless it exists; safe to call again.

        Raises:
            DimensionMismatchError: The index exists with vectors of another length.
            VectorStoreError: The index exists in another shape or for another metric, or
                OpenSearch failed.
        """
        async with self._lock:
            self._check_open()
            async with self._errors("create the index"):
                if not await self._client.indices.exists(index=self._index):
                    try:
                        await self._client.indices.create(index=self._index, body=self.mapping())
                    except opensearchpy.RequestError as exc:
                        if exc.error != "resource_already_exists_exception":
                            raise  # another handle's setup won the race otherwise
                await self._check_index()
            self._ready = True

    async def refresh(self) -> None:
        """Make every write so far searchable (needed only with ``refresh=False``)."""
        await self._ensure()
        async with self._errors("refresh the index"):
            await self._client.indices.refresh(index=self._index)

    async def aclose(self) -> None:
        """Close the client if the store opened it; safe to call again."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._owned:
                await self._client.close()

    # ------------------------------------------------------------------ writes
    async def upsert_many(
        self,
        ids: Sequence[str],
        embeddings: Sequence[Sequence[float]],
        documents: Sequence[Document],
    ) -> None:
        """Insert or replace many vectors with ``_bulk``, checked as a whole before sending.

        Raises:
            DimensionMismatchError: A vector has the wrong length.
            VectorStoreError: Ids repeat or are empty, a value is not finite, a cosine vector is
                zero, or OpenSearch refused documents (named).
            SerializationError: A document's metadata is not JSON.
        """
        check_records(ids, documents, len(embeddings))
        vectors = [
            check_vector(e, self._dimension, f"vector {key!r}")
            for key, e in zip(ids, embeddings, strict=True)
        ]
        for key, vector in zip(ids, vectors, strict=True):
            if len(key.encode()) > _MAX_ID_BYTES:
                raise VectorStoreError(
                    f"vector id {key[:40]!r}... is {len(key.encode())} bytes: OpenSearch ids hold "
                    f"at most {_MAX_ID_BYTES}"
                )
            _check_float32(f"vector {key!r}", vector)
            if self._metric == "cosine" and not any(vector):
                raise VectorStoreError(
                    f"vector {key!r} is all zeros: OpenSearch's cosine space refuses it"
                )
        if not vectors:
            return
        await self._ensure()
        actions: list[dict[str, Any]] = []
        for key, vector, document in zip(ids, vectors, documents, strict=True):
            actions.append({"index": {"_index": self._index, "_id": key}})
            actions.append(
                {
                    "content": document.content,
                    "metadata": dict(document.metadata),
                    "embedding": vector,
                    **_typed_fields(document.metadata),
                }
            )
        step = 2 * self._batch_size
        for start in range(0, len(actions), step):
            last = start + step >= len(actions)
            async with self._errors("write vectors"):
                reply = await self._client.bulk(
                    body=actions[start : start + step],
                    refresh=self._refresh if last else False,
                )
            if reply.get("errors"):
                failed = [
                    (item.get("_id"), item.get("error", {}))
                    for entry in reply.get("items", [])
                    for item in entry.values()
                    if "error" in item
                ]
                first_id, error = failed[0]
                raise VectorStoreError(
                    f"OpenSearch refused {len(failed)} of the batch's vectors (first {first_id!r}: "
                    f"{error.get('type')}: {error.get('reason')}); the others were written. "
                    f"Refused: {[key for key, _ in failed][:20]}"
                )

    async def delete(self, id: str) -> bool:
        """Remove one vector; whether it existed."""
        await self._ensure()
        async with self._errors("delete a vector"):
            try:
                await self._client.delete(index=self._index, id=id, refresh=self._refresh)
            except opensearchpy.NotFoundError as exc:
                if exc.error == "index_not_found_exception":
                    raise
                return False
        return True

    async def delete_where(self, filter: Mapping[str, Any]) -> int:
        """Remove every vector whose metadata matches ``filter``; how many were removed."""
        query = _filter_query(parse_filter(filter)) or {"match_all": {}}
        await self._ensure()
        async with self._errors("delete vectors"):
            reply = await self._client.delete_by_query(
                index=self._index,
                body={"query": query},
                refresh=self._refresh is not False,
                conflicts="proceed",
            )
        return int(reply.get("deleted", 0))

    # ------------------------------------------------------------------ reads
    async def count(self, filter: Mapping[str, Any] | None = None) -> int:
        """How many vectors are stored (matching ``filter`` when given)."""
        query = _filter_query(parse_filter(filter))
        await self._ensure()
        async with self._errors("count vectors"):
            reply = await self._client.count(
                index=self._index, body={"query": query} if query else None
            )
        return int(reply["count"])

    async def query(
        self,
        embedding: Sequence[float],
        top_k: int,
        filter: Mapping[str, Any] | None = None,
    ) -> list[ScoredDocument]:
        """The ``top_k`` nearest documents, closest first, matching ``filter`` when given."""
        vector = check_vector(embedding, self._dimension, "query vector")
        check_top_k(top_k)
        if top_k > 10_000:
            raise VectorStoreError(f"top_k must be at most 10000 for OpenSearch, got {top_k}")
        _check_float32("the query vector", vector)
        if self._metric == "cosine" and not any(vector):
            raise VectorStoreError("the query vector is all zeros: cosine similarity is undefined")
        knn: dict[str, Any] = {"vector": vector, "k": top_k}
        where = _filter_query(parse_filter(filter))
        if where is not None:
            knn["filter"] = where
        await self._ensure()
        async with self._errors("search"):
            reply = await self._client.search(
                index=self._index,
                body={
                    "size": top_k,
                    "query": {"knn": {"embedding": knn}},
                    "_source": {"includes": ["content", "metadata"]},
                },
            )
        found = []
        for hit in reply["hits"]["hits"]:
            source = hit.get("_source", {})
            found.append(
                ScoredDocument(
                    document=Document(
                        content=source.get("content", ""),
                        id=hit["_id"],
                        metadata=source.get("metadata") or {},
                    ),
                    score=_score(self._metric, float(hit["_score"])),
                )
            )
        return found

    # ------------------------------------------------------------------ internals
    def _check_open(self) -> None:
        if self._closed:
            raise VectorStoreError(f"OpenSearchVectorStore({self._index!r}) is closed")

    async def _ensure(self) -> None:
        """Check the index once before first use."""
        if self._ready:
            self._check_open()
            return
        async with self._lock:
            self._check_open()
            if not self._ready:
                async with self._errors("read the index"):
                    if not await self._client.indices.exists(index=self._index):
                        raise VectorStoreError(
                            f"index {self._index!r} does not exist: call setup() first"
                        )
                    await self._check_index()
                self._ready = True

    async def _check_index(self) -> None:
        """Raise unless the existing index is one this store can use."""
        reply: dict[str, Any] = await self._client.indices.get_mapping(index=self._index)
        concrete: dict[str, Any] = next(iter(reply.values()), {})  # keyed by the real name
        mappings: dict[str, Any] = concrete.get("mappings", {})
        field = mappings.get("properties", {}).get("embedding")
        if not isinstance(field, dict) or field.get("type") != "knn_vector":
            raise VectorStoreError(
                f"index {self._index!r} exists but has no knn_vector field 'embedding': it is "
                "not an OpenSearchVectorStore index"
            )
        dimension = field.get("dimension")
        if not isinstance(dimension, int):
            raise VectorStoreError(f"index {self._index!r}: 'embedding' has no dimension")
        if dimension != self._dimension:
            raise DimensionMismatchError(
                dimension, self._dimension, f"a store on index {self._index!r}"
            )
        space = field.get("method", {}).get("space_type", field.get("space_type", "l2"))
        if space != _SPACES[self._metric]:
            named = {v: k for k, v in _SPACES.items()}.get(space, space)
            raise VectorStoreError(
                f"index {self._index!r} holds {named!r} vectors (space {space!r}), but this "
                f"store was asked for {self._metric!r}"
            )

    @asynccontextmanager
    async def _errors(self, action: str) -> AsyncIterator[None]:
        """Turn the client's errors into :class:`VectorStoreError`, naming what failed."""
        try:
            yield
        except opensearchpy.ConnectionError as exc:
            raise VectorStoreError(
                f"could not {action}: OpenSearch is unreachable ({exc.error})"
            ) from exc
        except opensearchpy.TransportError as exc:
            info = exc.info if isinstance(exc.info, dict) else {}
            error = info.get("error")
            reason = error.get("reason") if isinstance(error, dict) else error
            if exc.error == "index_not_found_exception":
                self._ready = False
                raise VectorStoreError(
                    f"could not {action}: index {self._index!r} does not exist; call setup()"
                ) from exc
            raise VectorStoreError(
                f"could not {action}: OpenSearch answered {exc.status_code} {exc.error}"
                + (f": {reason}" if reason and reason != exc.error else "")
            ) from exc
