"""Graph runs hold their run's lease like agent runs, on a file store, Redis and NATS.

Each handle stands for a process: a runner on another handle is refused while the lease lives,
takes the run over once it expired, and the stalled owner's later save is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from daimon.agent import Agent
from daimon.checkpoint.file import FileCheckpoint
from daimon.checkpoint.nats import NatsKVCheckpoint
from daimon.checkpoint.redis import RedisCheckpoint
from daimon.core import ChatResponse, CheckpointConflictError, CheckpointState, RunLeasedError
from daimon.core.chat import ChatRequest
from daimon.models.function import FunctionModel
from daimon.orchestration import END, START, GraphBuilder, GraphContext, NodeError, append

_WAIT = 10.0
"""Seconds a test waits for something that should happen at once (generous: CI is loaded)."""

Store = FileCheckpoint | RedisCheckpoint | NatsKVCheckpoint
Factory = Callable[..., Store]


@pytest.fixture
async def nats_bucket(service_url: dict[str, str]) -> AsyncIterator[str]:
    """A JetStream key-value bucket of the test's own, deleted afterwards."""
    name = f"daimon_test_{uuid.uuid4().hex}"
    yield name
    nc = await nats.connect(service_url["nats"])
    try:
        with contextlib.suppress(Exception):  # never created
            await nc.jetstream().delete_key_value(name)
    finally:
        await nc.close()


@pytest.fixture(
    params=[
        "file",
        pytest.param("redis", marks=pytest.mark.service("redis")),
        pytest.param("nats", marks=pytest.mark.service("nats")),
    ]
)
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Any, str]:
    """Where the store lives: a folder, a Redis URL and key prefix, or a NATS URL and bucket."""
    if request.param == "file":
        return "file", tmp_path / "runs", ""
    if request.param == "redis":
        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        return "redis", url, prefix
    return (
        "nats",
        request.getfixturevalue("service_url")["nats"],
        request.getfixturevalue("nats_bucket"),
    )


@pytest.fixture
async def make_store(store_at: tuple[str, Any, str]) -> AsyncIterator[Factory]:
    """Opens a new handle (another process, as far as leases go) on the test's store."""
    handles: list[Store] = []
    kind, where, place = store_at

    def make(**options: Any) -> Store:
        if kind == "file":
            handles.append(FileCheckpoint(where, **options))
        elif kind == "redis":
            handles.append(RedisCheckpoint.from_url(where, prefix=place, **options))
        else:
            handles.append(NatsKVCheckpoint.from_url(where, bucket=place, **options))
        return handles[-1]

    yield make
    for handle in handles:
        await handle.aclose()


class Blocking:
    """a -> b -> END; ``b`` waits for ``release`` (bounded) after setting ``entered``."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        builder = GraphBuilder(reducers={"log": append})
        builder.add_node("a", self.a).add_node("b", self.b)
        self.graph = builder.add_edge(START, "a").add_edge("a", "b").add_edge("b", END).build()

    async def a(self, ctx: GraphContext) -> dict[str, Any]:
        self.calls["a"] += 1
        return {"log": "a"}

    async def b(self, ctx: GraphContext) -> dict[str, Any]:
        self.calls["b"] += 1
        self.entered.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.release.wait(), _WAIT)
        return {"log": "b"}


@pytest.mark.parametrize("stagger_ms", [0, 20, 200])
async def test_a_second_runner_is_refused_while_the_first_holds_the_lease(
    make_store: Factory, stagger_ms: int
) -> None:
    """Two runners of one graph run, ``stagger_ms`` apart: one runs every node, once."""
    flow = Blocking()

    async def run(delay: float) -> object:
        await asyncio.sleep(delay)
        try:
            return await flow.graph.run({"log": []}, run_id="g", checkpoint=make_store())
        except RunLeasedError as exc:
            flow.release.set()  # the first runner's node goes on once the second was refused
            return exc

    outcomes = await asyncio.wait_for(asyncio.gather(run(0), run(stagger_ms / 1000)), _WAIT * 2)

    refused = [o for o in outcomes if isinstance(o, RunLeasedError)]
    results = [o for o in outcomes if not isinstance(o, RunLeasedError)]
    assert len(refused) == 1 and len(results) == 1, outcomes
    assert flow.calls == {"a": 1, "b": 1}
    assert refused[0].owner and refused[0].expires_at > 0
    # the lease was given up at the end: another runner gets the finished run at once
    again = await flow.graph.run(None, run_id="g", checkpoint=make_store())
    assert again.resumed and again.state == {"log": ["a", "b"]} and flow.calls["b"] == 1


async def test_a_runner_inside_a_node_is_refused_before_any_node_runs(
    make_store: Factory,
) -> None:
    """A runner arriving while a node runs is refused without running anything."""
    flow = Blocking()
    first = asyncio.create_task(flow.graph.run({"log": []}, run_id="g", checkpoint=make_store()))
    await asyncio.wait_for(flow.entered.wait(), _WAIT)
    with pytest.raises(RunLeasedError):
        await flow.graph.run(None, run_id="g", checkpoint=make_store())
    assert flow.calls == {"a": 1, "b": 1}
    flow.release.set()
    assert (await asyncio.wait_for(first, _WAIT)).state == {"log": ["a", "b"]}


async def test_the_lease_is_renewed_while_a_node_outlasts_it(make_store: Factory) -> None:
    """A node running past the lease's length keeps it: the run is renewed, then saves."""
    flow = Blocking()
    owner = make_store(lease=0.6)
    first = asyncio.create_task(flow.graph.run({"log": []}, run_id="g", checkpoint=owner))
    await asyncio.wait_for(flow.entered.wait(), _WAIT)
    await asyncio.sleep(1.0)  # past the first expiry
    with pytest.raises(RunLeasedError):
        await make_store().acquire("g")
    flow.release.set()
    result = await asyncio.wait_for(first, _WAIT)
    assert result.state == {"log": ["a", "b"]} and result.steps == 2


async def test_a_failed_run_gives_its_lease_up(make_store: Factory) -> None:
    """A run that raised releases its lease: another runner resumes it at once."""
    calls: Counter[str] = Counter()

    async def b(ctx: GraphContext) -> dict[str, Any]:
        calls["b"] += 1
        if calls["b"] == 1:
            raise ConnectionError("b lost its connection")
        return {"log": "b"}

    graph = (
        GraphBuilder(reducers={"log": append})
        .add_node("a", lambda ctx: {"log": "a"})
        .add_node("b", b)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .build()
    )
    with pytest.raises(NodeError):
        await graph.run({"log": []}, run_id="g", checkpoint=make_store())
    result = await graph.run(None, run_id="g", checkpoint=make_store())  # not RunLeasedError
    assert result.resumed and result.state == {"log": ["a", "b"]}


async def test_a_dead_owners_run_is_taken_over_after_expiry(make_store: Factory) -> None:
    """An owner that took the run and died: refused until its lease expires, then resumed."""
    flow = Blocking()
    flow.release.set()
    dead = make_store(lease=0.5)
    lease = await dead.acquire("g")  # took the run, then died: never renews
    await dead.save(_graph_state("g"))
    with pytest.raises(RunLeasedError) as refused:
        await flow.graph.run(None, run_id="g", checkpoint=make_store())
    assert refused.value.owner == lease.owner and not flow.calls

    await asyncio.sleep(max(0, lease.expires_at - time.time_ns() // 1_000_000) / 1000 + 0.05)
    result = await flow.graph.run(None, run_id="g", checkpoint=make_store())

    assert result.resumed and result.state == {"log": ["a", "b"]} and flow.calls == {"b": 1}
    with pytest.raises(CheckpointConflictError):  # the dead owner's late save is refused
        await dead.save(_graph_state("g"))


def _graph_state(run_id: str) -> CheckpointState:
    """The checkpoint of a graph run ``a -> b`` that finished ``a``."""
    graph = {"step": 1, "next": ["b"], "state": {"log": ["a"]}, "joins": [], "done": {}}
    return CheckpointState(run_id=run_id, iteration=1, custom={"graph": graph})


async def test_a_stalled_owner_is_taken_over_and_its_late_save_refused(
    make_store: Factory,
) -> None:
    """An owner stalled in a node past its lease (its event loop blocked: no renewal) is taken
    over by another process; when it wakes up, its save of the superstep is refused."""
    calls: Counter[str] = Counter()
    taker: dict[str, Any] = {}
    owner = make_store(lease=1.0)

    def b(ctx: GraphContext) -> dict[str, Any]:  # sync: it blocks its run's event loop
        calls["b"] += 1
        if calls["b"] == 1:
            thread = threading.Thread(target=lambda: taker.update(asyncio.run(take_over())))
            thread.start()
            thread.join(_WAIT * 2)
        return {"log": "b"}

    graph = (
        GraphBuilder(reducers={"log": append})
        .add_node("a", lambda ctx: {"log": "a"})
        .add_node("b", b)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .build()
    )

    async def take_over() -> dict[str, Any]:
        """Another process: refused while the owner's lease lives, then takes the run over."""
        async with make_store() as store:
            try:
                await graph.run(None, run_id="g", checkpoint=store)
            except RunLeasedError as exc:
                refused = exc
            await asyncio.sleep(1.2)  # the stalled owner's lease expires meanwhile
            result = await graph.run(None, run_id="g", checkpoint=store)
            return {"refused": refused, "result": result}

    with pytest.raises(CheckpointConflictError, match="may no longer save"):
        await graph.run({"log": []}, run_id="g", checkpoint=owner)

    assert isinstance(taker["refused"], RunLeasedError)
    assert taker["result"].state == {"log": ["a", "b"]} and taker["result"].resumed
    assert calls["b"] == 2  # the owner's b (cut off by the takeover) and the taker's
    assert [s.iteration for s in await make_store().history("g")] == [1, 2]


# ------------------------------------------------------------------- agents inside graph nodes


def _answering_agent(store: Store) -> Agent[None, str]:
    def answer(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply("done")

    return Agent(FunctionModel(answer), checkpoint=store)


async def test_an_agent_in_a_node_with_its_own_run_id_shares_the_store(
    make_store: Factory,
) -> None:
    """A node's agent checkpointing to the graph's store under its own run id runs as usual."""
    store = make_store()
    agent = _answering_agent(store)

    async def ask(ctx: GraphContext) -> dict[str, Any]:
        response = await agent.prompt("go", run_id="g-agent")
        return {"log": response.text}

    graph = (
        GraphBuilder(reducers={"log": append})
        .add_node("ask", ask)
        .add_edge(START, "ask")
        .add_edge("ask", END)
        .build()
    )
    result = await asyncio.wait_for(graph.run({"log": []}, run_id="g", checkpoint=store), _WAIT)
    assert result.state == {"log": ["done"]}
    assert await store.list_runs() == ["g", "g-agent"]
    await make_store().acquire("g-agent")  # both leases were given up
    await make_store().acquire("g")


@pytest.mark.parametrize("handle", ["same", "another"])
async def test_an_agent_in_a_node_reusing_the_graphs_run_id_fails_at_once(
    make_store: Factory, handle: str
) -> None:
    """An agent on the graph's own run id is refused at once (no wait on the graph's lease)."""
    store = make_store()
    agent = _answering_agent(store if handle == "same" else make_store())

    async def ask(ctx: GraphContext) -> dict[str, Any]:
        response = await agent.prompt("go", run_id="g")
        return {"log": response.text}

    graph = (
        GraphBuilder(reducers={"log": append})
        .add_node("ask", ask)
        .add_edge(START, "ask")
        .add_edge("ask", END)
        .build()
    )
    with pytest.raises(NodeError) as failed:
        await asyncio.wait_for(graph.run({"log": []}, run_id="g", checkpoint=store), _WAIT)
    assert isinstance(failed.value.__cause__, CheckpointConflictError)
    if handle == "another":
        assert isinstance(failed.value.__cause__, RunLeasedError)
    await make_store().acquire("g")  # the graph gave its lease up
