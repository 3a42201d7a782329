"""Where ``daimon serve`` keeps its own state: backends of :class:`daimon.core.StateStore`.

:class:`MemoryStateStore` keeps it in the process (one replica); ``RedisStateStore`` and
``PostgresStateStore`` share it between replicas. ``StateEventStore`` (MCP resumable streams)
and ``StateTaskStore`` (A2A tasks) put the SDKs' stores on any of them. Importing this package
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
    from daimon.serverstate.a2a_tasks import StateTaskStore
    from daimon.serverstate.mcp_events import StateEventStore
    from daimon.serverstate.postgres import PostgresStateStore
    from daimon.serverstate.redis import RedisStateStore

__all__ = (
    "MemoryStateStore",
    "PostgresStateStore",
    "RedisStateStore",
    "StateEventStore",
    "StateTaskStore",
    "check_state_store_url",
    "state_store_from_url",
)

# name -> (module, attribute): backends that need an extra, imported on first use.
_LAZY: dict[str, tuple[str, str]] = {
    "PostgresStateStore": ("daimon.serverstate.postgres", "PostgresStateStore"),
    "RedisStateStore": ("daimon.serverstate.redis", "RedisStateStore"),
    "StateEventStore": ("daimon.serverstate.mcp_events", "StateEventStore"),
    "StateTaskStore": ("daimon.serverstate.a2a_tasks", "StateTaskStore"),
}


# URL scheme -> the lazy name of the store class it picks.
_SCHEMES = {
    "redis": "RedisStateStore",
    "rediss": "RedisStateStore",
    "unix": "RedisStateStore",
    "postgresql": "PostgresStateStore",
    "postgres": "PostgresStateStore",
}


def check_state_store_url(url: str) -> str:
    """The scheme of ``url`` if it names a known store (lower-cased).

    Raises:
        BuilderError: It names none.
    """
    scheme, sep, _ = url.partition(":") if isinstance(url, str) else ("", "", "")
    scheme = scheme.lower()
    if not sep or (scheme != "memory" and scheme not in _SCHEMES):
        known = ", ".join(f"{s}://" for s in ("memory", *sorted(_SCHEMES)))
        raise BuilderError(f"unknown state store URL {url!r}; expected one of {known}")
    return scheme


def state_store_from_url(url: str) -> StateStore:
    """The store ``url`` names.

    ``memory://`` (this process), ``redis://``/``rediss://``/``unix://`` (Redis) or
    ``postgresql://``/``postgres://`` (PostgreSQL).

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
