"""``daimon broker dead-letters`` against a real Redis broker."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from daimon.distributed.brokers.redis import RedisBroker
from daimon.testing.brokers import sample_task

from .conftest import CLI

URL = "redis://127.0.0.1:6379/0"


async def _dead_letter_one(queue: str) -> None:
    async with RedisBroker.from_url(URL, queue=queue) as broker:
        await broker.submit(sample_task("poison"))
        delivery = await broker.claim(wait=2)
        assert delivery is not None
        assert await delivery.fail("ValueError: nope")
        await broker.submit(sample_task("healthy"))


@pytest.mark.service("redis")
def test_dead_letters_are_listed_as_text_and_json_and_stay(cli: CLI) -> None:
    queue = f"cli-dead-{uuid.uuid4().hex[:8]}"
    asyncio.run(_dead_letter_one(queue))

    text = cli("broker", "dead-letters", URL, "--queue", queue)
    assert text.returncode == 0, text.stderr
    [line] = text.stdout.splitlines()
    assert "  poison  attempts=1  ValueError: nope" in line

    as_json = cli("broker", "dead-letters", URL, "--queue", queue, "--json", "--limit", "5")
    assert as_json.returncode == 0, as_json.stderr
    [row] = json.loads(as_json.stdout)
    assert row["task"]["task_id"] == "poison"
    assert row["task"]["input"] == sample_task().input
    assert (row["reason"], row["attempts"]) == ("ValueError: nope", 1)
    assert row["dead_at"] > 0


@pytest.mark.service("redis")
def test_an_empty_queue_and_a_bad_limit(cli: CLI) -> None:
    queue = f"cli-dead-{uuid.uuid4().hex[:8]}"
    empty = cli("broker", "dead-letters", URL, "--queue", queue)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout == ""
    assert "no dead letters" in empty.stderr
    bad = cli("broker", "dead-letters", URL, "--queue", queue, "--limit", "0")
    assert bad.returncode == 2
    assert "limit must be a whole number from 1 to 10,000, got 0" in bad.stderr
