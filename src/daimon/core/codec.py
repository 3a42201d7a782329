"""Versioned JSON for every type daimon persists or sends over a wire.

Decoding is driven by the target type: a payload can only ever become the dataclass the caller
asked for, never an arbitrary class. Unknown fields, wrong types and markers that other
serializers use to revive code (``__class__``, ``py/object``, pickle opcodes, ...) are rejected
with a :class:`SerializationError` that says where.

``dumps``/``loads`` wrap the data in an envelope ``{"daimon": 1, "data": ...}`` so formats can
evolve; ``to_data``/``from_data`` give the bare JSON value for embedding in larger documents.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from functools import cache
from typing import Any, TypeVar, cast

from daimon.core.errors import SerializationError

__all__ = ("CODEC_VERSION", "dumps", "from_data", "loads", "to_data")

CODEC_VERSION = 1
"""The envelope version :func:`dumps` writes and :func:`loads` accepts."""

T = TypeVar("T")
_Decoder = Callable[[Any, str], Any]

_REVIVING_MARKERS = frozenset(
    {"__class__", "__reduce__", "__reduce_ex__", "__module__", "__type__", "py/object",
     "py/reduce", "py/type", "py/function", "!!python", "$type", "__pickle__"}
)


def to_data(obj: Any) -> Any:
    """The JSON value for ``obj`` (a daimon dataclass, or plain JSON data)."""
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if isinstance(obj, Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        items = cast(Mapping[Any, Any], obj)
        out: dict[str, Any] = {}
        for key, value in items.items():
            if not isinstance(key, str):
                raise SerializationError(f"cannot encode a mapping key of type {type(key).__name__}")
            out[key] = to_data(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_data(v) for v in cast(Sequence[Any], obj)]
    if isinstance(obj, bytes):
        return base64.b64encode(obj).decode("ascii")
    raise SerializationError(f"cannot encode a value of type {type(obj).__name__} as JSON")


def from_data(cls: type[T], data: Any) -> T:
    """Build a ``cls`` from the JSON value ``data``; :class:`SerializationError` if it does not fit."""
    return cast(T, _decoder(cls)(data, "$"))


def dumps(obj: Any) -> str:
    """``obj`` as versioned JSON text."""
    try:
        return json.dumps(
            {"daimon": CODEC_VERSION, "data": to_data(obj)}, ensure_ascii=False, allow_nan=False
        )
    except ValueError as exc:
        if isinstance(exc, SerializationError):
            raise
        raise SerializationError(f"cannot encode as JSON: {exc}") from exc


def loads(text: str | bytes, cls: type[T]) -> T:
    """Read versioned JSON text written by :func:`dumps` back into a ``cls``."""
    try:
        envelope = json.loads(text)
    except ValueError as exc:
        raise SerializationError(f"not valid JSON: {exc}") from exc
    if not isinstance(envelope, dict) or "daimon" not in envelope or "data" not in envelope:
        raise SerializationError('not a daimon payload: expected {"daimon": <version>, "data": ...}')
    env = cast(dict[str, Any], envelope)
    version = env["daimon"]
    if version != CODEC_VERSION:
        raise SerializationError(
            f"unsupported payload version {version!r}; this daimon reads version {CODEC_VERSION}"
        )
    extra = set(env) - {"daimon", "data"}
    if extra:
        raise SerializationError(f"unexpected envelope field(s): {', '.join(sorted(extra))}")
    return from_data(cls, env["data"])


def _fail(path: str, message: str) -> SerializationError:
    return SerializationError(f"at {path}: {message}")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


@cache
def _decoder(tp: Any) -> _Decoder:  # noqa: C901 - one branch per supported type form
    if tp is Any or tp is object:
        return _decode_json_value
    if tp is type(None) or tp is None:
        return _decode_none
    if tp is str:
        return _decode_str
    if tp is bool:
        return _decode_bool
    if tp is int:
        return _decode_int
    if tp is float:
        return _decode_float
    if tp is bytes:
        return _decode_bytes
    if isinstance(tp, type) and issubclass(tp, Enum):
        return _enum_decoder(cast(type[Enum], tp))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _union_decoder(args)
    if origin is typing.Literal:
        return _literal_decoder(args)
    if origin in (tuple, Sequence, list):
        item = _decoder(args[0]) if args else _decode_json_value
        as_tuple = origin is not list
        return _sequence_decoder(item, as_tuple)
    if origin in (dict, Mapping):
        value = _decoder(args[1]) if len(args) == 2 else _decode_json_value
        return _mapping_decoder(value)
    raise SerializationError(f"the codec cannot decode type {tp!r}")


def _decode_none(value: Any, path: str) -> None:
    if value is not None:
        raise _fail(path, f"expected null, got {_type_name(value)}")


def _decode_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, f"expected a string, got {_type_name(value)}")
    return value


def _decode_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, f"expected a boolean, got {_type_name(value)}")
    return value


def _decode_int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"expected an integer, got {_type_name(value)}")
    return value


def _decode_float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, f"expected a number, got {_type_name(value)}")
    return float(value)


def _decode_bytes(value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise _fail(path, f"expected base64 text, got {_type_name(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise _fail(path, "invalid base64") from exc


def _decode_json_value(value: Any, path: str) -> Any:
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, list):
        return [_decode_json_value(v, f"{path}[{i}]") for i, v in enumerate(cast(list[Any], value))]
    if isinstance(value, dict):
        obj = cast(dict[str, Any], value)
        markers = _REVIVING_MARKERS.intersection(obj)
        if markers:
            raise _fail(path, f"refusing a code-reviving marker {sorted(markers)[0]!r}")
        return {k: _decode_json_value(v, f"{path}.{k}") for k, v in obj.items()}
    raise _fail(path, f"not a JSON value: {_type_name(value)}")


def _enum_decoder(enum: type[Enum]) -> _Decoder:
    def decode(value: Any, path: str) -> Enum:
        try:
            return enum(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in enum)
            raise _fail(path, f"{value!r} is not one of {allowed}") from None

    return decode


def _literal_decoder(allowed: tuple[Any, ...]) -> _Decoder:
    def decode(value: Any, path: str) -> Any:
        if value not in allowed:
            raise _fail(path, f"expected one of {list(allowed)!r}, got {value!r}")
        return value

    return decode


def _sequence_decoder(item: _Decoder, as_tuple: bool) -> _Decoder:
    def decode(value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise _fail(path, f"expected a list, got {_type_name(value)}")
        items = [item(v, f"{path}[{i}]") for i, v in enumerate(cast(list[Any], value))]
        return tuple(items) if as_tuple else items

    return decode


def _mapping_decoder(item: _Decoder) -> _Decoder:
    def decode(value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _fail(path, f"expected an object, got {_type_name(value)}")
        obj = cast(dict[str, Any], value)
        markers = _REVIVING_MARKERS.intersection(obj)
        if markers:
            raise _fail(path, f"refusing a code-reviving marker {sorted(markers)[0]!r}")
        return {k: item(v, f"{path}.{k}") for k, v in obj.items()}

    return decode


def _kind_of(cls: type[Any]) -> str | None:
    for f in dataclasses.fields(cls):
        if f.name == "kind" and isinstance(f.default, str):
            return f.default
    return None


def _union_decoder(members: tuple[Any, ...]) -> _Decoder:
    by_kind: dict[str, _Decoder] = {}
    others: list[_Decoder] = []
    optional = False
    for member in members:
        if member is type(None):
            optional = True
        elif isinstance(member, type) and dataclasses.is_dataclass(member) and _kind_of(member):
            by_kind[cast(str, _kind_of(member))] = _decoder(member)
        else:
            others.append(_decoder(member))

    def decode(value: Any, path: str) -> Any:
        if value is None and optional:
            return None
        if isinstance(value, dict) and by_kind:
            kind = cast(dict[str, Any], value).get("kind")
            if isinstance(kind, str) and kind in by_kind:
                return by_kind[kind](value, path)
        errors: list[str] = []
        for decoder in others:
            try:
                return decoder(value, path)
            except SerializationError as exc:
                errors.append(str(exc))
        if by_kind and isinstance(value, dict):
            kinds = ", ".join(sorted(by_kind))
            raise _fail(path, f"unknown kind {cast(dict[str, Any], value).get('kind')!r}; expected one of {kinds}")
        if errors:
            raise SerializationError(errors[0])
        raise _fail(path, f"unexpected {_type_name(value)}")

    return decode


def _dataclass_decoder(cls: type[Any]) -> _Decoder:
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls)]
    field_decoders = {f.name: _decoder(hints[f.name]) for f in fields}
    init_names = {f.name for f in fields if f.init}
    required = {
        f.name
        for f in fields
        if f.init
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    }
    kind = _kind_of(cls)
    name = cls.__name__

    def decode(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _fail(path, f"expected a {name} object, got {_type_name(value)}")
        obj = cast(dict[str, Any], value)
        markers = _REVIVING_MARKERS.intersection(obj)
        if markers:
            raise _fail(path, f"refusing a code-reviving marker {sorted(markers)[0]!r}")
        if kind is not None and obj.get("kind", kind) != kind:
            raise _fail(path, f"expected kind {kind!r}, got {obj.get('kind')!r}")
        unknown = set(obj) - set(field_decoders)
        if unknown:
            raise _fail(path, f"unknown field(s) for {name}: {', '.join(sorted(unknown))}")
        missing = required - set(obj)
        if missing:
            raise _fail(path, f"missing field(s) for {name}: {', '.join(sorted(missing))}")
        kwargs = {
            key: field_decoders[key](item, f"{path}.{key}")
            for key, item in obj.items()
            if key in init_names
        }
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise _fail(path, f"invalid {name}: {exc}") from exc

    return decode
