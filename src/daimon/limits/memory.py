"""MemoryLimitStore: a fleet's limits kept in this process (one process's runs share them).

The reference :class:`~daimon.core.LimitStore`: the Redis and PostgreSQL stores keep the same
state (token buckets, concurrency slots, waiting tickets, a pause) in their own medium, by the
same rules. Time is this process's monotonic clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from daimon.core.limits import RateLimits, Remaining, Ticket

__all__ = ("MemoryLimitStore", "WAITER_TTL", "shares", "slot_ttl")

WAITER_TTL = 2.0
"""Seconds a waiting ticket stays in the queue without being refreshed (its caller asks again
every quarter second at most): a dead process's ticket stops blocking the queue this soon."""

_SOON = 0.05
"""The wait to report when only another ticket's end can let this one go."""


def slot_ttl(limits: RateLimits) -> float:
    """Seconds a concurrency slot is held unless its call settles (a dead one frees itself)."""
    return 5 * limits.period


def shares(limits: RateLimits, ticket: Ticket) -> dict[str, tuple[float, int]]:
    """Per limited bucket: its capacity and the ticket's share, clamped to the capacity."""
    found: dict[str, tuple[float, int]] = {}
    for name, limit, share in (
        ("requests", limits.requests_per_minute, ticket.requests),
        ("input", limits.input_tokens_per_minute, ticket.input_tokens),
        ("output", limits.output_tokens_per_minute, ticket.output_tokens),
    ):
        if limit is not None:
            found[name] = (float(limit), min(share, limit))
    return found


@dataclass(slots=True)
class _Key:
    """One key's state."""

    levels: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per bucket: tokens available, and when that was true."""
    slots: dict[str, float] = field(default_factory=dict)
    """Admitted tickets holding a concurrency slot, and when the slot expires."""
    waiters: dict[str, tuple[float, str, float]] = field(default_factory=dict)
    """Waiting tickets: (arrived, id) for the order, and when each was last refreshed."""
    admitted: dict[str, dict[str, int]] = field(default_factory=dict)
    """Admitted, unsettled tickets and the shares they took."""
    paused_until: float = 0.0


class MemoryLimitStore:
    """Limits kept in this process: every run of the process shares them."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[str, _Key] = {}

    async def reserve(self, key: str, limits: RateLimits, ticket: Ticket) -> float:
        """See :meth:`daimon.core.LimitStore.reserve`."""
        now = time.monotonic()
        state = self._keys.setdefault(key, _Key())
        _expire(state, now)
        state.waiters[ticket.id] = (ticket.arrived, ticket.id, now)
        if now < state.paused_until:
            return state.paused_until - now
        first = min(state.waiters.values())
        if first[1] != ticket.id:
            return _SOON
        wanted = shares(limits, ticket)
        wait = max(
            (
                _deficit(state, limits, name, cap, share, now)
                for name, (cap, share) in wanted.items()
            ),
            default=0.0,
        )
        if limits.concurrent is not None and len(state.slots) >= limits.concurrent:
            wait = max(wait, _SOON)
        if wait > 0:
            return wait
        for name, (cap, share) in wanted.items():
            level = _level(state, limits, name, cap, now)
            state.levels[name] = (level - share, now)
        del state.waiters[ticket.id]
        state.admitted[ticket.id] = {name: share for name, (_, share) in wanted.items()}
        if limits.concurrent is not None:
            state.slots[ticket.id] = now + slot_ttl(limits)
        return 0.0

    async def settle(
        self, key: str, limits: RateLimits, ticket: Ticket, input_tokens: int, output_tokens: int
    ) -> None:
        """See :meth:`daimon.core.LimitStore.settle`."""
        state = self._keys.get(key)
        if state is None:
            return
        taken = state.admitted.pop(ticket.id, None)
        state.slots.pop(ticket.id, None)
        if taken is None:
            return
        now = time.monotonic()
        for name, used in (("input", input_tokens), ("output", output_tokens)):
            cap = _capacity(limits, name)
            if name in taken and cap is not None:
                level = _level(state, limits, name, cap, now)
                state.levels[name] = (level - (used - taken[name]), now)

    async def cancel(self, key: str, ticket: Ticket) -> None:
        """See :meth:`daimon.core.LimitStore.cancel`."""
        state = self._keys.get(key)
        if state is None:
            return
        state.waiters.pop(ticket.id, None)
        state.slots.pop(ticket.id, None)
        taken = state.admitted.pop(ticket.id, None)
        if not taken:
            return
        for name, share in taken.items():
            if name in state.levels:
                level, at = state.levels[name]
                state.levels[name] = (level + share, at)

    async def learn(
        self,
        key: str,
        limits: RateLimits,
        *,
        pause: float | None = None,
        remaining: Remaining | None = None,
    ) -> None:
        """See :meth:`daimon.core.LimitStore.learn`."""
        now = time.monotonic()
        state = self._keys.setdefault(key, _Key())
        if pause is not None and pause > 0:
            state.paused_until = max(state.paused_until, now + pause)
        if remaining is None:
            return
        input_left = (
            remaining.input_tokens if remaining.input_tokens is not None else remaining.tokens
        )
        for name, left in (
            ("requests", remaining.requests),
            ("input", input_left),
            ("output", remaining.output_tokens),
        ):
            cap = _capacity(limits, name)
            if left is not None and cap is not None:
                level = _level(state, limits, name, cap, now)
                state.levels[name] = (min(level, float(left)), now)

    async def aclose(self) -> None:
        """Nothing to release."""


def _capacity(limits: RateLimits, name: str) -> float | None:
    limit = {
        "requests": limits.requests_per_minute,
        "input": limits.input_tokens_per_minute,
        "output": limits.output_tokens_per_minute,
    }[name]
    return None if limit is None else float(limit)


def _level(state: _Key, limits: RateLimits, name: str, cap: float, now: float) -> float:
    """The bucket's tokens now: what it had, refilled at ``cap / period`` per second."""
    level, at = state.levels.get(name, (cap, now))
    return min(cap, level + (now - at) * cap / limits.period)


def _deficit(
    state: _Key, limits: RateLimits, name: str, cap: float, share: int, now: float
) -> float:
    """Seconds until the bucket holds ``share`` (0 when it does)."""
    missing = share - _level(state, limits, name, cap, now)
    return 0.0 if missing <= 0 else missing * limits.period / cap


def _expire(state: _Key, now: float) -> None:
    """Forget waiters not refreshed lately and slots past their expiry."""
    for ticket_id in [t for t, (_, _, seen) in state.waiters.items() if now - seen > WAITER_TTL]:
        del state.waiters[ticket_id]
    for ticket_id in [t for t, until in state.slots.items() if until <= now]:
        del state.slots[ticket_id]
        state.admitted.pop(ticket_id, None)
