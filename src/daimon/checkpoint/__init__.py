"""Checkpoint backends: implementations of the :class:`daimon.core.Checkpoint` protocol.

Importing this package stays cheap: each backend, and the library it needs, loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.checkpoint.file import FileCheckpoint
    from daimon.checkpoint.nats import NatsKVCheckpoint
    from daimon.checkpoint.postgres import PostgresCheckpoint
    from daimon.checkpoint.redis import RedisCheckpoint

__all__ = ("FileCheckpoint", "NatsKVCheckpoint", "PostgresCheckpoint", "RedisCheckpoint")

# name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    "FileCheckpoint": ("daimon.checkpoint.file", "FileCheckpoint"),
    "NatsKVCheckpoint": ("daimon.checkpoint.nats", "NatsKVCheckpoint"),
    "PostgresCheckpoint": ("daimon.checkpoint.postgres", "PostgresCheckpoint"),
    "RedisCheckpoint": ("daimon.checkpoint.redis", "RedisCheckpoint"),
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
