"""Where ``daimon serve`` keeps its own state: backends of :class:`daimon.core.StateStore`.

:class:`MemoryStateStore` keeps it in the process (one replica); ``RedisStateStore`` and
``PostgresStateStore`` share it between replicas, ``SQLiteStateStore`` between the processes of
one host. ``StateEventStore`` puts the MCP SDK's resumable-stream event store on any of them
(the A2A server keeps its tasks on one with ``a2a_app(store=...)``). Importing this package
stays cheap: what needs an optional library loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from daimon.core.errors import BuilderError
from daimon.core.lazy import lazy_exports
from daimon.serverstate.memory import MemoryStateStore

if TYPE_CHECKING:
    from daimon.core.state_store import StateStore
    from daimon.serverstate.mcp_events import StateEventStore
    from daimon.serverstate.postgres import PostgresStateStore
    from daimon.serverstate.redis import RedisStateStore
    from daimon.serverstate.sqlite import SQLiteStateStore

__all__ = (
    "MemoryStateStore",
    "PostgresStateStore",
    "RedisStateStore",
    "SQLiteStateStore",
    "StateEventStore",
    "check_state_store_url",
    "state_store_from_url",
)

# name -> (module, attribute): backends that need an extra, imported on first use.
_LAZY: dict[str, tuple[str, str]] = {
    "PostgresStateStore": ("daimon.serverstate.postgres", "PostgresStateStore"),
    "RedisStateStore": ("daimon.serverstate.redis", "RedisStateStore"),
    "SQLiteStateStore": ("daimon.serverstate.sqlite", "SQLiteStateStore"),
    "StateEventStore": ("daimon.serverstate.mcp_events", "StateEventStore"),
}


# URL scheme -> the lazy name of the store class it picks.
_SCHEMES = {
    "redis": "RedisStateStore",
    "rediss": "RedisStateStore",
    "unix": "RedisStateStore",
    "postgresql": "PostgresStateStore",
    "postgres": "PostgresStateStore",
    "sqlite": "SQLiteStateStore",
}


def check_state_store_url(url: str) -> str:
    """The scheme of ``url`` if it names a known store (lower-cased).

    Raises:
        BuilderError: It names none (or an ``sqlite`` URL names no file).
    """
    scheme, sep, _ = url.partition(":") if isinstance(url, str) else ("", "", "")
    scheme = scheme.lower()
    if not sep or (scheme != "memory" and scheme not in _SCHEMES):
        known = ", ".join(f"{s}://" for s in ("memory", *sorted(_SCHEMES)))
        raise BuilderError(f"unknown state store URL {url!r}; expected one of {known}")
    if scheme == "sqlite":  # a file is needed: say so before a server starts
        importlib.import_module("daimon.serverstate.sqlite").path_from_url(url)
    return scheme


def state_store_from_url(url: str) -> StateStore:
    """The store ``url`` names.

    ``memory://`` (this process), ``redis://``/``rediss://``/``unix://`` (Redis),
    ``postgresql://``/``postgres://`` (PostgreSQL) or ``sqlite:///relative.db``/
    ``sqlite:////absolute/path.db`` (an SQLite file that the processes of one host share).

    Raises:
        BuilderError: The URL names no known store.
    """
    scheme = check_state_store_url(url)
    if scheme == "memory":
        return MemoryStateStore()
    module, name = _LAZY[_SCHEMES[scheme]]
    cls = getattr(importlib.import_module(module), name)
    return cast("StateStore", cls.from_url(url))


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
