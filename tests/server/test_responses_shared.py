"""Two replicas sharing one state store answer each other's Responses follow-ups.

Each test runs two servers (``create_app`` twice, uvicorn each) on one Redis or PostgreSQL store
(its own key or table prefix), and talks to them with the official ``openai`` client.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from daimon import Agent, ChatRequest, ChatResponse, ToolCall, tool
from daimon.core.state_store import StateStore
from daimon.models import FunctionModel

from .conftest import (
    TOKEN,
    Calls,
    LiveServer,
    WorkerThread,
    sdk,
    sse_events,
    stop_workers,
    streaming,
)
from .test_client_tools import RESPONSES_TOOL, trip_agent
from .test_openai_responses import thinker

Replicas = Callable[[Agent], tuple[LiveServer, LiveServer]]

_BACKENDS = [
    pytest.param("redis", marks=pytest.mark.service("redis")),
    pytest.param("postgres", marks=pytest.mark.service("postgres")),
    pytest.param("workers", marks=[pytest.mark.service("redis"), pytest.mark.service("postgres")]),
]
"""Where the state is, and where runs run: in the replicas, on Redis or PostgreSQL; or on two
workers (a Redis broker), the state on PostgreSQL (``daimon serve --broker ... --store ...``)."""


@pytest.fixture(params=_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(request: pytest.FixtureRequest, backend: str) -> Callable[[], StateStore]:
    """A new handle on this test's store (each server has its own, on its own loop)."""
    if backend == "redis":
        from daimon.serverstate.redis import RedisStateStore

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        return lambda: RedisStateStore.from_url(url, prefix=prefix)
    from daimon.serverstate.postgres import PostgresStateStore

    url = request.getfixturevalue("postgres_url")
    prefix = request.getfixturevalue("postgres_prefix")
    return lambda: PostgresStateStore(url, prefix=prefix)


@pytest.fixture
def replicas(
    request: pytest.FixtureRequest,
    backend: str,
    live: Callable[..., LiveServer],
    make_store: Callable[[], StateStore],
) -> Iterator[Replicas]:
    """``replicas(agent)``: two started servers of ``agent`` on one shared store (and, with
    ``workers``, two workers running the runs)."""
    started: list[tuple[LiveServer, StateStore]] = []
    workers: list[WorkerThread] = []
    options: dict[str, Any] = {}
    if backend == "workers":
        redis_url = request.getfixturevalue("redis_url")
        options = {"broker": redis_url, "queue": f"responses-{uuid.uuid4().hex}"}

    def start(agent: Agent) -> tuple[LiveServer, LiveServer]:
        for _ in range(2):
            store = make_store()
            started.append((live(agent, token=TOKEN, store=store, **options), store))
        if options:
            from daimon.distributed import broker_from_url

            def open_broker() -> Any:
                return broker_from_url(options["broker"], queue=options["queue"], lease=5.0)

            workers.extend(WorkerThread(agent, open_broker, make_store).start() for _ in range(2))
        return started[-2][0], started[-1][0]

    yield start
    stop_workers(workers)
    for server, store in started:  # before the servers stop (their loops own the connections)
        server.call(store.aclose)


def _poll(client: openai.OpenAI, response_id: str, seconds: float = 3.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        response = client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return response
        time.sleep(0.02)


def _runs(server: LiveServer) -> int:
    """The runs writing logs on ``server``."""
    return len(server.app.state.daimon_logs)


# ------------------------------------------------------------------------------ stored responses


def test_a_response_made_on_one_replica_is_continued_read_and_deleted_on_another(
    replicas: Replicas,
) -> None:
    calls = Calls()
    a, b = (sdk(server) for server in replicas(thinker(calls)))
    first = a.responses.create(model="thinker", input="one")
    second = b.responses.create(model="thinker", input="two", previous_response_id=first.id)
    assert second.output_text == "thought: two (3 messages)"
    assert [m.text for m in calls.requests[1].messages] == ["one", first.output_text, "two"]
    again = b.responses.retrieve(first.id)
    assert (again.status, again.output_text) == ("completed", first.output_text)
    assert a.responses.retrieve(second.id).previous_response_id == first.id
    b.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError, match="not found"):
        a.responses.create(model="thinker", input="three", previous_response_id=first.id)


def test_a_run_paused_for_a_client_tool_on_one_replica_is_finished_on_another(
    replicas: Replicas,
) -> None:
    calls = Calls()
    a, b = (sdk(server) for server in replicas(trip_agent(calls)))
    first = a.responses.create(model="trip", input="Weather where I am?", tools=[RESPONSES_TOOL])
    call = first.output[-1]
    assert call.type == "function_call"
    answer: Any = [{"type": "function_call_output", "call_id": call.call_id, "output": "Bergen"}]
    second = b.responses.create(
        model="trip", previous_response_id=first.id, input=answer, tools=[RESPONSES_TOOL]
    )
    assert second.output_text == "sunny in Oslo | Bergen"
    assert calls.tool_args == [{"city": "Oslo"}]  # the server's tool ran once, on A
    with pytest.raises(openai.BadRequestError, match="no paused run"):  # answered already
        a.responses.create(model="trip", previous_response_id=first.id, input=answer)
    third = a.responses.create(model="trip", previous_response_id=second.id, input="thanks")
    assert third.status == "completed"


def test_two_replicas_answering_one_paused_run_at_once_continue_it_once(
    replicas: Replicas,
) -> None:
    calls = Calls()
    clients = [sdk(server) for server in replicas(trip_agent(calls))]
    first = clients[0].responses.create(model="trip", input="Where?", tools=[RESPONSES_TOOL])
    answer: Any = [{"type": "function_call_output", "call_id": "loc1", "output": "Bergen"}]
    outcomes: list[str] = []
    gate = threading.Barrier(2)

    def resume(client: openai.OpenAI) -> None:
        gate.wait()
        try:
            client.responses.create(model="trip", previous_response_id=first.id, input=answer)
            outcomes.append("continued")
        except openai.BadRequestError as exc:
            assert isinstance(exc.body, dict)
            outcomes.append(exc.body["code"])

    threads = [threading.Thread(target=resume, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert sorted(outcomes) == ["continued", "tool_call_not_found"]
    assert len([r for r in calls.requests if len(r.messages) > 1]) == 1  # one model call resumed


# ------------------------------------------------------------------------------ background


def slow_recorder(calls: Calls, delay: float) -> Agent:
    """Thinks ``delay`` seconds, then calls ``record`` (which notes that it ran), then answers."""

    @tool
    def record() -> str:
        """Note that the run got this far."""
        calls.tool_args.append({})
        return "noted"

    async def model(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        if request.messages[-1].text == "noted":
            return ChatResponse.reply("done")
        await asyncio.sleep(delay)
        return ChatResponse.tool_use(ToolCall(id="r1", name="record", arguments={}))

    return Agent(FunctionModel(model), name="slow", tools=[record])


def test_a_background_response_started_on_one_replica_is_polled_on_another(
    replicas: Replicas,
) -> None:
    calls = Calls()
    a, b = (sdk(server) for server in replicas(slow_recorder(calls, delay=0.2)))
    started = a.responses.create(model="slow", input="go", background=True)
    assert started.status == "queued"
    assert b.responses.retrieve(started.id).status in ("queued", "in_progress")
    finished = _poll(b, started.id)
    assert (finished.status, finished.output_text) == ("completed", "done")
    assert calls.tool_args == [{}]
    follow = b.responses.create(model="slow", input="noted", previous_response_id=started.id)
    assert follow.output_text == "done"


def test_a_background_response_cancelled_on_another_replica_stops_there_too(
    replicas: Replicas,
) -> None:
    calls = Calls()
    server_a, server_b = replicas(slow_recorder(calls, delay=0.4))
    a, b = sdk(server_a), sdk(server_b)
    started = a.responses.create(model="slow", input="go", background=True)
    deadline = time.monotonic() + 2
    while not calls.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.responses.cancel(started.id).status == "cancelled"
    deadline = time.monotonic() + 1
    while _runs(server_a) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _runs(server_a) == 0  # the run on A stopped
    time.sleep(0.5)  # past the model's delay: a run still going would have called the tool
    assert calls.tool_args == []
    assert a.responses.retrieve(started.id).status == "cancelled"
    assert a.responses.cancel(started.id).status == "cancelled"


def test_a_cancel_after_the_run_finished_leaves_it_completed(replicas: Replicas) -> None:
    calls = Calls()
    a, b = (sdk(server) for server in replicas(thinker(calls)))
    started = a.responses.create(model="thinker", input="quick", background=True)
    assert _poll(a, started.id).status == "completed"
    assert b.responses.cancel(started.id).status == "completed"
    assert a.responses.retrieve(started.id).status == "completed"


# ------------------------------------------------------------------------------ streams


def test_a_stream_started_on_one_replica_is_resumed_on_another(replicas: Replicas) -> None:
    chunks = [f"w{n} " for n in range(12)]
    agent = Agent(streaming(chunks, delay=0.02), name="talker")
    server_a, server_b = replicas(agent)
    a, b = sdk(server_a), sdk(server_b)
    seen: list[Any] = []
    with a.responses.create(model="talker", input="talk", stream=True) as events:
        for event in events:
            seen.append(event)
            if event.type == "response.output_text.delta" and len(seen) > 5:
                break  # the connection closes: the run goes on
    response_id = seen[0].response.id
    last = seen[-1].sequence_number
    with b.responses.retrieve(response_id, stream=True, starting_after=last) as rest:
        remaining = list(rest)
    numbers = [e.sequence_number for e in seen + remaining]
    assert numbers == list(range(len(numbers)))  # every event once, in order
    assert remaining[-1].type == "response.completed"
    deltas = [e.delta for e in seen + remaining if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "".join(chunks)
    assert b.responses.retrieve(response_id).status == "completed"


def test_a_stream_resumes_after_the_last_event_id(replicas: Replicas) -> None:
    server_a, server_b = replicas(thinker(Calls()))
    events: list[Any] = list(
        sdk(server_a).responses.create(model="thinker", input="x", stream=True)
    )
    response_id = events[-1].response.id
    headers = {"authorization": f"Bearer {TOKEN}", "last-event-id": f"{response_id}:2"}
    with server_b.client(headers=headers).stream(
        "GET", f"/v1/responses/{response_id}", params={"stream": "true"}
    ) as answer:
        assert answer.status_code == 200
        frames = sse_events(list(answer.iter_lines()))
    kinds = [kind for kind, _ in frames if kind != ":"]
    assert kinds == [e.type for e in events[2:]]  # log number 2 is sequence number 1


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ({"starting_after": "999"}, 400),
        ({"starting_after": "-1"}, 400),
        ({"starting_after": "x"}, 400),
    ],
)
def test_bad_places_in_a_stream_are_refused(
    replicas: Replicas, query: dict[str, str], status: int
) -> None:
    server_a, server_b = replicas(thinker(Calls()))
    events: list[Any] = list(
        sdk(server_a).responses.create(model="thinker", input="x", stream=True)
    )
    http = server_b.client(headers={"authorization": f"Bearer {TOKEN}"})
    answer = http.get(f"/v1/responses/{events[-1].response.id}", params={"stream": "true", **query})
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["param"] == "starting_after", answer.text
    unknown = http.get("/v1/responses/resp_nope", params={"stream": "true", "starting_after": "1"})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
