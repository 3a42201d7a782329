"""The limiter in one process: rates, concurrency, order, what the provider said, giving up."""

from __future__ import annotations

import asyncio
import time

import pytest

import daimon.limits.memory as memory
from daimon.core import BuilderError, RateLimitedError
from daimon.limits import Limiter, MemoryLimitStore, RateLimits, Remaining, Ticket


async def call(
    limiter: Limiter, key: str = "k", *, tokens: int = 0, used: int | None = None
) -> float:
    """One call through the limiter; when it was admitted (monotonic seconds)."""
    async with limiter.slot(key, input_tokens=tokens) as slot:
        admitted = time.monotonic()
        if used is not None:
            slot.settle(used, 0)
    return admitted


async def test_requests_per_period_are_spread_at_the_limits_rate() -> None:
    limiter = Limiter(RateLimits(requests_per_minute=5, period=0.5))  # 10 a second
    started = time.monotonic()
    admitted = await asyncio.gather(*(call(limiter) for _ in range(10)))
    offsets = sorted(t - started for t in admitted)
    assert offsets[4] < 0.3  # the bucket's five at once (the rest wait about 0.1 s each)
    assert offsets[-1] >= 0.45  # the other five at the refill rate, about 0.1 s apart


async def test_concurrent_calls_are_capped() -> None:
    limiter = Limiter(RateLimits(concurrent=2))
    running, most = 0, 0

    async def busy() -> None:
        nonlocal running, most
        async with limiter.slot("k"):
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.02)
            running -= 1

    await asyncio.gather(*(busy() for _ in range(8)))
    assert most == 2


async def test_the_longest_waiting_call_goes_first() -> None:
    """A big call at the head of the queue is not overtaken by small ones that would fit."""
    limiter = Limiter(RateLimits(input_tokens_per_minute=100, period=0.5))
    await call(limiter, tokens=80)  # 20 left
    order: list[str] = []

    async def named(name: str, tokens: int, delay: float) -> None:
        await asyncio.sleep(delay)
        await call(limiter, tokens=tokens)
        order.append(name)

    await asyncio.gather(named("big", 100, 0.0), named("small", 10, 0.05))
    assert order == ["big", "small"]


async def test_a_call_that_used_more_than_it_reserved_makes_the_next_wait() -> None:
    limiter = Limiter(RateLimits(input_tokens_per_minute=100, period=1.0))
    first = await call(limiter, tokens=10, used=100)  # 90 left by the estimate, 0 by the usage
    second = await call(limiter, tokens=10)
    assert second - first >= 0.08  # 10 tokens refill in 0.1 s (without the settle: at once)


async def test_a_pause_the_provider_asked_for_holds_every_call() -> None:
    limiter = Limiter(RateLimits(requests_per_minute=1000))
    await limiter.learn("k", pause=0.3)
    started = time.monotonic()
    await call(limiter)
    assert time.monotonic() - started >= 0.25


async def test_what_the_provider_says_remains_lowers_the_bucket() -> None:
    limiter = Limiter(RateLimits(requests_per_minute=10, period=1.0))
    await limiter.learn("k", remaining=Remaining(requests=0))
    started = time.monotonic()
    await call(limiter)
    assert time.monotonic() - started >= 0.08  # one request refills in 0.1 s


async def test_a_call_that_waited_too_long_fails_and_leaves_the_queue() -> None:
    limiter = Limiter(RateLimits(requests_per_minute=1, period=30.0, max_wait=0.2))
    await call(limiter)
    with pytest.raises(RateLimitedError, match=r"waited 0\.2s for its turn under 'k'"):
        await call(limiter)
    # the refused ticket no longer heads the queue: another key's call is unaffected, and this
    # key's next caller waits only for the bucket, not behind a ghost
    state = limiter.store._keys["k"]  # type: ignore[attr-defined]
    assert state.waiters == {}


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    limiter = Limiter(RateLimits(requests_per_minute=1, period=30.0))
    await call(limiter)
    waiting = asyncio.create_task(call(limiter))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert limiter.store._keys["k"].waiters == {}  # type: ignore[attr-defined]


async def test_a_dead_waiter_stops_blocking_the_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "WAITER_TTL", 0.1)
    store = MemoryLimitStore()
    limits = RateLimits(requests_per_minute=1, period=0.2)
    ghost = Ticket(id="ghost", arrived=0.0, requests=1)
    await store.reserve("k", limits, Ticket(id="first", arrived=1.0))  # takes the one request
    assert await store.reserve("k", limits, ghost) > 0  # queued first, then never asks again
    await asyncio.sleep(0.25)
    assert await store.reserve("k", limits, Ticket(id="live", arrived=2.0)) == 0.0


async def test_keys_are_limited_apart() -> None:
    limiter = Limiter(RateLimits(requests_per_minute=1, period=30.0, max_wait=0.1))
    await call(limiter, "tenant-a")
    await call(limiter, "tenant-b")  # its own bucket: not held up by tenant-a's
    with pytest.raises(RateLimitedError):
        await call(limiter, "tenant-a")


async def test_waits_are_reported() -> None:
    waits: list[tuple[str, float]] = []
    limiter = Limiter(
        RateLimits(requests_per_minute=1, period=0.2), on_wait=lambda k, s: waits.append((k, s))
    )
    await call(limiter)
    await call(limiter)
    [(key, waited)] = waits
    assert key == "k" and waited >= 0.15


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"requests_per_minute": 0}, "requests_per_minute must be a positive whole number"),
        ({"concurrent": 1.5}, "concurrent must be a positive whole number"),
        ({"period": 0}, "period must be a positive number of seconds"),
        ({"max_wait": float("inf")}, "max_wait must be a positive number of seconds"),
    ],
)
def test_bad_limits_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(BuilderError, match=message):
        RateLimits(**options)  # type: ignore[arg-type]


def test_an_unknown_store_url_is_refused() -> None:
    with pytest.raises(BuilderError, match=r"no limit store for 'nats://x'"):
        Limiter.from_url("nats://x", RateLimits())
