"""Versioned JSON for every type daimon persists or sends over a wire.

Decoding is driven by the target type: a payload can only ever become the dataclass the caller
asked for, never an arbitrary class. Unknown fields, wrong types and keys that other serializers
read as code to revive are rejected with a :class:`SerializationError` that says where. Those
markers are a family: dunder names (``__class__``, ``__reduce__``, ...), ``py/...`` (jsonpickle),
``!!python...`` (YAML tags, also spelled ``tag:yaml.org,2002:python/...``) and ``$type`` (.NET).

Free-form data (tool arguments, ``custom`` state, metadata) may still hold such keys: it is data,
so it is stored losslessly by escaping. On encode, a mapping key that is a marker, or ``~``
repeated before a marker, gains one more leading ``~`` (``$type`` -> ``~$type``, ``~$type`` ->
``~~$type``); on decode such a key loses one. A bare marker in a payload was never written by
daimon, so it is still refused. Every other key is stored as it is, so data written before
escaping existed reads back the same. Dataclass fields are never markers and are not escaped.

``dumps``/``loads`` wrap the data in an envelope ``{"daimon": 1, "data": ...}`` so formats can
evolve; ``to_data``/``from_data`` give the bare JSON value for embedding in larger documents.
Only strict JSON is accepted: ``NaN`` and infinities are refused both ways.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence, Set
from enum import Enum
from functools import cache
from typing import Any, TypeVar, cast, overload

from daimon.core._added import ADDED  # re-exported: the marker belongs to the format
from daimon.core.errors import SerializationError

__all__ = ("ADDED", "CODEC_VERSION", "dumps", "from_data", "loads", "to_data")

CODEC_VERSION = 1
"""The envelope version :func:`dumps` writes and :func:`loads` accepts."""

T = TypeVar("T")
_Decoder = Callable[[Any, str], Any]

_REVIVING_MARKERS = frozenset(
    {
        "__class__",
        "__reduce__",
        "__reduce_ex__",
        "__module__",
        "__type__",
        "py/object",
        "py/reduce",
        "py/type",
        "py/function",
        "!!python",
        "$type",
        "__pickle__",
    }
)
"""Well-known markers; :data:`_MARKER` matches these and the rest of their families."""

_ESCAPE = "~"
# A marker (dunder name, ``py/`` or ``!!python`` prefix, ``$type``) after any number of escapes.
# ``\Z``, not ``$``: ``$`` would also match before a trailing newline ("$type\n" is no marker).
_MARKER = re.compile(r"~*(?:__.+__\Z|py/|!!python|tag:yaml\.org,2002:python/|\$type\Z)", re.DOTALL)

# The JSON shapes a value can have, used to pick the member of a union that a value is meant for.
_NULL = "null"
_BOOL = "bool"
_NUMBER = "number"
_STRING = "string"
_ARRAY = "array"
_OBJECT = "object"
_ANY_SHAPE = frozenset({_NULL, _BOOL, _NUMBER, _STRING, _ARRAY, _OBJECT})
_SHAPE_NAMES = {
    _NULL: "null",
    _BOOL: "a boolean",
    _NUMBER: "a number",
    _STRING: "a string",
    _ARRAY: "a list",
    _OBJECT: "an object",
}


def to_data(obj: Any) -> Any:
    """The JSON value for ``obj`` (a daimon dataclass, or plain JSON data)."""
    try:
        return _to_data(obj)
    except RecursionError:
        raise SerializationError("cannot encode: the value is nested too deeply") from None


def _to_data(obj: Any) -> Any:
    if isinstance(obj, Enum):  # before str: a StrEnum becomes its plain value
        return obj.value
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for name, default in _encoded_fields(type(obj)):
            value = getattr(obj, name)
            if default is _ALWAYS or value != default:
                out[name] = _to_data(value)
        return out
    if isinstance(obj, Mapping):
        out = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise SerializationError(
                    f"cannot encode a mapping key of type {type(key).__name__}"
                )
            out[_escape_key(key)] = _to_data(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [_to_data(v) for v in cast(Sequence[Any], obj)]
    if isinstance(obj, bytes):
        return base64.b64encode(obj).decode("ascii")
    raise SerializationError(f"cannot encode a value of type {type(obj).__name__} as JSON")


_ALWAYS: Any = object()


@cache
def _encoded_fields(cls: type[Any]) -> tuple[tuple[str, Any], ...]:
    """Each field's name, and the default it is left out at (``_ALWAYS``: never left out)."""
    fields = []
    for f in dataclasses.fields(cls):
        if not f.metadata.get("daimon_added"):
            fields.append((f.name, _ALWAYS))
        elif f.default is not dataclasses.MISSING:
            fields.append((f.name, f.default))
        else:
            factory = cast(Callable[[], Any], f.default_factory)
            fields.append((f.name, factory()))
    return tuple(fields)


def _escape_key(key: str) -> str:
    """``key`` as stored: a marker, bare or escaped, gains one escape (see the module doc)."""
    return _ESCAPE + key if _MARKER.match(key) else key


@overload
def from_data(cls: type[T], data: Any) -> T: ...
@overload
def from_data(cls: Any, data: Any) -> Any: ...
def from_data(cls: Any, data: Any) -> Any:
    """Build a ``cls`` from the JSON value ``data``; :class:`SerializationError` if it won't fit.

    ``cls`` is a daimon dataclass, or a union of them such as
    :data:`~daimon.core.events.StreamEvent` (told apart by their ``kind``).
    """
    try:
        return _decoder(cls)(data, "$")
    except RecursionError:
        raise SerializationError("the data is nested too deeply") from None


def dumps(obj: Any) -> str:
    """``obj`` as versioned JSON text."""
    try:
        text = json.dumps(
            {"daimon": CODEC_VERSION, "data": to_data(obj)}, ensure_ascii=False, allow_nan=False
        )
        text.encode("utf-8")  # a lone surrogate would make text no store can hold
    except SerializationError:
        raise
    except UnicodeEncodeError as exc:
        raise SerializationError(f"cannot encode as UTF-8 JSON: {exc.reason}") from exc
    except ValueError as exc:
        raise SerializationError(f"cannot encode as JSON: {exc}") from exc
    return text


@overload
def loads(text: str | bytes, cls: type[T]) -> T: ...
@overload
def loads(text: str | bytes, cls: Any) -> Any: ...
def loads(text: str | bytes, cls: Any) -> Any:
    """Read versioned JSON text written by :func:`dumps` back into a ``cls``."""
    try:
        envelope = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise SerializationError("not valid JSON: nested too deeply") from None
    except ValueError as exc:  # includes UnicodeDecodeError
        raise SerializationError(f"not valid JSON: {exc}") from exc
    if not isinstance(envelope, dict) or "daimon" not in envelope or "data" not in envelope:
        raise SerializationError(
            'not a daimon payload: expected {"daimon": <version>, "data": ...}'
        )
    env = cast(dict[str, Any], envelope)
    version = env["daimon"]
    if type(version) is not int or version != CODEC_VERSION:  # true == 1 and 1.0 == 1 in Python
        raise SerializationError(
            f"unsupported payload version {version!r}; this daimon reads version {CODEC_VERSION}"
        )
    extra = set(env) - {"daimon", "data"}
    if extra:
        raise SerializationError(f"unexpected envelope field(s): {', '.join(sorted(extra))}")
    return from_data(cls, env["data"])


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text}")
    return value


def _fail(path: str, message: str) -> SerializationError:
    return SerializationError(f"at {path}: {message}")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _shape(value: Any) -> str | None:
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, (int, float)):
        return _NUMBER
    if isinstance(value, str):
        return _STRING
    if isinstance(value, list):
        return _ARRAY
    if isinstance(value, dict):
        return _OBJECT
    return None


def _describe(shapes: frozenset[str]) -> str:
    names = [
        _SHAPE_NAMES[s] for s in (_NULL, _BOOL, _NUMBER, _STRING, _ARRAY, _OBJECT) if s in shapes
    ]
    return " or ".join(names) if names else "nothing"


@cache
def _accepts(tp: Any) -> frozenset[str]:
    """The JSON shapes that the decoder for ``tp`` can take."""
    if tp is Any or tp is object:
        return _ANY_SHAPE
    if tp is type(None) or tp is None:
        return frozenset({_NULL})
    if tp is str or tp is bytes:
        return frozenset({_STRING})
    if tp is bool:
        return frozenset({_BOOL})
    if tp is int or tp is float:
        return frozenset({_NUMBER})
    if isinstance(tp, type) and issubclass(tp, Enum):
        return frozenset(s for m in tp if (s := _shape(m.value)) is not None)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return frozenset({_OBJECT})
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return frozenset().union(*(_accepts(a) for a in args))
    if origin is typing.Literal:
        return frozenset(s for a in args if (s := _shape(a)) is not None)
    if origin in (tuple, Sequence, list):
        return frozenset({_ARRAY})
    if origin in (dict, Mapping):
        return frozenset({_OBJECT})
    return _ANY_SHAPE


@cache
def _decoder(tp: Any) -> _Decoder:
    # A type variable (AgentResponse's output) stands for whatever the caller typed: JSON data.
    if tp is Any or tp is object or isinstance(tp, TypeVar):
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
        return _enum_decoder(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _union_decoder(args)
    if origin is typing.Literal:
        return _literal_decoder(args)
    if origin in (tuple, Sequence, list):
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            raise SerializationError(f"the codec cannot decode fixed-length tuple {tp!r}")
        item = _decoder(args[0]) if args else _decode_json_value
        return _sequence_decoder(item, as_tuple=origin is not list)
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
    try:
        number = float(value)
    except OverflowError:
        raise _fail(path, "number out of range") from None
    if not math.isfinite(number):
        raise _fail(path, f"expected a finite number, got {number!r}")
    return number


def _decode_bytes(value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise _fail(path, f"expected base64 text, got {_type_name(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise _fail(path, "invalid base64") from exc


def _decode_key(key: Any, path: str) -> str:
    """A free-form mapping key as it was before :func:`_escape_key`; refuses bare markers."""
    if not isinstance(key, str):
        raise _fail(path, f"object keys must be strings, got {_type_name(key)}")
    if _MARKER.match(key) is None:
        return key
    if key[0] != _ESCAPE:
        raise _fail(path, f"refusing a code-reviving marker {key!r}")
    return key[1:]


def _check_field_keys(keys: Set[Any], path: str) -> None:
    """Refuse non-string keys and bare markers among keys that are no dataclass field."""
    for key in keys:
        if not isinstance(key, str):
            raise _fail(path, f"object keys must be strings, got {_type_name(key)}")
    markers = sorted(key for key in keys if _MARKER.match(key) and key[0] != _ESCAPE)
    if markers:
        raise _fail(path, f"refusing a code-reviving marker {markers[0]!r}")


def _decode_json_value(value: Any, path: str) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(path, f"expected a finite number, got {value!r}")
        return value
    if isinstance(value, list):
        return [_decode_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return _decode_object(value, path, _decode_json_value)
    raise _fail(path, f"not a JSON value: {_type_name(value)}")


def _decode_object(obj: dict[Any, Any], path: str, item: _Decoder) -> dict[str, Any]:
    """A free-form JSON object: keys unescaped (bare markers refused), values by ``item``."""
    out: dict[str, Any] = {}
    for stored, value in obj.items():
        key = _decode_key(stored, path)
        out[key] = item(value, f"{path}.{key}")
    return out


def _enum_decoder(enum: type[Enum]) -> _Decoder:
    shapes = _accepts(enum)

    def decode(value: Any, path: str) -> Enum:
        allowed = ", ".join(repr(m.value) for m in enum)
        if _shape(value) not in shapes:
            raise _fail(path, f"expected one of {allowed}, got {_type_name(value)}")
        try:
            return enum(value)
        except ValueError:
            raise _fail(path, f"{value!r} is not one of {allowed}") from None

    return decode


def _literal_decoder(allowed: tuple[Any, ...]) -> _Decoder:
    def decode(value: Any, path: str) -> Any:
        # Compare types too: in Python true == 1, so a boolean must not pass for the literal 1.
        if not any(type(value) is type(a) and value == a for a in allowed):
            raise _fail(path, f"expected one of {list(allowed)!r}, got {value!r}")
        return value

    return decode


def _sequence_decoder(item: _Decoder, as_tuple: bool) -> _Decoder:
    def decode(value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise _fail(path, f"expected a list, got {_type_name(value)}")
        items = [item(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if as_tuple else items

    return decode


def _mapping_decoder(item: _Decoder) -> _Decoder:
    def decode(value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _fail(path, f"expected an object, got {_type_name(value)}")
        return _decode_object(value, path, item)

    return decode


def _kind_of(cls: type[Any]) -> str | None:
    for f in dataclasses.fields(cls):
        if f.name == "kind" and isinstance(f.default, str):
            return f.default
    return None


def _union_decoder(members: tuple[Any, ...]) -> _Decoder:
    by_kind: dict[str, _Decoder] = {}
    others: list[tuple[frozenset[str], _Decoder]] = []
    optional = False
    for member in members:
        kind = (
            _kind_of(member)
            if isinstance(member, type) and dataclasses.is_dataclass(member)
            else None
        )
        if member is type(None):
            optional = True
        elif kind is not None:
            by_kind[kind] = _decoder(member)
        else:
            others.append((_accepts(member), _decoder(member)))
    kinds = ", ".join(sorted(by_kind))
    sole_object = (
        next(iter(by_kind.values()))
        if len(by_kind) == 1 and not any(_OBJECT in shapes for shapes, _ in others)
        else None
    )
    expected = _describe(
        frozenset().union(
            *(shapes for shapes, _ in others),
            {_OBJECT} if by_kind else (),
            {_NULL} if optional else (),
        )
    )

    def decode(value: Any, path: str) -> Any:
        if value is None and optional:
            return None
        shape = _shape(value)
        if shape == _OBJECT and by_kind:
            kind = cast(dict[str, Any], value).get("kind")
            if isinstance(kind, str) and kind in by_kind:
                return by_kind[kind](value, path)
            if kind is None and "kind" not in value and sole_object is not None:
                return sole_object(value, path)  # as for a lone dataclass, kind may be left out
        # Only members that take this JSON shape are tried, so the error comes from the member
        # the value was meant for and points inside it (``$.content[0].text``), not at the union.
        candidates = [decoder for shapes, decoder in others if shape in shapes]
        if not candidates:
            if shape == _OBJECT and by_kind:
                if "kind" not in value:
                    raise _fail(path, f"missing field 'kind'; expected one of {kinds}")
                raise _fail(path, f"unknown kind {value['kind']!r}; expected one of {kinds}")
            raise _fail(path, f"expected {expected}, got {_type_name(value)}")
        first: SerializationError | None = None
        for decoder in candidates:
            try:
                return decoder(value, path)
            except SerializationError as exc:
                first = first or exc
        assert first is not None
        raise first

    return decode


def _dataclass_decoder(cls: type[Any]) -> _Decoder:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    field_decoders = {f.name: _decoder(hints[f.name]) for f in fields}
    init_names = {f.name for f in fields if f.init}
    required = {
        f.name
        for f in fields
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    kind = _kind_of(cls)
    name = cls.__name__

    def decode(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _fail(path, f"expected a {name} object, got {_type_name(value)}")
        obj = cast(dict[str, Any], value)
        # Field names are never markers, so only keys that name no field need checking.
        unknown = obj.keys() - field_decoders.keys()
        if unknown:
            _check_field_keys(unknown, path)
        if kind is not None and obj.get("kind", kind) != kind:
            raise _fail(path, f"expected kind {kind!r}, got {obj.get('kind')!r}")
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
