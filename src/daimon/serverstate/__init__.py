"""Where ``daimon serve`` keeps its own state: backends of :class:`daimon.core.StateStore`.

:class:`MemoryStateStore` keeps it in the process (one replica); ``RedisStateStore`` and
``PostgresStateStore`` share it between replicas. ``StateEventStore`` (MCP resumable streams)
and ``StateTaskStore`` (A2A tasks) put the SDKs' stores on any of them. Importing this package
stays cheap: what needs an optional library loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports
from daimon.serverstate.memory import MemoryStateStore

if TYPE_CHECKING:
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
)

# name -> (module, attribute): backends that need an extra, imported on first use.
_LAZY: dict[str, tuple[str, str]] = {
    "PostgresStateStore": ("daimon.serverstate.postgres", "PostgresStateStore"),
    "RedisStateStore": ("daimon.serverstate.redis", "RedisStateStore"),
    "StateEventStore": ("daimon.serverstate.mcp_events", "StateEventStore"),
    "StateTaskStore": ("daimon.serverstate.a2a_tasks", "StateTaskStore"),
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
