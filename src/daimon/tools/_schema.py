"""JSON Schema for Python type hints.

The schemas are valid draft 2020-12 and use only keywords that draft 7 (what fastjsonschema
validates with) understands too: named types go to ``$defs`` and are referenced with
``{"$ref": "#/$defs/Name"}``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any, Literal, get_args, get_origin

from daimon.core.errors import BuilderError
from daimon.tools._docstrings import parse_class_doc
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
    type_name,
    typeddict_key_required,
)
from daimon.tools._output import to_plain

__all__ = ("MISSING", "SchemaBuilder", "json_default")

MISSING: Any = object()
"""No default value (or one that JSON cannot hold)."""

_SIMPLE: dict[Any, dict[str, str]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
}
_JSON_TYPES: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    type(None): "null",
}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def json_default(value: Any) -> Any:
    """``value`` as plain JSON data for a schema's ``default``, or :data:`MISSING`."""
    try:
        plain = to_plain(value)
        json.dumps(plain, allow_nan=False)
    except (TypeError, ValueError):
        return MISSING
    return plain


class SchemaBuilder:
    """Builds schemas for the hints of one tool, collecting the named types in ``defs``."""

    __slots__ = ("_localns", "_names", "defs")

    def __init__(self, localns: Mapping[str, Any] | None = None) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self._names: dict[Any, str] = {}
        self._localns = localns

    def schema(
        self, hint: Any, *, description: str | None = None, default: Any = MISSING
    ) -> dict[str, Any]:
        """The schema of ``hint``, with a description and default when given."""
        tp, inline = split_annotated(hint)
        schema = self._build(tp)
        if inline or description:
            schema["description"] = inline or description
        if default is not MISSING:
            schema["default"] = default
        return schema

    def _build(self, tp: Any) -> dict[str, Any]:
        if tp is Any or tp is object:
            return {}
        if tp is None or tp is type(None):
            return {"type": "null"}
        simple = _SIMPLE.get(tp)
        if simple is not None:
            return dict(simple)
        string = string_format(tp)  # datetime, date, time, UUID
        if string is not None:
            return {"type": "string", "format": string}
        if isinstance(tp, type):
            built = self._class(tp)
            if built is not None:
                return built
        return self._generic(tp)

    def _class(self, tp: type[Any]) -> dict[str, Any] | None:
        """The schema of a bare class (an enum, a model, a container), or ``None``."""
        if issubclass(tp, Enum):
            return _enum_values([m.value for m in tp], tp)
        if is_pydantic_model(tp):
            return self._pydantic(tp)
        if is_dataclass_type(tp) or typing.is_typeddict(tp):
            return self._named(tp)
        if tp in ARRAYS or tp is tuple:
            return {"type": "array"}
        if tp in SETS:
            return {"type": "array", "uniqueItems": True}
        if tp in MAPPINGS:
            return {"type": "object"}
        return None

    def _generic(self, tp: Any) -> dict[str, Any]:
        """The schema of a parameterised form: a union, a literal, a container of items."""
        origin, args = get_origin(tp), get_args(tp)
        if is_union(tp):
            return self._union(args)
        if origin is Literal:
            return _enum_values(list(args), tp)
        if origin in ARRAYS:
            return {"type": "array", "items": self.schema(args[0])} if args else {"type": "array"}
        if origin is tuple:
            return self._tuple(args)
        if origin in SETS:
            return {"type": "array", "items": self.schema(args[0]), "uniqueItems": True}
        if origin in MAPPINGS:
            return self._mapping(tp, args)
        raise UnsupportedTypeError(tp)

    def _union(self, members: tuple[Any, ...]) -> dict[str, Any]:
        schemas: list[dict[str, Any]] = []
        for member in members:
            schema = self.schema(member)
            if schema not in schemas:
                schemas.append(schema)
        return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}

    def _tuple(self, args: tuple[Any, ...]) -> dict[str, Any]:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": self.schema(args[0])}
        if args == ((),) or not args:  # tuple[()]
            return {"type": "array", "maxItems": 0}
        # Fixed-length tuples: ``prefixItems`` is 2020-12 only, so check length and item types.
        items = self._union(args)
        return {"type": "array", "items": items, "minItems": len(args), "maxItems": len(args)}

    def _mapping(self, tp: Any, args: tuple[Any, ...]) -> dict[str, Any]:
        if not args:
            return {"type": "object"}
        key, _ = split_annotated(args[0])
        if key is not str and key is not Any:
            raise UnsupportedTypeError(tp, "is not supported: JSON object keys are strings")
        values = self.schema(args[1])
        return {"type": "object", "additionalProperties": values} if values else {"type": "object"}

    def _named(self, tp: type[Any]) -> dict[str, Any]:
        name = self._names.get(tp)
        if name is None:
            name = self._claim_name(tp)
            self.defs[name] = {}  # claimed first, so recursive types refer back to it
            body = self._dataclass(tp) if is_dataclass_type(tp) else self._typeddict(tp)
            self.defs[name].update(body)
        return {"$ref": f"#/$defs/{name}"}

    def _claim_name(self, tp: type[Any]) -> str:
        name = tp.__name__
        if name in self.defs:
            name = _UNSAFE_NAME.sub("_", f"{tp.__module__}.{tp.__qualname__}")
        self._names[tp] = name
        return name

    def _hints(self, tp: type[Any]) -> dict[str, Any]:
        try:
            return resolve_hints(tp, self._localns)
        except NameError as exc:
            raise UnsupportedTypeError(
                tp, f"has an annotation that cannot be resolved ({exc})"
            ) from None

    def _dataclass(self, tp: type[Any]) -> dict[str, Any]:
        hints = self._hints(tp)
        doc = parse_class_doc(tp)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            default = MISSING
            if f.default is not dataclasses.MISSING:
                default = json_default(f.default)
            elif f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            properties[f.name] = self.schema(
                hints.get(f.name, Any), description=doc.params.get(f.name), default=default
            )
        return _object(properties, required, doc.description)

    def _typeddict(self, tp: type[Any]) -> dict[str, Any]:
        hints = self._hints(tp)
        doc = parse_class_doc(tp)
        required_keys: frozenset[str] = getattr(tp, "__required_keys__", frozenset())
        properties: dict[str, Any] = {}
        required: list[str] = []
        for key, hint in hints.items():
            if typeddict_key_required(hint, key in required_keys):
                required.append(key)
            properties[key] = self.schema(hint, description=doc.params.get(key))
        return _object(properties, required, doc.description)

    def _pydantic(self, tp: type[Any]) -> dict[str, Any]:
        try:
            schema: dict[str, Any] = tp.model_json_schema(ref_template="#/$defs/{model}")
        except Exception as exc:  # pydantic cannot describe some field
            raise UnsupportedTypeError(tp, f"has no JSON Schema ({exc})") from None
        for name, definition in schema.pop("$defs", {}).items():
            self._add_def(name, definition, tp)
        if set(schema) == {"$ref"}:  # recursive models come back as a reference already
            return schema
        self._add_def(tp.__name__, schema, tp)
        self._names[tp] = tp.__name__
        return {"$ref": f"#/$defs/{tp.__name__}"}

    def _add_def(self, name: str, definition: dict[str, Any], owner: type[Any]) -> None:
        existing = self.defs.get(name)
        if existing is not None and existing != definition:
            raise BuilderError(
                f"two different types are named {name!r} (one used by {type_name(owner)}); "
                "rename one of them"
            )
        self.defs[name] = definition


def _object(properties: dict[str, Any], required: list[str], description: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


def _enum_values(values: list[Any], tp: Any) -> dict[str, Any]:
    values = [v.value if isinstance(v, Enum) else v for v in values]
    kinds = {_JSON_TYPES.get(type(v)) for v in values}
    if not values or None in kinds:
        raise UnsupportedTypeError(tp, "is not supported: its values must be JSON scalars")
    schema: dict[str, Any] = {"enum": values}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    return schema
