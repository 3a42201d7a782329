"""MemoryLimitStore: a fleet's limits kept in this process (one process's runs share them).

The reference :class:`~daimon.core.LimitStore`: the Redis and PostgreSQL stores keep the same
state (token buckets, concurrency slots, waiting tickets, a pause) in their own medium, by the
same rules. Time is this process's monotonic clock.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from daimon.core.errors import BuilderError
from daimon.core.limits import RateLimits, Remaining, Ticket
from daimon.kit.checks import check_seconds

__all__ = (
    "MemoryLimitStore",
    "WAITER_TTL",
    "check_key",
    "check_ticket",
    "check_usage",
    "check_waiter_ttl",
    "shares",
    "slot_ttl",
)

WAITER_TTL = 2.0
"""Seconds a waiting ticket stays in the queue without being refreshed (its caller asks again
every quarter second at most): a dead process's ticket stops blocking the queue this soon."""

_SOON = 0.05
"""The wait to report when only another ticket's end can let this one go."""


def check_key(key: object) -> str:
    """``key`` if a store can keep it: 1 to 1,000 characters, no NUL; else BuilderError."""
    if not isinstance(key, str) or not 0 < len(key) <= 1000 or "\0" in key:
        raise BuilderError(f"a limit key must be 1 to 1000 characters without NUL, got {key!r}")
    return key


def _check_tokens(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BuilderError(f"{name} must be a whole number of 0 or more, got {value!r}")
    return value


def check_ticket(ticket: object) -> Ticket:
    """``ticket`` if its id and counts can be kept; else BuilderError."""
    if not isinstance(ticket, Ticket):
        raise BuilderError(f"expected a Ticket, got {type(ticket).__name__}")
    if not isinstance(ticket.id, str) or not 0 < len(ticket.id) <= 200 or "\0" in ticket.id:
        raise BuilderError(f"a ticket id must be 1 to 200 characters, got {ticket.id!r}")
    if isinstance(ticket.arrived, bool) or not isinstance(ticket.arrived, int | float):
        raise BuilderError(f"a ticket's arrival must be a number, got {ticket.arrived!r}")
    if not math.isfinite(ticket.arrived):
        raise BuilderError(f"a ticket's arrival must be finite, got {ticket.arrived!r}")
    _check_tokens("requests", ticket.requests)
    _check_tokens("input_tokens", ticket.input_tokens)
    _check_tokens("output_tokens", ticket.output_tokens)
    return ticket


def check_usage(input_tokens: object, output_tokens: object) -> tuple[int, int]:
    """The usage a call settles with, if both counts are whole numbers of 0 or more."""
    return _check_tokens("input_tokens", input_tokens), _check_tokens(
        "output_tokens", output_tokens
    )


def check_waiter_ttl(waiter_ttl: object) -> float:
    """``waiter_ttl`` if it is a positive, finite number of seconds; else BuilderError."""
    return check_seconds("waiter_ttl", waiter_ttl)


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
    """Limits kept in this process: every run of the process shares them.

    Args:
        waiter_ttl: Seconds a waiting ticket blocks the queue without asking again
            (:data:`WAITER_TTL` unless given; tests shorten it).
    """

    __slots__ = ("_keys", "_waiter_ttl")

    def __init__(self, *, waiter_ttl: float | None = None) -> None:
        self._keys: dict[str, _Key] = {}
        self._waiter_ttl = None if waiter_ttl is None else check_waiter_ttl(waiter_ttl)

    async def reserve(self, key: str, limits: RateLimits, ticket: Ticket) -> float:
        """See :meth:`daimon.core.LimitStore.reserve`."""
        check_key(key)
        check_ticket(ticket)
        now = time.monotonic()
        state = self._keys.setdefault(key, _Key())
        _expire(state, now, WAITER_TTL if self._waiter_ttl is None else self._waiter_ttl)
        if ticket.id in state.admitted:  # asked again (its answer was lost): admitted already
            return 0.0
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
        check_key(key)
        check_ticket(ticket)
        check_usage(input_tokens, output_tokens)
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
        check_key(key)
        check_ticket(ticket)
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
        check_key(key)
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


def _expire(state: _Key, now: float, waiter_ttl: float) -> None:
    """Forget waiters not refreshed within ``waiter_ttl`` and slots past their expiry."""
    for ticket_id in [t for t, (_, _, seen) in state.waiters.items() if now - seen > waiter_ttl]:
        del state.waiters[ticket_id]
    for ticket_id in [t for t, until in state.slots.items() if until <= now]:
        del state.slots[ticket_id]
        state.admitted.pop(ticket_id, None)
