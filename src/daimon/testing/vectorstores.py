"""A conformance suite for :class:`daimon.core.VectorStore` backends.

Subclass :class:`VectorStoreConformance` in a test module and provide a ``make_store`` fixture:
an async callable taking ``dimension`` and ``metric`` as keywords that returns a store already
``setup()``, on a location (table, collection, index) that is fresh for each test; every call in
one test opens a new handle on that same location. The fixture closes its handles at teardown::

    class TestInMemoryVectorStore(VectorStoreConformance):
        @pytest.fixture
        async def make_store(self):
            async def make(*, dimension, metric="cosine"):
                return InMemoryVectorStore(dimension, metric=metric)

            return make

The contract the suite checks, which every store follows:

* **Protocol**: ``dimension``, ``setup``, ``aclose`` (both idempotent), ``upsert``,
  ``upsert_many``, ``query``, ``delete``, ``delete_where``, ``count(filter=None)``.
* **Scores**, higher is closer: ``cosine`` similarity, ``dot`` product, ``l2`` the negated
  Euclidean distance (:mod:`daimon.kit.vectors`). Results come closest first.
* **Documents** come back with the id they were stored under (``Document.id`` as given is
  ignored), their content and their metadata (any JSON) equal.
* **Filters** use :mod:`daimon.kit.filters`: ``{"f": v}``, ``{"f": {"$eq": v}}``,
  ``{"f": {"$in": [...]}}``, ``{"f": {"$gt"|"$gte"|"$lt"|"$lte": n}}``; fields are AND-ed.
  Stores call :func:`~daimon.kit.filters.parse_filter` and translate its conditions.
* **Bad input writes nothing**: a vector of the wrong length is a ``DimensionMismatchError``
  (``expected``/``actual``), on writes and queries; NaN, duplicate ids in a batch, a bad
  ``top_k`` are ``VectorStoreError``; a filter outside the language is ``FilterError``;
  metadata that is not JSON is ``SerializationError``. :func:`daimon.kit.vectors.check_batch`
  and friends do these checks.
* **Stores that keep vectors outside the handle** (a server, a file) subclass
  :class:`PersistentVectorStoreConformance` instead: a second handle sees the first's vectors,
  and one opened with another dimension on the same location fails its ``setup()`` with
  ``DimensionMismatchError`` naming both lengths.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Mapping
from typing import Any, ClassVar, Protocol

import pytest

from daimon.core.documents import Document, ScoredDocument
from daimon.core.errors import (
    DimensionMismatchError,
    FilterError,
    SerializationError,
    VectorStoreError,
)
from daimon.core.protocols import VectorStore
from daimon.kit.vectors import METRICS, Metric

__all__ = (
    "FILTER_CASES",
    "PersistentVectorStoreConformance",
    "VectorStoreConformance",
    "VectorStoreFactory",
    "filter_documents",
    "unit_vectors",
)


class VectorStoreFactory(Protocol):
    """Opens a new, set-up handle on the test's store location."""

    def __call__(self, *, dimension: int, metric: Metric = "cosine") -> Awaitable[VectorStore]:
        """A handle holding vectors of ``dimension``, compared by ``metric``."""
        ...


def unit_vectors(count: int, dimension: int, seed: int = 0) -> list[list[float]]:
    """``count`` random vectors of unit length, the same for the same seed."""
    rng = random.Random(seed)
    vectors = []
    for _ in range(count):
        vector = [rng.gauss(0.0, 1.0) for _ in range(dimension)]
        norm = math.sqrt(sum(v * v for v in vector))
        vectors.append([v / norm for v in vector])
    return vectors


# Metadata of the documents the filter cases run over, by id.
_FILTER_DOCS: dict[str, dict[str, Any]] = {
    "a": {"lang": "en", "year": 2019, "score": 0.5, "draft": True, "tag": "x"},
    "b": {"lang": "en", "year": 2020, "score": 1.5, "draft": False, "tag": "y"},
    "c": {"lang": "de", "year": 2021, "score": 2.5, "draft": False},
    "d": {"lang": "fr", "year": 2022, "score": -1.0, "draft": True, "tag": "x"},
    "e": {"lang": "en", "year": "2023", "score": 3.0, "flag": 1},
    "f": {"other": "nothing else", "flag": True},
}

FILTER_CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({}, {"a", "b", "c", "d", "e", "f"}),
    ({"lang": "en"}, {"a", "b", "e"}),
    ({"lang": {"$eq": "de"}}, {"c"}),
    ({"year": 2020}, {"b"}),
    ({"draft": True}, {"a", "d"}),
    ({"draft": False}, {"b", "c"}),
    ({"flag": 1}, {"e"}),  # an int never equals a bool ...
    ({"flag": True}, {"f"}),  # ... nor a bool an int
    ({"score": 2.5}, {"c"}),
    ({"lang": {"$in": ["de", "fr"]}}, {"c", "d"}),
    ({"tag": {"$in": ["x"]}}, {"a", "d"}),
    ({"year": {"$in": [2019, 2022, 1999]}}, {"a", "d"}),
    ({"year": {"$gte": 2020}}, {"b", "c", "d"}),  # "2023" is a string: no range holds
    ({"year": {"$gt": 2020, "$lte": 2022}}, {"c", "d"}),
    ({"year": {"$lt": 2020.5}}, {"a", "b"}),
    ({"score": {"$gt": 0.5, "$lt": 3.0}}, {"b", "c"}),
    ({"score": {"$lte": 0}}, {"d"}),
    ({"lang": "en", "year": {"$gte": 2020}}, {"b"}),
    ({"lang": "en", "draft": True, "tag": "x"}, {"a"}),
    ({"missing": "anything"}, set()),
    ({"lang": "EN"}, set()),
]
"""``(filter, ids expected)`` pairs over the suite's filter documents."""

_BAD_FILTERS: list[Any] = [
    {"lang": {"$regex": "e.*"}},
    {"lang": {"$ne": "en"}},
    {"year": {"$gt": "2020"}},
    {"year": {"$gte": True}},
    {"lang": None},
    {"lang": ["en", "de"]},
    {"lang": {"$in": "en"}},
    {"lang": {"$in": []}},
    {"lang": {}},
    {"lang": {"nested": "x"}},
    {"meta.lang": "en"},
    {"lang; DROP TABLE x": "en"},
    {"score": float("nan")},
    ["lang", "en"],
]


def _doc(content: str, **metadata: Any) -> Document:
    return Document(content=content, metadata=metadata)


def _ids(found: list[ScoredDocument]) -> list[str]:
    return [scored.document.id for scored in found]


class VectorStoreConformance:
    """Tests every :class:`~daimon.core.VectorStore` backend must pass."""

    score_tolerance: ClassVar[float] = 1e-3
    """How far a reported score may be from the exact one (float32 storage, conversions)."""

    @pytest.fixture
    async def store(self, make_store: VectorStoreFactory) -> VectorStore:
        """A cosine store of dimension 4."""
        return await make_store(dimension=4)

    async def test_empty_store(self, store: VectorStore) -> None:
        """A new store counts no vectors and finds nothing."""
        assert store.dimension == 4
        assert await store.count() == 0
        assert await store.query([1.0, 0.0, 0.0, 0.0], top_k=5) == []

    async def test_document_round_trips(self, store: VectorStore) -> None:
        """Content and JSON metadata come back equal, under the id they were stored with."""
        metadata = {
            "source": "docs/ünïcödé 🧪.md",
            "page": 3,
            "ratio": 0.25,
            "ok": True,
            "none": None,
            "tags": ["a", "b"],
            "nested": {"deep": [1, {"x": "y"}]},
        }
        content = "Ünïcödé text, emoji 🧪, quotes \" ' and newlines\n\tindented."
        await store.upsert(
            "doc/1#chunk:0",
            [0.0, 1.0, 0.0, 0.0],
            Document(content=content, id="ignored", metadata=metadata),
        )
        [found] = await store.query([0.0, 1.0, 0.0, 0.0], top_k=3)
        assert found.document == Document(content=content, id="doc/1#chunk:0", metadata=metadata)
        assert found.score == pytest.approx(1.0, abs=self.score_tolerance)

    async def test_ids_that_look_alike_stay_apart(self, store: VectorStore) -> None:
        """Ids differing in case, punctuation or script are different vectors."""
        ids = [
            "d",
            "D",
            "d ",
            "d:1",
            "d/1",
            "é",
            "d" * 200,
            "1",
            "00000000-0000-0000-0000-000000000000",
        ]
        for n, key in enumerate(ids):
            await store.upsert(key, [1.0, float(n), 0.0, 0.0], _doc(f"text {n}"))
        assert await store.count() == len(ids)
        found = await store.query([1.0, 0.0, 0.0, 0.0], top_k=len(ids))
        assert sorted(_ids(found)) == sorted(ids)
        assert {s.document.id: s.document.content for s in found} == {
            key: f"text {n}" for n, key in enumerate(ids)
        }

    async def test_upsert_replaces(self, store: VectorStore) -> None:
        """Upserting an existing id replaces its vector and document."""
        await store.upsert("x", [1.0, 0.0, 0.0, 0.0], _doc("old", v=1))
        await store.upsert("y", [0.0, 0.0, 1.0, 0.0], _doc("other"))
        await store.upsert("x", [0.0, 1.0, 0.0, 0.0], _doc("new", v=2))
        assert await store.count() == 2
        [found] = await store.query([0.0, 1.0, 0.0, 0.0], top_k=1)
        assert found.document == Document(content="new", id="x", metadata={"v": 2})
        await store.upsert_many(["x", "z"], [[0.0, 0.0, 0.0, 1.0]] * 2, [_doc("newer"), _doc("z")])
        assert await store.count() == 3
        both = await store.query([0.0, 0.0, 0.0, 1.0], top_k=2)
        assert sorted(_ids(both)) == ["x", "z"]
        assert {s.document.content for s in both} == {"newer", "z"}

    @pytest.mark.parametrize("metric", METRICS)
    async def test_ordering_and_scores_per_metric(
        self, make_store: VectorStoreFactory, metric: Metric
    ) -> None:
        """Each metric orders and scores as documented (cosine, dot, negated L2)."""
        store = await make_store(dimension=4, metric=metric)
        vectors = {
            "same": [1.0, 0.0, 0.0, 0.0],
            "long": [10.0, 1.0, 0.0, 0.0],
            "half": [0.5, 0.5, 0.0, 0.0],
            "away": [-1.0, 0.0, 0.5, 0.0],
        }
        await store.upsert_many(list(vectors), list(vectors.values()), [_doc(k) for k in vectors])
        query = [1.0, 0.0, 0.0, 0.0]
        exact = {
            "cosine": {
                "same": 1.0,
                "long": 10 / math.sqrt(101),
                "half": math.sqrt(0.5),
                "away": -1 / math.sqrt(1.25),
            },
            "dot": {"same": 1.0, "long": 10.0, "half": 0.5, "away": -1.0},
            "l2": {
                "same": 0.0,
                "long": -math.sqrt(82),
                "half": -math.sqrt(0.5),
                "away": -math.sqrt(4.25),
            },
        }[metric]
        found = await store.query(query, top_k=4)
        assert _ids(found) == sorted(exact, key=lambda k: -exact[k])
        for scored in found:
            assert scored.score == pytest.approx(
                exact[scored.document.id], abs=self.score_tolerance
            )
        assert _ids(await store.query(query, top_k=2)) == _ids(found)[:2]

    async def test_top_k(self, store: VectorStore) -> None:
        """``top_k`` limits the results; a small store returns all it has."""
        vectors = unit_vectors(10, 4, seed=1)
        await store.upsert_many(
            [f"v{n}" for n in range(10)], vectors, [_doc(str(n)) for n in range(10)]
        )
        assert len(await store.query(vectors[0], top_k=3)) == 3
        assert len(await store.query(vectors[0], top_k=1)) == 1
        assert len(await store.query(vectors[0], top_k=50)) == 10
        [best] = await store.query(vectors[7], top_k=1)
        assert best.document.id == "v7"
        for bad in (0, -1, 2.5, "3", True):
            with pytest.raises(VectorStoreError, match="top_k"):
                await store.query(vectors[0], top_k=bad)  # type: ignore[arg-type]

    async def _filter_store(self, make_store: VectorStoreFactory) -> VectorStore:
        store = await make_store(dimension=4)
        ids = list(_FILTER_DOCS)
        vectors = [[1.0, 0.1 * n, 0.0, 0.0] for n in range(len(ids))]
        await store.upsert_many(ids, vectors, [_doc(key, **_FILTER_DOCS[key]) for key in ids])
        return store

    @pytest.mark.parametrize(("filter", "expected"), FILTER_CASES, ids=lambda v: repr(v)[:60])
    async def test_filters(
        self, make_store: VectorStoreFactory, filter: dict[str, Any], expected: set[str]
    ) -> None:
        """Each filter of the language selects exactly the documents it should."""
        store = await self._filter_store(make_store)
        found = await store.query([1.0, 0.0, 0.0, 0.0], top_k=10, filter=filter)
        assert set(_ids(found)) == expected
        assert await store.count(filter) == len(expected)
        scores = [s.score for s in found]
        assert scores == sorted(scores, reverse=True)

    async def test_filter_applies_before_top_k(self, make_store: VectorStoreFactory) -> None:
        """A filtered query finds the nearest matches even when others are nearer."""
        store = await make_store(dimension=4)
        ids = [f"n{n}" for n in range(60)]
        vectors = [[1.0, 0.01 * n, 0.0, 0.0] for n in range(60)]
        docs = [_doc(key, rare=(n >= 55)) for n, key in enumerate(ids)]
        await store.upsert_many(ids, vectors, docs)
        found = await store.query([1.0, 0.0, 0.0, 0.0], top_k=3, filter={"rare": True})
        assert _ids(found) == ["n55", "n56", "n57"]

    @pytest.mark.parametrize("bad", _BAD_FILTERS, ids=lambda v: repr(v)[:40])
    async def test_bad_filters_are_refused(self, store: VectorStore, bad: Any) -> None:
        """A filter outside the language is a ``FilterError``, on every method taking one."""
        await store.upsert("k", [1.0, 0.0, 0.0, 0.0], _doc("kept", lang="en"))
        with pytest.raises(FilterError):
            await store.query([1.0, 0.0, 0.0, 0.0], top_k=1, filter=bad)
        with pytest.raises(FilterError):
            await store.count(bad)
        with pytest.raises(FilterError):
            await store.delete_where(bad)
        assert await store.count() == 1

    async def test_wrong_dimension_writes_nothing(self, store: VectorStore) -> None:
        """A vector of the wrong length fails with both lengths named; nothing is written."""
        await store.upsert("kept", [1.0, 0.0, 0.0, 0.0], _doc("kept"))
        with pytest.raises(DimensionMismatchError) as caught:
            await store.upsert("x", [1.0, 0.0, 0.0], _doc("short"))
        assert (caught.value.expected, caught.value.actual) == (4, 3)
        assert "3" in str(caught.value) and "4" in str(caught.value)
        with pytest.raises(DimensionMismatchError) as caught:
            await store.upsert_many(
                ["a", "b", "c"],
                [[1.0, 0.0, 0.0, 0.0], [1.0] * 5, [0.0, 1.0, 0.0, 0.0]],
                [_doc("a"), _doc("b"), _doc("c")],
            )
        assert (caught.value.expected, caught.value.actual) == (4, 5)
        with pytest.raises(DimensionMismatchError):
            await store.query([1.0, 0.0], top_k=1)
        assert await store.count() == 1
        assert _ids(await store.query([1.0, 0.0, 0.0, 0.0], top_k=5)) == ["kept"]

    async def test_bad_batches_write_nothing(self, store: VectorStore) -> None:
        """NaN, duplicate ids, mismatched lengths or non-JSON metadata fail the whole batch."""
        one = [1.0, 0.0, 0.0, 0.0]
        with pytest.raises(VectorStoreError, match="NaN"):
            await store.upsert_many(
                ["a", "b"], [one, [float("nan"), 0, 0, 0]], [_doc("a"), _doc("b")]
            )
        with pytest.raises(VectorStoreError, match="NaN"):
            await store.upsert("i", [float("inf"), 0.0, 0.0, 0.0], _doc("i"))
        with pytest.raises(VectorStoreError, match="twice"):
            await store.upsert_many(["a", "a"], [one, one], [_doc("a"), _doc("a")])
        with pytest.raises(VectorStoreError, match="as many"):
            await store.upsert_many(["a", "b"], [one], [_doc("a"), _doc("b")])
        with pytest.raises(VectorStoreError):
            await store.upsert("", one, _doc("empty id"))
        with pytest.raises(SerializationError):
            await store.upsert_many(["a", "b"], [one, one], [_doc("a"), _doc("b", when=object())])
        with pytest.raises(SerializationError):
            await store.upsert("c", one, _doc("c", score=float("nan")))
        assert await store.count() == 0
        await store.upsert_many([], [], [])
        assert await store.count() == 0

    async def test_delete(self, store: VectorStore) -> None:
        """``delete`` removes one vector and says whether it existed."""
        await store.upsert_many(
            ["a", "b"], [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]], [_doc("a"), _doc("b")]
        )
        assert await store.delete("a") is True
        assert await store.delete("a") is False
        assert await store.delete("never") is False
        assert await store.count() == 1
        assert _ids(await store.query([1.0, 0.0, 0.0, 0.0], top_k=5)) == ["b"]
        await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("again"))
        assert await store.count() == 2

    async def test_delete_where(self, make_store: VectorStoreFactory) -> None:
        """``delete_where`` removes exactly the matching vectors and counts them."""
        store = await self._filter_store(make_store)
        assert await store.delete_where({"lang": "en", "year": {"$gte": 2020}}) == 1
        assert await store.delete_where({"missing": 1}) == 0
        assert await store.count() == 5
        assert await store.delete_where({"tag": {"$in": ["x", "y"]}}) == 2
        remaining = await store.query([1.0, 0.0, 0.0, 0.0], top_k=10)
        assert sorted(_ids(remaining)) == ["c", "e", "f"]

    async def test_large_batch(self, make_store: VectorStoreFactory) -> None:
        """A batch of 2,000 vectors is stored whole and every one can be found."""
        store = await make_store(dimension=16)
        vectors = unit_vectors(2000, 16, seed=2)
        ids = [f"chunk-{n}" for n in range(2000)]
        await store.upsert_many(ids, vectors, [_doc(f"text {n}", n=n) for n in range(2000)])
        assert await store.count() == 2000
        assert await store.count({"n": {"$lt": 100}}) == 100
        for n in (0, 999, 1999):
            [best] = await store.query(vectors[n], top_k=1)
            assert best.document == Document(content=f"text {n}", id=ids[n], metadata={"n": n})

    async def test_concurrent_writes_all_land(self, store: VectorStore) -> None:
        """Upserts issued concurrently are all stored."""
        vectors = unit_vectors(40, 4, seed=3)
        await asyncio.gather(
            *(store.upsert(f"c{n}", v, _doc(str(n))) for n, v in enumerate(vectors))
        )
        assert await store.count() == 40

    async def test_setup_and_aclose_are_idempotent(self, store: VectorStore) -> None:
        """``setup`` again keeps the data; ``aclose`` twice is fine."""
        await store.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
        await store.setup()
        assert await store.count() == 1
        await store.aclose()
        await store.aclose()


class PersistentVectorStoreConformance(VectorStoreConformance):
    """The suite plus what stores that keep vectors outside the handle must pass."""

    async def test_a_new_handle_sees_the_vectors(self, make_store: VectorStoreFactory) -> None:
        """A second handle on the location reads what the first wrote."""
        first = await make_store(dimension=4)
        await first.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a", k="v"))
        second = await make_store(dimension=4)
        [found] = await second.query([1.0, 0.0, 0.0, 0.0], top_k=1)
        assert found.document == Document(content="a", id="a", metadata={"k": "v"})

    async def test_another_dimension_on_the_same_location(
        self, make_store: VectorStoreFactory
    ) -> None:
        """Opening a location that holds vectors of another length fails, naming both."""
        first = await make_store(dimension=4)
        await first.upsert("a", [1.0, 0.0, 0.0, 0.0], _doc("a"))
        with pytest.raises(DimensionMismatchError) as caught:
            await make_store(dimension=8)
        assert (caught.value.expected, caught.value.actual) == (4, 8)
        assert await first.count() == 1


def filter_documents() -> Mapping[str, Mapping[str, Any]]:
    """The metadata, by id, that :data:`FILTER_CASES` run over."""
    return _FILTER_DOCS
