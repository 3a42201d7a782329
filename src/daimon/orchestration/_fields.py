"""Typed fields of workflow nodes: reading them off functions, and checking types match."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin

from daimon.orchestration._errors import OrchestrationBuildError

__all__ = ("compatible", "fields_of", "matches", "parameters_of", "type_name")

_UNIONS = (Union, types.UnionType)


def type_name(tp: Any) -> str:
    """A short readable name: ``str``, ``list[int]``, ``int | None``."""
    if isinstance(tp, type) and not get_args(tp):
        return tp.__name__
    return repr(tp).replace("typing.", "")


def hints(obj: Any, what: str) -> dict[str, Any]:
    """Resolved annotations of a function or class."""
    try:
        return typing.get_type_hints(obj)
    except Exception as exc:
        raise OrchestrationBuildError(
            f"cannot resolve the type annotations of {what}: {type(exc).__name__}: {exc} "
            "(define the types it uses at module level)"
        ) from exc


def fields_of(tp: Any, what: str) -> dict[str, Any] | None:
    """The fields of a TypedDict or dataclass type, or ``None`` for any other type."""
    if isinstance(tp, type) and typing.is_typeddict(tp):
        return hints(tp, what)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        resolved = hints(tp, what)
        return {f.name: resolved.get(f.name, Any) for f in dataclasses.fields(tp) if f.init}
    return None


def parameters_of(
    fn: Callable[..., Any], what: str, context_type: type, *, declared: bool = False
) -> tuple[dict[str, Any], frozenset[str], str | None, Any]:
    """Input fields (name to type), those with defaults, the context parameter, return type.

    With ``declared`` (the inputs are given explicitly) ``**kwargs`` is accepted.
    """
    resolved = hints(fn, what)
    inputs: dict[str, Any] = {}
    optional: set[str] = set()
    context: str | None = None
    for parameter in inspect.signature(fn).parameters.values():
        if declared and parameter.kind is parameter.VAR_KEYWORD:
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise OrchestrationBuildError(
                f"{what} cannot take *args or **kwargs: each input is a named parameter"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise OrchestrationBuildError(
                f"{what} takes {parameter.name!r} positionally only; inputs are passed by name"
            )
        annotation = resolved.get(parameter.name, Any)
        if annotation is context_type:
            context = parameter.name
            continue
        inputs[parameter.name] = annotation
        if parameter.default is not parameter.empty:
            optional.add(parameter.name)
    return inputs, frozenset(optional), context, resolved.get("return", Any)


def compatible(produced: Any, consumed: Any) -> bool:
    """Whether a value of type ``produced`` can be used where ``consumed`` is expected.

    Generics are compared covariantly (``list[bool]`` fits ``list[int]``), ``int`` fits
    ``float``, a union fits when each member fits, ``Any`` fits everything.
    """
    if produced is Any or consumed is Any or produced == consumed:
        return True
    if get_origin(produced) in _UNIONS:
        return all(compatible(member, consumed) for member in get_args(produced))
    if get_origin(consumed) in _UNIONS:
        return any(compatible(produced, member) for member in get_args(consumed))
    if get_origin(produced) is Literal:
        return all(matches(value, consumed) for value in get_args(produced))
    if get_origin(consumed) is Literal:
        return False
    if produced is int and consumed is float:
        return True
    have, want = get_origin(produced) or produced, get_origin(consumed) or consumed
    if not (isinstance(have, type) and isinstance(want, type)):
        return False
    try:
        if not issubclass(have, want):
            return False
    except TypeError:  # TypedDicts and non-runtime protocols refuse subclass checks
        return False
    wanted, given = get_args(consumed), get_args(produced)
    if not wanted or not given or Ellipsis in wanted or Ellipsis in given:
        return True
    return len(wanted) == len(given) and all(map(compatible, given, wanted))


def matches(value: object, tp: Any) -> bool:
    """Whether ``value`` is of type ``tp``, as far as is cheap to check (not container items)."""
    if tp is Any or tp is object:
        return True
    origin = get_origin(tp)
    if origin in _UNIONS:
        return any(matches(value, member) for member in get_args(tp))
    if origin is Literal:
        return value in get_args(tp)
    if tp is None or tp is types.NoneType:
        return value is None
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return True
    cls = origin or tp
    if not isinstance(cls, type):
        return True
    if typing.is_typeddict(cls):
        return isinstance(value, Mapping)
    try:
        return isinstance(value, cls)
    except TypeError:  # a protocol that is not runtime-checkable: not checked
        return True
