"""Conversation memories: backends of the :class:`daimon.core.Memory` protocol.

Importing this package stays cheap: backends that need an optional library load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from daimon.core.tokens import CharacterTokenCounter
from daimon.memory.window import SlidingWindowMemory, TokenWindowMemory

__all__ = ("CharacterTokenCounter", "SlidingWindowMemory", "TokenWindowMemory")

# name -> (module, attribute): backends that need an extra, imported on first use. Once a listed
# module exists, also add its name to ``__all__`` and to a ``TYPE_CHECKING`` import block.
_LAZY: dict[str, tuple[str, str]] = {
    "RedisMemory": ("daimon.memory.redis", "RedisMemory"),
    "SQLiteMemory": ("daimon.memory.sqlite", "SQLiteMemory"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:  # the module is there but needs a library: say so
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(loaded, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
