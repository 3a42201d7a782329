"""OpenSearchVectorStore through the real opensearch-py client, over HTTP, against the fake.

No OpenSearch server can run here: ``opensearch_fake.py`` implements, from OpenSearch's REST API
reference, the endpoints the adapter uses. The adapter has not yet run against a live cluster.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import opensearchpy
import pytest

from daimon.core import Document
from daimon.core.errors import BuilderError, DimensionMismatchError, VectorStoreError
from daimon.kit.vectors import Metric
from daimon.rag.stores.opensearch import OpenSearchVectorStore
from daimon.testing.vectorstores import VectorStoreConformance, unit_vectors


def _sibling(name: str) -> Any:
    """Import a helper module beside this file (tests/ is not a package)."""
    qualified = f"_daimon_tests_rag_stores_{name}"
    if qualified not in sys.modules:
        path = Path(__file__).with_name(f"{name}.py")
        spec = importlib.util.spec_from_file_location(qualified, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


OpenSearchFake = _sibling("opensearch_fake").OpenSearchFake
iter_ndjson = _sibling("opensearch_fake").iter_ndjson


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with OpenSearchFake() as fake:
        yield fake


@pytest.fixture
def index_name() -> str:
    return f"daimon-test-{uuid.uuid4().hex[:12]}"


class TestOpenSearchVectorStore(VectorStoreConformance):
    score_tolerance = 2e-3  # scores travel as OpenSearch's float32 _score, then convert back

    @pytest.fixture
    async def make_store(self, server: Any, index_name: str) -> AsyncIterator[Any]:
        handles: list[OpenSearchVectorStore] = []

        async def make(*, dimension: int, metric: Metric = "cosine") -> OpenSearchVectorStore:
            store = OpenSearchVectorStore.from_url(
                server.url, dimension=dimension, index=index_name, metric=metric
            )
            handles.append(store)
            await store.setup()
            return store

        yield make
        for handle in handles:
            await handle.aclose()


@pytest.fixture
async def store(server: Any, index_name: str) -> AsyncIterator[OpenSearchVectorStore]:
    async with OpenSearchVectorStore(server.url, dimension=4, index=index_name) as handle:
        yield handle


def _doc(content: str, **metadata: Any) -> Document:
    return Document(content=content, metadata=metadata)


@pytest.mark.parametrize(
    ("metric", "space"), [("cosine", "cosinesimil"), ("dot", "innerproduct"), ("l2", "l2")]
)
async def test_setup_creates_a_knn_index(
    server: Any, index_name: str, metric: Metric, space: str
) -> None:
    async with OpenSearchVectorStore(
        server.url, dimension=3, index=index_name, metric=metric, engine="faiss", hnsw_m=8
    ):
        pass
    [create] = [c for c in server.calls if c.method == "PUT" and c.path == f"/{index_name}"]
    assert create.body["settings"]["index"]["knn"] is True
    client = opensearchpy.AsyncOpenSearch(hosts=[server.url])
    try:
        info = await client.indices.get(index=index_name)
    finally:
        await client.close()
    assert info[index_name]["settings"]["index"]["knn"] == "true"
    vector = server.mapping(index_name)["properties"]["embedding"]
    assert vector["type"] == "knn_vector" and vector["dimension"] == 3
    assert vector["method"] == {
        "name": "hnsw",
        "space_type": space,
        "engine": "faiss",
        "parameters": {"m": 8, "ef_construction": 128},
    }


async def test_filters_go_inside_the_knn_query(store: OpenSearchVectorStore, server: Any) -> None:
    await store.upsert_many(
        ["a", "b"],
        [[1.0, 0.0, 0.0, 0.0], [0.9, 0.1, 0.0, 0.0]],
        [_doc("a", lang="en", year=2020), _doc("b", lang="de", year=2021)],
    )
    found = await store.query(
        [1.0, 0.0, 0.0, 0.0], top_k=3, filter={"lang": {"$in": ["de", 1]}, "year": {"$gt": 2020}}
    )
    assert [s.document.id for s in found] == ["b"]
    search = server.calls[-1]
    assert search.path.endswith("/_search")
    knn = search.body["query"]["knn"]["embedding"]
    assert knn["k"] == 3 and search.body["size"] == 3
    assert knn["filter"] == {
        "bool": {
            "filter": [
                {
                    "bool": {
                        "should": [{"terms": {"f_n.lang": [1]}}, {"terms": {"f_s.lang": ["de"]}}],
                        "minimum_should_match": 1,
                    }
                },
                {"range": {"f_n.year": {"gt": 2020}}},
            ]
        }
    }


async def test_metadata_is_indexed_by_json_type(store: OpenSearchVectorStore, server: Any) -> None:
    metadata = {"lang": "en", "n": 3, "ok": True, "tags": ["x"], "a.b": 1, "nested": {"k": 1}}
    await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a", **metadata))
    [source] = server.documents(store.index).values()
    assert source["metadata"] == metadata  # verbatim
    assert (source["f_s"], source["f_n"], source["f_b"]) == ({"lang": "en"}, {"n": 3}, {"ok": True})
    props = server.mapping(store.index)["properties"]
    assert props["f_s"]["properties"]["lang"] == {"type": "keyword"}
    assert props["f_n"]["properties"]["n"] == {"type": "double"}
    assert props["f_b"]["properties"]["ok"] == {"type": "boolean"}


async def test_bulk_requests_are_batched(server: Any, index_name: str) -> None:
    async with OpenSearchVectorStore(
        server.url, dimension=4, index=index_name, batch_size=3
    ) as store:
        vectors = unit_vectors(7, 4)
        await store.upsert_many(
            [str(n) for n in range(7)], vectors, [_doc(str(n)) for n in range(7)]
        )
        assert await store.count() == 7
    bulks = [c for c in server.calls if c.path == "/_bulk" and index_name in c.body]
    assert [len(list(iter_ndjson(c.body))) // 2 for c in bulks] == [3, 3, 1]
    assert [c.params.get("refresh") for c in bulks] == ["false", "false", "wait_for"]


async def test_writes_wait_for_refresh_unless_asked_not_to(server: Any, index_name: str) -> None:
    async with OpenSearchVectorStore(
        server.url, dimension=4, index=index_name, refresh=False
    ) as store:
        await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
        assert await store.count() == 0  # like a cluster: not searchable before a refresh
        await store.refresh()
        assert await store.count() == 1


async def test_another_metric_is_refused(server: Any, index_name: str) -> None:
    async with OpenSearchVectorStore(server.url, dimension=4, index=index_name, metric="l2"):
        pass
    store = OpenSearchVectorStore(server.url, dimension=4, index=index_name, metric="dot")
    with pytest.raises(VectorStoreError, match=r"'l2'.*'dot'"):
        await store.setup()
    await store.aclose()


async def test_another_dimension_names_both(server: Any, index_name: str) -> None:
    async with OpenSearchVectorStore(server.url, dimension=4, index=index_name):
        pass
    store = OpenSearchVectorStore(server.url, dimension=384, index=index_name)
    with pytest.raises(DimensionMismatchError, match=f"{index_name}.*384.*4"):
        await store.count()  # checked on first use too, not only by setup()
    await store.aclose()


async def test_a_foreign_index_is_refused(server: Any, index_name: str) -> None:
    client = opensearchpy.AsyncOpenSearch(hosts=[server.url])
    await client.indices.create(
        index=index_name, body={"mappings": {"properties": {"t": {"type": "text"}}}}
    )
    store = OpenSearchVectorStore(client, dimension=4, index=index_name)
    with pytest.raises(VectorStoreError, match="no knn_vector field"):
        await store.setup()
    await store.aclose()
    await client.close()  # the store leaves a client it was given open


async def test_use_before_setup_is_a_clear_error(server: Any, index_name: str) -> None:
    store = OpenSearchVectorStore(server.url, dimension=4, index=index_name)
    with pytest.raises(VectorStoreError, match="does not exist: call setup"):
        await store.query([1.0, 0.0, 0.0, 0.0], top_k=1)
    with pytest.raises(VectorStoreError, match="call setup"):
        await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
    assert index_name not in server.indices()  # a write did not auto-create a plain index
    await store.setup()
    await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
    assert await store.count() == 1
    await store.aclose()
    with pytest.raises(VectorStoreError, match="closed"):
        await store.count()


async def test_server_errors_become_vector_store_errors(
    store: OpenSearchVectorStore, server: Any
) -> None:
    body = {
        "error": {
            "root_cause": [{"type": "cluster_block_exception", "reason": "index read-only"}],
            "type": "cluster_block_exception",
            "reason": "index [x] blocked by: [FORBIDDEN/8/index write (api)];",
        },
        "status": 403,
    }
    server.fail_next(403, body)
    with pytest.raises(
        VectorStoreError, match=r"403 cluster_block_exception.*blocked by"
    ) as caught:
        await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
    assert isinstance(caught.value.__cause__, opensearchpy.TransportError)


async def test_refused_bulk_items_are_named(store: OpenSearchVectorStore, server: Any) -> None:
    reply = {
        "took": 3,
        "errors": True,
        "items": [
            {"index": {"_index": store.index, "_id": "a", "status": 201, "result": "created"}},
            {
                "index": {
                    "_index": store.index,
                    "_id": "b",
                    "status": 400,
                    "error": {
                        "type": "illegal_argument_exception",
                        "reason": "Limit of total fields [1000] has been exceeded",
                    },
                }
            },
        ],
    }
    server.fail_next(200, reply)
    with pytest.raises(
        VectorStoreError, match=r"refused 1 .*'b'.*total fields.*others were written"
    ):
        await store.upsert_many(
            ["a", "b"], [[1.0, 0.0, 0.0, 0.0]] * 2, [_doc("a"), _doc("b", many=1)]
        )


async def test_an_unreachable_server_is_a_clear_error(index_name: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    store = OpenSearchVectorStore.from_url(
        url, dimension=4, index=index_name, max_retries=0, timeout=2
    )
    with pytest.raises(VectorStoreError, match="unreachable"):
        await store.setup()
    await store.aclose()


async def test_ids_longer_than_opensearch_allows_are_refused_whole(
    store: OpenSearchVectorStore,
) -> None:
    one = [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(VectorStoreError, match=r"513 bytes.*at most 512"):
        await store.upsert_many(["ok", "é" * 256 + "x"], [one, one], [_doc("a"), _doc("b")])
    assert await store.count() == 0
    await store.upsert("é" * 256, one, _doc("fits"))  # 512 bytes
    assert await store.count() == 1


async def test_values_beyond_float32_are_refused_whole(store: OpenSearchVectorStore) -> None:
    one = [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(VectorStoreError, match="too large for float32"):
        await store.upsert_many(["a", "b"], [one, [1e39, 0, 0, 0]], [_doc("a"), _doc("b")])
    with pytest.raises(VectorStoreError, match="too large for float32"):
        await store.query([-1e39, 0.0, 0.0, 0.0], top_k=1)
    assert await store.count() == 0


async def test_zero_vectors_are_refused_for_cosine(store: OpenSearchVectorStore) -> None:
    with pytest.raises(VectorStoreError, match="zeros"):
        await store.upsert("z", [0.0, 0.0, 0.0, 0.0], _doc("z"))
    with pytest.raises(VectorStoreError, match="zeros"):
        await store.query([0.0, 0.0, 0.0, 0.0], top_k=1)
    assert await store.count() == 0


def test_configuration_mistakes() -> None:
    url = "http://127.0.0.1:9"
    for bad in ("", "Upper", "_private", "a b", "a/b"):
        with pytest.raises(BuilderError, match="index name"):
            OpenSearchVectorStore(url, dimension=4, index=bad)
    with pytest.raises(BuilderError, match="engine"):
        OpenSearchVectorStore(url, dimension=4, engine="nmslib")  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match="refresh"):
        OpenSearchVectorStore(url, dimension=4, refresh="later")  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match="batch_size"):
        OpenSearchVectorStore(url, dimension=4, batch_size=0)


# ---------------------------------------------------------------------- the fake itself


async def test_fake_scores_follow_the_documented_formulas(server: Any, index_name: str) -> None:
    """The fake reproduces the l2 example of OpenSearch's efficient-filtering page."""
    client = opensearchpy.AsyncOpenSearch(hosts=[server.url])
    try:
        await client.indices.create(
            index=index_name,
            body={
                "settings": {"index": {"knn": True}},
                "mappings": {
                    "properties": {
                        "location": {
                            "type": "knn_vector",
                            "dimension": 2,
                            "method": {"name": "hnsw", "space_type": "l2", "engine": "lucene"},
                        }
                    }
                },
            },
        )
        hotels = [
            ([5.2, 4.4], "true", 5),
            ([4.9, 3.4], "true", 9),
            ([6.4, 3.4], "true", 9),
            ([3.3, 4.5], "true", 8),
            ([2.4, 4.0], "true", 8),
            ([5.2, 3.9], "false", 4),
        ]
        body: list[Any] = []
        for n, (location, parking, rating) in enumerate(hotels, start=1):
            body += [
                {"index": {"_index": index_name, "_id": str(n)}},
                {"location": location, "parking": parking, "rating": rating},
            ]
        await client.bulk(body=body, refresh=True)
        reply = await client.search(
            index=index_name,
            body={
                "size": 3,
                "query": {
                    "knn": {
                        "location": {
                            "vector": [5, 4],
                            "k": 3,
                            "filter": {
                                "bool": {
                                    "must": [
                                        {"range": {"rating": {"gte": 8, "lte": 10}}},
                                        {"term": {"parking": "true"}},
                                    ]
                                }
                            },
                        }
                    }
                },
            },
        )
        hits = [(h["_id"], round(h["_score"], 6)) for h in reply["hits"]["hits"]]
        # the documentation's answer: ids 3, 6, 5 with 0.72992706, 0.3012048, 0.24154587
        assert hits == [("2", 0.729927), ("3", 0.301205), ("4", 0.241546)]
        with pytest.raises(opensearchpy.NotFoundError) as caught:
            await client.search(index="missing-index", body={"query": {"match_all": {}}})
        assert caught.value.error == "index_not_found_exception"
        with pytest.raises(opensearchpy.RequestError) as bad:
            await client.indices.create(index=index_name, body={})
        assert bad.value.error == "resource_already_exists_exception"
        with pytest.raises(opensearchpy.RequestError) as dims:
            await client.search(
                index=index_name,
                body={"query": {"knn": {"location": {"vector": [1, 2, 3], "k": 1}}}},
            )
        assert "invalid dimension: 3" in json.dumps(dims.value.info)
    finally:
        await client.close()


@pytest.mark.parametrize("library", ["opensearchpy", "aiohttp"])
def test_a_missing_library_names_the_opensearch_extra(
    library: str, import_without: Callable[[str, str], tuple[str, str, str]]
) -> None:
    extra, _, message = import_without("daimon.rag.stores.opensearch", library)
    assert extra == "opensearch"
    assert 'pip install "daimon-agents[opensearch]"' in message
