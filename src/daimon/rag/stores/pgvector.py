"""A vector store in PostgreSQL with pgvector: an HNSW index, metadata filters in SQL.

One table per store::

    id         text PRIMARY KEY
    content    text NOT NULL
    metadata   jsonb NOT NULL
    embedding  vector(<dimension>) NOT NULL

with an HNSW index on ``embedding`` whose operator class matches the metric (``cosine`` →
``vector_cosine_ops`` and ``<=>``, ``dot`` → ``vector_ip_ops`` and ``<#>``, ``l2`` →
``vector_l2_ops`` and ``<->``). :meth:`PgVectorStore.setup` creates the extension, the table and
the index. Filters (:mod:`daimon.kit.filters`) become SQL over ``metadata``, with every value
bound as a parameter. Connections come from a ``psycopg_pool`` pool; each one sets
``hnsw.ef_search`` and turns on pgvector's iterative index scans, so a filtered query still
returns ``top_k`` rows when the nearest ones are filtered out.

Writes are one transaction per batch. A batch of 64 rows or more is checked as one numpy array,
sent with binary ``COPY`` into a temporary staging table and upserted from it by one
``INSERT ... ON CONFLICT``; smaller ones by one pipelined ``INSERT`` per row.
"""

from __future__ import annotations

import asyncio
import re
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
    check_dimension,
    check_metric,
    check_records,
    check_top_k,
    check_vector,
)

np = require("numpy", extra="postgres")
psycopg = require("psycopg", extra="postgres")
psycopg_pool = require("psycopg_pool", extra="postgres")
pgvector_psycopg = require("pgvector.psycopg", extra="postgres")
sql = require("psycopg.sql", extra="postgres")
psycopg_json = require("psycopg.types.json", extra="postgres")

__all__ = ("PgVectorStore",)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_HNSW_MAX_DIMENSION = 2000
"""pgvector's HNSW index holds ``vector`` columns of up to 2,000 dimensions."""

# metric -> (distance operator, operator class, score from distance in SQL)
_METRICS: dict[str, tuple[str, str, str]] = {
    "cosine": ("<=>", "vector_cosine_ops", "1 - ({d})"),
    "dot": ("<#>", "vector_ip_ops", "-({d})"),  # <#> is the negated inner product
    "l2": ("<->", "vector_l2_ops", "-({d})"),
}
_RANGE_SQL = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_EF_SEARCH_MAX = 1000
"""The largest ``hnsw.ef_search`` pgvector accepts."""
_COPY_FROM = 64
"""Batches of at least this many rows go through ``COPY`` and a staging table; smaller ones
through one pipelined ``INSERT`` per row."""
_STAGING = sql.Identifier("daimon_upsert_staging")
_ON_CONFLICT = (
    "ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, "
    "metadata = EXCLUDED.metadata, embedding = EXCLUDED.embedding"
)
_SETUP_LOCK = 0x6461_696D_6F6E  # pg_advisory_xact_lock key: concurrent setups take turns


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise BuilderError(
            f"{kind} name {name!r} must be an identifier of at most 63 characters "
            "([A-Za-z_][A-Za-z0-9_]*)"
        )
    return name


def _ef_search_ok(value: object) -> bool:
    return type(value) is int and 1 <= value <= _EF_SEARCH_MAX


class PgVectorStore(VectorStoreBase):
    """Stores vectors in a PostgreSQL table with pgvector, searched through an HNSW index.

    Numbers in metadata come back as PostgreSQL's ``jsonb`` prints them: equal in value, but a
    float with no fractional digits beyond 15 significant ones (``1e16``) comes back as an int.
    PostgreSQL text cannot hold a NUL character, so content or metadata holding one is refused.

    Args:
        url: A libpq connection string or ``postgresql://`` URL.
        dimension: Length of every vector.
        table: The table's name (created by :meth:`setup`).
        schema: The table's schema; the connection's ``search_path`` when ``None``.
        metric: ``"cosine"``, ``"dot"`` or ``"l2"`` (see :mod:`daimon.kit.vectors`).
        hnsw_m: HNSW ``m``: links per node (more: better recall, bigger index).
        hnsw_ef_construction: HNSW ``ef_construction``: candidates kept while building.
        ef_search: ``hnsw.ef_search``: candidates kept while searching (recall against speed;
            1 to 1,000; :meth:`query` takes one per query too).
        index: Whether :meth:`setup` creates the HNSW index; without it search is exact until
            :meth:`create_index` (for bulk loads).
        min_size: Connections the pool keeps open.
        max_size: Connections the pool opens at most.
    """

    def __init__(
        self,
        url: str,
        *,
        dimension: int,
        table: str = "daimon_vectors",
        schema: str | None = None,
        metric: Metric = "cosine",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 64,
        ef_search: int = 100,
        index: bool = True,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise BuilderError(f"url must be a PostgreSQL connection string, got {url!r}")
        self._url = url
        self._dimension = check_dimension(dimension)
        self._metric = check_metric(metric)
        self._table = _check_name("table", table)
        self._schema = None if schema is None else _check_name("schema", schema)
        self._m = check_positive("hnsw_m", hnsw_m)
        self._ef_construction = check_positive("hnsw_ef_construction", hnsw_ef_construction)
        if not _ef_search_ok(ef_search):
            raise BuilderError(
                f"ef_search must be an integer from 1 to {_EF_SEARCH_MAX} (pgvector's range), "
                f"got {ef_search!r}"
            )
        self._ef_search = ef_search
        if index and dimension > _HNSW_MAX_DIMENSION:
            raise BuilderError(
                f"pgvector's HNSW index holds at most {_HNSW_MAX_DIMENSION} dimensions, not "
                f"{dimension}; pass index=False for exact search"
            )
        self._index = index
        self._min_size = check_positive("min_size", min_size)
        self._max_size = check_positive("max_size", max_size)
        if max_size < min_size:
            raise BuilderError(f"max_size ({max_size}) is below min_size ({min_size})")
        operator, self._opclass, score = _METRICS[self._metric]
        self._operator = sql.SQL(operator)
        self._score = score
        parts = (self._table,) if self._schema is None else (self._schema, self._table)
        self._ident = sql.Identifier(*parts)
        self._insert_values = sql.SQL(
            "INSERT INTO {} (id, content, metadata, embedding) VALUES (%s, %s, %s::jsonb, %b) "
            + _ON_CONFLICT
        ).format(self._ident)
        self._insert_staged = sql.SQL(
            "INSERT INTO {} (id, content, metadata, embedding) "
            "SELECT id, content, metadata::jsonb, embedding FROM {} " + _ON_CONFLICT
        ).format(self._ident, _STAGING)
        self._pool: Any = None
        self._lock = asyncio.Lock()
        self._ready = False
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        dimension: int,
        table: str = "daimon_vectors",
        schema: str | None = None,
        metric: Metric = "cosine",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 64,
        ef_search: int = 100,
        index: bool = True,
        min_size: int = 1,
        max_size: int = 4,
    ) -> Self:
        """A store on its own connection pool to ``url``."""
        return cls(
            url,
            dimension=dimension,
            table=table,
            schema=schema,
            metric=metric,
            hnsw_m=hnsw_m,
            hnsw_ef_construction=hnsw_ef_construction,
            ef_search=ef_search,
            index=index,
            min_size=min_size,
            max_size=max_size,
        )

    @property
    def table(self) -> str:
        """The table's name (without its schema)."""
        return self._table

    # ------------------------------------------------------------------ lifecycle
    async def setup(self) -> None:
        """Create the extension, the table and its HNSW index; safe to call again.

        Raises:
            DimensionMismatchError: The table exists with vectors of another length.
            VectorStoreError: The table exists in another shape, or has an HNSW index for
                another metric.
        """
        async with self._lock:
            self._check_open()
            conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
            async with conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SETUP_LOCK,))
                await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                if not await self._check_table(conn):
                    await conn.execute(
                        sql.SQL(
                            "CREATE TABLE {} (id text PRIMARY KEY, content text NOT NULL, "
                            "metadata jsonb NOT NULL DEFAULT '{{}}'::jsonb, "
                            "embedding vector({}) NOT NULL)"
                        ).format(self._ident, sql.Literal(self._dimension))
                    )
                if self._index:
                    await conn.execute(self._create_index_sql())
            self._ready = True

    async def create_index(self, *, maintenance_work_mem: str = "512MB") -> None:
        """Build the HNSW index unless it exists: the fast way to finish a bulk load.

        Building the index once over loaded rows is many times faster than keeping it up to date
        row by row (pgvector's advice for large loads): make the store with ``index=False``,
        load, then call this. Queries are exact until the index exists.

        Args:
            maintenance_work_mem: Memory for the build (PostgreSQL's setting, for this session);
                a build that fits in it is much faster.
        """
        if self._dimension > _HNSW_MAX_DIMENSION:
            raise VectorStoreError(
                f"pgvector's HNSW index holds at most {_HNSW_MAX_DIMENSION} dimensions, not "
                f"{self._dimension}"
            )
        await self._connections()  # the table must exist
        conn = await psycopg.AsyncConnection.connect(self._url, autocommit=True)
        async with conn:
            await conn.execute(
                "SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,)
            )
            await conn.execute(self._create_index_sql())

    def _create_index_sql(self) -> Any:
        return sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding {}) "
            "WITH (m = {}, ef_construction = {})"
        ).format(
            sql.Identifier(f"{self._table}_{self._metric}_hnsw"[:63]),
            self._ident,
            sql.SQL(self._opclass),
            sql.Literal(self._m),
            sql.Literal(self._ef_construction),
        )

    async def aclose(self) -> None:
        """Close the connection pool; safe to call again. The store cannot be used afterwards."""
        async with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            if pool is not None:
                await pool.close()

    # ------------------------------------------------------------------ writes
    async def upsert_many(
        self,
        ids: Sequence[str],
        embeddings: Sequence[Sequence[float]],
        documents: Sequence[Document],
    ) -> None:
        """Insert or replace many vectors in one transaction, checked as a whole first.

        Raises:
            DimensionMismatchError: A vector has the wrong length.
            VectorStoreError: Ids repeat or are empty, a value is not finite, or text holds NUL.
            SerializationError: A document's metadata is not JSON.
        """
        texts = check_records(ids, documents, len(embeddings))  # the metadata as JSON text
        if not texts:
            return
        matrix = self._matrix(ids, embeddings)
        for key, document, text in zip(ids, documents, texts, strict=True):
            if "\x00" in key or "\x00" in document.content or "\\u0000" in text:
                raise VectorStoreError(
                    f"vector {key!r}: PostgreSQL text cannot hold a NUL character (\\x00)"
                )
        matrix = self._float32_rows(ids, matrix)
        rows = [
            (key, document.content, text, vector)
            for key, document, text, vector in zip(ids, documents, texts, matrix, strict=True)
        ]
        pool = await self._connections()
        async with pool.connection() as conn, conn.transaction():
            if len(rows) < _COPY_FROM:
                async with conn.cursor() as cur:
                    await cur.executemany(self._insert_values, rows)
            else:
                await self._copy_in(conn, rows)

    async def _copy_in(self, conn: Any, rows: list[tuple[str, str, str, Any]]) -> None:
        """Upsert ``rows`` through binary ``COPY`` into a staging table, then one statement.

        Runs inside the caller's transaction: the staging table is dropped at its end, and a
        failure anywhere writes nothing.
        """
        await conn.execute(
            sql.SQL(
                "CREATE TEMPORARY TABLE {} (id text, content text, metadata text, "
                "embedding vector({})) ON COMMIT DROP"
            ).format(_STAGING, sql.Literal(self._dimension))
        )
        copy_sql = sql.SQL(
            "COPY {} (id, content, metadata, embedding) FROM STDIN (FORMAT BINARY)"
        ).format(_STAGING)
        async with conn.cursor() as cur:
            async with cur.copy(copy_sql) as copy:
                copy.set_types(["text", "text", "text", "vector"])
                for row in rows:
                    await copy.write_row(row)
            await cur.execute(self._insert_staged)

    async def delete(self, id: str) -> bool:
        """Remove one vector; whether it existed."""
        pool = await self._connections()
        async with pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("DELETE FROM {} WHERE id = %s").format(self._ident), (id,)
            )
            return bool(cur.rowcount)

    async def delete_where(self, filter: Mapping[str, Any]) -> int:
        """Remove every vector whose metadata matches ``filter``; how many were removed."""
        where, params = _where(parse_filter(filter))
        pool = await self._connections()
        async with pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("DELETE FROM {} WHERE {}").format(self._ident, where), params
            )
            return int(cur.rowcount)

    # ------------------------------------------------------------------ reads
    async def count(self, filter: Mapping[str, Any] | None = None) -> int:
        """How many vectors are stored (matching ``filter`` when given)."""
        where, params = _where(parse_filter(filter))
        pool = await self._connections()
        async with pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE {}").format(self._ident, where), params
            )
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    async def query(
        self,
        embedding: Sequence[float],
        top_k: int,
        filter: Mapping[str, Any] | None = None,
        *,
        ef_search: int | None = None,
    ) -> list[ScoredDocument]:
        """The ``top_k`` nearest documents, closest first, matching ``filter`` when given.

        Args:
            embedding: The query vector.
            top_k: How many documents at most.
            filter: Metadata conditions (:mod:`daimon.kit.filters`).
            ef_search: ``hnsw.ef_search`` for this query only, instead of the store's.

        Raises:
            VectorStoreError: ``ef_search`` is outside pgvector's range (1 to 1,000).
        """
        vector = check_vector(embedding, self._dimension, "query vector")
        check_top_k(top_k)
        if ef_search is not None and not _ef_search_ok(ef_search):
            raise VectorStoreError(
                f"ef_search must be an integer from 1 to {_EF_SEARCH_MAX}, got {ef_search!r}"
            )
        where, params = _where(parse_filter(filter))
        distance = sql.SQL("embedding {} %b").format(self._operator)
        statement = sql.SQL(
            "SELECT id, content, metadata, {score} FROM {table} WHERE {where} "
            "ORDER BY {distance} LIMIT %s"
        ).format(
            score=sql.SQL(self._score.format(d="{}")).format(distance),
            table=self._ident,
            where=where,
            distance=distance,
        )
        query = self._float32("the query vector", vector)
        pool = await self._connections()
        async with pool.connection() as conn:
            if ef_search is None:
                cur = await conn.execute(statement, [query, *params, query, top_k])
                rows = await cur.fetchall()
            else:
                async with conn.transaction():  # SET LOCAL ends with it
                    await conn.execute(
                        sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef_search))
                    )
                    cur = await conn.execute(statement, [query, *params, query, top_k])
                    rows = await cur.fetchall()
        return [
            ScoredDocument(
                document=Document(content=content, id=key, metadata=metadata),
                score=float(score),
            )
            for key, content, metadata, score in rows
        ]

    # ------------------------------------------------------------------ internals
    def _matrix(self, ids: Sequence[str], embeddings: Sequence[Sequence[float]]) -> Any:
        """The batch as one float64 ``(rows, dimension)`` array of finite values.

        Checked as a whole (fast for large batches); when that fails, row by row, so the error
        names the first bad vector as :func:`~daimon.kit.vectors.check_vector` words it.
        """
        try:
            matrix = np.asarray(embeddings, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            matrix = None
        if matrix is not None and matrix.shape == (len(ids), self._dimension):
            finite = np.isfinite(matrix).all(axis=1)
            if finite.all():
                return matrix
            bad = int(np.flatnonzero(~finite)[0])
            check_vector(embeddings[bad], self._dimension, f"vector {ids[bad]!r}")
        for key, embedding in zip(ids, embeddings, strict=True):
            check_vector(embedding, self._dimension, f"vector {key!r}")
        raise VectorStoreError(  # pragma: no cover - every row passed alone but not together
            f"embeddings must be {len(ids)} sequences of {self._dimension} numbers"
        )

    def _float32_rows(self, ids: Sequence[str], matrix: Any) -> Any:
        """:meth:`_float32` for a checked batch: its rows as pgvector stores them."""
        with np.errstate(over="ignore"):  # an overflow becomes inf, refused just below
            rows = matrix.astype(np.float32)
        usable = np.isfinite(rows).all(axis=1)
        if self._metric == "cosine":
            usable &= rows.any(axis=1)
        if not usable.all():
            bad = int(np.flatnonzero(~usable)[0])
            self._float32(f"vector {ids[bad]!r}", rows[bad].tolist())  # raises, naming the row
        return rows

    def _float32(self, what: str, vector: list[float]) -> Any:
        """The vector as pgvector stores it (float32), refused if pgvector could not use it."""
        with np.errstate(over="ignore"):  # an overflow becomes inf, refused just below
            array = np.asarray(vector, dtype=np.float32)
        if not np.isfinite(array).all():
            raise VectorStoreError(f"{what}: a value is too large for float32 (pgvector's type)")
        if self._metric == "cosine" and not array.any():
            # pgvector's cosine index leaves zero vectors out: stored, they could never be found
            raise VectorStoreError(f"{what} is all zeros: it has no direction for cosine")
        return array

    def _check_open(self) -> None:
        if self._closed:
            raise VectorStoreError(f"PgVectorStore({self._table!r}) is closed")

    async def _check_table(self, conn: Any) -> bool:
        """Whether the table exists; raises when it exists in a shape this store cannot use."""
        cur = await conn.execute(
            "SELECT a.atttypmod, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(%s) AND a.attname = 'embedding' "
            "AND NOT a.attisdropped",
            (self._ident.as_string(conn),),
        )
        row = await cur.fetchone()
        if row is None:
            cur = await conn.execute("SELECT to_regclass(%s)", (self._ident.as_string(conn),))
            found = await cur.fetchone()
            if found is not None and found[0] is not None:
                raise VectorStoreError(
                    f"table {self._table!r} exists but has no 'embedding' column: it is not a "
                    "PgVectorStore table"
                )
            return False
        dimension, type_name = row
        if not str(type_name).startswith("vector("):
            raise VectorStoreError(
                f"table {self._table!r}: column 'embedding' is {type_name}, not a pgvector vector"
            )
        if dimension != self._dimension:
            raise DimensionMismatchError(
                int(dimension), self._dimension, f"a store on table {self._table!r}"
            )
        cur = await conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = COALESCE(%s, current_schema()) "
            "AND tablename = %s AND indexdef LIKE '%%USING hnsw%%'",
            (self._schema, self._table),
        )
        for (definition,) in await cur.fetchall():
            if self._opclass not in definition:
                others = [m for m, (_, opclass, _) in _METRICS.items() if opclass in definition]
                raise VectorStoreError(
                    f"table {self._table!r} has an HNSW index for the "
                    f"{' / '.join(map(repr, others)) or 'another'} metric, but this store was "
                    f"asked for {self._metric!r}"
                )
        return True

    async def _connections(self) -> Any:
        """The pool, opened (and the table checked) on first use."""
        if self._pool is not None:
            return self._pool
        async with self._lock:
            self._check_open()
            if self._pool is None:
                if not self._ready:
                    async with await psycopg.AsyncConnection.connect(
                        self._url, autocommit=True
                    ) as conn:
                        if not await self._check_table(conn):
                            raise VectorStoreError(
                                f"table {self._table!r} does not exist: call setup() first"
                            )
                    self._ready = True
                pool = psycopg_pool.AsyncConnectionPool(
                    self._url,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    kwargs={"autocommit": True},
                    configure=self._configure,
                    open=False,
                )
                await pool.open(wait=True)
                self._pool = pool
        return self._pool

    async def _configure(self, conn: Any) -> None:
        await pgvector_psycopg.register_vector_async(conn)
        await conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(self._ef_search)))
        await conn.execute("SET hnsw.iterative_scan = strict_order")


def _where(conditions: tuple[Condition, ...]) -> tuple[Any, list[Any]]:
    """A SQL condition over ``metadata`` and its parameters; ``TRUE`` for no conditions.

    The semantics are :mod:`daimon.kit.filters`': ``jsonb`` equality keeps types apart (a bool
    never equals a number, a number never a string; ``1 = 1.0``), and ranges hold for numbers
    only.
    """
    Jsonb = psycopg_json.Jsonb
    parts: list[Any] = []
    params: list[Any] = []
    for condition in conditions:
        field = condition.field
        if condition.op == "eq":
            parts.append(sql.SQL("metadata -> %s::text = %s::jsonb"))
            params += [field, Jsonb(condition.value)]
        elif condition.op == "in":
            parts.append(
                sql.SQL("metadata -> %s::text IN (SELECT jsonb_array_elements(%s::jsonb))")
            )
            params += [field, Jsonb(list(condition.value))]  # type: ignore[arg-type]
        else:
            parts.append(
                sql.SQL(
                    "(jsonb_typeof(metadata -> %s::text) = 'number' "
                    "AND metadata -> %s::text {} %s::jsonb)"
                ).format(sql.SQL(_RANGE_SQL[condition.op]))
            )
            params += [field, field, Jsonb(condition.value)]
    if not parts:
        return sql.SQL("TRUE"), []
    return sql.SQL(" AND ").join(parts), params
