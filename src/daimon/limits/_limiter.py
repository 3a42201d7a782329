"""Limiter: a call waits for its turn under a key's limits, then settles with what it used."""

from __future__ import annotations

import asyncio
import importlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from daimon.core.errors import BuilderError, RateLimitedError
from daimon.core.limits import LimitStore, RateLimits, Remaining, Ticket
from daimon.limits.memory import MemoryLimitStore

__all__ = ("Limiter", "Slot")

_TRY_EVERY = 0.25
"""The longest sleep between two tries: each try also keeps the waiting ticket alive."""

_STORES = {
    "redis": ("daimon.limits.redis", "RedisLimitStore"),
    "rediss": ("daimon.limits.redis", "RedisLimitStore"),
    "postgresql": ("daimon.limits.postgres", "PostgresLimitStore"),
    "postgres": ("daimon.limits.postgres", "PostgresLimitStore"),
}
"""URL scheme -> (module, class) of the shared stores; each loads only when asked for."""

OnWait = Callable[[str, float], None]
"""Told the key and the seconds a call waited, after a call that had to wait goes."""


class Slot:
    """An admitted call: settle it with the usage it reported (else its estimate stands)."""

    __slots__ = ("_settled", "key", "ticket", "waited")

    def __init__(self, key: str, ticket: Ticket, waited: float) -> None:
        self.key = key
        self.ticket = ticket
        self.waited = waited
        """Seconds the call waited for its turn."""
        self._settled: tuple[int, int] | None = None

    def settle(self, input_tokens: int, output_tokens: int) -> None:
        """Record what the call used (applied when the ``async with`` block ends)."""
        self._settled = (input_tokens, output_tokens)

    @property
    def usage(self) -> tuple[int, int]:
        """The usage to settle with: as recorded, else the estimate."""
        if self._settled is not None:
            return self._settled
        return self.ticket.input_tokens, self.ticket.output_tokens


class Limiter:
    """Shared rate limits: each call reserves its turn before it is sent.

    Args:
        limits: The limits of every key this limiter is used with.
        store: Where the limits are kept: in this process (the default), or a shared store
            (:meth:`from_url`: Redis or PostgreSQL) for a fleet.
        on_wait: Told the key and the seconds waited, after a call that had to wait goes.
    """

    __slots__ = ("limits", "on_wait", "store")

    def __init__(
        self,
        limits: RateLimits,
        store: LimitStore | None = None,
        *,
        on_wait: OnWait | None = None,
    ) -> None:
        if not isinstance(limits, RateLimits):
            raise BuilderError(f"limits must be a RateLimits, got {type(limits).__name__}")
        self.limits = limits
        self.store: LimitStore = store if store is not None else MemoryLimitStore()
        self.on_wait = on_wait

    @classmethod
    def from_url(cls, url: str, limits: RateLimits, **options: Any) -> Limiter:
        """A limiter whose limits are kept at ``url`` (``redis://``, ``postgresql://``).

        Raises:
            BuilderError: The URL's scheme names no limit store.
        """
        scheme = url.partition(":")[0]
        found = _STORES.get(scheme)
        if found is None:
            known = ", ".join(f"{s}://" for s in _STORES)
            raise BuilderError(f"no limit store for {url!r}: use one of {known}")
        module, name = found
        store_class = getattr(importlib.import_module(module), name)
        return cls(limits, store_class.from_url(url, **options))

    @asynccontextmanager
    async def slot(
        self, key: str, *, input_tokens: int = 0, output_tokens: int = 0
    ) -> AsyncIterator[Slot]:
        """Wait for the call's turn under ``key``'s limits; settle when the block ends.

        Raises:
            RateLimitedError: The call waited ``limits.max_wait`` seconds and was not admitted.
        """
        ticket = Ticket(
            id=uuid.uuid4().hex,
            arrived=time.time(),
            input_tokens=max(0, input_tokens),
            output_tokens=max(0, output_tokens),
        )
        waited = await self._admit(key, ticket)
        slot = Slot(key, ticket, waited)
        try:
            yield slot
        finally:
            used_in, used_out = slot.usage
            await asyncio.shield(self.store.settle(key, self.limits, ticket, used_in, used_out))

    async def learn(
        self, key: str, *, pause: float | None = None, remaining: Remaining | None = None
    ) -> None:
        """Pass on what the provider said (a 429's ``Retry-After``, its rate-limit headers)."""
        await self.store.learn(key, self.limits, pause=pause, remaining=remaining)

    async def aclose(self) -> None:
        """Close the store; safe to call again."""
        await self.store.aclose()

    async def _admit(self, key: str, ticket: Ticket) -> float:
        """Ask until the ticket is admitted; the seconds it waited."""
        limits, store = self.limits, self.store
        started = time.monotonic()
        tries = 0
        try:
            while True:
                wait = await store.reserve(key, limits, ticket)
                if wait <= 0:
                    break
                tries += 1
                waited = time.monotonic() - started
                left = limits.max_wait - waited
                if left <= 0:
                    raise RateLimitedError(key, waited)
                await asyncio.sleep(min(wait, _TRY_EVERY, left))
        except BaseException:
            await asyncio.shield(store.cancel(key, ticket))
            raise
        if not tries:
            return 0.0
        waited = time.monotonic() - started
        if self.on_wait is not None:
            self.on_wait(key, waited)
        return waited
