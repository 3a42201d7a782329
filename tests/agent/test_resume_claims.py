"""Two resumers of one run: the run is claimed before any tool runs, so a tool never runs twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.checkpoint import FileCheckpoint, RedisCheckpoint
from daimon.core import CheckpointConflictError, CheckpointState
from daimon.core.protocols import Checkpoint
from daimon.models import FunctionModel

MakeStore = Callable[[], Checkpoint]


class Crash(BaseException):
    """Stands in for the process dying mid-tool: nothing in daimon catches a BaseException."""


def one_call(request: ChatRequest) -> ChatResponse:
    """Asks for one call of ``charge``, then answers with its result."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(ToolCall(id="c1", name="charge", arguments={"cents": 5}))
    return ChatResponse.reply(f"charged: {results[0]}")


@pytest.fixture
def file_stores(tmp_path: Path) -> MakeStore:
    """Opens new handles on one folder, as separate processes would."""
    return lambda: FileCheckpoint(tmp_path / "runs")


@pytest.fixture
async def redis_stores(redis_url: str, redis_prefix: str) -> AsyncIterator[MakeStore]:
    """Opens new connections to one Redis under one prefix, as separate processes would."""
    handles: list[RedisCheckpoint] = []

    def make() -> Checkpoint:
        handles.append(RedisCheckpoint.from_url(redis_url, prefix=redis_prefix))
        return handles[-1]

    yield make
    for handle in handles:
        await handle.aclose()


STORES = [
    pytest.param("file_stores", id="file"),
    pytest.param("redis_stores", id="redis", marks=pytest.mark.service("redis")),
]


@pytest.fixture
def make_store(request: pytest.FixtureRequest) -> MakeStore:
    """The store named by the test's parameter."""
    store: MakeStore = request.getfixturevalue(request.param)
    return store


def charging_agent(store: Checkpoint, charges: list[int], crash: bool = False) -> Agent:
    @tool
    async def charge(cents: int) -> str:
        """Charge a card (the side effect that must never run twice)."""
        charges.append(cents)
        if crash:
            raise Crash
        await asyncio.sleep(0.05)  # a slow side effect: both resumers are in flight meanwhile
        return f"{cents} cents"

    return Agent(FunctionModel(one_call), tools=[charge], checkpoint=store)


async def died_mid_tool(make: MakeStore, run_id: str) -> None:
    """A run whose process died while its tool ran: the checkpoint holds the pending call."""
    died: list[int] = []
    with pytest.raises(Crash):
        await charging_agent(make(), died, crash=True).prompt("pay", run_id=run_id)
    assert died == [5]


class LoadTogether:
    """A store handle whose ``load`` returns only once every handle of its group has loaded.

    Two resumers started at once may or may not load the run before the other claims it: that
    depends on how fast each one's connection opens. This pins the case the claim is for (both
    read the same checkpoint, then race to run its pending tool), so the test never depends on
    timing. (A resumer that starts after another's claim, while that one's tool still runs, is
    refused by the run's lease: tests/checkpoint's staggered-resumer cases.)
    """

    def __init__(self, store: Checkpoint, barrier: asyncio.Barrier) -> None:
        self._store = store
        self._barrier = barrier

    async def save(self, state: CheckpointState) -> None:
        await self._store.save(state)

    async def load(self, run_id: str) -> CheckpointState | None:
        state = await self._store.load(run_id)
        await self._barrier.wait()
        return state

    async def list_runs(self) -> list[str]:
        return await self._store.list_runs()

    async def delete(self, run_id: str) -> None:
        await self._store.delete(run_id)


@pytest.mark.parametrize("make_store", STORES, indirect=True)
async def test_two_resumers_of_a_run_that_died_mid_tool_run_it_once(make_store: MakeStore) -> None:
    await died_mid_tool(make_store, "run-claim")
    charges: list[int] = []
    both_loaded = asyncio.Barrier(2)
    first = charging_agent(LoadTogether(make_store(), both_loaded), charges)
    second = charging_agent(LoadTogether(make_store(), both_loaded), charges)

    outcomes = await asyncio.gather(
        first.resume("run-claim"), second.resume("run-claim"), return_exceptions=True
    )

    assert charges == [5]
    conflicts = [o for o in outcomes if isinstance(o, CheckpointConflictError)]
    answers = [o.text for o in outcomes if not isinstance(o, BaseException)]
    assert len(conflicts) == 1 and answers == ["charged: 5 cents"], outcomes


@pytest.mark.parametrize("make_store", STORES, indirect=True)
async def test_a_resumer_that_lost_the_claim_runs_nothing_later(make_store: MakeStore) -> None:
    await died_mid_tool(make_store, "run-late")
    charges: list[int] = []
    loser_store = make_store()
    assert await loser_store.load("run-late") is not None  # the loser saw the run first...
    winner = await charging_agent(make_store(), charges).resume("run-late")
    assert winner.text == "charged: 5 cents"

    # ...and the run it resumes is already finished: it returns the answer, running nothing.
    late = await charging_agent(loser_store, charges).resume("run-late")
    assert late.text == "charged: 5 cents"
    assert charges == [5]


async def test_one_handle_running_one_run_twice_at_once_is_refused(tmp_path: Path) -> None:
    store = FileCheckpoint(tmp_path / "runs")
    await died_mid_tool(lambda: store, "run-shared")
    charges: list[int] = []
    agent = charging_agent(store, charges)

    outcomes = await asyncio.gather(
        agent.resume("run-shared"), agent.resume("run-shared"), return_exceptions=True
    )

    assert charges == [5]
    conflicts = [o for o in outcomes if isinstance(o, CheckpointConflictError)]
    assert len(conflicts) == 1 and "already running in this process" in str(conflicts[0])
    # the refusal held nothing: the run can be resumed (and answers) afterwards
    assert (await agent.resume("run-shared")).text == "charged: 5 cents"
    assert charges == [5]


def duplicate_ids(request: ChatRequest) -> ChatResponse:
    """Gives two different calls one id, as some models do, then echoes what it was told."""
    results = [(m.tool_call_id, m.text) for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(
            ToolCall(id="dup", name="echo", arguments={"word": "first"}),
            ToolCall(id="dup", name="echo", arguments={"word": "second"}),
            ToolCall(id="dup~2", name="echo", arguments={"word": "third"}),
        )
    return ChatResponse.reply(" ".join(f"{i}={t}" for i, t in results))


@pytest.mark.parametrize("stream", [False, True])
async def test_duplicate_call_ids_each_get_their_own_result(stream: bool) -> None:
    @tool
    async def echo(word: str) -> str:
        """Say the word back."""
        return word

    agent = Agent(FunctionModel(duplicate_ids), tools=[echo])
    if stream:
        done = [e async for e in agent.prompt_stream("go")][-1]
        response = done.response  # type: ignore[union-attr]
        assert response is not None
    else:
        response = await agent.prompt("go")

    assert response.text == "dup=first dup~3=second dup~2=third"
    assistant = response.messages[1]
    assert [c.id for c in assistant.tool_calls] == ["dup", "dup~3", "dup~2"]
    assert [m.tool_call_id for m in response.messages[2:5]] == ["dup", "dup~3", "dup~2"]
