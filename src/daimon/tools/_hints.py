"""Type-hint helpers shared by schema building and argument conversion."""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import functools
import inspect
import re
import sys
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, NotRequired, Required, Union, get_args, get_origin

from daimon.tools._context import RunContext

__all__ = (
    "ARRAYS",
    "MAPPINGS",
    "SETS",
    "UnsupportedTypeError",
    "is_dataclass_type",
    "is_pydantic_model",
    "is_run_context",
    "is_union",
    "resolve_hints",
    "split_annotated",
    "string_format",
    "type_name",
    "typeddict_key_required",
    "unwrap_alias",
)

ARRAYS: tuple[Any, ...] = (list, abc.Sequence, abc.MutableSequence, abc.Iterable, abc.Collection)
"""Hints (bare or as ``X[...]`` origins) that take a JSON array and give a list."""
SETS: tuple[Any, ...] = (set, frozenset, abc.Set, abc.MutableSet)
"""Hints that take a JSON array of unique items and give a set."""
MAPPINGS: tuple[Any, ...] = (dict, abc.Mapping, abc.MutableMapping)
"""Hints that take a JSON object and give a dict."""


class UnsupportedTypeError(Exception):
    """A type hint that cannot be described in JSON Schema (internal; becomes a BuilderError)."""

    def __init__(self, tp: object, reason: str = "is not supported") -> None:
        super().__init__(f"type {type_name(tp)} {reason}")
        self.tp = tp


def type_name(tp: object) -> str:
    """A short, readable name for a type hint."""
    if isinstance(tp, type) and not get_args(tp):
        return tp.__qualname__
    return repr(tp).replace("typing.", "")


def is_pydantic_model(tp: object) -> bool:
    """Whether ``tp`` is a pydantic model class, judged without importing pydantic."""
    if not isinstance(tp, type) or "pydantic" not in sys.modules:
        return False
    return callable(getattr(tp, "model_json_schema", None)) and callable(
        getattr(tp, "model_validate", None)
    )


def string_format(tp: object) -> str | None:
    """The JSON Schema string ``format`` of a datetime, date, time or UUID type, else ``None``.

    Judged without importing :mod:`datetime` or :mod:`uuid` (uuid alone costs about 2 ms, with
    the platform module it loads): a hint can name one of their types only once it is loaded.
    """
    dt = sys.modules.get("datetime")
    if dt is not None:
        if tp is dt.datetime:
            return "date-time"
        if tp is dt.date:
            return "date"
        if tp is dt.time:
            return "time"
    uuid = sys.modules.get("uuid")
    if uuid is not None and tp is uuid.UUID:
        return "uuid"
    return None


def is_dataclass_type(tp: object) -> bool:
    """Whether ``tp`` is a dataclass (the class, not an instance)."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def is_union(tp: object) -> bool:
    """Whether ``tp`` is ``Union[...]``, ``Optional[...]`` or ``X | Y``."""
    origin = get_origin(tp)
    return origin is Union or origin is types.UnionType


def is_run_context(tp: object) -> bool:
    """Whether ``tp`` is ``RunContext`` or ``RunContext[Deps]`` (possibly ``Annotated``)."""
    tp, _ = split_annotated(tp)
    return tp is RunContext or get_origin(tp) is RunContext


def unwrap_alias(tp: Any) -> Any:
    """Follow ``NewType`` and ``type X = ...`` aliases to the type they stand for."""
    while True:
        supertype = getattr(tp, "__supertype__", None)  # typing.NewType
        if supertype is not None:
            tp = supertype
            continue
        if type(tp).__name__ == "TypeAliasType":  # Python 3.12+ ``type X = ...``
            tp = tp.__value__
            continue
        return tp


def split_annotated(tp: Any) -> tuple[Any, str | None]:
    """Strip ``Annotated``, ``Required`` and ``NotRequired``; return the type and a description.

    The description is the last string in ``Annotated`` metadata, or the ``description`` of a
    metadata object that has one (e.g. a pydantic ``Field``).
    """
    description: str | None = None
    while True:
        tp = unwrap_alias(tp)
        origin = get_origin(tp)
        if origin is Annotated:
            for meta in tp.__metadata__:
                if isinstance(meta, str):
                    description = meta
                elif isinstance(getattr(meta, "description", None), str):
                    description = meta.description
            tp = tp.__origin__
        elif origin is Required or origin is NotRequired:
            tp = get_args(tp)[0]
        else:
            return tp, description


def resolve_hints(obj: Any, localns: Mapping[str, Any] | None) -> dict[str, Any]:
    """``typing.get_type_hints`` keeping ``Annotated``, retrying with the caller's locals.

    Raises:
        NameError: A string annotation names something that cannot be found.
    """
    target: Any = obj
    if not isinstance(obj, type | types.FunctionType | types.MethodType | types.ModuleType):
        # staticmethod/classmethod objects, functools.partial, or an object with __call__
        if isinstance(obj, functools.partial):
            target = obj.func
        else:
            target = getattr(obj, "__func__", None) or type(obj).__call__
    try:
        return typing.get_type_hints(target, include_extras=True)
    except NameError:
        if isinstance(target, type):
            if not localns:
                raise
            return typing.get_type_hints(target, localns=dict(localns), include_extras=True)
    return _resolve_one_by_one(target, dict(localns or {}))


_RUN_CONTEXT = re.compile(r"\s*(?:[\w.]+\.)?RunContext\b")


def _resolve_one_by_one(function: Any, localns: dict[str, Any]) -> dict[str, Any]:
    """Resolve a function's annotations separately, so the one that fails can be named.

    A ``RunContext[Deps]`` whose ``Deps`` is imported only under ``TYPE_CHECKING`` still counts
    as the run context: the parameter needs no schema.
    """
    globalns = getattr(inspect.unwrap(function), "__globals__", {})
    hints: dict[str, Any] = {}
    for name, raw in getattr(function, "__annotations__", {}).items():
        holder = types.SimpleNamespace(__annotations__={name: raw})
        try:
            hints.update(
                typing.get_type_hints(
                    holder, globalns=globalns, localns=localns, include_extras=True
                )
            )
        except NameError as exc:
            if isinstance(raw, str) and _RUN_CONTEXT.match(raw):
                hints[name] = RunContext
            elif name != "return":
                raise NameError(f"{exc} (in the annotation of {name!r})") from exc
    return hints


def typeddict_key_required(hint: Any, default: bool) -> bool:
    """Whether a TypedDict key is required, reading ``Required``/``NotRequired`` in its hint.

    ``default`` comes from ``__required_keys__``, which Python 3.11 gets wrong for string
    annotations (``from __future__ import annotations``), hence reading the hint itself.
    """
    while True:
        origin = get_origin(hint)
        if origin is Required:
            return True
        if origin is NotRequired:
            return False
        if origin is Annotated:
            hint = hint.__origin__
        else:
            return default
