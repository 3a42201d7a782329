from __future__ import annotations

import pytest

from daimon.core import (
    BuilderError,
    DimensionMismatchError,
    Document,
    SerializationError,
    VectorStoreError,
)
from daimon.kit.vectors import (
    check_batch,
    check_dimension,
    check_metric,
    check_top_k,
    check_vector,
)


def test_check_vector() -> None:
    assert check_vector((1, 2.5), 2) == [1.0, 2.5]
    with pytest.raises(DimensionMismatchError, match="has 3 dimensions, but the store holds 2"):
        check_vector([1, 2, 3], 2)
    with pytest.raises(VectorStoreError, match="NaN"):
        check_vector([1.0, float("nan")], 2)
    with pytest.raises(VectorStoreError, match="not a number"):
        check_vector([1.0, "x"], 2)  # type: ignore[list-item]
    with pytest.raises(VectorStoreError, match="sequence of numbers"):
        check_vector(3, 2)  # type: ignore[arg-type]


def test_check_batch() -> None:
    docs = [Document(content="a"), Document(content="b")]
    assert check_batch(["a", "b"], [[1], [2]], docs, 1) == [[1.0], [2.0]]
    with pytest.raises(VectorStoreError, match="twice"):
        check_batch(["a", "a"], [[1], [2]], docs, 1)
    with pytest.raises(DimensionMismatchError) as caught:
        check_batch(["a", "b"], [[1], [2, 3]], docs, 1)
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    with pytest.raises(SerializationError, match="metadata of vector 'b'"):
        check_batch(["a", "b"], [[1], [2]], [docs[0], Document(content="", metadata={"x": {1}})], 1)
    with pytest.raises(VectorStoreError, match="expected a Document"):
        check_batch(["a"], [[1]], ["text"], 1)  # type: ignore[list-item]


def test_settings() -> None:
    assert check_metric("dot") == "dot"
    with pytest.raises(BuilderError, match="cosine, dot, l2"):
        check_metric("ip")
    for bad in (0, -3, 1.0, True):
        with pytest.raises(BuilderError):
            check_dimension(bad)  # type: ignore[arg-type]
        with pytest.raises(VectorStoreError):
            check_top_k(bad)  # type: ignore[arg-type]
