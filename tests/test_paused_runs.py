"""The one bounded store of paused runs that the AG-UI, OpenAI and A2A front ends share."""

from __future__ import annotations

import pytest

from daimon import BuilderError, DaimonError, ToolCall, UnknownPausedRunError
from daimon._paused_runs import KEPT_PAUSED_RUNS, PausedRuns
from daimon.core.results import AgentResponse


def paused(*call_ids: str) -> AgentResponse:
    calls = tuple(ToolCall(id=c, name="t", arguments={}) for c in call_ids)
    return AgentResponse(text="", client_calls=calls)


def test_the_store_keeps_the_newest_runs_only() -> None:
    store = PausedRuns(limit=2)
    for n in range(3):
        store.keep("m", paused(f"c{n}"), key=f"k{n}")
    assert len(store) == 2
    assert store.get("m", "k0") is None and store.get("m", "k2") is not None
    with pytest.raises(UnknownPausedRunError) as forgotten:
        store.waiting_for("m", ["c0"])
    assert (forgotten.value.owner, forgotten.value.key) == ("m", "c0")
    with pytest.raises(UnknownPausedRunError):  # another model's run
        store.waiting_for("other", ["c1"])
    assert store.waiting_for("m", ["c1"]).key == "k1"


def test_a_lookup_keeps_the_run_and_forget_ends_it() -> None:
    store = PausedRuns()
    kept = store.keep("m", paused("a", "b"), key="resp_1")
    assert store.waiting_for("m", ["b", "a"]) is kept  # looking does not take it
    assert store.get("m", "resp_1") is kept
    store.forget(kept)
    store.forget(kept)  # again: nothing to do
    assert len(store) == 0 and store.get("m", "resp_1") is None
    with pytest.raises(UnknownPausedRunError, match="waits for tool call 'a' \\(input\\[0\\]\\)"):
        store.waiting_for("m", ["a"], ["input[0]"])


def test_calls_of_two_runs_or_none_are_refused() -> None:
    store = PausedRuns()
    store.keep("m", paused("a"))
    store.keep("m", paused("b"))
    with pytest.raises(UnknownPausedRunError) as two:
        store.waiting_for("m", ["a", "b"])
    assert two.value.key == "b"
    with pytest.raises(UnknownPausedRunError, match="no tool results were given"):
        store.waiting_for("m", [])


def test_a_run_kept_under_a_key_replaces_the_one_there() -> None:
    store = PausedRuns()
    first = store.keep("agent", paused("x"), key="thread")
    second = store.keep("agent", paused("y"), key="thread", shown=frozenset({"s"}))
    other = store.keep("other agent", paused("z"), key="thread")  # another owner's thread
    assert len(store) == 2 and store.get("agent", "thread") is second
    assert second.shown == {"s"} and store.get("other agent", "thread") is other
    with pytest.raises(UnknownPausedRunError):  # the replaced run's calls went with it
        store.waiting_for("agent", ["x"])
    store.forget(first)  # no longer kept: the run now under the key stays
    assert store.get("agent", "thread") is second


def test_the_error_says_what_was_asked_and_why_it_is_gone() -> None:
    store = PausedRuns(limit=3)
    error = store.unknown("bank", "task-1", "task 'task-1'", "give the agent a checkpoint")
    assert isinstance(error, DaimonError) and isinstance(error, LookupError)
    assert str(error) == (
        "no paused run of 'bank' waits for task 'task-1': it was answered already, is "
        "unknown, or is no longer kept (only the newest 3 paused runs are kept, in memory: "
        "none survive a restart); give the agent a checkpoint"
    )


def test_the_limit_is_checked_and_zero_keeps_nothing() -> None:
    assert PausedRuns().limit == KEPT_PAUSED_RUNS == 1000
    for bad in (-1, True, 1.5):
        with pytest.raises(BuilderError, match="limit"):
            PausedRuns(bad)  # type: ignore[arg-type]
    store = PausedRuns(0)
    store.keep("m", paused("a"), key="k")
    assert len(store) == 0 and store.get("m", "k") is None
