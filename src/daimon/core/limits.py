"""Rate limits shared by a fleet: what a limit says, and the contract of the stores that keep them.

A model call reserves before it is sent (a :class:`Ticket`: one request, its estimated input and
output tokens), and settles with its real usage afterwards. A :class:`LimitStore` keeps, per key
(an API key, a model, a tenant), token buckets for requests and tokens, refilled continuously at
the limit per ``period``, the concurrency slots in use, and the queue of waiting tickets: the
oldest live waiter is admitted first. Every process that uses one store shares its limits.
Standard library only: providers report :class:`Remaining` without importing :mod:`daimon.limits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from daimon.core.errors import BuilderError

__all__ = ("LimitStore", "RateLimits", "Remaining", "Ticket")


def _check_count(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise BuilderError(f"{name} must be a positive whole number or None, got {value!r}")


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise BuilderError(f"{name} must be a positive number of seconds, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimits:
    """The limits of one key, per ``period`` (a minute unless shortened); ``None``: no limit."""

    requests_per_minute: int | None = None
    input_tokens_per_minute: int | None = None
    output_tokens_per_minute: int | None = None
    concurrent: int | None = None
    """Calls in flight at once."""
    period: float = 60.0
    """The window the per-minute limits count over, in seconds (tests shorten it)."""
    max_wait: float = 60.0
    """The longest a call waits for its turn before it fails with ``RateLimitedError``."""

    def __post_init__(self) -> None:
        for name in (
            "requests_per_minute",
            "input_tokens_per_minute",
            "output_tokens_per_minute",
            "concurrent",
        ):
            _check_count(name, getattr(self, name))
        _check_seconds("period", self.period)
        _check_seconds("max_wait", self.max_wait)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ticket:
    """One call's claim on a key's limits, kept from its first try until it settles."""

    id: str
    """Unique per call (a uuid4's hex)."""
    arrived: float
    """When the call first asked, in seconds since the epoch: the queue's order."""
    requests: int = 1
    input_tokens: int = 0
    """Estimated input tokens (the settle corrects the bucket by the real count)."""
    output_tokens: int = 0
    """Estimated output tokens (the settle corrects the bucket by the real count)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Remaining:
    """What a provider says is left of its limits (rate-limit headers), and when it resets."""

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tokens: int | None = None
    """Tokens left where the provider counts input and output together."""
    reset: float | None = None
    """Seconds until the provider's window starts afresh."""
    extra: dict[str, str] = field(default_factory=dict[str, str])
    """The headers as the provider sent them, for logs."""


@runtime_checkable
class LimitStore(Protocol):
    """Where a fleet's limits are kept: token buckets, concurrency slots and waiting tickets.

    Every operation is atomic and judged by the store's clock. State expires on its own: a
    dead process's waiting ticket stops blocking the queue within seconds, its concurrency slot
    within ``5 * period``.
    """

    async def reserve(self, key: str, limits: RateLimits, ticket: Ticket) -> float:
        """Admit ``ticket`` if it may go now; else queue it (or refresh it) and say how long.

        A ticket goes when no older live ticket waits on ``key``, every bucket holds its share
        (a share larger than a bucket's capacity counts as the capacity) and, with a
        concurrency limit, a slot is free; then its shares are taken and ``0.0`` returned.
        Otherwise the seconds until it could go (an estimate, ``> 0``); the caller asks again.
        """
        ...

    async def settle(
        self, key: str, limits: RateLimits, ticket: Ticket, input_tokens: int, output_tokens: int
    ) -> None:
        """The admitted call ended with this usage: correct the buckets, free its slot.

        A bucket may go below zero (the call used more than reserved): later calls then wait.
        Settling a ticket again does nothing.
        """
        ...

    async def cancel(self, key: str, ticket: Ticket) -> None:
        """The ticket gives up: a waiter leaves the queue.

        An admitted one frees its slot and gives its reserved tokens back.
        """
        ...

    async def learn(
        self,
        key: str,
        limits: RateLimits,
        *,
        pause: float | None = None,
        remaining: Remaining | None = None,
    ) -> None:
        """What the provider said, for every process on ``key``.

        Admit nobody for ``pause`` seconds (a 429's ``Retry-After``); lower the buckets to at most
        what ``remaining`` says is left.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; safe to call again."""
        ...
