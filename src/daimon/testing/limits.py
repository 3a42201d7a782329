"""A conformance suite for :class:`daimon.core.LimitStore` backends.

Subclass :class:`LimitStoreConformance` in a test module and provide a ``make_store`` fixture:
an async callable that opens a new handle on one store, fresh for each test, and closes its
handles at teardown. It is called with no argument, or with ``waiter_ttl=seconds`` (the seconds
a waiting ticket blocks the queue without asking again; the suite shortens it). Handles must
share their state: the races below run on two handles, as two processes would::

    class TestRedisLimitStore(LimitStoreConformance):
        @pytest.fixture
        async def make_store(self, redis_url, redis_prefix):
            handles = []

            async def make(**options):
                handles.append(RedisLimitStore(redis_url, prefix=redis_prefix, **options))
                return handles[-1]

            yield make
            for handle in handles:
                await handle.aclose()

A store in one process's memory returns the same object for the same options.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from daimon.core.errors import DaimonError
from daimon.core.limits import LimitStore, RateLimits, Remaining, Ticket

__all__ = ("LimitStoreConformance", "LimitStoreFactory", "ticket")

LimitStoreFactory = Callable[..., Awaitable[LimitStore]]
"""Opens a new handle on the store under test (options: ``waiter_ttl``)."""

_LONG = 600.0
"""A period so long that nothing refills during a test."""

_last = [0.0]
"""The arrival of the ticket made last (each new one arrives after it)."""


def ticket(
    requests: int = 1, input_tokens: int = 0, output_tokens: int = 0, arrived: float | None = None
) -> Ticket:
    """A new ticket; each arrives after the one made before unless ``arrived`` is given."""
    if arrived is None:
        arrived = _last[0] = max(time.time(), _last[0] + 1e-6)
    return Ticket(
        id=uuid.uuid4().hex,
        arrived=arrived,
        requests=requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


class LimitStoreConformance:
    """Tests every :class:`~daimon.core.LimitStore` passes; provide ``make_store``."""

    # ------------------------------------------------------------------ buckets

    async def test_admits_within_the_bucket(self, make_store: LimitStoreFactory) -> None:
        """Calls go at once while the bucket holds them; the next one is told to wait."""
        store = await make_store()
        limits = RateLimits(requests_per_minute=3, period=_LONG)
        assert [await store.reserve("k", limits, ticket()) for _ in range(3)] == [0.0] * 3
        wait = await store.reserve("k", limits, ticket())
        assert wait == pytest.approx(_LONG / 3, rel=0.05)

    async def test_the_wait_is_the_deficit_at_the_refill_rate(
        self, make_store: LimitStoreFactory
    ) -> None:
        """An empty bucket's wait: missing tokens * period / capacity."""
        store = await make_store()
        limits = RateLimits(input_tokens_per_minute=100, period=10.0)
        assert await store.reserve("k", limits, ticket(input_tokens=100)) == 0.0
        wait = await store.reserve("k", limits, ticket(input_tokens=50))
        assert 4.8 <= wait <= 5.0

    async def test_the_bucket_refills_over_time(self, make_store: LimitStoreFactory) -> None:
        """Spent requests come back at the limit per period."""
        store = await make_store()
        limits = RateLimits(requests_per_minute=2, period=0.4)  # one each 0.2 s
        first, second, third = ticket(), ticket(), ticket()
        assert await store.reserve("k", limits, first) == 0.0
        assert await store.reserve("k", limits, second) == 0.0
        assert 0 < await store.reserve("k", limits, third) <= 0.2
        await asyncio.sleep(0.25)
        assert await store.reserve("k", limits, third) == 0.0

    async def test_a_share_larger_than_the_bucket_is_clamped(
        self, make_store: LimitStoreFactory
    ) -> None:
        """A call bigger than the capacity goes when the bucket is full, and empties it."""
        store = await make_store()
        limits = RateLimits(input_tokens_per_minute=100, period=_LONG)
        assert await store.reserve("k", limits, ticket(input_tokens=5_000)) == 0.0
        wait = await store.reserve("k", limits, ticket(input_tokens=10))
        assert wait == pytest.approx(10 * _LONG / 100, rel=0.05)

    # ------------------------------------------------------------------ concurrency

    async def test_concurrency_is_capped_and_freed(self, make_store: LimitStoreFactory) -> None:
        """Two slots: a third call waits until a settle or a cancel frees one."""
        store = await make_store()
        limits = RateLimits(concurrent=2, period=_LONG)
        a, b, c, d = ticket(), ticket(), ticket(), ticket()
        assert await store.reserve("k", limits, a) == 0.0
        assert await store.reserve("k", limits, b) == 0.0
        assert await store.reserve("k", limits, c) > 0
        await store.settle("k", limits, a, 0, 0)
        assert await store.reserve("k", limits, c) == 0.0
        assert await store.reserve("k", limits, d) > 0
        await store.cancel("k", b)
        assert await store.reserve("k", limits, d) == 0.0

    async def test_a_slot_nobody_settles_expires(self, make_store: LimitStoreFactory) -> None:
        """A dead call's slot frees itself after ``5 * period``."""
        store = await make_store()
        limits = RateLimits(concurrent=1, period=0.1)
        held, next_one = ticket(), ticket()
        assert await store.reserve("k", limits, held) == 0.0
        assert await store.reserve("k", limits, next_one) > 0
        await asyncio.sleep(0.3)
        assert await store.reserve("k", limits, next_one) > 0  # 0.3 s < 0.5 s
        await asyncio.sleep(0.3)
        assert await store.reserve("k", limits, next_one) == 0.0

    # ------------------------------------------------------------------ the queue

    async def test_the_oldest_waiter_goes_first(self, make_store: LimitStoreFactory) -> None:
        """By arrival, not by asking order; a younger call that would fit waits its turn."""
        store = await make_store()
        limits = RateLimits(input_tokens_per_minute=100, period=1.0)
        now = time.time()
        assert await store.reserve("k", limits, ticket(input_tokens=80, arrived=now)) == 0.0
        young = ticket(input_tokens=10, arrived=now + 2)
        old = ticket(input_tokens=100, arrived=now + 1)
        assert await store.reserve("k", limits, old) > 0  # 20 of 100 left
        assert await store.reserve("k", limits, young) > 0  # it would fit, but old is first
        await asyncio.sleep(0.85)
        assert await store.reserve("k", limits, young) > 0
        assert await store.reserve("k", limits, old) == 0.0
        assert await store.reserve("k", limits, young) > 0  # the bucket is empty now

    async def test_arrival_orders_the_queue_not_asking(self, make_store: LimitStoreFactory) -> None:
        """A ticket that asked later but arrived earlier heads the queue."""
        store = await make_store()
        limits = RateLimits(requests_per_minute=1, period=0.3)
        now = time.time()
        assert await store.reserve("k", limits, ticket(arrived=now)) == 0.0
        young, old = ticket(arrived=now + 2), ticket(arrived=now + 1)
        assert await store.reserve("k", limits, young) > 0
        assert await store.reserve("k", limits, old) > 0
        await asyncio.sleep(0.35)
        assert await store.reserve("k", limits, young) > 0
        assert await store.reserve("k", limits, old) == 0.0

    async def test_a_dead_waiter_stops_blocking(self, make_store: LimitStoreFactory) -> None:
        """A waiter that stops asking leaves the queue after ``waiter_ttl``."""
        store = await make_store(waiter_ttl=0.5)
        other = await make_store(waiter_ttl=0.5)
        limits = RateLimits(requests_per_minute=1, period=0.2)
        now = time.time()
        assert await store.reserve("k", limits, ticket(arrived=now)) == 0.0
        assert await store.reserve("k", limits, ticket(arrived=now + 1)) > 0  # then dies
        live = ticket(arrived=now + 2)
        await asyncio.sleep(0.22)  # the bucket is full again
        assert await other.reserve("k", limits, live) > 0  # the dead one is still first
        await asyncio.sleep(0.35)
        assert await other.reserve("k", limits, live) == 0.0

    async def test_a_cancelled_waiter_leaves_the_queue(self, make_store: LimitStoreFactory) -> None:
        """After a cancel, a younger waiter goes first."""
        store = await make_store()
        limits = RateLimits(requests_per_minute=1, period=0.2)
        now = time.time()
        assert await store.reserve("k", limits, ticket(arrived=now)) == 0.0
        gone, live = ticket(arrived=now + 1), ticket(arrived=now + 2)
        assert await store.reserve("k", limits, gone) > 0
        await store.cancel("k", gone)
        await asyncio.sleep(0.22)
        assert await store.reserve("k", limits, live) == 0.0

    # ------------------------------------------------------------------ settle and cancel

    async def test_settle_corrects_by_the_real_usage(self, make_store: LimitStoreFactory) -> None:
        """More than reserved: the bucket goes below zero and later calls wait longer."""
        store = await make_store()
        limits = RateLimits(input_tokens_per_minute=100, output_tokens_per_minute=100, period=10)
        used = ticket(input_tokens=10)
        assert await store.reserve("k", limits, used) == 0.0
        await store.settle("k", limits, used, 150, 0)  # 90 - 140: -50
        wait = await store.reserve("k", limits, ticket(input_tokens=10))
        assert 5.8 <= wait <= 6.0  # 60 missing at 10 a second
        # Less than reserved: the rest comes back.
        spared = ticket(output_tokens=60)
        assert await store.reserve("o", limits, spared) == 0.0
        await store.settle("o", limits, spared, 0, 10)
        assert await store.reserve("o", limits, ticket(output_tokens=90)) == 0.0

    async def test_a_reserve_asked_again_takes_nothing_more(
        self, make_store: LimitStoreFactory
    ) -> None:
        """A reserve retried after its answer was lost finds its ticket admitted already."""
        store = await make_store()
        limits = RateLimits(requests_per_minute=2, period=_LONG)
        retried = ticket()
        assert await store.reserve("k", limits, retried) == 0.0
        assert await store.reserve("k", limits, retried) == 0.0
        assert await store.reserve("k", limits, ticket()) == 0.0  # the second request is left

    async def test_settling_twice_counts_once(self, make_store: LimitStoreFactory) -> None:
        """A second settle of one ticket changes nothing."""
        store = await make_store()
        limits = RateLimits(input_tokens_per_minute=100, period=10)
        used = ticket(input_tokens=10)
        assert await store.reserve("k", limits, used) == 0.0
        await store.settle("k", limits, used, 100, 0)
        await store.settle("k", limits, used, 100, 0)
        wait = await store.reserve("k", limits, ticket(input_tokens=10))
        assert 0.8 <= wait <= 1.0  # 10 missing, not 110

    async def test_a_cancelled_admission_gives_its_tokens_back(
        self, make_store: LimitStoreFactory
    ) -> None:
        """An admitted ticket that gives up returns what it took."""
        store = await make_store()
        limits = RateLimits(requests_per_minute=1, input_tokens_per_minute=100, period=_LONG)
        taken = ticket(input_tokens=100)
        assert await store.reserve("k", limits, taken) == 0.0
        assert await store.reserve("k", limits, ticket(input_tokens=100)) > 0
        await store.cancel("k", taken)
        await store.cancel("k", taken)  # twice: given back once
        again = ticket(input_tokens=100, arrived=0.0)
        assert await store.reserve("k", limits, again) == 0.0
        assert await store.reserve("k", limits, ticket(arrived=1.0)) > 0

    # ------------------------------------------------------------------ learn

    async def test_a_pause_holds_everyone(self, make_store: LimitStoreFactory) -> None:
        """A 429's Retry-After: nobody goes until it passes, on any handle."""
        store, other = await make_store(), await make_store()
        limits = RateLimits(requests_per_minute=1000, period=60)
        await store.learn("k", limits, pause=0.3)
        one = ticket()
        assert 0.1 < await other.reserve("k", limits, one) <= 0.3
        assert await other.reserve("k2", limits, ticket()) == 0.0
        await asyncio.sleep(0.32)
        assert await other.reserve("k", limits, one) == 0.0

    async def test_what_remains_lowers_the_buckets(self, make_store: LimitStoreFactory) -> None:
        """Provider headers lower the buckets; a total token count lowers the input bucket."""
        store = await make_store()
        limits = RateLimits(
            requests_per_minute=10,
            input_tokens_per_minute=100,
            output_tokens_per_minute=100,
            period=10,
        )
        await store.learn("k", limits, remaining=Remaining(requests=0))
        assert 0.9 <= await store.reserve("k", limits, ticket(requests=1)) <= 1.0
        await store.learn("t", limits, remaining=Remaining(tokens=20, requests=50))
        assert await store.reserve("t", limits, ticket(output_tokens=100)) == 0.0
        assert await store.reserve("t", limits, ticket(input_tokens=20)) == 0.0
        assert 0.9 <= await store.reserve("t", limits, ticket(input_tokens=10)) <= 1.0

    # ------------------------------------------------------------------ keys and handles

    async def test_keys_are_apart(self, make_store: LimitStoreFactory) -> None:
        """One tenant's empty bucket does not hold up another's."""
        store = await make_store()
        limits = RateLimits(requests_per_minute=1, concurrent=1, period=_LONG)
        assert await store.reserve("tenant-a", limits, ticket()) == 0.0
        assert await store.reserve("tenant-b", limits, ticket()) == 0.0
        assert await store.reserve("tenant-a", limits, ticket()) > 0

    async def test_two_handles_share_the_limits(self, make_store: LimitStoreFactory) -> None:
        """What one handle takes, the other sees; a settle on one frees a slot on the other."""
        first, second = await make_store(), await make_store()
        limits = RateLimits(requests_per_minute=2, concurrent=1, period=_LONG)
        taken = ticket()
        assert await first.reserve("k", limits, taken) == 0.0
        waiting = ticket()
        assert await second.reserve("k", limits, waiting) > 0
        await second.settle("k", limits, taken, 0, 0)
        assert await first.reserve("k", limits, waiting) == 0.0
        assert await second.reserve("k", limits, ticket()) > 0  # both requests spent

    @pytest.mark.parametrize(
        "limits",
        [
            RateLimits(requests_per_minute=8, period=_LONG),
            RateLimits(concurrent=5, period=_LONG),
            RateLimits(input_tokens_per_minute=70, period=_LONG),
        ],
        ids=["requests", "concurrent", "tokens"],
    )
    async def test_a_burst_on_two_handles_admits_exactly_the_capacity(
        self, make_store: LimitStoreFactory, limits: RateLimits
    ) -> None:
        """Many callers racing on two handles: exactly as many go as the limit holds."""
        handles = [await make_store(), await make_store()]
        expected = limits.requests_per_minute or limits.concurrent or 7  # 70 tokens / 10
        admitted = await _burst(handles, limits, callers=30, tokens=10)
        assert admitted == expected, f"{admitted} admitted; the limit holds {expected}"

    # ------------------------------------------------------------------ bad input

    async def test_bad_input_is_refused(self, make_store: LimitStoreFactory) -> None:
        """Negative counts, a bad key or ticket: a DaimonError, and no state changed."""
        store = await make_store()
        limits = RateLimits(input_tokens_per_minute=100, period=_LONG)
        bad_tickets: list[Any] = [ticket(input_tokens=-1), ticket(requests=-1), "ticket"]
        for bad in bad_tickets:
            with pytest.raises(DaimonError):
                await store.reserve("k", limits, bad)
        for key in ("", "a\0b", 7):
            with pytest.raises(DaimonError):
                await store.reserve(key, limits, ticket())  # type: ignore[arg-type]
        good = ticket(input_tokens=50)
        assert await store.reserve("k", limits, good) == 0.0
        with pytest.raises(DaimonError):
            await store.settle("k", limits, good, -100, 0)
        await store.settle("k", limits, good, 50, 0)
        assert await store.reserve("k", limits, ticket(input_tokens=50)) == 0.0


async def _burst(
    handles: list[LimitStore], limits: RateLimits, *, callers: int, tokens: int
) -> int:
    """``callers`` tickets asking again and again for a second; how many were admitted."""
    deadline = time.monotonic() + 1.0
    admitted = 0

    async def caller(store: LimitStore) -> None:
        nonlocal admitted
        mine = ticket(input_tokens=tokens)
        while time.monotonic() < deadline:
            if await store.reserve("k", limits, mine) == 0.0:
                admitted += 1
                return
            await asyncio.sleep(0.02)
        await store.cancel("k", mine)

    await asyncio.gather(*(caller(handles[i % len(handles)]) for i in range(callers)))
    return admitted
