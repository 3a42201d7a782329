"""A conformance suite for checkpoint backends.

Subclass :class:`CheckpointConformance` in a test module and provide a ``make_checkpoint``
fixture: an async callable that opens a new handle on one store, fresh for each test, taking the
retention options ``keep_last`` and ``ttl`` as keywords, and closes its handles at teardown::

    class TestFileCheckpoint(CheckpointConformance):
        @pytest.fixture
        async def make_checkpoint(self, tmp_path):
            async def make(**options):
                return FileCheckpoint(tmp_path / "runs", **options)

            return make

Beyond the :class:`daimon.core.Checkpoint` protocol, the suite checks the methods of
:class:`CheckpointStore`: ``history``, ``fork`` and ``prune``, the optimistic concurrency every
daimon backend has (a handle that has not seen a run's newest checkpoint cannot save over it), and
run leases (:class:`daimon.core.RunLeases`, option ``lease``): agents resuming a run that died
inside a tool call, started 0 to 200 ms apart, run the tool once; a dead owner's lease is taken
over once it expires, and the dead owner can no longer save; deleting a run removes its lease too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import pytest

from daimon.agent import Agent
from daimon.core.chat import ChatRequest, ChatResponse, Usage
from daimon.core.checkpoints import CheckpointState, Lease, RunLeases
from daimon.core.errors import (
    CheckpointConflictError,
    DaimonError,
    InvalidIdError,
    RunLeasedError,
    SerializationError,
)
from daimon.core.messages import Message, Role, ToolCall
from daimon.core.protocols import Checkpoint
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput
from daimon.models.function import FunctionModel
from daimon.testing.memory import sample_messages
from daimon.tools import tool

__all__ = ("CheckpointConformance", "CheckpointFactory", "CheckpointStore", "sample_state")


class CheckpointStore(Checkpoint, RunLeases, Protocol):
    """A :class:`~daimon.core.Checkpoint` with history, forks, retention and leases (daimon's)."""

    async def history(self, run_id: str) -> list[CheckpointState]:
        """Every checkpoint of the run, newest last."""
        ...

    async def fork(self, run_id: str, new_run_id: str) -> None:
        """Copy a run's checkpoints to a new run."""
        ...

    async def prune(self) -> int:
        """Apply retention; how many checkpoints were deleted."""
        ...


class CheckpointFactory(Protocol):
    """Opens a new handle on the store under test."""

    def __call__(self, **options: Any) -> Awaitable[CheckpointStore]:
        """A handle with these options (``keep_last``, ``ttl``, ``lease``)."""
        ...


def sample_state(run_id: str, iteration: int = 3) -> CheckpointState:
    """A run state using every field: tool calls pending and done, usage, custom data."""
    return CheckpointState(
        run_id=run_id,
        messages=(*sample_messages(), Message.assistant("", [ToolCall(id="c9", name="wait")])),
        iteration=iteration,
        usage=Usage(input_tokens=1200, output_tokens=345, cached_tokens=100, requests=4),
        cost=0.012345,
        pending_tool_calls=(
            ToolCall(id="c9", name="wait", arguments={}),
            ToolCall(id="c10", name="search", arguments={"q": "ünï", "k": [1, 2.5, None, True]}),
        ),
        completed_tool_results={
            "call_1": ToolOutput.json({"cats": 2, "names": ["a", "b"]}),
            "call_2": ToolOutput.error("bad arguments"),
            "c0": ToolOutput.text("plain"),
        },
        custom={"step": "tools", "nested": {"list": [1, {"deep": "🧪"}], "none": None}, "n": -1},
        session_id="session-1",
    )


def _state(run_id: str, iteration: int) -> CheckpointState:
    return CheckpointState(run_id=run_id, iteration=iteration)


async def _iterations(store: CheckpointStore, run_id: str) -> list[int]:
    return [state.iteration for state in await store.history(run_id)]


_WAIT = 10.0
"""Seconds a test waits for something that should happen at once (generous: CI is loaded)."""


class _Crash(BaseException):
    """Stands in for the process dying mid-tool: nothing in daimon catches a BaseException."""


def _one_call(request: ChatRequest) -> ChatResponse:
    """Asks for one call of ``charge``, then answers with its result."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(ToolCall(id="c1", name="charge", arguments={"cents": 5}))
    return ChatResponse.reply(f"charged: {results[0]}")


def _charging_agent(
    store: Checkpoint, charges: list[int], *, crash: bool = False, hold: asyncio.Event | None = None
) -> Agent:
    """An agent whose one tool records a charge; it crashes, or waits for ``hold`` (bounded)."""

    @tool
    async def charge(cents: int) -> str:
        """Charge a card (the side effect that must never run twice)."""
        charges.append(cents)
        if crash:
            raise _Crash
        if hold is not None:  # the owner stays alive and inside the tool meanwhile
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hold.wait(), _WAIT)
        return f"{cents} cents"

    return Agent(FunctionModel(_one_call), tools=[charge], checkpoint=store)


async def _died_mid_tool(store: CheckpointStore, run_id: str) -> None:
    """A run whose process died while its tool ran: the checkpoint holds the pending call."""
    charges: list[int] = []
    with pytest.raises(_Crash):
        await _charging_agent(store, charges, crash=True).prompt("pay", run_id=run_id)
    assert charges == [5]
    saved = await store.load(run_id)
    assert saved is not None and saved.pending_tool_calls


async def _until_expired(lease: Lease) -> None:
    """Sleep until the wall clock is past ``lease``'s expiry (and a little more)."""
    await asyncio.sleep(max(0, lease.expires_at - time.time_ns() // 1_000_000) / 1000 + 0.05)


class CheckpointConformance:
    """Tests every daimon checkpoint backend must pass."""

    @pytest.fixture
    async def checkpoint(self, make_checkpoint: CheckpointFactory) -> CheckpointStore:
        """A handle with default options on the store under test."""
        return await make_checkpoint()

    async def test_unknown_run_loads_none(self, checkpoint: CheckpointStore) -> None:
        """Loading a run that was never saved gives ``None`` and no history."""
        assert await checkpoint.load("no-such-run") is None
        assert await checkpoint.history("no-such-run") == []

    async def test_state_round_trips_equal(self, checkpoint: CheckpointStore) -> None:
        """A state with every field set loads back equal."""
        state = sample_state("run-1")
        await checkpoint.save(state)
        assert await checkpoint.load("run-1") == state

    async def test_load_returns_the_newest(self, checkpoint: CheckpointStore) -> None:
        """``load`` gives the newest checkpoint; ``history`` all of them, newest last."""
        for iteration in range(4):
            await checkpoint.save(_state("r", iteration))
        assert await checkpoint.load("r") == _state("r", 3)
        assert await _iterations(checkpoint, "r") == [0, 1, 2, 3]

    async def test_runs_are_isolated(self, checkpoint: CheckpointStore) -> None:
        """Runs whose ids look alike never see each other's checkpoints."""
        ids = ["r", "r1", "r-1", "R", "r 1", "r:1", "ré", "r.1", "r=1"]
        for n, run_id in enumerate(ids):
            await checkpoint.save(_state(run_id, n))
        assert await checkpoint.list_runs() == sorted(ids)
        for n, run_id in enumerate(ids):
            assert await checkpoint.load(run_id) == _state(run_id, n), run_id

    async def test_delete(self, checkpoint: CheckpointStore) -> None:
        """``delete`` removes one run only, is a no-op for unknown runs, and frees the id."""
        await checkpoint.save(_state("a", 1))
        await checkpoint.save(_state("b", 1))
        await checkpoint.delete("a")
        await checkpoint.delete("never-saved")
        assert await checkpoint.load("a") is None
        assert await checkpoint.history("a") == []
        assert await checkpoint.list_runs() == ["b"]
        await checkpoint.save(_state("a", 7))  # the id can be used again
        assert await _iterations(checkpoint, "a") == [7]

    async def test_keep_last(self, make_checkpoint: CheckpointFactory) -> None:
        """With ``keep_last=2`` only the two newest checkpoints of a run remain."""
        store = await make_checkpoint(keep_last=2)
        for iteration in range(5):
            await store.save(_state("r", iteration))
        assert await _iterations(store, "r") == [3, 4]
        assert await store.load("r") == _state("r", 4)
        assert await store.prune() == 0

    async def test_ttl_hides_expired_checkpoints(self, make_checkpoint: CheckpointFactory) -> None:
        """A checkpoint older than ``ttl`` is never returned."""
        store = await make_checkpoint(ttl=0.5)
        await store.save(_state("r", 1))
        assert await store.load("r") == _state("r", 1)
        await asyncio.sleep(0.8)
        assert await store.load("r") is None
        assert await store.history("r") == []

    async def test_fork(self, checkpoint: CheckpointStore) -> None:
        """``fork`` copies a run under a new id; both then go their own way."""
        for iteration in range(3):
            await checkpoint.save(_state("main", iteration))
        await checkpoint.fork("main", "branch")
        assert await checkpoint.history("branch") == [_state("branch", i) for i in range(3)]
        await checkpoint.save(_state("branch", 10))
        assert await _iterations(checkpoint, "branch") == [0, 1, 2, 10]
        assert await _iterations(checkpoint, "main") == [0, 1, 2]
        assert await checkpoint.list_runs() == ["branch", "main"]
        with pytest.raises(DaimonError, match="already has checkpoints"):
            await checkpoint.fork("main", "branch")
        with pytest.raises(DaimonError, match="no intact checkpoint"):
            await checkpoint.fork("no-such-run", "other")

    async def test_state_survives_a_new_handle(self, make_checkpoint: CheckpointFactory) -> None:
        """A new handle (a restarted process) loads what another saved."""
        await (await make_checkpoint()).save(sample_state("r"))
        assert await (await make_checkpoint()).load("r") == sample_state("r")

    async def test_resume_from_another_handle(self, make_checkpoint: CheckpointFactory) -> None:
        """A handle must have loaded a run's newest checkpoint to save after it."""
        first, second = await make_checkpoint(), await make_checkpoint()
        await first.save(_state("r", 1))
        with pytest.raises(DaimonError, match="conflict"):  # second never loaded the run
            await second.save(_state("r", 2))
        assert await second.load("r") == _state("r", 1)
        await second.save(_state("r", 2))
        with pytest.raises(DaimonError, match="conflict"):  # first is now behind
            await first.save(_state("r", 3))
        assert await first.load("r") == _state("r", 2)
        await first.save(_state("r", 3))
        assert await _iterations(second, "r") == [1, 2, 3]

    async def test_concurrent_saves_one_wins(self, make_checkpoint: CheckpointFactory) -> None:
        """Of handles racing to save after the same checkpoint, exactly one wins."""
        handles = [await make_checkpoint() for _ in range(4)]
        await handles[0].save(_state("r", 0))
        for handle in handles:
            await handle.load("r")
        results = await asyncio.gather(
            *(h.save(_state("r", n)) for n, h in enumerate(handles, start=1)),
            return_exceptions=True,
        )
        winners = [n for n, r in enumerate(results, start=1) if r is None]
        assert len(winners) == 1, results
        assert all(isinstance(r, DaimonError) for r in results if r is not None), results
        assert await handles[0].load("r") == _state("r", winners[0])
        assert await _iterations(handles[0], "r") == [0, winners[0]]

    async def test_unstorable_state_is_a_typed_error(self, checkpoint: CheckpointStore) -> None:
        """A state that cannot be stored raises ``SerializationError`` and stores nothing."""
        with pytest.raises(SerializationError):
            await checkpoint.save(CheckpointState(run_id="r", custom={"bad": "\ud800"}))
        with pytest.raises(SerializationError):
            await checkpoint.save(CheckpointState(run_id="r", custom={"bad": object()}))
        assert await checkpoint.load("r") is None
        await checkpoint.save(_state("r", 1))
        assert await checkpoint.load("r") == _state("r", 1)

    async def test_keys_other_serializers_read_as_code_are_kept_as_data(
        self, checkpoint: CheckpointStore
    ) -> None:
        """Custom data with ``py/object`` or ``$type`` keys is stored and read back as is."""
        state = CheckpointState(run_id="r", custom={"x": {"py/object": "os"}, "$type": ["~py/a"]})
        await checkpoint.save(state)
        assert await checkpoint.load("r") == state

    @pytest.mark.parametrize("run_id", ["", "\ud800", "a\0b", "r" * 1025])
    async def test_an_invalid_run_id_is_refused(
        self, checkpoint: CheckpointStore, run_id: str
    ) -> None:
        """A run id no backend can hold is an ``InvalidIdError`` naming it; nothing is stored."""
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: checkpoint.save(_state(run_id, 1)),
            lambda: checkpoint.load(run_id),
            lambda: checkpoint.history(run_id),
            lambda: checkpoint.delete(run_id),
            lambda: checkpoint.fork("r", run_id),
        ]
        for call in calls:
            with pytest.raises(InvalidIdError, match="invalid run id") as raised:
                await call()
            assert raised.value.value == run_id
        assert await checkpoint.list_runs() == []

    # -------------------------------------------------------------------------------- leases

    async def test_a_live_lease_is_refused_naming_its_owner(
        self, make_checkpoint: CheckpointFactory
    ) -> None:
        """A second holder is refused while the lease lives; once released, the run is free."""
        first, second = await make_checkpoint(), await make_checkpoint()
        lease = await first.acquire("r")
        assert lease.run_id == "r" and ":" in lease.owner
        with pytest.raises(RunLeasedError) as refused:
            await second.acquire("r")
        assert isinstance(refused.value, CheckpointConflictError)
        assert refused.value.owner == lease.owner and lease.owner in str(refused.value)
        assert abs(refused.value.expires_at - lease.expires_at) < 1000
        assert (await first.acquire("other")).run_id == "other"  # leases are per run
        await first.release(lease)
        taken = await second.acquire("r")
        assert taken.token > lease.token  # each new holder's token is higher
        await first.release(lease)  # releasing an ended lease changes nothing
        with pytest.raises(RunLeasedError):
            await first.acquire("r")

    async def test_racing_acquires_one_wins(self, make_checkpoint: CheckpointFactory) -> None:
        """Of handles taking one run's lease at once, exactly one gets it."""
        handles = [await make_checkpoint() for _ in range(4)]
        outcomes = await asyncio.gather(*(h.acquire("r") for h in handles), return_exceptions=True)
        assert sum(isinstance(o, Lease) for o in outcomes) == 1, outcomes
        assert all(isinstance(o, (Lease, RunLeasedError)) for o in outcomes), outcomes

    async def test_a_renewed_lease_outlives_its_first_expiry(
        self, make_checkpoint: CheckpointFactory
    ) -> None:
        """``renew`` extends the lease from now; the holder keeps it past its first expiry."""
        holder, other = await make_checkpoint(lease=1.5), await make_checkpoint()
        lease = await holder.acquire("r")
        await asyncio.sleep(0.5)
        renewed = await holder.renew(lease)
        assert renewed.token == lease.token and renewed.expires_at > lease.expires_at
        await _until_expired(lease)
        with pytest.raises(RunLeasedError):
            await other.acquire("r")
        await holder.save(_state("r", 1))  # the holder still saves

    async def test_an_expired_lease_is_taken_over_and_its_holder_fenced(
        self, make_checkpoint: CheckpointFactory
    ) -> None:
        """After expiry another handle takes the run; the old holder can neither save nor renew."""
        old, new = await make_checkpoint(lease=0.5), await make_checkpoint()
        lease = await old.acquire("r")
        await old.save(_state("r", 1))
        await _until_expired(lease)
        taken = await new.acquire("r")
        assert taken.token > lease.token
        assert await new.load("r") == _state("r", 1)
        await new.save(_state("r", 2))
        with pytest.raises(CheckpointConflictError):
            await old.save(_state("r", 3))
        with pytest.raises(CheckpointConflictError):
            await old.renew(lease)
        await old.release(lease)  # the old holder's release leaves the new lease alone
        with pytest.raises(RunLeasedError):
            await old.acquire("r")
        assert await _iterations(new, "r") == [1, 2]

    async def test_delete_removes_the_runs_lease(self, make_checkpoint: CheckpointFactory) -> None:
        """Deleting a run removes its live lease too: the id can be leased and run again at once."""
        holder, other = await make_checkpoint(), await make_checkpoint()
        await holder.acquire("r")
        await holder.save(_state("r", 1))
        await other.acquire("leased-only")  # a run leased before its first save
        await other.delete("r")
        await holder.delete("leased-only")
        again = await other.acquire("r")
        assert again.run_id == "r" and again.owner
        assert await other.load("r") is None
        await other.save(_state("r", 2))
        assert await _iterations(other, "r") == [2]
        assert (await holder.acquire("leased-only")).run_id == "leased-only"
        assert await holder.list_runs() == ["r"]

    @pytest.mark.parametrize("stagger_ms", [0, 10, 50, 200])
    async def test_staggered_resumers_run_a_pending_tool_once(
        self, make_checkpoint: CheckpointFactory, stagger_ms: int
    ) -> None:
        """Agents resuming a run that died mid-tool, ``stagger_ms`` apart: the tool runs once.

        The first resumer stays inside the tool until every other one was refused, so each later
        one finds a live owner: it is refused (``RunLeasedError``) before it runs anything.
        """
        await _died_mid_tool(await make_checkpoint(), "staggered")
        charges: list[int] = []
        refused = asyncio.Event()

        async def resume(delay: float) -> AgentResponse[Any] | CheckpointConflictError:
            await asyncio.sleep(delay)
            agent = _charging_agent(await make_checkpoint(), charges, hold=refused)
            try:
                return await agent.resume("staggered")
            except CheckpointConflictError as exc:
                refused.set()
                return exc

        outcomes = await asyncio.gather(resume(0), resume(stagger_ms / 1000))

        assert charges == [5], (charges, outcomes)
        answers = [o.text for o in outcomes if isinstance(o, AgentResponse)]
        assert answers == ["charged: 5 cents"], outcomes
        assert sum(isinstance(o, RunLeasedError) for o in outcomes) == 1, outcomes

    async def test_a_dead_owners_run_completes_once_after_its_lease_expires(
        self, make_checkpoint: CheckpointFactory
    ) -> None:
        """A run whose owner died holding its lease: refused until expiry, then completed once."""
        await _died_mid_tool(await make_checkpoint(), "orphan")
        dead = await make_checkpoint(lease=0.5)
        lease = await dead.acquire("orphan")  # took the run, then died: never renews
        assert await dead.load("orphan") is not None
        charges: list[int] = []
        agent = _charging_agent(await make_checkpoint(), charges)
        with pytest.raises(RunLeasedError) as refused:
            await agent.resume("orphan")
        assert refused.value.owner == lease.owner and charges == []

        await _until_expired(lease)
        response = await agent.resume("orphan")

        assert response.text == "charged: 5 cents" and charges == [5]
        with pytest.raises(CheckpointConflictError):  # the dead owner's late save is refused
            await dead.save(CheckpointState(run_id="orphan", iteration=99))
        again = _charging_agent(await make_checkpoint(), charges)
        assert (await again.resume("orphan")).text == "charged: 5 cents"  # finished: nothing runs
        assert charges == [5]
