"""A flow's AG-UI run as a worker runs it: the replica's events, and never the flow run twice.

The flow's job (:class:`~daimon.server._agui_run.AguiFlowJob`) is the one code path: the replica
runs it without a broker; with one, a worker makes it again from the task's spec and writes its
events to the run's log. A later attempt (its worker was lost) does not run the flow again.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any
from uuid import uuid4

import pytest
from ag_ui.core import Event
from ag_ui_validate.pytest_plugin import assert_valid_agui
from pydantic import TypeAdapter

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, Usage, tool
from daimon._run_logs import AGENT_KEY, END, JOB_KEY, LOG_KIND, STREAM_KEY, LogWriter, log_job
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError
from daimon.core.state_store import StateStore
from daimon.core.tasks import TaskState
from daimon.distributed import Worker, new_task, wait_for_task
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.models import FunctionModel
from daimon.orchestration import END as FLOW_END
from daimon.orchestration import START, GraphBuilder, GraphContext, PromptableFlow
from daimon.server._agui_run import AguiFlowJob, RunInput
from daimon.serverstate import MemoryStateStore

from .conftest import LiveServer, WorkerThread
from .test_agui import agui, final_state, kinds, run_input

_EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


class Ran:
    """Where the flow's nodes ran (the thread), and how often its ``send`` node did."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.sends = 0
        self.looked_up: list[str] = []


def writer(ran: Ran) -> Agent:
    """Looks the topic up (a tool), then answers ``draft on <notes>``."""

    @tool
    def look_up(topic: str) -> str:
        """Look a topic up."""
        ran.looked_up.append(topic)
        return f"notes on {topic}"

    def model(request: ChatRequest) -> ChatResponse:
        usage = Usage(input_tokens=5, output_tokens=2, requests=1)
        last = request.messages[-1]
        if last.role is not Role.TOOL:
            call = ToolCall(id="c1", name="look_up", arguments={"topic": last.text})
            return ChatResponse.tool_use(call, usage=usage)
        return ChatResponse.reply(f"draft on {last.text}", usage=usage)

    return Agent(FunctionModel(model, model_name="writer-model"), name="writer", tools=[look_up])


def drafting(ran: Ran) -> PromptableFlow:
    """``draft`` prompts the writer; ``send`` counts its runs (a tool that must not run twice)."""
    agent = writer(ran)

    async def draft(ctx: GraphContext) -> dict[str, Any]:
        ran.threads.append(threading.current_thread().name)
        response = await ctx.prompt(agent, ctx.state["input"])
        return {"draft": response.text}

    async def send(ctx: GraphContext) -> dict[str, Any]:
        ran.threads.append(threading.current_thread().name)
        ran.sends += 1
        return {"answer": f"sent: {ctx.state['draft']}"}

    graph = (
        GraphBuilder("drafting")
        .add_node("draft", draft)
        .add_node("send", send)
        .add_edge(START, "draft")
        .add_edge("draft", "send")
        .add_edge("send", FLOW_END)
        .build()
    )
    return PromptableFlow(graph, output=lambda result: result.state["answer"])


def _given() -> RunInput:
    return RunInput("t-1", "run-1", None, "tides", None, {"theme": "dark"})


def _events(frames: list[str]) -> list[dict[str, Any]]:
    """The AG-UI events of logged frames (marked or not)."""
    return [json.loads(f.split("data: ", 1)[1]) for f in frames if f != END]


_IDS = re.compile(r"\b(msg|tool)_[0-9a-f]{32}\b")


def _untimed(value: Any) -> Any:
    """``value`` with every timing (a ``seconds`` field, a patch setting one) made 0."""
    if isinstance(value, list):
        return [_untimed(item) for item in value]
    if not isinstance(value, dict):
        return value
    timed = str(value.get("path", "")).endswith("/seconds")
    return {
        key: 0 if key == "seconds" or (timed and key == "value") else _untimed(item)
        for key, item in value.items()
    }


def _same_ids(events: list[dict[str, Any]]) -> str:
    """The events as JSON, each random message id numbered by first appearance, no timings."""
    text = json.dumps(_untimed(events), sort_keys=True)
    seen: dict[str, str] = {}
    return _IDS.sub(lambda m: seen.setdefault(m.group(0), f"{m.group(1)}_{len(seen)}"), text)


async def _logged(store: StateStore, stream: str) -> list[str]:
    return [value for _, value in await store.read_after(LOG_KIND, stream, 0)]


def _task(job: AguiFlowJob, stream: str) -> Any:
    metadata = {STREAM_KEY: stream, JOB_KEY: json.loads(json.dumps(job.spec())), AGENT_KEY: "d"}
    return new_task("", task_id=stream, metadata=metadata)


async def _work(broker: MemoryBroker, flow: PromptableFlow, store: StateStore, stream: str) -> Any:
    """Run a worker serving ``flow`` until the task ``stream`` is settled; its status."""
    worker = Worker(flow, broker.handle(), poll=0.05, store=store, retry_delay=0.0)
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            return await wait_for_task(broker, stream)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)


# --------------------------------------------------------------------- the events, either side


async def test_the_job_made_on_a_worker_sends_the_events_the_replica_sends() -> None:
    here, there = Ran(), Ran()
    replica = AguiFlowJob(drafting(here), "d", _given())
    in_replica = [frame.decode() async for frame in replica.frames(CancelToken())]

    broker, store = MemoryBroker(lease=2.0), MemoryStateStore()
    await broker.submit(_task(AguiFlowJob(drafting(Ran()), "d", _given()), "s1"))
    status = await _work(broker, drafting(there), store, "s1")
    assert status.state is TaskState.COMPLETED, status.error
    assert status.result is not None and status.result.output == "sent: draft on notes on tides"

    on_worker = _events(await _logged(store, "s1"))
    assert _same_ids(on_worker) == _same_ids(_events(in_replica))
    assert_valid_agui(on_worker)
    for event in on_worker:
        _EVENTS.validate_python(event)
    seen = kinds(on_worker)
    assert seen[:3] == ["RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED"]
    assert seen[-1] == "RUN_FINISHED" and "TOOL_CALL_RESULT" in seen
    steps = [e["stepName"] for e in on_worker if e["type"] == "STEP_FINISHED"]
    assert steps == ["draft", "send"]
    started = next(e for e in on_worker if e["type"] == "TEXT_MESSAGE_START")
    assert started["metadata"]["daimon"]["node"] == "draft"
    state = final_state(on_worker)
    assert state["theme"] == "dark" and state["daimon"]["status"] == "finished"
    assert state["daimon"]["nodes"]["send"]["status"] == "finished"
    assert on_worker[-1]["metadata"]["daimon"]["text"] == "sent: draft on notes on tides"
    assert (here.sends, there.sends, there.looked_up) == (1, 1, ["tides"])


async def test_a_flow_spec_and_a_worker_agent_of_that_name_do_not_match() -> None:
    store = MemoryStateStore()
    flow_task = _task(AguiFlowJob(drafting(Ran()), "d", _given()), "s2")
    with pytest.raises(BuilderError, match=r"a flow's AG-UI run of 'd'.* is not a flow \(Agent\)"):
        log_job(writer(Ran()), flow_task, store)

    from daimon._paused_runs import PausedRuns
    from daimon.server._agui_run import AguiJob

    agent_job = AguiJob(writer(Ran()), "d", "writer-model", _given(), PausedRuns(store, "agui"))
    agent_task = new_task("", task_id="s3", metadata={STREAM_KEY: "s3", JOB_KEY: agent_job.spec()})
    with pytest.raises(
        BuilderError, match=r"an agent's AG-UI run of 'd'.* is a flow \(PromptableFlow\)"
    ):
        log_job(drafting(Ran()), agent_task, store)


async def test_a_run_the_worker_cannot_make_ends_its_stream_in_ag_ui() -> None:
    broker, store = MemoryBroker(lease=1.0), MemoryStateStore()
    await broker.submit(_task(AguiFlowJob(drafting(Ran()), "d", _given()), "s5"))
    status = await _work(broker, writer(Ran()), store, "s5")  # an agent, where a flow was served
    assert status.state is TaskState.FAILED and status.error is not None
    assert status.error.startswith("BuilderError: the task is a flow's AG-UI run of 'd'")
    log = await _logged(store, "s5")
    events = _events(log)
    assert_valid_agui(events)  # not the native ``error`` frame an AG-UI client cannot read
    assert kinds(events) == ["RUN_STARTED", "RUN_ERROR"] and log[-1] == END
    assert (events[0]["threadId"], events[0]["runId"]) == ("t-1", "run-1")
    assert events[1]["code"] == "BuilderError" and "is not a flow" in events[1]["message"]


# -------------------------------------------------------------------------- a later attempt


def _cut_after_text(frames: list[str]) -> list[str]:
    """The frames up to the first text the flow's agent sent (its message and step open)."""
    events = _events(frames)
    first = kinds(events).index("TEXT_MESSAGE_CONTENT")
    return frames[: first + 1]


async def _lost_then_later(logged: list[str]) -> tuple[Any, list[str], Ran]:
    """A worker takes the task, logs ``logged`` and is lost; another worker takes it over.

    Returns the task's status, the log and what the later attempt's flow ran.
    """
    broker, store = MemoryBroker(lease=0.5), MemoryStateStore()
    await broker.submit(_task(AguiFlowJob(drafting(Ran()), "d", _given()), "s4"))
    lost = await broker.claim(wait=1.0)
    assert lost is not None and lost.task.attempt == 1
    writer_1 = LogWriter(store, "s4", retention=60.0, attempt=1)
    for frame in logged:
        await writer_1.append(frame.encode())
    later = Ran()
    status = await _work(broker, drafting(later), store, "s4")
    return status, await _logged(store, "s4"), later


async def test_a_later_attempt_ends_the_lost_run_and_does_not_run_the_flow() -> None:
    whole = [
        f.decode() async for f in AguiFlowJob(drafting(Ran()), "d", _given()).frames(CancelToken())
    ]
    status, log, later = await _lost_then_later(_cut_after_text(whole))

    assert status.state is TaskState.COMPLETED, status.error
    assert (later.threads, later.sends, later.looked_up) == ([], 0, [])  # the flow never ran
    events = _events(log)
    assert_valid_agui(events)
    for event in events:
        _EVENTS.validate_python(event)
    cut = len(_cut_after_text(whole))
    assert kinds(events)[cut:] == [
        "TEXT_MESSAGE_END",  # the lost message and step, ended
        "STEP_FINISHED",
        "STATE_DELTA",
        "CUSTOM",
        "STATE_DELTA",
        "RUN_ERROR",
    ]
    assert events[cut]["metadata"] == {"daimon": {"lost": True}}
    step = events[cut + 1]
    assert step["stepName"] == "draft" and step["metadata"]["daimon"]["lost"] is True
    assert events[cut + 3]["name"] == "daimon.attempt"
    error = events[-1]
    assert error["code"] == "RunLost"
    assert "not run again" in error["message"] and "twice" in error["message"]
    state = final_state(events)
    assert state["theme"] == "dark" and state["daimon"]["status"] == "failed"
    assert state["daimon"]["nodes"]["draft"]["status"] == "failed"
    assert kinds(events).count("RUN_STARTED") == 1


async def test_a_later_attempt_whose_log_holds_the_end_writes_nothing() -> None:
    whole = [
        f.decode() async for f in AguiFlowJob(drafting(Ran()), "d", _given()).frames(CancelToken())
    ]
    status, log, later = await _lost_then_later(whole)

    assert status.state is TaskState.COMPLETED, status.error
    assert status.result is not None and status.result.output == "sent: draft on notes on tides"
    assert (later.threads, later.sends) == ([], 0)
    assert _events(log) == _events(whole)  # nothing more than the lost attempt's frames
    assert log[-1] == END


async def test_a_later_attempt_whose_log_is_empty_does_not_run_the_flow_either() -> None:
    status, log, later = await _lost_then_later([])

    assert status.state is TaskState.COMPLETED, status.error
    assert (later.threads, later.sends) == ([], 0)
    events = _events(log)
    assert_valid_agui(events)
    assert kinds(events) == ["RUN_STARTED", "STATE_SNAPSHOT", "STATE_DELTA", "RUN_ERROR"]
    assert events[-1]["code"] == "RunLost"


# ----------------------------------------------------------------------------- end to end


@pytest.fixture
def flow_on_a_worker(
    request: pytest.FixtureRequest, live: Callable[..., LiveServer]
) -> Iterator[tuple[LiveServer, Ran, Ran]]:
    """A replica serving the flow with a Redis broker and a PostgreSQL store, and one worker;
    what the flow ran on each."""
    from daimon.distributed import broker_from_url
    from daimon.serverstate import PostgresStateStore

    redis_url = request.getfixturevalue("redis_url")
    postgres_url = request.getfixturevalue("postgres_url")
    prefix = request.getfixturevalue("postgres_prefix")
    queue = f"agui-flow-{uuid4().hex}"

    def store() -> StateStore:
        return PostgresStateStore(postgres_url, prefix=prefix, min_size=1, max_size=2)

    on_replica, on_worker = Ran(), Ran()
    replica_store = store()
    server = live({"d": drafting(on_replica)}, store=replica_store, broker=redis_url, queue=queue)
    worker = WorkerThread(
        drafting(on_worker),  # type: ignore[arg-type]  # any promptable
        lambda: broker_from_url(redis_url, queue=queue, lease=5.0),
        store,
    ).start()
    yield server, on_replica, on_worker
    worker.stop()
    server.call(server.app.state.daimon_logs.aclose)
    server.call(replica_store.aclose)


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_a_flow_run_posted_to_a_replica_with_a_broker_runs_on_the_worker(
    flow_on_a_worker: tuple[LiveServer, Ran, Ran],
) -> None:
    server, on_replica, on_worker = flow_on_a_worker
    events = agui(server, run_input("tides", thread="t-flow"))  # checked by the AG-UI validator

    for event in events:
        _EVENTS.validate_python(event)
    assert kinds(events)[0] == "RUN_STARTED" and kinds(events)[-1] == "RUN_FINISHED"
    assert [e["stepName"] for e in events if e["type"] == "STEP_STARTED"] == ["draft", "send"]
    assert events[-1]["metadata"]["daimon"]["text"] == "sent: draft on notes on tides"
    assert final_state(events)["daimon"]["flow"] == "d"
    # the events were written by the worker: its thread ran the nodes, the replica ran nothing
    assert on_worker.threads == ["daimon-worker", "daimon-worker"]
    assert (on_worker.sends, on_worker.looked_up) == (1, ["tides"])
    assert (on_replica.threads, on_replica.sends) == ([], 0)
    assert len(server.app.state.daimon_logs) == 0  # no run writes a log in the replica
