from __future__ import annotations

import pytest

from daimon.core import BuilderError, StateStore
from daimon.serverstate.memory import MemoryStateStore
from daimon.testing.state_store import StateStoreConformance, StateStoreFactory


class TestMemoryStateStore(StateStoreConformance):
    @pytest.fixture
    def make_store(self) -> StateStoreFactory:
        store = MemoryStateStore()  # handles on one process's memory are the one object

        async def make() -> StateStore:
            return store

        return make


async def test_it_is_a_state_store() -> None:
    assert isinstance(MemoryStateStore(), StateStore)


async def test_each_kind_keeps_its_newest_records_and_streams() -> None:
    store = MemoryStateStore(limit=3)
    for i in range(5):
        await store.put("response", f"r{i}", str(i))
        await store.append("mcp_event", f"s{i}", str(i))
    await store.put("paused_run", "p", "1")  # another kind has its own bound
    await store.put("response", "r2", "rewritten")  # a write makes it the newest again
    await store.put("response", "r5", "5")
    assert [await store.get("response", f"r{i}") for i in range(6)] == [
        None,
        None,
        "rewritten",
        None,
        "4",
        "5",
    ]
    assert [bool(await store.read_after("mcp_event", f"s{i}")) for i in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert await store.get("paused_run", "p") == "1"


async def test_a_stream_keeps_its_newest_events() -> None:
    store = MemoryStateStore(max_events=3)
    for i in range(1, 6):
        assert await store.append("mcp_event", "s", str(i)) == i
    assert await store.read_after("mcp_event", "s") == [(3, "3"), (4, "4"), (5, "5")]
    assert await store.read_after("mcp_event", "s", 3) == [(4, "4"), (5, "5")]
    assert await store.read_after("mcp_event", "s", 3, limit=1) == [(4, "4")]


@pytest.mark.parametrize("options", [{"limit": 0}, {"max_events": 0}, {"limit": True}])
def test_bounds_must_be_positive(options: dict[str, object]) -> None:
    with pytest.raises(BuilderError):
        MemoryStateStore(**options)  # type: ignore[arg-type]


async def test_waits_that_time_out_leave_nothing_behind() -> None:
    store = MemoryStateStore()
    for i in range(3):
        assert await store.wait_after("mcp_event", f"s{i}", 0, wait=0.01) == []
    assert not store._waiters
