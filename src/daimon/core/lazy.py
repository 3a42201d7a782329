"""Lazy package namespaces: names load from their modules on first use.

A package lists its public names with the module each comes from, and gets the module-level
``__getattr__`` and ``__dir__`` that load them (PEP 562), so importing the package stays cheap and
optional libraries load only when a name that needs them is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ("lazy_exports",)


def lazy_exports(
    namespace: MutableMapping[str, Any],
    table: Mapping[str, str | tuple[str, str]],
    *,
    before_load: Callable[[str], None] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose names load lazily.

    Args:
        namespace: The package's ``globals()``; a loaded name is cached there.
        table: Public name to the module defining it, or to ``(module, attribute)``.
        before_load: Called with the module's name before it is imported (e.g. to check that
            an optional library is installed and name its extra).
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        entry = table.get(name)
        if entry is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = (entry, name) if isinstance(entry, str) else entry
        if before_load is not None:
            before_load(module)
        value = getattr(importlib.import_module(module), attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *table})

    return __getattr__, __dir__
