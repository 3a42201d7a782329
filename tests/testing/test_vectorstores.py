from __future__ import annotations

import daimon.testing
from daimon.kit.filters import matches, parse_filter
from daimon.testing.vectorstores import (
    FILTER_CASES,
    PersistentVectorStoreConformance,
    VectorStoreConformance,
    filter_documents,
    unit_vectors,
)


def test_the_kits_are_exported() -> None:
    assert daimon.testing.VectorStoreConformance is VectorStoreConformance
    assert daimon.testing.PersistentVectorStoreConformance is PersistentVectorStoreConformance
    assert issubclass(PersistentVectorStoreConformance, VectorStoreConformance)
    for suite in (VectorStoreConformance, PersistentVectorStoreConformance):
        assert not suite.__name__.startswith("Test")


def test_filter_expectations_follow_the_reference_semantics() -> None:
    for spec, expected in FILTER_CASES:
        conditions = parse_filter(spec)
        found = {key for key, meta in filter_documents().items() if matches(conditions, meta)}
        assert found == expected, spec


def test_unit_vectors_are_unit_and_repeatable() -> None:
    vectors = unit_vectors(5, 7, seed=3)
    assert vectors == unit_vectors(5, 7, seed=3)
    for vector in vectors:
        assert abs(sum(v * v for v in vector) - 1.0) < 1e-9
