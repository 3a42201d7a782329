"""The worker, against the in-memory broker: concurrency, retries, cancellation, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.core import (
    AgentTask,
    BuilderError,
    CheckpointState,
    InvalidIdError,
    ModelError,
    TaskState,
    TaskStatus,
    codec,
)
from daimon.distributed import (
    TRACEPARENT,
    Worker,
    broker_from_url,
    child_traceparent,
    current_traceparent,
    default_should_retry,
    new_task,
    run_worker,
    wait_for_task,
)
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.models import FunctionModel
from daimon.multiagent import HandoffNetwork
from daimon.orchestration import WorkflowBuilder, workflow_node


def echo_agent(**options: Any) -> Agent:
    return Agent(FunctionModel(lambda r: f"echo: {r.messages[-1].text}"), **options)


async def settled(broker: MemoryBroker, task_id: str) -> TaskStatus:
    async with asyncio.timeout(5):
        return await wait_for_task(broker, task_id)


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker(lease=0.3, max_deliver=3)


async def start(worker: Worker) -> asyncio.Task[None]:
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(0)
    return task


async def stop(worker: Worker, task: asyncio.Task[None]) -> None:
    worker.stop()
    await asyncio.wait_for(task, 10)


async def test_runs_tasks_and_records_one_result_each(broker: MemoryBroker) -> None:
    worker = Worker(echo_agent(), broker.handle(), concurrency=4, poll=0.05)
    running = await start(worker)
    ids = [await broker.submit(new_task(f"n{n}")) for n in range(20)]
    statuses = [await settled(broker, task_id) for task_id in ids]
    await stop(worker, running)
    assert [s.result.output for s in statuses if s.result] == [f"echo: n{n}" for n in range(20)]
    assert all(s.result and s.result.iterations == 1 for s in statuses)
    assert worker.completed == 20


async def test_a_worker_of_several_agents_runs_the_one_each_task_names(
    broker: MemoryBroker,
) -> None:
    agents = {
        "first": Agent(FunctionModel(lambda r: f"first: {r.messages[-1].text}")),
        "second": Agent(FunctionModel(lambda r: f"second: {r.messages[-1].text}")),
    }
    worker = Worker(agents, broker.handle(), poll=0.05)
    running = await start(worker)
    named = await broker.submit(new_task("a", metadata={"daimon.agent": "second"}))
    unnamed = await broker.submit(new_task("b"))
    other = await broker.submit(new_task("c", metadata={"daimon.agent": "third"}))
    outcomes = [await settled(broker, task_id) for task_id in (named, unnamed, other)]
    await stop(worker, running)
    assert [s.result.output if s.result else None for s in outcomes] == [
        "second: a",
        "first: b",
        None,
    ]
    assert outcomes[2].state is TaskState.FAILED  # for good: on its first attempt
    assert "agent 'third'" in (outcomes[2].error or "")
    assert "['first', 'second']" in (outcomes[2].error or "")
    with pytest.raises(BuilderError, match="at least one agent"):
        Worker({}, broker.handle())


async def test_runs_up_to_concurrency_tasks_at_once(broker: MemoryBroker) -> None:
    now = peak = 0

    async def slow(request: ChatRequest) -> str:
        nonlocal now, peak
        now += 1
        peak = max(peak, now)
        await asyncio.sleep(0.05)
        now -= 1
        return "ok"

    worker = Worker(Agent(FunctionModel(slow)), broker.handle(), concurrency=3, poll=0.05)
    running = await start(worker)
    ids = [await broker.submit(new_task(str(n))) for n in range(12)]
    for task_id in ids:
        await settled(broker, task_id)
    await stop(worker, running)
    assert peak == 3


async def test_failing_task_retries_then_is_dead_lettered(broker: MemoryBroker) -> None:
    calls = 0

    def flaky(request: ChatRequest) -> str:
        nonlocal calls
        calls += 1
        raise ModelError("overloaded", status_code=529, retryable=True)

    worker = Worker(Agent(FunctionModel(flaky)), broker.handle(), retry_delay=0.01, poll=0.05)
    running = await start(worker)
    task_id = await broker.submit(new_task("x"))
    status = await settled(broker, task_id)
    await stop(worker, running)
    assert status.state is TaskState.FAILED
    assert status.error is not None
    assert "dead-lettered after 3 attempts; last error: ModelError: overloaded" in status.error
    assert calls == 3
    assert [d.task.task_id for d in await broker.dead_letters()] == [task_id]


async def test_permanent_error_fails_at_once(broker: MemoryBroker) -> None:
    calls = 0

    def refuses(request: ChatRequest) -> str:
        nonlocal calls
        calls += 1
        raise ModelError("invalid request", status_code=400, retryable=False)

    worker = Worker(Agent(FunctionModel(refuses)), broker.handle(), poll=0.05)
    running = await start(worker)
    status = await settled(broker, await broker.submit(new_task("x")))
    await stop(worker, running)
    assert status.state is TaskState.FAILED
    assert status.error == "ModelError: invalid request"
    assert calls == 1


async def test_serves_a_handoff_network_and_a_workflow(broker: MemoryBroker) -> None:
    def triage(request: ChatRequest) -> ChatResponse:
        call = ToolCall(id="h1", name="transfer_to_billing", arguments={"reason": "money"})
        return ChatResponse.tool_use(call)

    network = HandoffNetwork(
        {"triage": Agent(FunctionModel(triage)), "billing": echo_agent()}, start="triage"
    )

    @workflow_node(output="loud")
    def shout(text: str) -> str:
        return text.upper() + "!"

    workflow = WorkflowBuilder("shout", inputs={"text": str}).add(shout).build()
    for promptable, expected in [(network, "echo: [handoff] The triage"), (workflow, "HEY!")]:
        worker = Worker(promptable, broker.handle(), poll=0.05)
        running = await start(worker)
        status = await settled(broker, await broker.submit(new_task("hey")))
        await stop(worker, running)
        assert status.state is TaskState.COMPLETED, status
        assert status.result is not None and status.result.output.startswith(expected)


def test_default_should_retry() -> None:
    from daimon.core import (
        BudgetExceededError,
        BuilderError,
        MaxIterationsError,
        RepeatedToolCallError,
    )

    assert default_should_retry(ConnectionError("reset"))
    assert default_should_retry(ModelError("rate limited", retryable=True))
    assert not default_should_retry(ModelError("bad request", retryable=False))
    assert not default_should_retry(BuilderError("misconfigured"))
    assert not default_should_retry(MaxIterationsError(5))
    assert not default_should_retry(RepeatedToolCallError("search", {"q": "x"}, 4))
    assert not default_should_retry(BudgetExceededError(1.0, 0.5))


async def test_cancel_reaches_the_running_task(broker: MemoryBroker) -> None:
    started = asyncio.Event()
    finished = False

    async def forever(request: ChatRequest) -> str:
        nonlocal finished
        started.set()
        await asyncio.sleep(30)
        finished = True
        return "never"

    worker = Worker(Agent(FunctionModel(forever)), broker.handle(), poll=0.05)
    running = await start(worker)
    task_id = await broker.submit(new_task("x"))
    await asyncio.wait_for(started.wait(), 5)
    assert await broker.cancel(task_id)
    for _ in range(100):  # the next heartbeat (every lease / 3 = 0.1 s) stops the run
        if worker.in_flight == 0:
            break
        await asyncio.sleep(0.02)
    assert worker.in_flight == 0
    await stop(worker, running)
    assert (await broker.status(task_id)).state is TaskState.CANCELLED
    assert not finished and worker.completed == 0


async def test_graceful_stop_finishes_or_hands_back(broker: MemoryBroker) -> None:
    release = asyncio.Event()

    async def model(request: ChatRequest) -> str:
        text = request.messages[-1].text
        if text.startswith("slow"):
            await release.wait()
        else:
            await asyncio.sleep(0.05)
        return f"done {text}"

    agent = Agent(FunctionModel(model))
    first = Worker(agent, broker.handle(), concurrency=6, grace=0.3, poll=0.05)
    running = await start(first)
    ids = [
        await broker.submit(new_task(f"{kind}{n}")) for n in range(3) for kind in ["fast", "slow"]
    ]
    await asyncio.sleep(0.15)
    assert first.in_flight == 3  # the three slow ones
    await stop(first, running)
    assert first.completed == 3 and first.released == 3
    for task_id in ids:  # none is lost, none is left running
        assert (await broker.status(task_id)).state in (TaskState.COMPLETED, TaskState.PENDING)
    release.set()
    second = Worker(agent, broker.handle(), poll=0.05)
    running = await start(second)
    statuses = [await settled(broker, task_id) for task_id in ids]
    await stop(second, running)
    assert all(s.state is TaskState.COMPLETED for s in statuses)
    assert second.completed == 3


async def test_without_heartbeats_the_stale_attempt_is_refused() -> None:
    broker = MemoryBroker(lease=0.2)
    runs: Counter[int] = Counter()

    async def slow(request: ChatRequest) -> str:
        attempt = len(runs) + 1
        runs[attempt] += 1
        await asyncio.sleep(0.5 if attempt == 1 else 0.01)  # the first takes 2.5 leases
        return f"attempt {attempt}"

    agent = Agent(FunctionModel(slow))
    workers = [
        Worker(agent, broker.handle(), heartbeats=False, concurrency=1, poll=0.02) for _ in range(2)
    ]
    running = [await start(w) for w in workers]
    task_id = await broker.submit(new_task("x"))
    status = await settled(broker, task_id)
    await asyncio.sleep(0.6)
    for worker, task in zip(workers, running, strict=True):
        await stop(worker, task)
    assert sum(runs.values()) >= 2  # the lease ran out: the task ran again (at least once)
    assert sum(w.completed for w in workers) == 1  # ... but only one result was recorded
    assert sum(w.refused for w in workers) == 1  # the stale attempt's was refused
    assert status.result is not None and status.result.output == "attempt 2"
    assert (await broker.status(task_id)).result == status.result


async def test_with_heartbeats_a_long_task_runs_once() -> None:
    broker = MemoryBroker(lease=0.2)
    runs = 0

    async def slow(request: ChatRequest) -> str:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.7)  # 3.5 leases
        return "ok"

    agent = Agent(FunctionModel(slow))
    workers = [Worker(agent, broker.handle(), concurrency=1, poll=0.02) for _ in range(2)]
    running = [await start(w) for w in workers]
    status = await settled(broker, await broker.submit(new_task("x")))
    for worker, task in zip(workers, running, strict=True):
        await stop(worker, task)
    assert status.state is TaskState.COMPLETED
    assert runs == 1


class DictCheckpoint:
    """A core Checkpoint kept in a dict, through the codec like a real backend."""

    def __init__(self) -> None:
        self.saved: dict[str, list[str]] = {}

    async def save(self, state: CheckpointState) -> None:
        self.saved.setdefault(state.run_id, []).append(codec.dumps(state))

    async def load(self, run_id: str) -> CheckpointState | None:
        records = self.saved.get(run_id)
        return codec.loads(records[-1], CheckpointState) if records else None

    async def list_runs(self) -> list[str]:
        return sorted(self.saved)

    async def delete(self, run_id: str) -> None:
        self.saved.pop(run_id, None)


async def test_a_redelivered_task_resumes_from_its_checkpoint(broker: MemoryBroker) -> None:
    executions: Counter[str] = Counter()
    model_calls = 0

    @tool
    async def charge(order: str) -> str:
        """Charge the customer (a side effect that must not run twice)."""
        executions[order] += 1
        return f"charged {order}"

    def model(request: ChatRequest) -> ChatResponse:
        nonlocal model_calls
        model_calls += 1
        results = [m.text for m in request.messages if m.role is Role.TOOL]
        if not results:
            return ChatResponse.tool_use(
                ToolCall(id="c1", name="charge", arguments={"order": "o1"})
            )
        if model_calls == 2:  # the first attempt dies after the tool ran
            raise ConnectionError("connection reset by peer")
        return ChatResponse.reply(f"receipt: {results[0]}")

    checkpoint = DictCheckpoint()
    agent = Agent(FunctionModel(model), tools=[charge], checkpoint=checkpoint)
    worker = Worker(agent, broker.handle(), retry_delay=0.0, poll=0.05)
    running = await start(worker)
    task_id = await broker.submit(new_task("buy", run_id="order-o1"))
    status = await settled(broker, task_id)
    await stop(worker, running)
    assert status.result is not None and status.result.output == "receipt: charged o1"
    assert executions == Counter({"o1": 1})  # resumed after the tool call: not charged twice
    assert model_calls == 3
    assert list(checkpoint.saved) == ["order-o1"]


async def test_a_run_leased_elsewhere_is_tried_again_after_its_lease(
    broker: MemoryBroker, tmp_path: Path
) -> None:
    """A task whose run another process still holds waits that lease out, not its attempts."""
    from daimon.checkpoint import FileCheckpoint

    holder = FileCheckpoint(tmp_path, lease=1.0)
    await holder.acquire("order-o2")  # a worker that died mid-run: its lease runs out in 1 s
    agent = Agent(FunctionModel(lambda request: "done"), checkpoint=FileCheckpoint(tmp_path))
    worker = Worker(agent, broker.handle(), retry_delay=0.0, poll=0.05)
    running = await start(worker)
    task_id = await broker.submit(new_task("buy", run_id="order-o2"))
    status = await settled(broker, task_id)
    await stop(worker, running)
    assert status.result is not None and status.result.output == "done", status
    assert (worker.completed, worker.failed) == (1, 1)  # refused once, then run


async def test_runs_under_the_task_trace(broker: MemoryBroker) -> None:
    seen: list[str | None] = []

    def model(request: ChatRequest) -> str:
        seen.append(current_traceparent())
        return "ok"

    worker = Worker(Agent(FunctionModel(model)), broker.handle(), poll=0.05)
    running = await start(worker)
    task = new_task("x")
    await settled(broker, await broker.submit(task))
    await stop(worker, running)
    parent = task.metadata[TRACEPARENT].split("-")
    child = (seen[0] or "").split("-")
    assert child[1] == parent[1] and child[2] != parent[2]  # same trace, a new span
    assert current_traceparent() is None


class FlakyBroker:
    """A broker whose first claims fail, like one briefly unreachable."""

    def __init__(self, inner: MemoryBroker, failures: int) -> None:
        self.inner = inner
        self.failures = failures
        self.lease = inner.lease
        self.max_deliver = inner.max_deliver

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def claim(self, wait: float = 1.0) -> Any:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker unreachable")
        return await self.inner.claim(wait)


async def test_worker_survives_an_unreachable_broker(
    broker: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(echo_agent(), FlakyBroker(broker.handle(), 2), poll=0.05)  # type: ignore[arg-type]
    running = await start(worker)
    status = await settled(broker, await broker.submit(new_task("x")))
    await stop(worker, running)
    assert status.state is TaskState.COMPLETED
    assert "claiming a task failed" in caplog.text


class UnsettlingBroker:
    """A broker whose deliveries' ``complete`` fails its first ``hangs`` tries by never answering
    (a request lost in a network cut), and every try after those with ``then``, if given."""

    def __init__(self, inner: MemoryBroker, hangs: int, then: Exception | None = None) -> None:
        self.inner = inner
        self.hangs = hangs
        self.then = then
        self.tries: list[float] = []
        """When each try began (the event loop's clock)."""
        self.lease = inner.lease
        self.max_deliver = inner.max_deliver

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def claim(self, wait: float = 1.0) -> Any:
        delivery = await self.inner.claim(wait)
        return None if delivery is None else UnsettlingDelivery(self, delivery)


class UnsettlingDelivery:
    def __init__(self, broker: UnsettlingBroker, inner: Any) -> None:
        self.broker = broker
        self.inner = inner
        self.task = inner.task

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def complete(self, result: Any) -> bool:
        broker = self.broker
        broker.tries.append(asyncio.get_running_loop().time())
        if len(broker.tries) <= broker.hangs:
            await asyncio.Event().wait()
        if broker.then is not None:
            raise broker.then
        return bool(await self.inner.complete(result))


async def test_a_settle_lost_in_a_cut_is_tried_again_within_the_lease(
    broker: MemoryBroker,
) -> None:
    flaky = UnsettlingBroker(broker.handle(lease=5.0), hangs=2)
    worker = Worker(echo_agent(), flaky, poll=0.05)  # type: ignore[arg-type]
    running = await start(worker)
    started = asyncio.get_running_loop().time()
    status = await settled(broker, await broker.submit(new_task("x")))
    took = asyncio.get_running_loop().time() - started
    await stop(worker, running)
    assert status.state is TaskState.COMPLETED
    assert (len(flaky.tries), worker.completed) == (3, 1)
    assert 2.0 <= took < 4.0  # two tries of 1 s (a fifth of the lease) lost, the third lands


async def test_a_settle_gives_up_when_the_lease_runs_out(
    broker: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    handle = broker.handle(lease=1.5, max_deliver=1)
    flaky = UnsettlingBroker(handle, hangs=0, then=ConnectionError("cut"))
    worker = Worker(echo_agent(), flaky, poll=0.05)  # type: ignore[arg-type]
    running = await start(worker)
    task_id = await broker.submit(new_task("x"))
    status = await settled(broker, task_id)  # the lease ran out: its next delivery is its last
    await stop(worker, running)
    assert status.state is TaskState.FAILED
    assert status.error is not None and "attempt 1 was lost" in status.error
    assert len(flaky.tries) > 3  # tried again and again meanwhile, and for one lease only:
    assert 1.5 <= flaky.tries[-1] - flaky.tries[0] < 1.5 + 1.0  # (+ one pause between tries)
    assert f"could not complete task {task_id} before its lease ran out" in caplog.text
    assert (worker.completed, worker.refused) == (0, 1)


async def test_run_worker_stops_on_sigterm(broker: MemoryBroker) -> None:
    task_id = await broker.submit(new_task("x"))
    running = asyncio.create_task(run_worker(echo_agent(), broker.handle(), poll=0.05))
    await settled(broker, task_id)
    os.kill(os.getpid(), signal.SIGTERM)
    worker = await asyncio.wait_for(running, 5)
    assert worker.completed == 1


async def test_run_worker_from_a_url() -> None:
    running = asyncio.create_task(
        run_worker(echo_agent(), "memory://", lease=1.0, handle_signals=False, poll=0.05)
    )
    await asyncio.sleep(0.1)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


async def test_cancelling_the_worker_hands_tasks_back(broker: MemoryBroker) -> None:
    started = asyncio.Event()

    async def forever(request: ChatRequest) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    worker = Worker(Agent(FunctionModel(forever)), broker.handle(), poll=0.05)
    running = await start(worker)
    task_id = await broker.submit(new_task("x"))
    await asyncio.wait_for(started.wait(), 5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert worker.released == 1
    assert (await broker.status(task_id)).state is TaskState.PENDING


def test_new_task_ids_and_traces() -> None:
    a, b = (
        new_task("x"),
        new_task("x", metadata={TRACEPARENT: "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}),
    )
    assert a.task_id != b.task_id and len(a.task_id) == 32
    assert a.metadata[TRACEPARENT].startswith("00-")
    assert b.metadata[TRACEPARENT] == "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    assert isinstance(a, AgentTask)


@pytest.mark.parametrize(
    "parent",
    [
        None,
        "",
        "garbage",
        "01-" + "1" * 32 + "-" + "2" * 16 + "-01",
        "00-" + "0" * 32 + "-" + "2" * 16 + "-01",
    ],
)
def test_an_invalid_traceparent_starts_a_new_trace(parent: str | None) -> None:
    child = child_traceparent(parent)
    assert child.startswith("00-") and len(child) == 55
    assert not parent or parent.split("-")[1:2] != child.split("-")[1:2]


def test_unknown_store_url() -> None:
    with pytest.raises(BuilderError, match="unknown task store URL"):
        broker_from_url("memory://", store="postgres://localhost/db")


@pytest.mark.parametrize("bad", ["", "\ud800"])
def test_new_task_refuses_an_invalid_task_id(bad: str) -> None:
    with pytest.raises(InvalidIdError, match="invalid task id"):
        new_task("x", task_id=bad)
    assert new_task("x", task_id="order-7").task_id == "order-7"
