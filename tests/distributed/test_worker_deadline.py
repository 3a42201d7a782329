"""A streamed task's timeout counts from its submission: a later attempt gets what is left."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from daimon import Agent, ChatRequest
from daimon._run_logs import DEADLINE_KEY, END, LOG_KIND, STREAM_KEY, TIMEOUT_KEY
from daimon.core import TaskState
from daimon.core.events import StreamEvent, TextDelta
from daimon.distributed import Worker, new_task, wait_for_task
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.models import FunctionModel
from daimon.serverstate import MemoryStateStore


def slow() -> Agent:
    """Streams one delta, then takes 5 s over the rest."""

    async def talk(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta(text="thinking")
        await asyncio.sleep(5)
        yield TextDelta(text="done")

    return Agent(FunctionModel(stream_function=talk), name="slow")


async def test_an_attempt_ends_at_the_deadline_set_at_submission() -> None:
    broker, store = MemoryBroker(lease=5.0), MemoryStateStore()
    # Submitted 9.7 s ago with a 10 s timeout (as a lost first attempt would leave it).
    metadata = {STREAM_KEY: "s1", TIMEOUT_KEY: 10.0, DEADLINE_KEY: time.time() + 0.3}
    await broker.submit(new_task("hi", task_id="s1", metadata=metadata))
    worker = Worker(slow(), broker.handle(), poll=0.05, store=store)
    running = asyncio.create_task(worker.run())
    started = time.monotonic()
    try:
        async with asyncio.timeout(10):
            status = await wait_for_task(broker, "s1")
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
    took = time.monotonic() - started
    assert took < 3.0, f"the attempt ran {took:.1f} s: a new 10 s timeout, not what was left"
    assert status.state is TaskState.FAILED
    logged = [value for _, value in await store.read_after(LOG_KIND, "s1", 0)]
    assert logged[-1] == END
    error = json.loads(logged[-2].rsplit("data: ", 1)[1])
    assert error["error_type"] == "TimeoutError"
    assert "10" in error["message"]  # the timeout the request had
