from __future__ import annotations

from typing import Any

import pytest

from daimon.core import FilterError
from daimon.kit.filters import Condition, matches, parse_filter


def test_parse_flattens_every_form() -> None:
    assert parse_filter(None) == ()
    assert parse_filter({}) == ()
    assert parse_filter(
        {"a": "x", "b": {"$eq": 2}, "c": {"$in": [1, "y", True]}, "d": {"$gte": 1, "$lt": 2.5}}
    ) == (
        Condition("a", "eq", "x"),
        Condition("b", "eq", 2),
        Condition("c", "in", (1, "y", True)),
        Condition("d", "gte", 1),
        Condition("d", "lt", 2.5),
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"a": {"$regex": "x"}}, "unknown operator '\\$regex'"),
        ({"a": None}, "not NoneType"),
        ({"a": [1]}, "not list"),
        ({"a": {"$in": []}}, "at least one"),
        ({"a": {"$in": "ab"}}, "needs a list"),
        ({"a": {"$in": [None]}}, "not NoneType"),
        ({"a": {"$gt": "1"}}, "needs a number"),
        ({"a": {"$lt": False}}, "needs a number"),
        ({"a": {"$lt": float("inf")}}, "finite"),
        ({"a": {}}, "empty mapping"),
        ({"a.b": 1}, "not an identifier"),
        ({"": 1}, "not an identifier"),
        ({1: 1}, "not an identifier"),
        ("a=1", "mapping of field"),
    ],
)
def test_bad_filters_name_the_problem(bad: Any, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        parse_filter(bad)
    assert issubclass(FilterError, ValueError)


@pytest.mark.parametrize(
    ("filter", "metadata", "expected"),
    [
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1}, {"a": True}, False),
        ({"a": True}, {"a": 1}, False),
        ({"a": "1"}, {"a": 1}, False),
        ({"a": 1}, {"a": "1"}, False),
        ({"a": {"$gt": 1}}, {"a": "5"}, False),
        ({"a": {"$gt": 0}}, {"a": True}, False),
        ({"a": {"$gte": 1, "$lte": 1}}, {"a": 1}, True),
        ({"a": {"$in": [2, "x"]}}, {"a": "x"}, True),
        ({"a": 1}, {}, False),
        ({"a": 1}, {"a": None}, False),
        ({"a": 1}, {"a": [1]}, False),
        ({}, {}, True),
    ],
)
def test_reference_semantics(filter: Any, metadata: dict[str, Any], expected: bool) -> None:
    assert matches(parse_filter(filter), metadata) is expected
