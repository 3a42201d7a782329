"""Two A2A servers sharing one state store (Redis, PostgreSQL), as replicas behind a balancer.

Each replica is its own ``a2a_app`` with its own agent and its own handle on the store (the same
server, a key or table prefix of this test's own), talked to through the official SDK client: a
task made on one is read, listed and continued on the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Part,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError

from daimon import Agent, ChatRequest, ChatResponse, ToolCall, tool
from daimon import Role as ChatRole
from daimon.a2a import a2a_app
from daimon.core.errors import BuilderError, SerializationError
from daimon.core.state_store import StateStore
from daimon.models import FunctionModel

from .conftest import Gate, serving, streaming_agent
from .test_server import _events, _message, _reply

StoreFor = Callable[[], StateStore]


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.service("redis")),
        pytest.param("postgres", marks=pytest.mark.service("postgres")),
    ]
)
def store_for(request: pytest.FixtureRequest) -> StoreFor:
    """``store_for()``: a new handle on this test's store (a prefix of its own)."""
    if request.param == "redis":
        from daimon.serverstate import RedisStateStore

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        return lambda: RedisStateStore.from_url(url, prefix=prefix)
    from daimon.serverstate import PostgresStateStore

    url = request.getfixturevalue("postgres_url")
    prefix = request.getfixturevalue("postgres_prefix")
    return lambda: PostgresStateStore(url, prefix=prefix, min_size=1, max_size=4)


@contextlib.asynccontextmanager
async def replicas(
    agents: list[Agent], store_for: StoreFor, *, streaming: bool = False
) -> AsyncIterator[list[Any]]:
    """SDK clients of one A2A server per agent, each with its own handle on the store.

    Not streaming; with ``streaming``, a streaming client of each follows.
    """
    async with contextlib.AsyncExitStack() as stack:
        bases = []
        for agent in agents:
            store = store_for()
            stack.push_async_callback(store.aclose)  # after its server stops
            bases.append(
                await stack.enter_async_context(
                    serving(lambda port, a=agent, s=store: a2a_app(a, port=port, store=s))
                )
            )
        clients = []
        for streams in (False, True) if streaming else (False,):
            for base in bases:
                client = await create_client(base, ClientConfig(streaming=streams))
                stack.push_async_callback(client.close)
                clients.append(client)
        yield clients


class Refunds:
    """Counts the refunds an agent's ``refund`` tool (it needs approval) really made."""

    def __init__(self) -> None:
        self.made: list[int] = []

    def agent(self) -> Agent:
        @tool(requires_approval=True)
        def refund(amount: int) -> str:
            """Refund money."""
            self.made.append(amount)
            return f"refunded {amount}"

        def model(request: ChatRequest) -> ChatResponse:
            last = request.messages[-1]
            if last.role is ChatRole.TOOL:
                return ChatResponse.reply(f"done: {last.text}")
            call = ToolCall(id="r1", name="refund", arguments={"amount": 5})
            return ChatResponse.tool_use(call)

        return Agent(FunctionModel(model), name="refunder", tools=[refund])


async def test_a_task_made_on_one_replica_is_read_and_listed_on_the_other(
    store_for: StoreFor,
) -> None:
    async with replicas([streaming_agent(), streaming_agent()], store_for) as (a, b):
        (made,) = await _events(a, _message("hi"))
        assert made.task.status.state == TaskState.TASK_STATE_COMPLETED
        got = await b.get_task(GetTaskRequest(id=made.task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        assert got.artifacts[-1].parts[0].text == "Hello, you said: hi"
        assert [m.parts[0].text for m in got.history] == ["hi"]
        (other,) = await _events(b, _message("there"))
        listed = await a.list_tasks(ListTasksRequest(include_artifacts=True))
        assert [t.id for t in listed.tasks] == [other.task.id, made.task.id]  # latest first
        page = await a.list_tasks(ListTasksRequest(page_size=1))
        assert [t.id for t in page.tasks] == [other.task.id] and page.next_page_token
        assert not page.tasks[0].artifacts  # as the request asked
        rest = await b.list_tasks(ListTasksRequest(page_size=1, page_token=page.next_page_token))
        assert [t.id for t in rest.tasks] == [made.task.id]


async def test_a_run_paused_on_one_replica_is_approved_on_the_other(store_for: StoreFor) -> None:
    on_a, on_b = Refunds(), Refunds()
    async with replicas([on_a.agent(), on_b.agent()], store_for) as (a, b):
        (asked,) = await _events(a, _message("refund me"))
        assert asked.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        (event,) = await _events(b, _reply(asked.task.id, Part(text="approve")))
        assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert event.task.artifacts[-1].parts[0].text == "done: refunded 5"
        assert (on_a.made, on_b.made) == ([], [5])
        got = await a.get_task(GetTaskRequest(id=asked.task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        assert [m.parts[0].text for m in got.history if m.role == 1] == ["refund me", "approve"]


async def test_approvals_racing_on_both_replicas_resume_the_run_once(store_for: StoreFor) -> None:
    on_a, on_b = Refunds(), Refunds()
    async with replicas([on_a.agent(), on_b.agent()], store_for) as (a, b):
        for _ in range(3):
            (asked,) = await _events(a, _message("refund me"))
            task_id = asked.task.id
            answers = await asyncio.gather(
                _events(a, _reply(task_id, Part(text="approve"))),
                _events(b, _reply(task_id, Part(text="approve"))),
                return_exceptions=True,
            )
            for answer in answers:  # the later one finds the task working, or finished, or
                if isinstance(answer, BaseException):  # gets it as it is
                    assert isinstance(answer, UnsupportedOperationError), answer
                    assert re.search(
                        "is working on an earlier message|is in terminal state", str(answer)
                    ), answer
            for client in (a, b):
                got = await client.get_task(GetTaskRequest(id=task_id))
                assert got.status.state == TaskState.TASK_STATE_COMPLETED
                assert got.artifacts[-1].parts[0].text == "done: refunded 5"
        assert len(on_a.made) + len(on_b.made) == 3  # one refund per task, wherever it ran


async def test_a_task_running_on_one_replica_is_followed_and_canceled_on_the_other(
    store_for: StoreFor,
) -> None:
    followed, canceled = Gate(), Gate()
    agents = [streaming_agent(gate=followed), _stoppable(canceled)]
    async with replicas(agents, store_for, streaming=True) as (a, b, _, b_streaming):
        (started,) = await _events(a, _started("slow"))
        await followed.entered.wait()
        events = b_streaming.subscribe(SubscribeToTaskRequest(id=started.task.id))
        first = await anext(events)
        assert first.task.status.state == TaskState.TASK_STATE_WORKING
        followed.go.set()
        rest = [event async for event in events]
        assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        answers = [e.artifact_update.artifact for e in rest if e.HasField("artifact_update")]
        assert answers[-1].parts[0].text == "Hello, you said: slow"

        (held,) = await _events(b, _started("stop me"))
        await canceled.entered.wait()
        stopped = await a.cancel_task(CancelTaskRequest(id=held.task.id))
        assert stopped.status.state == TaskState.TASK_STATE_CANCELED
        canceled.go.set()  # the run's next write finds the task canceled: the run is stopped
        async with asyncio.timeout(10):
            await canceled.cancelled.wait()
        got = await b.get_task(GetTaskRequest(id=held.task.id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED and not got.artifacts


def _stoppable(gate: Gate) -> Agent:
    """Waits for ``gate.go``, streams ``Hello, `` and then waits until it is cancelled."""

    async def stream(request: ChatRequest) -> AsyncIterator[str]:
        gate.entered.set()
        await gate.go.wait()
        yield "Hello, "
        try:
            await asyncio.Event().wait()
        finally:
            gate.cancelled.set()
        yield "never"  # pragma: no cover

    return Agent(FunctionModel(stream_function=stream), name="echo")


def _started(text: str) -> SendMessageRequest:
    """A message answered at once, with the task its run goes on in."""
    request = _message(text)
    request.configuration.return_immediately = True
    return request


async def test_records_are_versioned_json_and_another_format_is_refused_saying_so(
    store_for: StoreFor,
) -> None:
    from daimon._paused_runs import _record_key
    from daimon.a2a._task_store import SharedTaskStore, _key

    store, context = store_for(), ServerCallContext()
    key_of = functools.partial(_key, resolve_user_scope(context))
    async with replicas([Refunds().agent()], store_for) as (a,):
        try:
            (asked,) = await _events(a, _message("refund me"))
            task_id = asked.task.id
            record = json.loads(await store.get("a2a_task", key_of(task_id)) or "")
            assert record["v"] == 1 and record["task"]["id"] == task_id
            paused = _record_key("refunder", "key", task_id)
            assert json.loads(await store.get("paused_a2a", paused) or "")["daimon"] == 1
            await store.put("paused_a2a", paused, json.dumps({"daimon": 2, "data": {}}))
            (event,) = await _events(a, _reply(task_id, Part(text="approve")))
            status = event.task.status
            assert status.state == TaskState.TASK_STATE_FAILED
            assert status.message.parts[0].text.startswith("Error: SerializationError: ")

            tasks = SharedTaskStore(store)
            for value, why in [
                ("not json", "is not JSON"),
                (json.dumps({"task": {}}), "no 'v'"),
                (json.dumps({"v": 2, "task": {}}), "is of format 2; this daimon reads format 1"),
                (json.dumps({"v": 1, "task": {"id": 3, "nope": 1}}), "is not valid"),
            ]:
                await store.put("a2a_task", key_of(task_id), value)
                with pytest.raises(SerializationError, match=why):
                    await tasks.get(task_id, context)
        finally:
            await store.aclose()


def test_a_store_must_be_a_state_store_or_a_known_url() -> None:
    agent = streaming_agent()
    with pytest.raises(BuilderError, match="unknown state store URL 'nope://x'"):
        a2a_app(agent, store="nope://x")
    with pytest.raises(BuilderError, match="store must be a StateStore or a URL"):
        a2a_app(agent, store=object())  # type: ignore[arg-type]
    with pytest.raises(BuilderError, match="keep_for"):
        a2a_app(agent, store="memory://", keep_for=0)


def test_a2a_serve_takes_its_store_from_daimon_store(tmp_path: Path) -> None:
    (tmp_path / "served.py").write_text(
        "from daimon import Agent\nfrom daimon.models import FunctionModel\n"
        "agent = Agent(FunctionModel(lambda request: None), name='pinger')\n"
    )
    given = filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))
    path = os.pathsep.join([str(tmp_path), *(str(Path(p).resolve()) for p in given)])
    done = subprocess.run(
        [sys.executable, "-m", "daimon.cli", "a2a", "serve", "served:agent"],
        env={**os.environ, "PYTHONPATH": path, "DAIMON_STORE": "nope://x"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "unknown state store URL 'nope://x'" in done.stderr and "Traceback" not in done.stderr
