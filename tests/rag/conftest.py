"""Shared pieces of the RAG tests: a small deterministic embedder and the stores to run over."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from daimon.core import VectorStore
from daimon.rag.stores.memory import InMemoryVectorStore
from daimon.rag.stores.qdrant import QdrantVectorStore


class HashingEmbedder:
    """Bag of words hashed into ``dimensions`` buckets, unit length: same words, near vectors.

    Deterministic and instant, for tests of the knowledge base's own logic; the semantic tests
    use the real MiniLM model.
    """

    model_name = "hashing-test"

    def __init__(self, dimensions: int = 64) -> None:
        self.dimensions = dimensions
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        vectors = []
        for text in texts:
            vector = [0.0] * self.dimensions
            for word in re.findall(r"\w+", text.lower()):
                bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big")
                vector[bucket % self.dimensions] += 1.0
            norm = math.sqrt(sum(v * v for v in vector)) or 1.0
            vectors.append([v / norm for v in vector])
        return vectors


@pytest.fixture(params=["memory", "qdrant"])
async def open_store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """Opens a set-up store of a dimension: in memory, or Qdrant local mode."""
    opened: list[VectorStore] = []

    async def make(dimension: int) -> VectorStore:
        store: VectorStore
        if request.param == "memory":
            store = InMemoryVectorStore(dimension)
        else:
            store = QdrantVectorStore("kb", dimension, location=":memory:")
        await store.setup()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.aclose()
