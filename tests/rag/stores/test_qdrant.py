from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import AsyncQdrantClient, models

from daimon.core import BuilderError, DimensionMismatchError, Document, VectorStoreError
from daimon.kit.vectors import Metric
from daimon.rag.stores.qdrant import QdrantVectorStore, point_id
from daimon.testing.vectorstores import PersistentVectorStoreConformance


class TestQdrantLocalMemory(PersistentVectorStoreConformance):
    """Qdrant's local mode in memory: one client shared by the test's handles."""

    @pytest.fixture
    async def make_store(self) -> AsyncIterator[Any]:
        client = AsyncQdrantClient(location=":memory:")
        stores: list[QdrantVectorStore] = []

        async def make(*, dimension: int, metric: Metric = "cosine") -> QdrantVectorStore:
            store = QdrantVectorStore("conformance", dimension, metric=metric, client=client)
            stores.append(store)
            await store.setup()
            return store

        yield make
        for store in stores:
            await store.aclose()
        await client.close()


class TestQdrantLocalFolder(PersistentVectorStoreConformance):
    """Qdrant's local mode on disk, each handle opening its own client on the folder in turn."""

    @pytest.fixture
    async def make_store(self, tmp_path: Path) -> AsyncIterator[Any]:
        stores: list[QdrantVectorStore] = []

        async def make(*, dimension: int, metric: Metric = "cosine") -> QdrantVectorStore:
            for store in stores:  # local mode locks its folder: one open client at a time
                await store.aclose()
            store = QdrantVectorStore(
                "conformance", dimension, metric=metric, path=str(tmp_path / "qdrant")
            )
            stores.append(store)
            await store.setup()
            return store

        yield make
        for store in stores:
            await store.aclose()

    async def test_a_new_handle_sees_the_vectors(self, make_store: Any) -> None:
        """A store reopened on the folder reads what an earlier one wrote."""
        first = await make_store(dimension=4)
        await first.upsert("a", [1.0, 0.0, 0.0, 0.0], Document(content="a", metadata={"k": "v"}))
        second = await make_store(dimension=4)  # closes the first: the folder is locked
        [found] = await second.query([1.0, 0.0, 0.0, 0.0], top_k=1)
        assert found.document == Document(content="a", id="a", metadata={"k": "v"})

    async def test_another_dimension_on_the_same_location(self, make_store: Any) -> None:
        """Reopening the folder's collection with another dimension fails, naming both."""
        first = await make_store(dimension=4)
        await first.upsert("a", [1.0, 0.0, 0.0, 0.0], Document(content="a"))
        with pytest.raises(DimensionMismatchError) as caught:
            await make_store(dimension=8)
        assert (caught.value.expected, caught.value.actual) == (4, 8)
        assert await (await make_store(dimension=4)).count() == 1


async def test_another_metric_on_the_same_collection_is_refused() -> None:
    client = AsyncQdrantClient(location=":memory:")
    try:
        await QdrantVectorStore("c", 4, metric="dot", client=client).setup()
        with pytest.raises(VectorStoreError, match=r"measures Dot.*'cosine'"):
            await QdrantVectorStore("c", 4, metric="cosine", client=client).setup()
    finally:
        await client.close()


async def test_named_vectors_collection_is_refused() -> None:
    client = AsyncQdrantClient(location=":memory:")
    try:
        await client.create_collection(
            "named", vectors_config={"text": models.VectorParams(size=4, distance="Cosine")}
        )
        with pytest.raises(VectorStoreError, match="named vectors"):
            await QdrantVectorStore("named", 4, client=client).setup()
    finally:
        await client.close()


async def test_points_carry_uuid_ids_and_the_original_id() -> None:
    async with QdrantVectorStore("c", 2, location=":memory:") as store:
        await store.upsert("doc/1#0", [1.0, 0.0], Document(content="x"))
        client: Any = store._client
        [point] = await client.retrieve("c", ids=[point_id("doc/1#0")], with_payload=True)
        assert point.payload == {"id": "doc/1#0", "content": "x", "metadata": {}}


async def test_use_before_setup_is_a_clear_error() -> None:
    store = QdrantVectorStore("c", 2, location=":memory:")
    with pytest.raises(VectorStoreError, match="not set up"):
        await store.count()
    await store.aclose()


async def test_a_server_that_is_not_there_is_a_vector_store_error() -> None:
    store = QdrantVectorStore.from_url(
        "http://127.0.0.1:9", "c", 2, timeout=2, check_compatibility=False
    )
    with pytest.raises(VectorStoreError, match="setup of 'c' failed"):
        await store.setup()
    await store.aclose()


def test_bad_settings() -> None:
    with pytest.raises(BuilderError, match="either client"):
        QdrantVectorStore("c", 2, client=object(), location=":memory:")
    with pytest.raises(BuilderError, match="say where"):
        QdrantVectorStore("c", 2)
    with pytest.raises(BuilderError, match="collection"):
        QdrantVectorStore("", 2, location=":memory:")
    with pytest.raises(BuilderError, match="metric"):
        QdrantVectorStore("c", 2, metric="cos", location=":memory:")  # type: ignore[arg-type]
