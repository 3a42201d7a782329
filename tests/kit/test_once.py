"""``Once``: an async set-up run once for every caller, tried again after a failure or a reset."""

from __future__ import annotations

import asyncio

import pytest

from daimon.kit.lifecycle import Once


async def test_callers_at_the_same_time_share_one_set_up_then_reset_runs_it_again() -> None:
    calls: list[int] = []

    async def setup() -> None:
        calls.append(1)
        await asyncio.sleep(0.01)

    once = Once()
    await asyncio.gather(*(once.run(setup) for _ in range(5)))
    await once.run(setup)
    assert len(calls) == 1
    once.reset()
    await once.run(setup)
    assert len(calls) == 2


async def test_a_set_up_that_failed_is_tried_again_by_the_next_caller() -> None:
    tries: list[int] = []

    async def setup() -> None:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("the database is down")

    once = Once()
    with pytest.raises(ConnectionError):
        await once.run(setup)
    await once.run(setup)
    await once.run(setup)
    assert len(tries) == 2
