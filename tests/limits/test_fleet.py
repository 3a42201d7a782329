"""A fleet sharing one API key: 4 ``daimon worker`` processes and 2 ``daimon serve`` replicas
call one rate-limited provider (an OpenAI-compatible fake, fake_provider.py) at the same time.

The provider allows ``REQUESTS`` requests and ``TOKENS`` tokens per ``PERIOD`` seconds (a
minute, shortened), refusing beyond them with 429 as OpenAI does. With the shared limiter
(``--limits ... --limits-store redis://...``) it refuses nothing and the fleet uses at least 90%
of the limit; without it, it refuses (so the first test can fail). When the provider's limit is
below the configured one, the processes learn it from its answers and all slow down: after the
first period, hardly a 429 more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ._harness import Fleet, Outcome, Provider, drive, figures, fleet, provider, until_ready

pytestmark = [pytest.mark.service("redis"), pytest.mark.timeout(120)]

PERIOD = 2.0
"""The provider's window, standing for a minute."""
REQUESTS = 20
"""Requests per period at the provider."""
TOKENS = 2400
"""Tokens per period at the provider: estimated prompt plus max_tokens (50), at admission."""
LIMITS = f"rpm={REQUESTS * 9 // 10},itpm=900,otpm=1260,period={PERIOD * 0.9:g}"
"""The fleet's limits: the provider's rates (its token limit split between input and output)
over a window 10% shorter, so a burst 10% smaller. With the provider's own burst, the calls
admitted at once reach it over some 0.3 s while later ones overtake them: 1 to 4 refusals in the
first half second were measured (none after)."""
WORKERS, REPLICAS = 4, 2
TASKS, PROMPTS = 120, 80
"""Calls through the workers (broker tasks) and through the servers (HTTP)."""


def limited(redis_url: str, limits: str = LIMITS) -> list[str]:
    """The options sharing ``limits`` through Redis."""
    return ["--limits", limits, "--limits-store", redis_url]


@dataclass
class Running:
    """A provider and a fleet calling it."""

    source: Provider
    fleet: Fleet
    started: float
    """Seconds the fleet took to come up."""


@pytest.fixture(scope="module")
def module_stack() -> Iterator[contextlib.ExitStack]:
    """What the module's tests share, stopped after the last."""
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.fixture
async def limited_fleet(
    module_stack: contextlib.ExitStack,
    tmp_path_factory: pytest.TempPathFactory,
    redis_url: str,
) -> Running:
    """The fleet with the shared limiter, started once for the module's tests (5 to 15 s on
    two cores) and warmed up: every process has called the provider (its first call, which
    opens a connection, is slower than the others). Each test sets the provider's limits."""
    cached: Running | None = getattr(module_stack, "running", None)
    if cached is None:
        folder = tmp_path_factory.mktemp("limited")
        source = module_stack.enter_context(
            provider(requests=REQUESTS, tokens=TOKENS, period=PERIOD)
        )
        options = limited(redis_url)
        running = module_stack.enter_context(
            fleet(folder, source, redis_url, workers=WORKERS, replicas=REPLICAS, limits=options)
        )
        cached = Running(source, running, await until_ready(running))
        await drive(running, tasks=4 * WORKERS, prompts=4 * REPLICAS, callers=4)
        module_stack.running = cached  # type: ignore[attr-defined]
    await asyncio.sleep(PERIOD)  # the limiter's buckets full again, like the provider's
    return cached


async def call(running: Running, tasks: int, prompts: int) -> Outcome:
    """``tasks`` calls through the workers and ``prompts`` through the servers, all at once."""
    outcome = await drive(running.fleet, tasks=tasks, prompts=prompts)
    print(
        f"\nfleet up in {running.started:.1f} s; {tasks + prompts} calls answered in "
        f"{outcome.seconds:.1f} s; {len(outcome.failures)} failed"
    )
    return outcome


def all_answered(outcome: Outcome, tasks: int, prompts: int) -> None:
    assert not outcome.failures, outcome.failures[:5]
    assert outcome.answered == {"worker": tasks, "server": prompts}


async def test_with_the_shared_limiter_the_provider_refuses_nothing_at_full_speed(
    limited_fleet: Running,
) -> None:
    source = limited_fleet.source
    source.limit(requests=REQUESTS, tokens=TOKENS, period=PERIOD)
    outcome = await call(limited_fleet, TASKS, PROMPTS)
    seen = figures(source.records(), requests=REQUESTS, period=PERIOD)
    print(f"with the limiter: {seen}")
    all_answered(outcome, TASKS, PROMPTS)
    assert seen.refused == 0, seen
    assert seen.throughput >= 0.9, seen


async def test_a_lower_limit_learned_by_one_process_slows_them_all(
    limited_fleet: Running,
) -> None:
    lower = REQUESTS * 3 // 5
    source = limited_fleet.source
    source.limit(requests=lower, tokens=TOKENS, period=PERIOD)
    outcome = await call(limited_fleet, TASKS // 2, PROMPTS // 2)
    records = source.records()
    seen = figures(records, requests=lower, period=PERIOD)
    start = min(r["t"] for r in records)
    late = Counter(r["process"] for r in records if r["status"] == 429 and r["t"] > start + PERIOD)
    print(f"a lower limit: {seen}; refused after the first period: {dict(late)}")
    assert max(late.values(), default=0) <= 2, (dict(late), seen)
    all_answered(outcome, TASKS // 2, PROMPTS // 2)


async def test_without_a_limiter_the_provider_refuses(tmp_path: Path, redis_url: str) -> None:
    """The same fleet and calls without ``--limits``: the provider refuses."""
    with provider(requests=REQUESTS, tokens=TOKENS, period=PERIOD) as source:
        with fleet(
            tmp_path, source, redis_url, workers=WORKERS, replicas=REPLICAS, limits=[]
        ) as running:
            started = await until_ready(running)
            await call(Running(source, running, started), TASKS // 2, PROMPTS // 2)
        seen = figures(source.records(), requests=REQUESTS, period=PERIOD)
    print(f"without a limiter: {seen}")
    assert seen.refused > 0, seen
