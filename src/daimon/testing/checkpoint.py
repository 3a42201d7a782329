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
:class:`CheckpointStore`: ``history``, ``fork`` and ``prune``, and the optimistic concurrency every
daimon backend has (a handle that has not seen a run's newest checkpoint cannot save over it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import pytest

from daimon.core.chat import Usage
from daimon.core.checkpoints import CheckpointState
from daimon.core.errors import DaimonError, InvalidIdError, SerializationError
from daimon.core.messages import Message, ToolCall
from daimon.core.protocols import Checkpoint
from daimon.core.tools import ToolOutput
from daimon.testing.memory import sample_messages

__all__ = ("CheckpointConformance", "CheckpointFactory", "CheckpointStore", "sample_state")


class CheckpointStore(Checkpoint, Protocol):
    """A :class:`~daimon.core.Checkpoint` with history, forks and retention, as daimon's are."""

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
        """A handle with these options (``keep_last``, ``ttl``)."""
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
