"""Conversation memories: backends of the :class:`daimon.core.Memory` protocol.

Importing this package stays cheap: backends that need an optional library load on first use.
"""

from __future__ import annotations

from daimon.core.lazy import lazy_exports
from daimon.kit.tokens import CharacterTokenCounter
from daimon.memory.summary import SummarizingMemory
from daimon.memory.window import SlidingWindowMemory, TokenWindowMemory

__all__ = ("CharacterTokenCounter", "SlidingWindowMemory", "SummarizingMemory", "TokenWindowMemory")

# name -> (module, attribute): backends that need an extra, imported on first use. Once a listed
# module exists, also add its name to ``__all__`` and to a ``TYPE_CHECKING`` import block.
_LAZY: dict[str, tuple[str, str]] = {
    "PostgresMemory": ("daimon.memory.postgres", "PostgresMemory"),
    "RedisMemory": ("daimon.memory.redis", "RedisMemory"),
    "SQLiteMemory": ("daimon.memory.sqlite", "SQLiteMemory"),
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
