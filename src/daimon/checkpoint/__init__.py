"""Checkpoint backends: implementations of the :class:`daimon.core.Checkpoint` protocol.

Importing this package stays cheap: each backend, and the library it needs, loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daimon.checkpoint.file import FileCheckpoint
    from daimon.checkpoint.nats import NatsKVCheckpoint
    from daimon.checkpoint.redis import RedisCheckpoint

__all__ = ("FileCheckpoint", "NatsKVCheckpoint", "RedisCheckpoint")

# name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    "FileCheckpoint": ("daimon.checkpoint.file", "FileCheckpoint"),
    "NatsKVCheckpoint": ("daimon.checkpoint.nats", "NatsKVCheckpoint"),
    "RedisCheckpoint": ("daimon.checkpoint.redis", "RedisCheckpoint"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
