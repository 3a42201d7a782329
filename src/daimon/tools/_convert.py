"""Turning validated JSON arguments back into the Python types a tool function declares.

A converter is built once per parameter at decoration time; parameters whose JSON value is
already the right Python value (``str``, ``int``, ``list[str]``, ...) get none, so calling them
costs nothing extra.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Literal, get_args, get_origin

from daimon.tools._hints import (
    ARRAYS,
    MAPPINGS,
    SETS,
    UnsupportedTypeError,
    is_dataclass_type,
    is_pydantic_model,
    is_union,
    resolve_hints,
    split_annotated,
    string_format,
)

__all__ = ("Converter", "ConverterBuilder")

Converter = Callable[[Any], Any]


class ConverterBuilder:
    """Builds converters for the hints of one tool; ``None`` means "use the value as is"."""

    __slots__ = ("_built", "_localns", "_pending")

    def __init__(self, localns: Mapping[str, Any] | None = None) -> None:
        self._built: dict[type[Any], Converter | None] = {}
        self._pending: set[type[Any]] = set()
        self._localns = localns

    def converter(self, hint: Any) -> Converter | None:
        """The converter for values of ``hint``, or ``None`` when none is needed."""
        tp, _ = split_annotated(hint)
        string = string_format(tp)
        if string is not None:  # UUID("..."), datetime.fromisoformat("..."), ...
            return tp if string == "uuid" else tp.fromisoformat  # type: ignore[no-any-return]
        if isinstance(tp, type):
            return self._class(tp)
        return self._generic(tp)

    def _class(self, tp: type[Any]) -> Converter | None:
        """The converter for a bare class (an enum, a model, a container), or ``None``."""
        if issubclass(tp, Enum):
            return tp
        if is_pydantic_model(tp):
            validate: Converter = getattr(tp, "model_validate")  # noqa: B009 - untyped here
            return validate
        if is_dataclass_type(tp) or typing.is_typeddict(tp):
            return self._named(tp)
        if tp is tuple:
            return tuple
        if tp in SETS:
            return frozenset if tp is frozenset else set
        return None

    def _generic(self, tp: Any) -> Converter | None:
        """The converter for a parameterised form (a union, a container of items), or ``None``."""
        origin, args = get_origin(tp), get_args(tp)
        if origin is None or origin is Literal or (origin in MAPPINGS and not args):
            return None
        if is_union(tp):
            members = [self.converter(a) for a in args if a is not type(None)]
            return _union([c for c in members if c is not None], plain=None in members)
        if origin is tuple:
            return self._tuple(args)
        if origin in ARRAYS or origin in SETS:
            return self._collection(origin, args)
        if origin in MAPPINGS:
            values = self.converter(args[1])
            if values is None:
                return None
            return lambda value: {k: values(v) for k, v in value.items()}
        return None

    def _collection(self, origin: Any, args: tuple[Any, ...]) -> Converter | None:
        item = self.converter(args[0]) if args else None
        container: Any = list if origin in ARRAYS else set
        if origin is frozenset:
            container = frozenset
        if item is None:
            return None if container is list else container
        return lambda value: container(item(v) for v in value)

    def _tuple(self, args: tuple[Any, ...]) -> Converter:
        if len(args) == 2 and args[1] is Ellipsis:
            item = self.converter(args[0])
            if item is None:
                return tuple
            return lambda value: tuple(item(v) for v in value)
        items = [self.converter(a) for a in args if a != ()]
        if not any(items):
            return tuple
        return lambda value: tuple(
            v if c is None else c(v) for c, v in zip(items, value, strict=True)
        )

    def _named(self, tp: type[Any]) -> Converter | None:
        built = self._built
        if tp in self._pending:  # a recursive type: its converter is looked up when first used
            return lambda value: (built[tp] or _identity)(value)
        if tp in built:
            return built[tp]
        self._pending.add(tp)
        try:
            hints = resolve_hints(tp, self._localns)
        except NameError as exc:
            raise UnsupportedTypeError(
                tp, f"has an annotation that cannot be resolved ({exc})"
            ) from None
        fields = {
            name: converter
            for name, hint in hints.items()
            if (converter := self.converter(hint)) is not None
        }
        converter = _dataclass(tp, fields) if is_dataclass_type(tp) else _typeddict(tp, fields)
        built[tp] = converter
        self._pending.discard(tp)
        return converter


def _identity(value: Any) -> Any:
    return value


def _union(members: list[Converter], *, plain: bool) -> Converter | None:
    """Try each member's converter; ``plain``: some member takes the JSON value as is."""
    if not members:
        return None

    def convert(value: Any) -> Any:
        if value is None:
            return None
        error: Exception | None = None
        for member in members:
            try:
                return member(value)
            except (TypeError, ValueError, KeyError) as exc:
                error = error or exc
        if plain or error is None:
            return value
        raise error

    return convert


def _dataclass(tp: type[Any], fields: dict[str, Converter]) -> Converter:
    init = {f.name for f in dataclasses.fields(tp) if f.init}
    fields = {name: c for name, c in fields.items() if name in init}

    def convert(value: Any) -> Any:
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(value).__name__}")
        kwargs = dict(value)
        for name, field_converter in fields.items():
            if name in kwargs:
                kwargs[name] = field_converter(kwargs[name])
        return tp(**kwargs)

    return convert


def _typeddict(tp: type[Any], fields: dict[str, Converter]) -> Converter | None:
    if not fields:
        return None

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(value).__name__}")
        converted = dict(value)
        for name, field_converter in fields.items():
            if name in converted:
                converted[name] = field_converter(converted[name])
        return converted

    return convert
