"""Exact nearest-neighbour search in process memory, with numpy.

Vectors live in one contiguous float32 matrix that grows geometrically; a query is one
matrix-vector product and an ``argpartition`` for the top k, whose scores are then recomputed in
float64. Filters need no scan of the documents: equality and ``$in`` use an inverted index of
(field, value) to rows, ranges use float64 columns of the numeric fields (integers beyond 2**53
compare as their nearest float).

A store can be saved to a file and loaded back: a zip holding a versioned JSON header (ids,
documents, settings) and the matrix as ``.npy`` written without pickle.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from daimon.core.documents import Document, ScoredDocument
from daimon.core.errors import SerializationError, VectorStoreError
from daimon.core.optional import require
from daimon.kit.filters import Condition, parse_filter
from daimon.kit.vectors import (
    Metric,
    VectorStoreBase,
    check_dimension,
    check_metadata,
    check_metric,
    check_records,
    check_top_k,
    check_vector,
)

np = require("numpy", extra="rag")

__all__ = ("FORMAT", "FORMAT_VERSION", "InMemoryVectorStore")

FORMAT = "daimon.vectors"
"""The ``format`` field of a saved store's header."""
FORMAT_VERSION = 1
"""The header version :meth:`InMemoryVectorStore.save` writes and :meth:`~.load` reads."""

_RANGE_OPS = {
    "gt": np.greater,
    "gte": np.greater_equal,
    "lt": np.less,
    "lte": np.less_equal,
}
_HEADER = "header.json"
_VECTORS = "vectors.npy"


def _key(value: Any) -> tuple[str, Any] | None:
    """The equality-index key of a metadata value: booleans, numbers and strings kept apart."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)  # 1 and 1.0 hash and compare equal: one key
    if isinstance(value, str):
        return ("s", value)
    return None


class _EqualityIndex:
    """Rows by (field, value), so equality and ``$in`` filters need no scan of every row."""

    __slots__ = ("_fields",)

    def __init__(self) -> None:
        self._fields: dict[str, dict[tuple[str, Any], set[int]]] = {}

    def add(self, row: int, metadata: Mapping[str, Any]) -> None:
        for field, value in metadata.items():
            key = _key(value)
            if key is not None:
                self._fields.setdefault(field, {}).setdefault(key, set()).add(row)

    def remove(self, row: int, metadata: Mapping[str, Any]) -> None:
        for field, value in metadata.items():
            key = _key(value)
            if key is None:
                continue
            rows = self._fields[field][key]
            rows.discard(row)
            if not rows:
                del self._fields[field][key]

    def rows(self, condition: Condition) -> set[int]:
        """Rows whose field equals the condition's value (one of them, for ``in``)."""
        values = condition.value if isinstance(condition.value, tuple) else (condition.value,)
        by_value = self._fields.get(condition.field, {})
        found: set[int] = set()
        for value in values:
            key = _key(value)
            if key is not None:
                found |= by_value.get(key, set())
        return found


class _NumericColumns:
    """Numeric metadata as float64 columns (NaN where a row has no number), for range filters."""

    __slots__ = ("_capacity", "_columns")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._columns: dict[str, Any] = {}

    def grow(self, capacity: int) -> None:
        for field, column in self._columns.items():
            grown = np.full(capacity, np.nan)
            grown[: self._capacity] = column
            self._columns[field] = grown
        self._capacity = capacity

    def write(self, row: int, metadata: Mapping[str, Any]) -> None:
        for column in self._columns.values():
            column[row] = np.nan
        for field, value in metadata.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            column = self._columns.get(field)
            if column is None:
                column = self._columns[field] = np.full(self._capacity, np.nan)
            try:
                column[row] = float(value)
            except OverflowError:  # an int beyond float64: past every finite bound
                column[row] = math.inf if value > 0 else -math.inf

    def move(self, source: int, target: int) -> None:
        for column in self._columns.values():
            column[target] = column[source]
            column[source] = np.nan

    def clear(self, row: int) -> None:
        for column in self._columns.values():
            column[row] = np.nan

    def holds(self, condition: Condition, rows: Any) -> Any:
        """A boolean mask over ``rows``: where the field is a number in the condition's range."""
        column = self._columns.get(condition.field)
        if column is None:
            return np.zeros(len(rows), dtype=bool)
        return _RANGE_OPS[condition.op](column[rows], condition.value)


class InMemoryVectorStore(VectorStoreBase):
    """Keeps vectors in memory and searches them exactly.

    Args:
        dimension: Length of every vector.
        metric: ``"cosine"``, ``"dot"`` or ``"l2"`` (scores: similarity, dot product, negated
            distance).
        capacity: Rows allocated up front; the matrix doubles when full.

    Raises:
        BuilderError: A setting is invalid.
    """

    def __init__(self, dimension: int, *, metric: Metric = "cosine", capacity: int = 1024) -> None:
        self._dimension = check_dimension(dimension)
        self._metric: Metric = check_metric(metric)
        check_dimension(capacity)  # a positive int, like a dimension
        self._matrix: Any = np.zeros((capacity, dimension), dtype=np.float32)
        self._sq_norms: Any = np.zeros(capacity, dtype=np.float32)  # for l2
        self._ids: list[str] = []
        self._rows: dict[str, int] = {}
        self._contents: list[str] = []
        self._metadata: list[str] = []  # JSON text: returned copies can never alias the store
        self._parsed: list[dict[str, Any]] = []  # the same, parsed, for filters
        self._index = _EqualityIndex()
        self._numbers = _NumericColumns(capacity)

    def __repr__(self) -> str:
        return (
            f"InMemoryVectorStore(dimension={self._dimension}, metric={self._metric!r}, "
            f"count={len(self._ids)})"
        )

    # ------------------------------------------------------------------ writes

    async def upsert_many(
        self,
        ids: Sequence[str],
        embeddings: Sequence[Sequence[float]],
        documents: Sequence[Document],
    ) -> None:
        """Insert or replace many vectors; the whole batch is checked before any is written.

        ``embeddings`` may be a 2-D numpy array, which skips converting row by row.
        """
        texts = check_records(ids, documents, len(embeddings))
        matrix = self._as_matrix(ids, embeddings)
        self._write(ids, matrix, documents, texts)

    def _as_matrix(self, ids: Sequence[str], embeddings: Sequence[Sequence[float]]) -> Any:
        try:
            with np.errstate(over="ignore"):  # too large for float32: inf, refused below
                matrix = np.asarray(embeddings, dtype=np.float32)
        except (TypeError, ValueError):
            matrix = None
        if matrix is None or matrix.ndim != 2 or matrix.shape[1] != self._dimension:
            if len(embeddings) == 0:
                return np.zeros((0, self._dimension), dtype=np.float32)
            for key, embedding in zip(ids, embeddings, strict=True):  # find the culprit
                check_vector(embedding, self._dimension, f"vector {key!r}")
            raise VectorStoreError("embeddings must be a sequence of equal-length vectors")
        finite = np.isfinite(matrix).all(axis=1)
        if not finite.all():
            culprit = ids[int(np.argmin(finite))]
            raise VectorStoreError(
                f"vector {culprit!r} holds NaN or an infinity (or a value too large for float32)"
            )
        return matrix

    def _write(
        self,
        ids: Sequence[str],
        matrix: Any,
        documents: Sequence[Document],
        texts: list[str],
        *,
        normalized: bool = False,
    ) -> None:
        if self._metric == "cosine" and not normalized:
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix = matrix / np.where(norms == 0.0, 1.0, norms)
        self._reserve(len(self._ids) + sum(1 for key in ids if key not in self._rows))
        indices = []
        for key, document, text in zip(ids, documents, texts, strict=True):
            parsed = json.loads(text)
            index = self._rows.get(key)
            if index is None:
                index = len(self._ids)
                self._rows[key] = index
                self._ids.append(key)
                self._contents.append(document.content)
                self._metadata.append(text)
                self._parsed.append(parsed)
            else:
                self._index.remove(index, self._parsed[index])
                self._contents[index] = document.content
                self._metadata[index] = text
                self._parsed[index] = parsed
            self._index.add(index, parsed)
            self._numbers.write(index, parsed)
            indices.append(index)
        if indices:
            rows = np.asarray(indices, dtype=np.intp)
            self._matrix[rows] = matrix
            if self._metric == "l2":
                block = self._matrix[rows]
                self._sq_norms[rows] = np.einsum("ij,ij->i", block, block)

    def _reserve(self, rows: int) -> None:
        capacity = self._matrix.shape[0]
        if rows <= capacity:
            return
        while capacity < rows:
            capacity *= 2
        grown = np.zeros((capacity, self._dimension), dtype=np.float32)
        grown[: len(self._ids)] = self._matrix[: len(self._ids)]
        norms = np.zeros(capacity, dtype=np.float32)
        norms[: len(self._ids)] = self._sq_norms[: len(self._ids)]
        self._matrix, self._sq_norms = grown, norms
        self._numbers.grow(capacity)

    async def delete(self, id: str) -> bool:
        """Remove one vector; whether it existed."""
        index = self._rows.pop(id, None)
        if index is None:
            return False
        last = len(self._ids) - 1
        self._index.remove(index, self._parsed[index])
        if index == last:
            self._numbers.clear(index)
        else:  # move the last row into the hole
            self._index.remove(last, self._parsed[last])
            self._index.add(index, self._parsed[last])
            self._numbers.move(last, index)
            moved = self._ids[last]
            self._ids[index] = moved
            self._rows[moved] = index
            self._contents[index] = self._contents[last]
            self._metadata[index] = self._metadata[last]
            self._parsed[index] = self._parsed[last]
            self._matrix[index] = self._matrix[last]
            self._sq_norms[index] = self._sq_norms[last]
        self._ids.pop()
        self._contents.pop()
        self._metadata.pop()
        self._parsed.pop()
        return True

    async def delete_where(self, filter: Mapping[str, Any]) -> int:
        """Remove every vector whose metadata matches ``filter``; how many were removed."""
        doomed = [self._ids[row] for row in self._matching(parse_filter(filter)).tolist()]
        for key in doomed:
            await self.delete(key)
        return len(doomed)

    # ------------------------------------------------------------------ reads

    async def count(self, filter: Mapping[str, Any] | None = None) -> int:
        """How many vectors are stored (matching ``filter`` when given)."""
        conditions = parse_filter(filter)
        if not conditions:
            return len(self._ids)
        return len(self._matching(conditions))

    def _matching(self, conditions: tuple[Condition, ...]) -> Any:
        """Rows matching every condition, ascending: equalities by index, ranges by column."""
        equalities = [c for c in conditions if c.op in ("eq", "in")]
        ranges = [c for c in conditions if c.op not in ("eq", "in")]
        if equalities:
            found = self._index.rows(equalities[0])
            for condition in equalities[1:]:
                if not found:
                    break
                found &= self._index.rows(condition)
            rows = np.fromiter(sorted(found), dtype=np.intp, count=len(found))
        else:
            rows = np.arange(len(self._ids), dtype=np.intp)
        for condition in ranges:
            if rows.size == 0:
                break
            rows = rows[self._numbers.holds(condition, rows)]
        return rows

    async def query(
        self,
        embedding: Sequence[float],
        top_k: int,
        filter: Mapping[str, Any] | None = None,
    ) -> list[ScoredDocument]:
        """The ``top_k`` nearest documents, closest first, matching ``filter`` when given."""
        check_top_k(top_k)
        query = np.asarray(check_vector(embedding, self._dimension, "query vector"))
        conditions = parse_filter(filter)
        size = len(self._ids)
        if size == 0:
            return []
        if conditions:
            candidates = self._matching(conditions)
            if candidates.size == 0:
                return []
            if candidates.size * 8 < size:  # few: gather their rows
                scores = self._scores(self._matrix[candidates], self._sq_norms[candidates], query)
            else:  # many: scoring all beats copying most of the matrix
                scores = self._scores(self._matrix[:size], self._sq_norms[:size], query)[candidates]
        else:
            candidates = None
            scores = self._scores(self._matrix[:size], self._sq_norms[:size], query)
        k = min(top_k, scores.shape[0])
        top = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(k)
        rows = top if candidates is None else candidates[top]
        exact = self._exact_scores(rows, query)
        order = np.argsort(-exact, kind="stable")
        return [self._found(int(rows[i]), float(exact[i])) for i in order]

    def _scores(self, block: Any, sq_norms: Any, query: Any) -> Any:
        q = query.astype(np.float32)
        if self._metric == "cosine":
            norm = float(np.linalg.norm(q))
            return block @ (q / norm if norm else q)
        dots = block @ q
        if self._metric == "dot":
            return dots
        return 2.0 * dots - sq_norms  # -(squared distance) up to a constant: same order

    def _exact_scores(self, rows: Any, query: Any) -> Any:
        block = self._matrix[rows].astype(np.float64)
        if self._metric == "cosine":
            norm = float(np.linalg.norm(query))
            return block @ (query / norm if norm else query)
        if self._metric == "dot":
            return block @ query
        return -np.linalg.norm(block - query, axis=1)

    def _found(self, row: int, score: float) -> ScoredDocument:
        document = Document(
            content=self._contents[row],
            id=self._ids[row],
            metadata=json.loads(self._metadata[row]),
        )
        return ScoredDocument(document=document, score=score)

    # ------------------------------------------------------------------ files

    async def save(self, path: str | os.PathLike[str]) -> None:
        """Write the store to ``path`` atomically (a zip of a JSON header and a ``.npy``)."""
        size = len(self._ids)
        header = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "dimension": self._dimension,
            "metric": self._metric,
            "count": size,
            "ids": list(self._ids),
            "contents": list(self._contents),
            "metadata": list(self._metadata),
        }
        matrix = self._matrix[:size].copy()
        await asyncio.to_thread(_write_file, Path(path), header, matrix)

    @classmethod
    async def load(cls, path: str | os.PathLike[str], *, capacity: int = 1024) -> Self:
        """A store read back from a file written by :meth:`save`.

        Raises:
            SerializationError: The file is missing, corrupt, of another format or version.
        """
        header, matrix = await asyncio.to_thread(_read_file, Path(path))
        store = cls(
            header["dimension"], metric=header["metric"], capacity=max(capacity, len(matrix))
        )
        documents = [
            Document(content=c, metadata=json.loads(m))
            for c, m in zip(header["contents"], header["metadata"], strict=True)
        ]
        texts = [check_metadata(d.metadata) for d in documents]
        store._write(header["ids"], matrix, documents, texts, normalized=True)
        return store


def _write_file(path: Path, header: dict[str, Any], matrix: Any) -> None:
    buffer = io.BytesIO()
    np.save(buffer, matrix, allow_pickle=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as archive:
            archive.writestr(_HEADER, json.dumps(header, ensure_ascii=False, allow_nan=False))
            archive.writestr(_VECTORS, buffer.getvalue())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read_file(path: Path) -> tuple[dict[str, Any], Any]:
    where = f"vector store file {os.fspath(path)!r}"
    try:
        with zipfile.ZipFile(path) as archive:
            header = json.loads(archive.read(_HEADER).decode("utf-8"))
            raw = archive.read(_VECTORS)
    except FileNotFoundError:
        raise SerializationError(f"{where} does not exist") from None
    except (OSError, zipfile.BadZipFile, KeyError, UnicodeDecodeError, ValueError) as exc:
        raise SerializationError(f"{where} is not a daimon vector store: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SerializationError(f"{where} is not a daimon vector store (no {FORMAT!r} header)")
    if header.get("version") != FORMAT_VERSION:
        raise SerializationError(
            f"{where} has format version {header.get('version')!r}; this daimon reads "
            f"version {FORMAT_VERSION}"
        )
    try:
        matrix = np.load(io.BytesIO(raw), allow_pickle=False)
    except ValueError as exc:
        raise SerializationError(f"{where} holds a corrupt vector matrix: {exc}") from None
    _check_header(where, header, matrix)
    return header, matrix


def _check_header(where: str, header: dict[str, Any], matrix: Any) -> None:
    dimension, count = header.get("dimension"), header.get("count")
    if type(dimension) is not int or dimension < 1 or type(count) is not int or count < 0:
        raise SerializationError(f"{where} has an invalid dimension or count")
    if header.get("metric") not in ("cosine", "dot", "l2"):
        raise SerializationError(f"{where} names an unknown metric {header.get('metric')!r}")
    for key in ("ids", "contents", "metadata"):
        values = header.get(key)
        if not isinstance(values, list) or len(values) != count:
            raise SerializationError(f"{where}: {key!r} should list {count} entries")
        if not all(isinstance(v, str) for v in values):
            raise SerializationError(f"{where}: {key!r} should hold strings only")
    if len(set(header["ids"])) != count or not all(header["ids"]):
        raise SerializationError(f"{where}: ids are empty or repeated")
    if matrix.dtype != np.float32 or matrix.ndim != 2 or matrix.shape[0] != count:
        raise SerializationError(
            f"{where}: the matrix is {matrix.dtype} {matrix.shape}, expected float32 "
            f"({count}, {dimension})"
        )
    if matrix.shape[1] != dimension:
        raise SerializationError(
            f"{where}: the matrix holds {matrix.shape[1]} dimensions, the header says {dimension}"
        )
    if not np.isfinite(matrix).all():
        raise SerializationError(f"{where}: the matrix holds NaN or an infinity")
    for n, text in enumerate(header["metadata"]):
        try:
            if not isinstance(json.loads(text), dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise SerializationError(f"{where}: metadata {n} is not a JSON object: {exc}") from None
