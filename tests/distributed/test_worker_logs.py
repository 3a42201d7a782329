"""A worker writing a task's events to a server's run log (``daimon serve --broker``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from daimon import Agent, ChatRequest
from daimon._run_logs import (
    END,
    GRACE_KEY,
    LISTENER_KIND,
    LOG_KIND,
    STREAM_KEY,
    TIMEOUT_KEY,
    frame_mark,
)
from daimon.core import TaskState, TaskStatus
from daimon.core.errors import ModelError
from daimon.core.events import StreamEvent
from daimon.distributed import Worker, new_task, wait_for_task
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.models import FunctionModel
from daimon.serverstate import MemoryStateStore


def ticking(ticks: int = 3, pace: float = 0.0, fail_first: bool = False) -> Agent:
    """An agent whose model streams ``ticks`` deltas (the first attempt may fail half-way)."""
    calls = {"n": 0}

    async def talk(request: ChatRequest) -> AsyncIterator[StreamEvent | str]:
        calls["n"] += 1
        for tick in range(ticks):
            await asyncio.sleep(pace)
            if fail_first and calls["n"] == 1 and tick == 1:
                raise ModelError("the provider hung up", retryable=True)
            yield f"t{tick} "

    return Agent(FunctionModel(stream_function=talk), name="ticker")


def log_task(stream: str, **metadata: Any) -> Any:
    return new_task("hi", task_id=stream, metadata={STREAM_KEY: stream, **metadata})


async def frames(store: MemoryStateStore, stream: str) -> list[tuple[str, Any]]:
    """The log's frames as (event, data) pairs, ``END`` as ("END", None).

    Each frame a worker wrote is marked with its attempt and place, increasing through the log.
    """
    out: list[tuple[str, Any]] = []
    marks: list[tuple[int, int]] = []
    for _, value in await store.read_after(LOG_KIND, stream, 0):
        if value == END:
            out.append(("END", None))
            continue
        mark = frame_mark(value)
        assert mark is not None, value
        marks.append(mark)
        head, _, data = value.split("\n", 1)[1].partition("\ndata: ")
        out.append((head.removeprefix("event: "), json.loads(data)))
    assert marks == sorted(set(marks))
    return out


async def run_until_settled(worker: Worker, broker: MemoryBroker, task_id: str) -> TaskStatus:
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            return await wait_for_task(broker, task_id)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)


async def test_a_task_naming_a_log_has_its_events_written_there_then_the_end() -> None:
    broker, store = MemoryBroker(lease=1.0), MemoryStateStore()
    await broker.submit(log_task("s1"))
    worker = Worker(ticking(), broker.handle(), poll=0.05, store=store)
    status = await run_until_settled(worker, broker, "s1")
    assert status.state is TaskState.COMPLETED
    got = await frames(store, "s1")
    deltas = [data["text"] for event, data in got if event == "text_delta"]
    assert deltas == ["t0 ", "t1 ", "t2 "]
    assert [event for event, _ in got[-2:]] == ["done", "END"]
    assert got[-2][1]["response"]["text"] == "t0 t1 t2 "
    assert "attempt" not in [event for event, _ in got]


async def test_a_retried_attempt_starts_with_an_attempt_event() -> None:
    broker, store = MemoryBroker(lease=1.0), MemoryStateStore()
    await broker.submit(log_task("s2"))
    worker = Worker(
        ticking(fail_first=True), broker.handle(), poll=0.05, store=store, retry_delay=0.0
    )
    status = await run_until_settled(worker, broker, "s2")
    assert status.state is TaskState.COMPLETED
    events = [event for event, _ in await frames(store, "s2")]
    # the first attempt's delta, then the second attempt from its start; one end only
    assert events[:2] == ["text_delta", "attempt"]
    assert events.count("END") == 1 and events[-2:] == ["done", "END"]
    attempt = next(data for event, data in await frames(store, "s2") if event == "attempt")
    assert attempt == {"kind": "attempt", "attempt": 2}


async def test_a_task_that_fails_for_good_ends_its_log_with_an_error() -> None:
    broker, store = MemoryBroker(lease=1.0, max_deliver=1), MemoryStateStore()
    await broker.submit(log_task("s3"))
    worker = Worker(ticking(fail_first=True), broker.handle(), poll=0.05, store=store)
    status = await run_until_settled(worker, broker, "s3")
    assert status.state is TaskState.FAILED
    got = await frames(store, "s3")
    assert [event for event, _ in got[-2:]] == ["error", "END"]
    assert got[-2][1]["error_type"] == "ModelError"


async def test_a_worker_without_a_store_fails_a_task_naming_a_log_saying_so() -> None:
    broker = MemoryBroker(lease=1.0)
    await broker.submit(log_task("s4"))
    worker = Worker(ticking(), broker.handle(), poll=0.05)
    status = await run_until_settled(worker, broker, "s4")
    assert status.state is TaskState.FAILED
    assert status.error is not None and "--store" in status.error
    assert status.error.startswith("BuilderError")


async def test_a_cancelled_task_stops_and_ends_its_log_with_an_error() -> None:
    broker, store = MemoryBroker(lease=0.3), MemoryStateStore()
    await broker.submit(log_task("s5"))
    worker = Worker(ticking(ticks=100, pace=0.05), broker.handle(), poll=0.05, store=store)
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(5):
            while not await store.read_after(LOG_KIND, "s5", 0):  # noqa: ASYNC110 - polls
                await asyncio.sleep(0.02)
            assert await broker.cancel("s5")
            while ("END", None) not in await frames(store, "s5"):  # noqa: ASYNC110 - polls
                await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
    got = await frames(store, "s5")
    assert [event for event, _ in got[-2:]] == ["error", "END"]
    assert got[-2][1]["error_type"] == "RunCancelled"
    assert sum(event == "text_delta" for event, _ in got) < 50  # it stopped early


async def test_a_run_nobody_reads_for_its_grace_is_cancelled() -> None:
    broker, store = MemoryBroker(lease=1.0), MemoryStateStore()
    await store.put(LISTENER_KIND, "s6", "1", ttl=0.3)  # a reader that leaves at once
    await broker.submit(log_task("s6", **{GRACE_KEY: 0.3}))
    worker = Worker(ticking(ticks=100, pace=0.05), broker.handle(), poll=0.05, store=store)
    status = await run_until_settled(worker, broker, "s6")
    assert status.state is TaskState.FAILED
    got = await frames(store, "s6")
    assert [event for event, _ in got[-2:]] == ["error", "END"]
    assert "no client read its events" in got[-2][1]["message"]


def test_the_worker_and_the_log_writer_import_without_the_web_libraries() -> None:
    code = (
        "import sys\n"
        "import daimon._run_logs, daimon.distributed._worker\n"
        "web = sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette'))\n"
        "assert not web, web\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("metadata", [{STREAM_KEY: 7}, {STREAM_KEY: ""}])
async def test_a_task_whose_log_name_is_not_a_string_fails(metadata: dict[str, Any]) -> None:
    broker, store = MemoryBroker(lease=1.0), MemoryStateStore()
    await broker.submit(new_task("hi", task_id="s7", metadata=metadata))
    worker = Worker(ticking(), broker.handle(), poll=0.05, store=store)
    status = await run_until_settled(worker, broker, "s7")
    assert status.state is TaskState.FAILED
    assert status.error is not None and STREAM_KEY in status.error


async def test_a_run_past_its_timeout_ends_its_log_with_a_timeout() -> None:
    broker, store = MemoryBroker(lease=1.0), MemoryStateStore()
    await broker.submit(log_task("s8", **{TIMEOUT_KEY: 0.2}))
    worker = Worker(ticking(ticks=100, pace=0.05), broker.handle(), poll=0.05, store=store)
    status = await run_until_settled(worker, broker, "s8")
    assert status.state is TaskState.FAILED
    assert status.error is not None and "0.2" in status.error
    got = await frames(store, "s8")
    assert [event for event, _ in got[-2:]] == ["error", "END"]
    assert got[-2][1]["error_type"] == "TimeoutError"
