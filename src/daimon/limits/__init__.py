"""Rate limits shared across runs, workers and server replicas.

A :class:`Limiter` holds one :class:`RateLimits` (requests, input and output tokens per minute,
calls in flight) per key, kept in this process or, for a fleet, in Redis or PostgreSQL
(:meth:`Limiter.from_url`). A model call waits for its turn before it is sent and settles with
its real usage afterwards; the caller that has waited longest goes first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.core.limits import LimitStore, RateLimits, Remaining, Ticket
    from daimon.limits._limiter import Limiter, Slot
    from daimon.limits._model import LimitedModel
    from daimon.limits.memory import MemoryLimitStore
    from daimon.limits.postgres import PostgresLimitStore
    from daimon.limits.redis import RedisLimitStore

__all__ = (
    "LimitStore",
    "LimitedModel",
    "Limiter",
    "MemoryLimitStore",
    "PostgresLimitStore",
    "RateLimits",
    "RedisLimitStore",
    "Remaining",
    "Slot",
    "Ticket",
)

_LAZY: dict[str, tuple[str, str]] = {
    "LimitStore": ("daimon.core.limits", "LimitStore"),
    "LimitedModel": ("daimon.limits._model", "LimitedModel"),
    "Limiter": ("daimon.limits._limiter", "Limiter"),
    "MemoryLimitStore": ("daimon.limits.memory", "MemoryLimitStore"),
    "PostgresLimitStore": ("daimon.limits.postgres", "PostgresLimitStore"),
    "RateLimits": ("daimon.core.limits", "RateLimits"),
    "RedisLimitStore": ("daimon.limits.redis", "RedisLimitStore"),
    "Remaining": ("daimon.core.limits", "Remaining"),
    "Slot": ("daimon.limits._limiter", "Slot"),
    "Ticket": ("daimon.core.limits", "Ticket"),
}

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
