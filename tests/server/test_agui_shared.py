"""Two replicas sharing one state store (Redis, PostgreSQL): AG-UI and Chat Completions runs
paused on one are answered on the other, and an AG-UI stream left on one is rejoined on the other
with ``Last-Event-ID``.

Each replica is its own app on its own event loop, with its own handle on the store (the same
server, the same key or table prefix, one per test), as two processes would be. With the
``workers`` backend the replicas have a broker (Redis) and two in-process workers run their AG-UI
runs, the state on PostgreSQL (``daimon serve --broker ... --store ...``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from uuid import uuid4

import httpx
import pytest

from daimon import Agent, ChatRequest, Role, ToolCall, tool
from daimon.core.events import StreamEvent, TextDelta, ToolCallEnd
from daimon.core.state_store import StateStore
from daimon.models import FunctionModel

from .conftest import Calls, LiveServer, WorkerThread, stop_workers
from .test_agui import agui, guarded, run_input
from .test_client_tools import AGUI_TOOL, LOCATION_TOOL, trip_agent

Live = Callable[..., LiveServer]
Made = Callable[[Calls], Agent]
"""Makes the agent a replica (or a worker) serves, its tools noting their calls in ``Calls``."""

_BACKENDS = [
    pytest.param("redis", marks=pytest.mark.service("redis")),
    pytest.param("postgres", marks=pytest.mark.service("postgres")),
    pytest.param("workers", marks=[pytest.mark.service("redis"), pytest.mark.service("postgres")]),
]
"""Where the state is, and where runs run: in the replicas, on Redis or PostgreSQL; or on two
workers (a Redis broker), the state on PostgreSQL (``daimon serve --broker ... --store ...``)."""
_STORES = _BACKENDS[:2]
"""For tests of what stays in the replicas with or without a broker: the stores alone."""


@pytest.fixture(params=_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_for(request: pytest.FixtureRequest, backend: str) -> Callable[[], StateStore]:
    """A new handle on this test's store (a prefix of its own) each call."""
    if backend == "redis":
        from daimon.serverstate import RedisStateStore

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        return lambda: RedisStateStore.from_url(url, prefix=prefix)
    from daimon.serverstate import PostgresStateStore

    url, prefix = (
        request.getfixturevalue("postgres_url"),
        request.getfixturevalue("postgres_prefix"),
    )
    return lambda: PostgresStateStore(url, prefix=prefix, min_size=1, max_size=2)


class Cluster:
    """Replicas A and B of one agent on one store, and with ``workers`` two workers running
    the runs; what each one's tools were asked."""

    def __init__(self, workers: bool) -> None:
        self.workers = workers
        self.on_a, self.on_b, self.on_workers = Calls(), Calls(), Calls()

    def ran(self, on: str, args: list[dict[str, Any]]) -> dict[str, Any]:
        """Where tools ran when ``args`` were the calls of an AG-UI run sent to replica ``on``:
        there, or with a broker on the workers."""
        where = "workers" if self.workers else on
        return {place: args if place == where else [] for place in ("a", "b", "workers")}

    def tools(self) -> dict[str, Any]:
        """What each place's tools were asked."""
        return {
            "a": self.on_a.tool_args,
            "b": self.on_b.tool_args,
            "workers": self.on_workers.tool_args,
        }


Replicas = Callable[[Made], tuple[LiveServer, LiveServer]]


@pytest.fixture
def cluster(backend: str) -> Cluster:
    return Cluster(workers=backend == "workers")


@pytest.fixture
def replicas(
    request: pytest.FixtureRequest,
    live: Live,
    store_for: Callable[[], StateStore],
    cluster: Cluster,
) -> Iterator[Replicas]:
    """``replicas(made)``: servers A and B, each its own agent and store handle, one store (and
    with ``workers``, two workers, each its own agent, running the agents' AG-UI runs)."""
    opened: list[tuple[LiveServer, StateStore]] = []
    workers: list[WorkerThread] = []
    options: dict[str, Any] = {}
    if cluster.workers:
        options = {"broker": request.getfixturevalue("redis_url"), "queue": f"agui-{uuid4().hex}"}

    def start(made: Made) -> tuple[LiveServer, LiveServer]:
        pair = []
        for calls in (cluster.on_a, cluster.on_b):
            store = store_for()
            server = live(made(calls), store=store, **options)
            opened.append((server, store))
            pair.append(server)
        if options:
            from daimon.distributed import broker_from_url

            def open_broker() -> Any:
                return broker_from_url(options["broker"], queue=options["queue"], lease=5.0)

            for _ in range(2):
                worker = WorkerThread(made(cluster.on_workers), open_broker, store_for)
                workers.append(worker.start())
        return pair[0], pair[1]

    yield start
    stop_workers(workers)
    for server, store in opened:  # on the loop that used it, before the server stops
        server.call(server.app.state.daimon_logs.aclose)  # its watchers read the store
        server.call(store.aclose)


def local_runs(*servers: LiveServer) -> list[int]:
    """The runs writing logs in each server's own process."""
    return [len(server.app.state.daimon_logs) for server in servers]


# ------------------------------------------------------------------------------ paused runs


def test_an_interrupt_raised_on_one_replica_is_approved_on_the_other(
    replicas: Replicas, cluster: Cluster
) -> None:
    a, b = replicas(guarded)

    first = agui(a, run_input("Send 5", thread="t-shared"))
    assert first[-1]["outcome"]["type"] == "interrupt"
    interrupt = first[-1]["outcome"]["interrupts"][0]["id"]
    resume = [{"interruptId": interrupt, "status": "resolved"}]

    resumed = agui(b, run_input(None, thread="t-shared", resume=resume))
    assert resumed[-1]["outcome"] == {"type": "success"}
    text = "".join(e["delta"] for e in resumed if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Done: moved 5"
    assert cluster.tools() == cluster.ran("b", [{"amount": 5}])

    # taken by B: A has nothing left to resume
    again = a.client().post("/agui", json=run_input(None, thread="t-shared", resume=resume))
    assert again.status_code == 409 and again.json()["error"]["type"] == "not_paused"


def test_a_front_end_tool_called_on_one_replica_is_answered_on_the_other(
    replicas: Replicas, cluster: Cluster
) -> None:
    a, b = replicas(trip_agent)

    first = agui(a, run_input("Weather here?", thread="t-trip", tools=[AGUI_TOOL]))
    assert first[-1]["type"] == "RUN_FINISHED"
    messages = [
        {"id": "m1", "role": "user", "content": "Weather here?"},
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "loc1",
                    "type": "function",
                    "function": {"name": "get_location", "arguments": '{"precise": true}'},
                }
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": "loc1", "content": "Bergen"},
    ]
    body = run_input(None, thread="t-trip", tools=[AGUI_TOOL], messages=messages)
    second = agui(b, body)
    text = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "sunny in Oslo | Bergen"
    assert cluster.tools() == cluster.ran("a", [{"city": "Oslo"}])  # ran once, for A

    again = a.client().post("/agui", json=body)
    assert again.status_code == 422 and "no run waiting" in again.json()["error"]["message"]


@pytest.mark.parametrize("backend", _STORES)
def test_a_chat_completions_client_tool_paused_on_one_replica_is_answered_on_the_other(
    replicas: Replicas, cluster: Cluster
) -> None:
    a, b = replicas(trip_agent)
    messages: list[Any] = [{"role": "user", "content": "Weather where I am?"}]
    request = {"model": "trip", "messages": messages, "tools": [LOCATION_TOOL]}

    first = a.client().post("/v1/chat/completions", json=request).json()
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    messages += [
        choice["message"],
        {"role": "tool", "tool_call_id": call["id"], "content": "Bergen"},
    ]
    second = b.client().post("/v1/chat/completions", json=request)
    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["message"]["content"] == "sunny in Oslo | Bergen"
    assert cluster.tools() == cluster.ran("a", [{"city": "Oslo"}])

    again = a.client().post("/v1/chat/completions", json=request)
    assert again.status_code == 400 and again.json()["error"]["code"] == "tool_call_not_found"


# --------------------------------------------------------------------------- a rejoined stream


def counting(calls: Calls, gate: threading.Event) -> Agent:
    """Says ``one``, calls ``count``, waits for ``gate``, then says ``two`` and ``three``."""

    @tool
    def count() -> str:
        """Count a call."""
        calls.tool_args.append({})
        return "counted"

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        if request.messages[-1].role is not Role.TOOL:
            yield TextDelta(text="one")
            yield ToolCallEnd(call=ToolCall(id="c1", name="count", arguments={}))
            return
        await asyncio.to_thread(gate.wait, 5)
        yield TextDelta(text="two ")
        yield TextDelta(text="three")

    return Agent(FunctionModel(stream_function=stream, model_name="counter"), tools=[count])


def read_events(
    reply: httpx.Response, until: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """``(id, event)`` per SSE event of ``reply``, up to the first of type ``until``."""
    events: list[tuple[str, dict[str, Any]]] = []
    event_id = ""
    for line in reply.iter_lines():
        if line.startswith("id: "):
            event_id = line[len("id: ") :]
        elif line.startswith("data: "):
            events.append((event_id, json.loads(line[len("data: ") :])))
            if events[-1][1]["type"] == until:
                break
    return events


def test_a_stream_left_on_one_replica_is_rejoined_on_the_other(
    replicas: Replicas, cluster: Cluster
) -> None:
    gate = threading.Event()
    a, b = replicas(lambda calls: counting(calls, gate))
    body = run_input("Count", thread="t-rejoin")

    with a.client().stream("POST", "/agui", json=body) as reply:
        assert reply.status_code == 200
        before = read_events(reply, until="TOOL_CALL_RESULT")  # then the client goes
    # the run waits for the gate: in A's process, or on a worker
    assert local_runs(a, b) == ([0, 0] if cluster.workers else [1, 0])
    last = before[-1][0]
    stream, _, number = last.rpartition(":")
    gate.set()  # the run goes on without a reader

    with b.client().stream("POST", "/agui", json=body, headers={"last-event-id": last}) as rest:
        assert rest.status_code == 200
        after = read_events(rest)

    numbers = [int(i.rpartition(":")[2]) for i, _ in before + after]
    assert numbers == list(range(1, len(numbers) + 1))  # every event once, in order
    assert {i.rpartition(":")[0] for i, _ in after} == {stream}
    assert int(number) == len(before)
    events = [event for _, event in before + after]
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "onetwo three"
    assert [e["type"] for _, e in after].count("TOOL_CALL_RESULT") == 0
    assert cluster.tools() == cluster.ran("a", [{}])  # ran once, for A

    # the whole stream again, from its start, on either replica
    for server in (a, b):
        whole = server.client().post("/agui", json=body, headers={"last-event-id": f"{stream}:0"})
        data = [line[6:] for line in whole.text.splitlines() if line.startswith("data: ")]
        assert [json.loads(d) for d in data] == events


@pytest.mark.parametrize("backend", _STORES)
def test_a_bad_or_unknown_last_event_id_is_refused(replicas: Replicas) -> None:
    a, _ = replicas(guarded)
    body = run_input("Send 5")
    client = a.client()

    bad = client.post("/agui", json=body, headers={"last-event-id": "no-number-here"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request"
    assert "Last-Event-ID" in bad.json()["error"]["message"]

    unknown = client.post("/agui", json=body, headers={"last-event-id": "nosuchstream:3"})
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found"
    assert "nosuchstream" in unknown.json()["error"]["message"]
