"""Checking a tool call's arguments against the tool's JSON Schema, with fastjsonschema.

Validators are compiled on first use (fastjsonschema itself is imported then too) and cached
per schema object, so each schema is compiled once per process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ("Validator", "describe_failure", "validator_for")

Validator = Callable[[Any], object]
"""Raises when the arguments do not match; the return value is unused."""

_MAX_CACHED = 1024
# id(schema) -> (schema, validator). The entry holds the schema, so its id cannot be reused.
_cache: dict[int, tuple[Mapping[str, Any], Validator]] = {}


class InvalidSchemaError(Exception):
    """The tool's own schema could not be compiled (internal)."""


def validator_for(schema: Mapping[str, Any]) -> Validator:
    """The compiled validator for ``schema``; compiled on the first call for that object."""
    entry = _cache.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    validator = _compile(schema)
    if len(_cache) >= _MAX_CACHED:
        del _cache[next(iter(_cache))]
    _cache[id(schema)] = (schema, validator)
    return validator


def _compile(schema: Mapping[str, Any]) -> Validator:
    import fastjsonschema

    try:
        plain = json.loads(json.dumps(schema))  # plain dicts and lists, whatever was given
        # use_default=False: never write defaults into the caller's arguments dict.
        validate: Validator = fastjsonschema.compile(plain, use_default=False, use_formats=False)
    except Exception as exc:  # any failure means the schema is unusable
        message = f"its parameters schema is invalid ({type(exc).__name__}: {exc})"

        def validate(data: Any) -> object:
            raise InvalidSchemaError(message)

    return validate


def describe_failure(exc: Exception, schema: Mapping[str, Any]) -> str:
    """Which argument is wrong and why, from a fastjsonschema error raised for ``schema``."""
    if isinstance(exc, InvalidSchemaError):
        return str(exc)
    name: str = getattr(exc, "name", "") or "data"
    rule = getattr(exc, "rule", None)
    value = getattr(exc, "value", None)
    definition = getattr(exc, "definition", None)
    if rule in ("anyOf", "oneOf") and isinstance(definition, dict):
        inner = _narrow(definition[rule], value, name, schema)
        if inner is not None:
            return describe_failure(inner, schema)
    path = name[4:].lstrip(".") if name.startswith("data") else name
    subject = f"argument {path!r}" if path else "the arguments object"
    if isinstance(definition, dict) and isinstance(value, dict):
        if rule == "required":
            missing = [k for k in definition.get("required", ()) if k not in value]
            if missing:
                what = "argument" if not path else "field"
                where = "" if not path else f" in {path!r}"
                return f"missing required {what} {missing[0]!r}{where}"
        if rule == "additionalProperties":
            known = definition.get("properties", {})
            extra = sorted(k for k in value if k not in known)
            if extra:
                what = "argument" if not path else "field"
                where = "" if not path else f" in {path!r}"
                allowed = ", ".join(known) or "none"
                return f"unexpected {what} {extra[0]!r}{where} (allowed: {allowed})"
    message = str(getattr(exc, "message", exc))
    reason = message[len(name) :].strip() if message.startswith(name) else message
    if rule in ("anyOf", "oneOf"):
        reason = "does not match any of the allowed types"
    return f"{subject} {reason} (got {_short(value)})"


def _narrow(
    alternatives: list[Any], value: Any, name: str, schema: Mapping[str, Any]
) -> Exception | None:
    """The error of the one alternative whose type fits ``value`` (``X | None`` and the like)."""
    kinds = _json_types(value)
    defs: Mapping[str, Any] = schema.get("$defs", {})
    fitting = [a for a in alternatives if kinds & _types_of(a, defs)]
    if len(fitting) != 1:
        return None
    key = (id(schema), json.dumps(fitting[0], sort_keys=True))
    entry = _narrowed.get(key)
    if entry is None or entry[0] is not schema:
        entry = (schema, _compile({**fitting[0], "$defs": defs}))
        if len(_narrowed) >= _MAX_CACHED:
            del _narrowed[next(iter(_narrowed))]
        _narrowed[key] = entry
    try:
        entry[1](value, name_prefix=name)  # type: ignore[call-arg]
    except Exception as exc:  # whatever it raised describes the problem
        return exc
    return None


_narrowed: dict[tuple[int, str], tuple[Mapping[str, Any], Validator]] = {}


def _types_of(alternative: Any, defs: Mapping[str, Any]) -> set[str]:
    if not isinstance(alternative, dict):
        return set()
    ref = alternative.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _types_of(defs.get(ref[len("#/$defs/") :]), defs)
    declared = alternative.get("type")
    return {declared} if isinstance(declared, str) else set(declared or ())


def _json_types(value: Any) -> set[str]:
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    for cls, kind in ((float, "number"), (str, "string"), (list, "array"), (dict, "object")):
        if isinstance(value, cls):
            return {kind}
    return set()


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
