"""The effect ledger: a call's intent is stored before it runs, and a call in doubt (started, its
result never stored) does what its tool declared, on every checkpoint store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, RunContext, ToolCall, tool
from daimon.agent._effects import UNKNOWN_OUTCOME
from daimon.checkpoint import FileCheckpoint, RedisCheckpoint
from daimon.core import (
    ApprovalDecision,
    BuilderError,
    CheckpointState,
    EffectRecord,
    ToolOutput,
    codec,
)
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
    return ChatResponse.reply(f"told: {results[0]}")


@pytest.fixture
def file_stores(tmp_path: Path) -> MakeStore:
    """New handles on one folder, as separate processes would open."""
    return lambda: FileCheckpoint(tmp_path / "runs", lease=0.2)


@pytest.fixture
async def redis_stores(redis_url: str, redis_prefix: str) -> AsyncIterator[MakeStore]:
    """New connections to one Redis under one prefix, as separate processes would open."""
    handles: list[RedisCheckpoint] = []

    def make() -> Checkpoint:
        handles.append(RedisCheckpoint.from_url(redis_url, prefix=redis_prefix, lease=0.2))
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


class Service:
    """A card service: every charge it receives, and the keys it has applied (it dedupes by key)."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.applied: dict[str, int] = {}

    def charge(self, key: str, cents: int) -> str:
        self.received.append(key)
        self.applied.setdefault(key, cents)
        return f"{cents} cents"


def charging_agent(
    store: Checkpoint, service: Service, effect: str, *, crash: bool = False
) -> Agent:
    @tool(effect=effect)  # type: ignore[call-overload]
    async def charge(ctx: RunContext, cents: int) -> str:
        """Charge a card."""
        done = service.charge(ctx.idempotency_key, cents)
        if crash:
            raise Crash  # the process died after the effect, before its result was stored
        return done

    return Agent(FunctionModel(one_call), tools=[charge], checkpoint=store)


async def died_mid_tool(make: MakeStore, service: Service, effect: str, run_id: str) -> None:
    with pytest.raises(Crash):
        await charging_agent(make(), service, effect, crash=True).prompt("pay", run_id=run_id)


async def effects(make: MakeStore, run_id: str) -> dict[str, EffectRecord]:
    state = await make().load(run_id)
    assert state is not None
    return state.effects


@pytest.mark.parametrize("make_store", STORES, indirect=True)
async def test_a_once_call_in_doubt_is_not_run_again_and_the_model_is_told(
    make_store: MakeStore,
) -> None:
    service = Service()
    await died_mid_tool(make_store, service, "once", "r-once")
    assert (await effects(make_store, "r-once"))["c1"].status == "started"

    done = await charging_agent(make_store(), service, "once").resume("r-once")

    assert service.received == ["r-once:c1"]
    assert done.text == f"told: {UNKNOWN_OUTCOME}"
    record = (await effects(make_store, "r-once"))["c1"]
    assert (record.status, record.effect, record.attempts) == ("in_doubt", "once", 1)


@pytest.mark.parametrize("make_store", STORES, indirect=True)
async def test_a_keyed_call_in_doubt_runs_again_under_the_same_key(make_store: MakeStore) -> None:
    service = Service()
    await died_mid_tool(make_store, service, "keyed", "r-keyed")

    done = await charging_agent(make_store(), service, "keyed").resume("r-keyed")

    assert service.received == ["r-keyed:c1", "r-keyed:c1"]
    assert service.applied == {"r-keyed:c1": 5}
    assert done.text == "told: 5 cents"
    record = (await effects(make_store, "r-keyed"))["c1"]
    assert (record.status, record.attempts, record.idempotency_key) == (
        "completed",
        2,
        "r-keyed:c1",
    )


@pytest.mark.parametrize("make_store", STORES, indirect=True)
async def test_a_repeatable_call_in_doubt_runs_again_unrecorded(make_store: MakeStore) -> None:
    service = Service()
    await died_mid_tool(make_store, service, "repeatable", "r-rep")
    assert await effects(make_store, "r-rep") == {}  # no intent written: nothing to decide

    done = await charging_agent(make_store(), service, "repeatable").resume("r-rep")

    assert service.received == ["r-rep:c1", "r-rep:c1"]
    assert done.text == "told: 5 cents"


@pytest.mark.parametrize("make_store", STORES, indirect=True)
async def test_an_ask_call_in_doubt_waits_for_a_person(make_store: MakeStore) -> None:
    service = Service()
    await died_mid_tool(make_store, service, "ask", "r-ask")

    paused = await charging_agent(make_store(), service, "ask").resume("r-ask")
    assert service.received == ["r-ask:c1"]
    [request] = paused.pending_approvals
    assert (request.id, request.in_doubt) == ("c1", True)
    assert (await effects(make_store, "r-ask"))["c1"].status == "in_doubt"

    done = await charging_agent(make_store(), service, "ask").resume("r-ask", {"c1": True})

    assert service.received == ["r-ask:c1", "r-ask:c1"]
    assert done.text == "told: 5 cents"
    record = (await effects(make_store, "r-ask"))["c1"]
    assert (record.status, record.attempts) == ("completed", 2)


async def test_an_ask_call_a_person_rejects_is_reported_not_run(tmp_path: Path) -> None:
    def make() -> Checkpoint:
        return FileCheckpoint(tmp_path, lease=0.2)

    service = Service()
    await died_mid_tool(make, service, "ask", "r-no")
    paused = await charging_agent(make(), service, "ask").resume("r-no")

    done = await charging_agent(make(), service, "ask").resume(
        paused, {"c1": ApprovalDecision.reject("the customer was charged already")}
    )

    assert service.received == ["r-no:c1"]
    assert "not to run it again: the customer was charged already" in done.text
    assert (await effects(make, "r-no"))["c1"].status == "skipped"


@pytest.mark.parametrize("make_store", STORES, indirect=True)
async def test_the_intent_is_stored_before_the_tool_runs(make_store: MakeStore) -> None:
    seen: list[EffectRecord] = []
    reader = make_store()

    @tool(effect="once")
    async def charge(cents: int) -> str:
        """Charge a card."""
        state = await reader.load("r-ahead")
        assert state is not None
        seen.append(state.effects["c1"])
        return f"{cents} cents"

    agent = Agent(FunctionModel(one_call), tools=[charge], checkpoint=make_store())
    done = await agent.prompt("pay", run_id="r-ahead")

    assert done.text == "told: 5 cents"
    [intent] = seen
    assert (intent.status, intent.tool, intent.attempts) == ("started", "charge", 1)
    assert intent.idempotency_key == "r-ahead:c1"
    assert len(intent.arguments_sha256) == 64
    assert (await effects(make_store, "r-ahead"))["c1"].status == "completed"


async def test_a_completed_call_is_never_run_again(tmp_path: Path) -> None:
    """The process dies after the result is stored, before the run ends: the result is reused."""
    calls: list[int] = []
    answered = False

    def dies_on_answer(request: ChatRequest) -> ChatResponse:
        if any(m.role is Role.TOOL for m in request.messages) and not answered:
            raise Crash
        return one_call(request)

    @tool(effect="once")
    async def charge(cents: int) -> str:
        """Charge a card."""
        calls.append(cents)
        return f"{cents} cents"

    def agent() -> Agent:
        return Agent(
            FunctionModel(dies_on_answer),
            tools=[charge],
            checkpoint=FileCheckpoint(tmp_path, lease=0.2),
        )

    with pytest.raises(Crash):
        await agent().prompt("pay", run_id="r-done")
    answered = True
    done = await agent().resume("r-done")

    assert calls == [5]
    assert done.text == "told: 5 cents"


async def test_the_run_context_shows_the_ledger(tmp_path: Path) -> None:
    seen: list[str] = []

    @tool(effect="keyed")
    async def charge(ctx: RunContext, cents: int) -> str:
        """Charge a card."""
        seen.append(ctx.effects[ctx.call_id].status)
        return f"{cents} cents"

    agent = Agent(FunctionModel(one_call), tools=[charge], checkpoint=FileCheckpoint(tmp_path))
    await agent.prompt("pay", run_id="r-ctx")

    assert seen == ["started"]


def test_a_keyed_tool_must_read_its_key() -> None:
    with pytest.raises(BuilderError, match=r"keyed tool .* RunContext"):

        @tool(effect="keyed")
        def charge(cents: int) -> str:
            """Charge a card."""
            return str(cents)


def test_an_unknown_effect_is_refused() -> None:
    with pytest.raises(BuilderError, match=r"effect must be one of 'repeatable', 'keyed'"):

        @tool(effect="twice")  # type: ignore[call-overload]
        def charge(cents: int) -> str:
            """Charge a card."""
            return str(cents)


def test_a_state_without_effects_is_written_as_before() -> None:
    """An older daimon reads what this one writes for runs whose tools declare no effect."""
    text = codec.dumps(CheckpointState(run_id="r"))
    assert "effects" not in text
    assert codec.loads(text, CheckpointState).effects == {}


class FailsOnSave:
    """A store whose ``fail_at``-th save raises, as a store that went down would."""

    def __init__(self, store: Checkpoint, fail_at: int) -> None:
        self._store = store
        self._saves = 0
        self._fail_at = fail_at

    async def save(self, state: CheckpointState) -> None:
        self._saves += 1
        if self._saves == self._fail_at:
            raise ConnectionError("store down")
        await self._store.save(state)

    async def load(self, run_id: str) -> CheckpointState | None:
        return await self._store.load(run_id)

    async def list_runs(self) -> list[str]:
        return await self._store.list_runs()

    async def delete(self, run_id: str) -> None:
        await self._store.delete(run_id)


async def test_a_call_whose_intent_could_not_be_saved_does_not_run(tmp_path: Path) -> None:
    """Saves: the model's turn, then the intent (which fails): the tool never starts."""
    service = Service()
    down = FailsOnSave(FileCheckpoint(tmp_path), fail_at=2)
    with pytest.raises(ConnectionError):
        await charging_agent(down, service, "once").prompt("pay", run_id="r-down")
    assert service.received == []

    # it never started, so it is not in doubt: once the store is back, the run runs it
    done = await charging_agent(FileCheckpoint(tmp_path), service, "once").resume("r-down")
    assert service.received == ["r-down:c1"]
    assert done.text == "told: 5 cents"


async def test_a_call_that_ends_the_run_is_recorded_completed(tmp_path: Path) -> None:
    from daimon.tools import EndRun

    @tool(effect="once")
    async def charge(cents: int) -> str:
        """Charge a card, which ends the run."""
        raise EndRun(text=f"charged {cents}")

    agent = Agent(FunctionModel(one_call), tools=[charge], checkpoint=FileCheckpoint(tmp_path))
    done = await agent.prompt("pay", run_id="r-end")

    assert done.text == "charged 5"
    assert (await FileCheckpoint(tmp_path).load("r-end")).effects["c1"].status == "completed"  # type: ignore[union-attr]


async def test_a_runner_stalled_past_its_lease_starts_no_call(tmp_path: Path) -> None:
    """The lease ran out between the last save and the tool (the event loop was blocked)."""
    import time

    from daimon.core import CheckpointConflictError
    from daimon.extensions import CallTool, Extension
    from daimon.state import RunState

    calls: list[int] = []

    class Stall(Extension):
        async def wrap_tool_call(
            self, call: ToolCall, ctx: RunState, call_next: CallTool
        ) -> ToolOutput:
            time.sleep(0.35)  # noqa: ASYNC251  # blocks the loop past the 0.2 s lease
            return await call_next(call)

    @tool
    async def charge(cents: int) -> str:
        """Charge a card."""
        calls.append(cents)
        return f"{cents} cents"

    store = FileCheckpoint(tmp_path, lease=0.2)
    agent = Agent(FunctionModel(one_call), tools=[charge], checkpoint=store, extensions=[Stall()])
    with pytest.raises(CheckpointConflictError, match="lease ended before the tool call"):
        await agent.prompt("pay", run_id="r-stall")

    assert calls == []
