"""A cheaper ``__init__`` for the frozen, slotted dataclasses that every run builds many of.

Kept because it is measured to matter (docs/benchmarks.md, "The speed tricks that stay"):
without :func:`fast_init`, a ReAct run with an async tool takes 4.8 µs more (23.0 -> 27.8 µs,
+21%; ``benchmarks/tree_ab.py``, 9 interleaved rounds) and a streamed text delta 0.2-0.35 µs more
(of 1.6-2.1 µs); :func:`fast_new` saves another 1.0-1.4 µs a run (4-5%;
``benchmarks/micro_ab.py``). So it is used only on classes built per run, per model call, per
tool call or per streamed event (each use says which).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ()  # private to daimon.core: nothing here is public API

T = TypeVar("T")


class _Factory:
    """Stands for a default made by a factory, as in the signature dataclasses writes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()
_MAKERS: dict[type, Callable[..., Any]] = {}


def fast_init(cls: type[T]) -> type[T]:
    """Replace a frozen, slotted dataclass's ``__init__`` with an equivalent, faster one.

    The ``__init__`` that dataclasses writes for a frozen class stores each field with
    ``object.__setattr__(self, name, value)``, a slot-wrapper call that costs more than the rest
    of the constructor together. This one stores each field through its slot's own descriptor,
    which skips the attribute lookup: about a third cheaper per object (a run builds a dozen;
    4.8 µs, a fifth of a run with an async tool, measured as above).
    Parameters, defaults, default factories, ``init=False`` fields and ``__post_init__`` are the
    same; the class is otherwise untouched, so it stays frozen.
    """
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    if (
        len(params) != len(cls.__dataclass_fields__)  # type: ignore[attr-defined]  # InitVars
        or not cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        or "__slots__" not in cls.__dict__
        or not params
        or not all(f.kw_only for f in params if f.init)
    ):
        raise TypeError(f"fast_init takes frozen, slotted, keyword-only dataclasses: {cls!r}")
    namespace: dict[str, Any] = {"_FACTORY": _FACTORY, "_cls": cls, "_object_new": object.__new__}
    args: list[str] = []
    body: list[str] = []
    annotations: dict[str, Any] = {"return": None}
    for index, f in enumerate(params):
        setter = f"_set{index}"
        namespace[setter] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_factory:
            namespace[f"_factory{index}"] = f.default_factory
        if f.default is not dataclasses.MISSING:
            namespace[f"_default{index}"] = f.default
        if not f.init:
            value = f"_factory{index}()" if has_factory else f"_default{index}"
        else:
            annotations[f.name] = f.type
            if has_factory:
                args.append(f"{f.name}=_FACTORY")
                value = f"_factory{index}() if {f.name} is _FACTORY else {f.name}"
            elif f.default is not dataclasses.MISSING:
                args.append(f"{f.name}=_default{index}")
                value = f.name
            else:
                args.append(f.name)
                value = f.name
        body.append(f"    {setter}(self, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    params_text = f"*, {', '.join(args)}" if args else ""
    source = (
        f"def __init__(self, {params_text}):\n" + "\n".join(body) + "\n"
        f"def _new({params_text}):\n    self = _object_new(_cls)\n" + "\n".join(body) + "\n"
        "    return self\n"
    )
    exec(source, namespace)  # the way dataclasses builds its own __init__
    _MAKERS[cls] = namespace["_new"]
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = annotations
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def fast_new(cls: type[T]) -> Callable[..., T]:
    """A function that builds ``cls(**fields)`` without calling the class.

    Calling a class packs its keyword arguments into a dict for ``__init__``; for the loop's hot
    path (a few objects per model call) this function skips that: 1.0-1.4 µs a run (4-5%) over
    its four uses together, 0.3-0.6 µs each (measured as above).
    It builds exactly ``cls``, never a subclass. ``cls`` must have gone through :func:`fast_init`.
    """
    return _MAKERS[cls]
