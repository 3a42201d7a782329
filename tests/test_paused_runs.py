"""Paused runs in the server's state store, shared by the AG-UI, OpenAI and A2A front ends."""

from __future__ import annotations

import asyncio

import pytest

from daimon import DaimonError, ToolCall, UnknownPausedRunError
from daimon._paused_runs import KEPT_PAUSED_RUNS, PausedRuns
from daimon.core.errors import SerializationError, StateStoreError
from daimon.core.results import AgentResponse
from daimon.serverstate import MemoryStateStore


def paused(*call_ids: str, run_id: str = "") -> AgentResponse:
    calls = tuple(ToolCall(id=c, name="t", arguments={}) for c in call_ids)
    return AgentResponse(text="", client_calls=calls, run_id=run_id or "-".join(call_ids))


async def test_a_memory_store_keeps_the_newest_runs_only() -> None:
    runs = PausedRuns(MemoryStateStore(limit=2), "test")
    for n in range(3):
        await runs.keep("m", paused(f"c{n}"), key=f"k{n}")
    assert await runs.get("m", "k0") is None and await runs.get("m", "k2") is not None
    with pytest.raises(UnknownPausedRunError) as forgotten:
        await runs.waiting_for("m", ["c0"])
    assert (forgotten.value.owner, forgotten.value.key) == ("m", "c0")
    with pytest.raises(UnknownPausedRunError):  # another model's run
        await runs.waiting_for("other", ["c1"])
    assert (await runs.waiting_for("m", ["c1"])).key == "k1"


async def test_a_lookup_keeps_the_run_and_take_ends_it_once() -> None:
    runs = PausedRuns(MemoryStateStore(), "test")
    kept = await runs.keep("m", paused("a", "b"), key="resp_1")
    assert await runs.waiting_for("m", ["b", "a"]) == kept  # looking does not take it
    assert await runs.get("m", "resp_1") == kept
    assert await runs.take(kept) is True
    assert await runs.take(kept) is False  # again: nothing to take
    assert await runs.get("m", "resp_1") is None
    with pytest.raises(UnknownPausedRunError, match="waits for tool call 'a' \\(input\\[0\\]\\)"):
        await runs.waiting_for("m", ["a"], ["input[0]"])


async def test_of_racing_takes_exactly_one_wins() -> None:
    store = MemoryStateStore()
    one, other = PausedRuns(store, "test"), PausedRuns(store, "test")  # two replicas
    kept = await one.keep("m", paused("a"), key="k")
    found = await other.get("m", "k")
    assert found == kept
    assert sorted(await asyncio.gather(one.take(kept), other.take(found))) == [False, True]


async def test_calls_of_two_runs_or_none_are_refused() -> None:
    runs = PausedRuns(MemoryStateStore(), "test")
    await runs.keep("m", paused("a"))
    await runs.keep("m", paused("b"))
    with pytest.raises(UnknownPausedRunError) as two:
        await runs.waiting_for("m", ["a", "b"])
    assert two.value.key == "b"
    with pytest.raises(UnknownPausedRunError, match="no tool results were given"):
        await runs.waiting_for("m", [])


async def test_a_run_kept_under_a_key_replaces_the_one_there() -> None:
    runs = PausedRuns(MemoryStateStore(), "test")
    await runs.keep("agent", paused("x"), key="thread")
    second = await runs.keep("agent", paused("y"), key="thread", shown=frozenset({"s"}))
    other = await runs.keep("other agent", paused("z"), key="thread")  # another owner's thread
    assert await runs.get("agent", "thread") == second
    assert second.shown == {"s"} and await runs.get("other agent", "thread") == other
    with pytest.raises(UnknownPausedRunError):  # the replaced run's calls went with it
        await runs.waiting_for("agent", ["x"])
    assert await runs.waiting_for("agent", ["y"]) == second


async def test_front_ends_keep_their_runs_apart() -> None:
    store = MemoryStateStore()
    agui, chat = PausedRuns(store, "agui"), PausedRuns(store, "chat")
    await agui.keep("m", paused("a"), key="thread")
    assert await chat.get("m", "thread") is None
    with pytest.raises(UnknownPausedRunError):
        await chat.waiting_for("m", ["a"])


async def test_a_kept_run_is_versioned_json_and_another_format_is_refused() -> None:
    store = MemoryStateStore()
    runs = PausedRuns(store, "test")
    await runs.keep("m", paused("a"), key="k")
    (name,) = store._kinds["paused_test"].records  # the one record
    value = await store.get("paused_test", name)
    assert value is not None and value.startswith('{"daimon": 1, "data": {"owner": "m"')
    await store.put("paused_test", name, value.replace('"format": 1', '"format": 2'))
    with pytest.raises(SerializationError, match="a paused run of format 2; this daimon reads 1"):
        await runs.get("m", "k")


def test_the_error_says_what_was_asked_and_why_it_is_gone() -> None:
    runs = PausedRuns(MemoryStateStore(), "test", ttl=3600)
    error = runs.unknown("bank", "task-1", "task 'task-1'", "give the agent a checkpoint")
    assert isinstance(error, DaimonError) and isinstance(error, LookupError)
    assert str(error) == (
        "no paused run of 'bank' waits for task 'task-1': it was answered already, is "
        "unknown, or is no longer kept (paused runs are kept for 3600 s; a server keeping them "
        f"in memory keeps only the newest {KEPT_PAUSED_RUNS} and none across a restart); "
        "give the agent a checkpoint"
    )


@pytest.mark.parametrize("ttl", [-1, 0, True, float("inf")])
def test_a_bad_time_to_live_is_refused(ttl: object) -> None:
    with pytest.raises(StateStoreError, match="ttl must be a positive number of seconds"):
        PausedRuns(MemoryStateStore(), "test", ttl=ttl)  # type: ignore[arg-type]
