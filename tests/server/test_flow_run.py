"""A served flow's native run as a job: in a replica, and on workers (``daimon serve --broker``).

First the job alone and a worker running it in-process (a memory broker and store); then a
replica sending its flows' runs to a worker (a Redis broker, the state on PostgreSQL). The flows'
nodes note the thread they run in: ``daimon-worker`` is a worker's, ``daimon-server`` a replica's.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from daimon import Message, ModelError
from daimon._paused_runs import PausedRuns
from daimon._run_logs import AGENT_KEY, END, JOB_KEY, LOG_KIND, STREAM_KEY, log_job
from daimon.core import TaskState, TaskStatus
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError, SerializationError
from daimon.distributed import Worker, new_task, wait_for_task
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.orchestration import DagBuilder, PromptableFlow
from daimon.server._chat_run import ChatRun
from daimon.server._client_tools import RunStart
from daimon.server._failures import RunLost
from daimon.server._flow_run import FlowJob, job_from_spec
from daimon.server._responses_run import ResponseRun, ResponseStore
from daimon.server._schemas import PromptResponse
from daimon.serverstate import MemoryStateStore

from .conftest import TOKEN, Calls, LiveServer, WorkerThread, echo, sse_events
from .test_flows import research


class Ran:
    """Where each node ran (its thread's name), and how often."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def note(self) -> None:
        self.threads.append(threading.current_thread().name)


def outline(ran: Ran, *, fail: Exception | None = None) -> PromptableFlow:
    """``split`` then ``count``; the answer is a mapping (a typed output); ``count`` raises
    ``fail`` when given."""

    async def split(inputs: Mapping[str, Any]) -> list[str]:
        ran.note()
        return str(inputs["input"]).split()

    async def count(inputs: Mapping[str, Any]) -> dict[str, int]:
        ran.note()
        if fail is not None:
            raise fail
        return {"words": len(inputs["split"])}

    dag = (
        DagBuilder("outline")
        .add_node("split", split)
        .add_node("count", count, depends_on=["split"])
        .build()
    )
    return PromptableFlow(dag)


def frames_of(values: list[str]) -> list[tuple[str, Any]]:
    """The (event, data) of each logged frame; ``END`` as ``("END", None)``."""
    out: list[tuple[str, Any]] = []
    for value in values:
        if value == END:
            out.append(("END", None))
            continue
        ((kind, data),) = [(k, d) for k, d in sse_events(value.splitlines()) if k != ":"]
        out.append((kind, json.loads(data)))
    return out


async def run_task(flow: PromptableFlow, text: str) -> tuple[TaskStatus, list[tuple[str, Any]]]:
    """Run the flow's job as a worker's task; its status and its log's frames."""
    broker, store = MemoryBroker(lease=1.0), MemoryStateStore()
    job = FlowJob(flow, "outline", text)
    stream = uuid.uuid4().hex
    metadata = {STREAM_KEY: stream, JOB_KEY: job.spec(), AGENT_KEY: "outline"}
    await broker.submit(new_task(text, task_id=stream, metadata=metadata))
    worker = Worker({"outline": flow}, broker.handle(), poll=0.05, store=store, retry_delay=0.0)
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            status = await wait_for_task(broker, stream)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
    logged = await store.read_after(LOG_KIND, stream, 0)
    return status, frames_of([value for _, value in logged])


async def test_a_worker_writes_the_flows_node_events_then_its_whole_answer() -> None:
    ran = Ran()
    status, frames = await run_task(outline(ran), "three short words")
    assert [kind for kind, _ in frames] == [
        "node_started",
        "node_finished",
        "node_started",
        "node_finished",
        "done",
        "END",
    ]
    answer = frames[4][1]["response"]
    PromptResponse.model_validate(answer)
    assert answer["output"] == {"words": 3}  # the typed output, whole
    assert answer["agent"] == "outline" and answer["session_id"] is None
    assert status.state is TaskState.COMPLETED
    assert len(ran.threads) == 2


async def test_a_flow_that_failed_is_not_run_again() -> None:
    # Retryable for an agent's run (its checkpoint says what ran); a flow's nodes would run again.
    ran = Ran()
    failing = outline(ran, fail=ModelError("the provider hung up", retryable=True))
    status, frames = await run_task(failing, "two words")
    assert status.state is TaskState.FAILED
    assert len(ran.threads) == 2  # split and count once each: one attempt
    kind, data = frames[-2]
    assert kind == "error" and data["error_type"] == "NodeError"
    assert frames[-1] == ("END", None)


async def test_a_later_attempt_fails_for_good_and_runs_nothing() -> None:
    ran = Ran()
    job = FlowJob(outline(ran), "outline", "two words")
    job.resume([': at 1.1\nevent: node_started\ndata: {"node": "split"}\n\n'])
    frames = job.frames(CancelToken())
    with pytest.raises(RunLost) as lost:
        await anext(frames)
    assert not job.retries and ran.threads == []
    ((kind, data),) = sse_events(job.on_error(lost.value).decode().splitlines())
    assert (kind, json.loads(data)["error_type"]) == ("error", "RunLost")
    assert "is not run again, as its tools could run twice" in data


async def test_a_later_attempt_after_the_end_has_nothing_to_do() -> None:
    ran = Ran()
    job = FlowJob(outline(ran), "outline", "two words")
    job.resume([': at 1.5\nevent: done\ndata: {"kind": "done"}\n\n'])
    assert [frame async for frame in job.frames(CancelToken())] == []
    assert ran.threads == [] and job.response is not None


def test_the_spec_makes_the_job_again_and_refuses_what_cannot_run() -> None:
    ran = Ran()
    flow = outline(ran)
    spec = json.loads(json.dumps(FlowJob(flow, "outline", "a b").spec()))  # as it travels
    task = new_task("a b", metadata={JOB_KEY: spec, STREAM_KEY: "s"})
    made = log_job(flow, task, MemoryStateStore())
    assert isinstance(made, FlowJob) and (made.name, made.text) == ("outline", "a b")
    bare = log_job(flow.flow, task, MemoryStateStore())  # a bare DAG gets the defaults
    assert isinstance(bare, FlowJob)
    with pytest.raises(BuilderError, match="as a flow, but this worker's 'outline' is a Agent"):
        job_from_spec(echo(Calls()), spec, MemoryStateStore())
    with pytest.raises(SerializationError, match="format 99"):
        job_from_spec(flow, {**spec, "format": 99}, MemoryStateStore())


def test_the_flow_run_imports_without_the_web_libraries() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import daimon.server._flow_run\n"
        "web = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'starlette', 'pydantic'))\n"
        "assert not web, web\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------ on workers


@pytest.fixture
def on_workers(
    request: pytest.FixtureRequest, live: Callable[..., LiveServer]
) -> Iterator[Callable[[Mapping[str, Any]], LiveServer]]:
    """``on_workers(flows)``: a replica sending its runs to one worker (a Redis broker), the
    state on PostgreSQL; stopped after the test."""
    from daimon.distributed import broker_from_url
    from daimon.serverstate.postgres import PostgresStateStore

    url = request.getfixturevalue("postgres_url")
    prefix = request.getfixturevalue("postgres_prefix")
    redis_url = request.getfixturevalue("redis_url")
    queue = f"flows-{uuid.uuid4().hex}"
    started: list[tuple[LiveServer, Any]] = []
    threads: list[WorkerThread] = []

    def start(flows: Mapping[str, Any]) -> LiveServer:
        store = PostgresStateStore(url, prefix=prefix)
        server = live(dict(flows), token=TOKEN, store=store, broker=redis_url, queue=queue)
        started.append((server, store))
        thread = WorkerThread(
            dict(flows),  # type: ignore[arg-type]
            lambda: broker_from_url(redis_url, queue=queue, lease=5.0),
            lambda: PostgresStateStore(url, prefix=prefix),
        )
        threads.append(thread.start())
        return server

    yield start
    for thread in threads:
        thread.stop()
    for server, store in started:
        server.call(store.aclose)


def authorized(server: LiveServer) -> Any:
    return server.client(headers={"Authorization": f"Bearer {TOKEN}"})


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_a_flows_stream_and_answer_come_from_a_worker(
    on_workers: Callable[[Mapping[str, Any]], LiveServer],
) -> None:
    ran = Ran()
    server = on_workers({"outline": outline(ran), "research": research()})
    client = authorized(server)
    with client.stream("POST", "/prompt/stream", json={"input": "a b c", "agent": "outline"}) as r:
        assert r.status_code == 200, r.read()
        events = [(k, json.loads(d)) for k, d in sse_events(list(r.iter_lines())) if k != ":"]
    assert [kind for kind, _ in events] == ["node_started", "node_finished"] * 2 + ["done"]
    assert events[-1][1]["response"]["output"] == {"words": 3}

    reply = client.post("/prompt", json={"input": "one two", "agent": "outline"})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    PromptResponse.model_validate(body)
    assert body["output"] == {"words": 2}  # whole, as a replica answers it: not only the text
    assert ran.threads == ["daimon-worker"] * 4  # none on the replica

    graph = client.post("/prompt", json={"input": "what is rust?", "agent": "research"}).json()
    assert graph["text"] == "draft: notes on what is rust?"


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_a_flow_that_fails_on_a_worker_answers_its_error_once(
    on_workers: Callable[[Mapping[str, Any]], LiveServer],
) -> None:
    ran = Ran()
    failing = outline(ran, fail=ModelError("the provider hung up", retryable=True))
    server = on_workers({"outline": failing})
    reply = authorized(server).post("/prompt", json={"input": "one two"})
    assert reply.status_code == 500, reply.text
    assert reply.json()["error"] == {
        "type": "NodeError",
        "message": "node 'count' failed: ModelError: the provider hung up",
    }
    assert ran.threads == ["daimon-worker"] * 2  # one attempt: not run again


# ------------------------------------------------------------------------------ other front ends


def a_response_run(flow: PromptableFlow) -> ResponseRun:
    store = MemoryStateStore()

    async def opened() -> MemoryStateStore:
        return store

    return ResponseRun(
        agent=flow,
        conversation=RunStart(Message.user("two words"), [], None),
        obj={"id": "resp_abc", "model": "outline", "status": "queued", "background": False},
        keep=False,
        kept=ResponseStore(opened, 60.0),
        paused=PausedRuns(store, "responses", 60.0),
        timeout=12.0,
    )


async def test_a_responses_run_of_a_flow_is_not_run_again() -> None:
    ran = Ran()
    run = a_response_run(outline(ran))
    assert not run.retries
    assert a_response_run_of_an_agent().retries  # an agent's checkpoint says what ran
    run.resume([])
    with pytest.raises(RunLost, match="is not run again"):
        await anext(run.frames(CancelToken()))
    assert ran.threads == []


def a_response_run_of_an_agent() -> ResponseRun:
    run = a_response_run(outline(Ran()))
    run.agent = echo(Calls())
    return run


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_a_response_of_a_flow_that_fails_on_a_worker_runs_once(
    on_workers: Callable[[Mapping[str, Any]], LiveServer],
) -> None:
    ran = Ran()
    failing = outline(ran, fail=ModelError("the provider hung up", retryable=True))
    server = on_workers({"outline": failing})
    reply = authorized(server).post("/v1/responses", json={"model": "outline", "input": "a b"})
    assert reply.status_code == 500, reply.text  # as a replica answers a run that failed
    assert reply.json()["error"]["type"] == "NodeError"
    assert ran.threads == ["daimon-worker"] * 2  # one attempt: the flow was not run again


async def test_a_chat_run_of_a_flow_is_not_run_again_even_before_its_text() -> None:
    ran = Ran()
    run = ChatRun(
        outline(ran),
        "outline",
        RunStart("two words", [], None),
        PausedRuns(MemoryStateStore(), "chat"),
        stream=True,
    )
    assert not run.retries
    run.resume(['data: {"choices": [{"delta": {"role": "assistant", "content": ""}}]}\n\n'])
    with pytest.raises(RunLost, match="is not run again"):  # an agent's would start over
        await anext(run.frames(CancelToken()))
    assert ran.threads == []


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_a_chat_completion_of_a_flow_runs_on_a_worker_once(
    on_workers: Callable[[Mapping[str, Any]], LiveServer],
) -> None:
    ran, failing_ran = Ran(), Ran()
    failing = outline(failing_ran, fail=ModelError("the provider hung up", retryable=True))
    server = on_workers({"outline": outline(ran), "failing": failing})
    client = authorized(server)
    user = [{"role": "user", "content": "a b c"}]
    reply = client.post("/v1/chat/completions", json={"model": "outline", "messages": user})
    assert reply.status_code == 200, reply.text
    assert json.loads(reply.json()["choices"][0]["message"]["content"]) == {"words": 3}
    assert ran.threads == ["daimon-worker"] * 2
    failed = client.post("/v1/chat/completions", json={"model": "failing", "messages": user})
    assert failed.status_code == 500, failed.text
    assert failed.json()["error"]["type"] == "NodeError"
    assert failing_ran.threads == ["daimon-worker"] * 2  # one attempt
