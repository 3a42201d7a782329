"""The metadata filter language every vector store understands, parsed once.

A filter is a mapping from metadata field to condition; every condition must hold::

    {"lang": "en"}                             equality (str, int, float or bool)
    {"lang": {"$eq": "en"}}                    the same, spelled out
    {"tag": {"$in": ["a", "b"]}}               one of these values (at least one)
    {"year": {"$gte": 2020, "$lt": 2024}}      numeric ranges: $gt, $gte, $lt, $lte
    {"lang": "en", "year": {"$gt": 2020}}      several fields: all must hold

Field names are identifiers (``[A-Za-z_][A-Za-z0-9_]*``): top-level metadata keys, no paths.
A document that lacks the field never matches. Booleans equal booleans only; numbers compare
numerically (``1 == 1.0``) and never equal strings or booleans; ranges hold for numbers only.
``None`` or ``{}`` matches everything. Anything else (another operator, a ``None``, list or
mapping value, a non-numeric bound) is a :class:`~daimon.core.errors.FilterError`.

Stores call :func:`parse_filter` and translate its :class:`Condition` tuple into their own query
language; :func:`matches` evaluates it in Python (for stores that filter in process).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from daimon.core.errors import FilterError

__all__ = ("Condition", "FilterOp", "Scalar", "matches", "parse_filter")

Scalar = str | int | float | bool
"""A value a filter can compare with."""

FilterOp = Literal["eq", "in", "gt", "gte", "lt", "lte"]
"""A condition's operator (the filter's ``$name`` without the dollar)."""

_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = ("$eq", "$in", "$gt", "$gte", "$lt", "$lte")
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


@dataclass(frozen=True, slots=True)
class Condition:
    """One parsed condition on one metadata field."""

    field: str
    """The metadata key."""
    op: FilterOp
    """How the field is compared."""
    value: Scalar | tuple[Scalar, ...]
    """The operand: a scalar, a non-empty tuple of them for ``in``, a number for ranges."""


def _scalar(field: str, op: str, value: Any) -> Scalar:
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FilterError(f"filter on {field!r}: {op} needs a finite number, got {value!r}")
        return value
    raise FilterError(
        f"filter on {field!r}: {op} compares with a str, int, float or bool, "
        f"not {type(value).__name__} ({value!r})"
    )


def _number(field: str, op: str, value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FilterError(
            f"filter on {field!r}: {op} needs a number, got {type(value).__name__} ({value!r})"
        )
    if not math.isfinite(value):
        raise FilterError(f"filter on {field!r}: {op} needs a finite number, got {value!r}")
    return value


def _conditions(field: str, spec: Any) -> list[Condition]:
    if not isinstance(spec, Mapping):
        return [Condition(field, "eq", _scalar(field, "equality", spec))]
    if not spec:
        raise FilterError(f"filter on {field!r} is an empty mapping; give an operator")
    found: list[Condition] = []
    for key, operand in spec.items():
        if key not in _OPERATORS:
            raise FilterError(
                f"filter on {field!r}: unknown operator {key!r}; use one of "
                + ", ".join(_OPERATORS)
            )
        op: FilterOp = key[1:]
        if op == "eq":
            found.append(Condition(field, "eq", _scalar(field, key, operand)))
        elif op == "in":
            if isinstance(operand, str | bytes | Mapping) or not hasattr(operand, "__iter__"):
                raise FilterError(f"filter on {field!r}: $in needs a list, got {operand!r}")
            values = tuple(_scalar(field, key, v) for v in operand)
            if not values:
                raise FilterError(f"filter on {field!r}: $in needs at least one value")
            found.append(Condition(field, "in", values))
        else:
            found.append(Condition(field, op, _number(field, key, operand)))
    return found


def parse_filter(filter: Mapping[str, Any] | None) -> tuple[Condition, ...]:
    """Check a filter and flatten it into conditions that must all hold.

    Raises:
        FilterError: The filter is outside the language; the message names the field and why.
    """
    if filter is None:
        return ()
    if not isinstance(filter, Mapping):
        raise FilterError(f"a filter is a mapping of field to condition, got {filter!r}")
    conditions: list[Condition] = []
    for field, spec in filter.items():
        if not isinstance(field, str) or not _FIELD.fullmatch(field):
            raise FilterError(
                f"filter field {field!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*)"
            )
        conditions.extend(_conditions(field, spec))
    return tuple(conditions)


def _equal(stored: Any, wanted: Scalar) -> bool:
    if isinstance(wanted, bool) or isinstance(stored, bool):
        return type(stored) is bool and type(wanted) is bool and stored is wanted
    if isinstance(wanted, str):
        return isinstance(stored, str) and stored == wanted
    return isinstance(stored, int | float) and stored == wanted


def _holds(condition: Condition, metadata: Mapping[str, Any]) -> bool:
    if condition.field not in metadata:
        return False
    stored, value = metadata[condition.field], condition.value
    if isinstance(value, tuple):
        return any(_equal(stored, v) for v in value)
    if condition.op == "eq":
        return _equal(stored, value)
    if isinstance(stored, bool) or not isinstance(stored, int | float):
        return False
    if isinstance(value, str | bool):  # parse_filter never makes such a range
        return False
    return _COMPARE[condition.op](stored, value)


def matches(conditions: tuple[Condition, ...], metadata: Mapping[str, Any]) -> bool:
    """Whether metadata satisfies every condition."""
    return all(_holds(c, metadata) for c in conditions)
