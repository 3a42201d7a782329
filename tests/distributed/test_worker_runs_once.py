"""A promptable that cannot resume (a HandoffNetwork, a flow) runs once on workers.

Its agents run with fresh run ids, so no checkpoint says which tools ran: a failed attempt fails
the task for good, and a later attempt (its worker lost) fails with ``RunLost`` and runs nothing.
An Agent's task is still tried again (its checkpoint resumes it): ``test_worker.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon._run_logs import END, LOG_KIND, STREAM_KEY, NativeJob, runs_again
from daimon.core import CancelToken, ModelError, Promptable, TaskState, TaskStatus
from daimon.distributed import Worker, new_task, wait_for_task
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.models import FunctionModel
from daimon.multiagent import HandoffNetwork, Supervisor
from daimon.orchestration import PromptableFlow, WorkflowBuilder, workflow_node
from daimon.serverstate import MemoryStateStore


def network(sent: Counter[str], *, fail: bool = False, pause: float = 0.0) -> HandoffNetwork:
    """One desk that sends a letter (the side effect), then answers, or fails (``fail``).

    The first model call waits ``pause`` seconds (a worker lost mid-run, for a short lease).
    """

    @tool
    def send(to: str) -> str:
        """Send a letter."""
        sent[to] += 1
        return "sent"

    async def desk(request: ChatRequest) -> ChatResponse | str:
        if request.messages[-1].role is not Role.TOOL:
            await asyncio.sleep(pause if sum(sent.values()) == 0 else 0.0)
            return ChatResponse.tool_use(ToolCall(id="c1", name="send", arguments={"to": "ann"}))
        if fail:
            raise ModelError("the provider hung up", retryable=True)
        return "done"

    return HandoffNetwork({"desk": Agent(FunctionModel(desk), tools=[send])}, start="desk")


def workflow(sent: Counter[str], pause: float) -> PromptableFlow:
    """A workflow whose one node sends a letter; its first run takes ``pause`` seconds."""

    @workflow_node(output="receipt")
    async def post(text: str) -> str:
        sent[text] += 1
        await asyncio.sleep(pause if sent[text] == 1 else 0.0)
        return "posted"

    return PromptableFlow(WorkflowBuilder("post", inputs={"text": str}).add(post).build())


async def settle(workers: list[Worker], broker: MemoryBroker, task_id: str) -> TaskStatus:
    running = [asyncio.create_task(worker.run()) for worker in workers]
    try:
        async with asyncio.timeout(10):
            status = await wait_for_task(broker, task_id)
        await asyncio.sleep(0.6)  # the lost attempt ends too (its result refused)
        return status
    finally:
        for worker in workers:
            worker.stop()
        await asyncio.wait_for(asyncio.gather(*running), 10)


def test_only_a_resumable_promptable_runs_again() -> None:
    agent = Agent(FunctionModel(lambda r: "hi"))
    assert runs_again(agent)
    assert runs_again(Supervisor(FunctionModel(lambda r: "ok"), {"helper": agent}))
    assert not runs_again(network(Counter()))
    assert not runs_again(workflow(Counter(), 0.0))


@pytest.mark.parametrize("logged", [False, True], ids=["plain", "logged"])
async def test_a_network_whose_attempt_failed_is_not_tried_again(logged: bool) -> None:
    sent: Counter[str] = Counter()
    broker, store = MemoryBroker(lease=1.0, max_deliver=3), MemoryStateStore()
    worker = Worker(
        network(sent, fail=True), broker.handle(), retry_delay=0.0, poll=0.02, store=store
    )
    task_id = await broker.submit(new_task("write", metadata={STREAM_KEY: "s"} if logged else {}))
    status = await settle([worker], broker, task_id)
    assert status.state is TaskState.FAILED, status
    assert status.error == "ModelError: the provider hung up"
    assert sent == Counter({"ann": 1})  # a retry would have sent the letter again
    if logged:
        *_, last, end = await store.read_after(LOG_KIND, "s", 0)
        assert "event: error" in last[1] and end[1] == END


def lost_promptables(sent: Counter[str]) -> dict[str, Promptable]:
    return {"network": network(sent, pause=0.5), "workflow": workflow(sent, 0.5)}


@pytest.mark.parametrize("kind", ["network", "workflow"])
@pytest.mark.parametrize("logged", [False, True], ids=["plain", "logged"])
async def test_a_later_attempt_after_a_lost_one_fails_without_running(
    kind: str, logged: bool
) -> None:
    sent: Counter[str] = Counter()
    promptable = lost_promptables(sent)[kind]
    broker, store = MemoryBroker(lease=0.2), MemoryStateStore()
    workers = [  # without heartbeats the first attempt's lease runs out mid-run: it is "lost"
        Worker(promptable, broker.handle(), heartbeats=False, concurrency=1, poll=0.02, store=store)
        for _ in range(2)
    ]
    metadata = {STREAM_KEY: "s"} if logged else {}
    task_id = await broker.submit(new_task("ann", metadata=metadata))
    status = await settle(workers, broker, task_id)
    assert status.state is TaskState.FAILED, status
    assert status.error is not None and status.error.startswith("RunLost: ")
    assert "is not run again, as its tools could run twice" in status.error
    assert sum(sent.values()) == 1  # the lost attempt's run only
    assert sum(w.refused for w in workers) == 1  # the lost attempt's result came too late
    if logged:  # (the lost attempt, with no heartbeat to stop it, logged on after the end)
        values = [value for _, value in await store.read_after(LOG_KIND, "s", 0)]
        last = values[values.index(END) - 1]
        assert json.loads(last.partition("\ndata: ")[2])["error_type"] == "RunLost"


async def test_a_native_job_of_a_network_whose_lost_attempt_had_ended_adds_nothing() -> None:
    sent: Counter[str] = Counter()
    job = NativeJob(network(sent), new_task("write", metadata={STREAM_KEY: "s"}))
    assert not job.retries
    job.resume(['event: done\ndata: {"kind": "done"}\n\n'])
    frames: list[Any] = [frame async for frame in job.frames(CancelToken())]
    assert frames == [] and job.response is not None and job.response.text == ""
    assert sent == Counter()
