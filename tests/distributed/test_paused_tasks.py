"""A run that pauses for approval, through a worker: a paused status, decisions, a resume.

An agent's or a supervisor's run pauses and resumes; a handoff network's or a flow's, which
cannot resume, fails for good.

Against Redis and NATS (real services) and the memory broker: the broker-level rules are in
:class:`daimon.testing.brokers.BrokerConformance`; these check the worker end to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest

from daimon import Agent, ApprovalDecision, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.core import ApprovalRequiredError, TaskState, TaskStatus
from daimon.distributed import Broker, Worker, default_should_retry, new_task, wait_for_task
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.distributed.brokers.nats import NatsBroker
from daimon.distributed.brokers.redis import RedisBroker
from daimon.models import FunctionModel
from daimon.multiagent import HandoffNetwork, Supervisor
from daimon.orchestration import NodeContext, WorkflowBuilder, workflow_node

ran: Counter[str] = Counter()


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    ran[order] += 1
    return f"refunded {order}"


def support(request: ChatRequest) -> ChatResponse:
    results = [m for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(
            ToolCall(id="r-1", name="refund", arguments={"order": "A-1"}),
            ToolCall(id="r-2", name="refund", arguments={"order": "B-2"}),
        )
    return ChatResponse.reply(" | ".join(m.text for m in results))


@pytest.fixture(autouse=True)
def reset() -> None:
    ran.clear()


@contextlib.asynccontextmanager
async def redis_broker(url: str) -> AsyncIterator[Broker]:
    queue = uuid.uuid4().hex
    async with RedisBroker.from_url(url, queue=queue, prefix="daimon-test:", max_deliver=1) as b:
        try:
            yield b
        finally:
            keys = [k async for k in b._client.scan_iter(match=f"daimon-test:{{{queue}}}:*")]
            if keys:
                await b._client.delete(*keys)


@contextlib.asynccontextmanager
async def nats_broker(url: str) -> AsyncIterator[Broker]:
    tag = uuid.uuid4().hex[:12]
    names = {"stream": f"P_{tag}", "bucket": f"p_{tag}"}
    async with NatsBroker.from_url(url, **names, max_deliver=1) as broker:
        yield broker
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for name in (names["stream"], f"{names['stream']}_DEAD"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_key_value(names["bucket"])
    finally:
        await nc.close()


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.service("redis")),
        pytest.param("nats", marks=pytest.mark.service("nats")),
    ]
)
async def broker(request: pytest.FixtureRequest, service_url: dict[str, str]) -> Any:
    if request.param == "memory":
        yield MemoryBroker(max_deliver=1)
        return
    opener = redis_broker if request.param == "redis" else nats_broker
    async with opener(service_url[request.param]) as handle:
        yield handle


async def settled(broker: Broker, task_id: str) -> TaskStatus:
    async with asyncio.timeout(10):
        return await wait_for_task(broker, task_id)


async def test_a_paused_run_waits_for_decisions_then_resumes(broker: Broker) -> None:
    """The task reads paused with its approvals; the decisions resume it; each refund runs once."""
    worker = Worker(Agent(FunctionModel(support), tools=[refund]), broker, poll=0.05)
    running = asyncio.create_task(worker.run())
    try:
        task_id = await broker.submit(new_task("refund both orders"))
        paused = await settled(broker, task_id)
        assert paused.state is TaskState.PAUSED, paused
        assert paused.result is None
        assert [(a.id, a.call.arguments) for a in paused.approvals] == [
            ("r-1", {"order": "A-1"}),
            ("r-2", {"order": "B-2"}),
        ]
        assert ran == Counter()  # nothing ran before a person said so

        decided = await broker.decide(task_id, {"r-2": ApprovalDecision.reject("not eligible")})
        assert decided is True
        again = await settled(broker, task_id)  # one decision of two: paused again
        assert again.state is TaskState.PAUSED
        assert [a.id for a in again.approvals] == ["r-1"]

        assert await broker.decide(task_id, {"r-1": True}) is True
        done = await settled(broker, task_id)
        assert done.state is TaskState.COMPLETED, done
        assert done.result is not None
        assert done.result.output == "refunded A-1 | The user rejected this call: not eligible"
        assert ran == Counter({"A-1": 1})
        assert await broker.decide(task_id, {"r-1": True}) is False  # it has ended
        assert (worker.paused, worker.completed) == (2, 1)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)


async def test_a_supervisor_pauses_and_resumes_through_the_worker(broker: Broker) -> None:
    """A Supervisor resumes: its own approval-gated tool pauses the task, decisions resume it."""
    team = Supervisor(FunctionModel(support), {"echo": Agent(FunctionModel(echo))}, tools=[refund])
    worker = Worker(team, broker, poll=0.05)
    running = asyncio.create_task(worker.run())
    try:
        task_id = await broker.submit(new_task("refund both orders"))
        paused = await settled(broker, task_id)
        assert paused.state is TaskState.PAUSED, paused
        assert [a.id for a in paused.approvals] == ["r-1", "r-2"]
        assert await broker.decide(task_id, {"r-1": True, "r-2": True}) is True
        done = await settled(broker, task_id)
        assert done.state is TaskState.COMPLETED, done
        assert done.result is not None
        assert done.result.output == "refunded A-1 | refunded B-2"
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)


async def test_a_network_or_flow_whose_agent_pauses_fails_for_good(broker: Broker) -> None:
    """They cannot resume: the pause is ApprovalRequiredError, a failure no retry can mend."""
    agent = Agent(FunctionModel(support), name="support", tools=[refund])
    network = HandoffNetwork({"support": agent}, start="support", name="desk")

    async def ask(ctx: NodeContext, text: str) -> str:
        return (await ctx.prompt(agent, text)).text

    flow = (
        WorkflowBuilder("refunds", inputs={"text": str})
        .add(workflow_node(output="answer")(ask), name="ask")
        .build()
    )
    for promptable, where in [
        (network, "agent 'support' of a HandoffNetwork"),
        (flow, "node 'ask' of flow 'refunds'"),
    ]:
        worker = Worker(promptable, broker, poll=0.05, retry_delay=0)
        running = asyncio.create_task(worker.run())
        try:
            failed = await settled(broker, await broker.submit(new_task("refund both orders")))
        finally:
            worker.stop()
            await asyncio.wait_for(running, 10)
        assert failed.state is TaskState.FAILED, failed
        assert failed.error == (
            "ApprovalRequiredError: the run paused: refund need(s) a person's approval, which "
            f"{where} cannot ask for; those calls did not run"
        )
        assert (worker.failed, worker.paused) == (1, 0)
        assert ran == Counter()
    assert not default_should_retry(ApprovalRequiredError((), "a test"))


def echo(request: ChatRequest) -> ChatResponse:
    return ChatResponse.reply(f"echo: {request.messages[-1].text}")
