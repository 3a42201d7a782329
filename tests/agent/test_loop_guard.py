"""The repeated-call guard: a model stuck making the same call with the same result is stopped."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from daimon import (
    Agent,
    AgentHook,
    AgentRunError,
    BuilderError,
    ChatRequest,
    ChatResponse,
    DaimonError,
    Done,
    MaxIterationsError,
    RepeatedToolCallError,
    RunState,
    StreamEvent,
    ToolCall,
    tool,
)
from daimon.models import FunctionModel


def looping_model(*arguments: dict[str, Any] | str, name: str = "search") -> FunctionModel:
    """A model that asks for ``name`` with each of ``arguments`` in turn, forever."""
    counter = itertools.count()
    cycle = itertools.cycle(arguments)

    def reply(request: ChatRequest) -> ChatResponse:
        return ChatResponse.tool_use(
            ToolCall(id=f"c{next(counter)}", name=name, arguments=next(cycle))
        )

    return FunctionModel(reply)


def searcher(log: list[str], result: Any = None) -> Any:
    """A ``search`` tool recording each query; it returns ``result()`` or a fixed text."""

    @tool
    async def search(query: str) -> str:
        """Search.

        Args:
            query: What to look for.
        """
        log.append(query)
        return result() if result is not None else f"nothing new about {query}"

    return search


async def test_the_same_call_with_the_same_result_runs_three_times_then_the_run_stops() -> None:
    log: list[str] = []
    agent = Agent(looping_model({"query": "x"}), tools=[searcher(log)], max_iterations=50)
    with pytest.raises(RepeatedToolCallError) as info:
        await agent.prompt("find x")
    assert log == ["x", "x", "x"]  # the fourth call is refused, not run
    error = info.value
    assert (error.tool_name, error.arguments, error.count) == ("search", {"query": "x"}, 4)
    assert isinstance(error, AgentRunError) and isinstance(error, DaimonError)
    assert "search" in str(error) and '"query": "x"' in str(error) and "4 times" in str(error)
    assert "max_repeated_tool_calls" in str(error) and "None" in str(error)


async def test_the_limit_is_configurable() -> None:
    log: list[str] = []
    agent = Agent(
        looping_model({"query": "x"}),
        tools=[searcher(log)],
        max_iterations=50,
        max_repeated_tool_calls=5,
    )
    with pytest.raises(RepeatedToolCallError) as info:
        await agent.prompt("find x")
    assert len(log) == 5
    assert info.value.count == 6


async def test_a_call_whose_result_changes_never_trips_the_guard() -> None:
    log: list[str] = []
    ticks = itertools.count()
    status = searcher(log, result=lambda: f"job at step {next(ticks)}")
    agent = Agent(looping_model({"query": "status"}), tools=[status], max_iterations=8)
    with pytest.raises(MaxIterationsError):
        await agent.prompt("poll")
    assert len(log) == 8


async def test_a_changed_result_starts_the_count_again() -> None:
    log: list[str] = []
    results = iter(["pending", "pending", "done", "done", "done", "done"])
    status = searcher(log, result=lambda: next(results))
    agent = Agent(looping_model({"query": "status"}), tools=[status], max_iterations=20)
    with pytest.raises(RepeatedToolCallError) as info:
        await agent.prompt("poll")
    # two "pending", then three "done"; the fourth "done" would be one too many
    assert len(log) == 5
    assert info.value.count == 4


async def test_different_arguments_never_trip_the_guard() -> None:
    log: list[str] = []
    agent = Agent(
        looping_model({"query": "a"}, {"query": "b"}, {"query": "c"}, {"query": "d"}),
        tools=[searcher(log)],
        max_iterations=4,
    )
    with pytest.raises(MaxIterationsError):
        await agent.prompt("find")
    assert log == ["a", "b", "c", "d"]


async def test_varied_calls_run_on_until_max_iterations() -> None:
    queries = [{"query": str(n)} for n in range(12)]
    log: list[str] = []
    agent = Agent(looping_model(*queries), tools=[searcher(log)], max_iterations=12)
    with pytest.raises(MaxIterationsError):
        await agent.prompt("find")
    assert len(log) == 12


async def test_the_order_of_arguments_does_not_make_a_call_different() -> None:
    calls: list[tuple[int, int]] = []

    @tool
    async def add(a: int, b: int) -> int:
        """Add."""
        calls.append((a, b))
        return a + b

    model = looping_model({"a": 1, "b": 2}, {"b": 2, "a": 1}, name="add")
    agent = Agent(model, tools=[add], max_iterations=50)
    with pytest.raises(RepeatedToolCallError) as info:
        await agent.prompt("add")
    assert calls == [(1, 2)] * 3
    assert info.value.count == 4


async def test_unparseable_arguments_are_compared_as_written() -> None:
    agent = Agent(looping_model('{"query": '), tools=[searcher([])], max_iterations=50)
    with pytest.raises(RepeatedToolCallError) as info:
        await agent.prompt("find")
    assert info.value.arguments == '{"query": '
    assert info.value.count == 4


async def test_none_turns_the_guard_off() -> None:
    log: list[str] = []
    agent = Agent(
        looping_model({"query": "x"}),
        tools=[searcher(log)],
        max_iterations=7,
        max_repeated_tool_calls=None,
    )
    with pytest.raises(MaxIterationsError):
        await agent.prompt("find x")
    assert log == ["x"] * 7


@pytest.mark.parametrize("value", [0, -1, 2.5, "3", True])
def test_an_invalid_limit_is_a_builder_error(value: Any) -> None:
    with pytest.raises(BuilderError, match="max_repeated_tool_calls"):
        Agent(looping_model({}), max_repeated_tool_calls=value)


def test_the_limit_defaults_to_three_and_survives_replace() -> None:
    agent = Agent(looping_model({}))
    assert agent.max_repeated_tool_calls == 3
    assert agent.replace(name="other").max_repeated_tool_calls == 3
    assert agent.replace(max_repeated_tool_calls=None).max_repeated_tool_calls is None
    assert (
        Agent(looping_model({}), max_repeated_tool_calls=7).replace().max_repeated_tool_calls == 7
    )
    with pytest.raises(BuilderError, match="max_repeated_tool_calls"):
        agent.replace(max_repeated_tool_calls=0)


async def test_streaming_ends_with_the_same_error_and_hooks_see_it() -> None:
    errors: list[BaseException] = []

    class Watch(AgentHook):
        async def on_error(self, error: BaseException, state: RunState) -> None:
            errors.append(error)

    log: list[str] = []
    agent = Agent(
        looping_model({"query": "x"}), tools=[searcher(log)], max_iterations=50, hooks=[Watch()]
    )
    events: list[StreamEvent] = []
    with pytest.raises(RepeatedToolCallError) as info:
        async for event in agent.prompt_stream("find x"):
            events.append(event)
    assert log == ["x", "x", "x"]
    assert not any(isinstance(e, Done) for e in events)
    assert errors == [info.value]


async def test_identical_calls_in_one_turn_count_one_each() -> None:
    log: list[str] = []
    counter = itertools.count()

    def reply(request: ChatRequest) -> ChatResponse:
        return ChatResponse.tool_use(
            ToolCall(id=f"c{next(counter)}", name="search", arguments={"query": "x"}),
            ToolCall(id=f"c{next(counter)}", name="search", arguments={"query": "x"}),
        )

    agent = Agent(FunctionModel(reply), tools=[searcher(log)], max_iterations=50)
    with pytest.raises(RepeatedToolCallError) as info:
        await agent.prompt("find x")
    # turn one runs two calls; in turn two the first is the third and the second the fourth:
    # the turn is refused before either runs
    assert log == ["x", "x"]
    assert info.value.count == 4


async def test_too_many_identical_calls_in_a_single_turn_are_refused() -> None:
    log: list[str] = []
    counter = itertools.count()

    def reply(request: ChatRequest) -> ChatResponse:
        return ChatResponse.tool_use(
            *(
                ToolCall(id=f"c{next(counter)}", name="search", arguments={"query": "x"})
                for _ in "1234"
            )
        )

    agent = Agent(FunctionModel(reply), tools=[searcher(log)], max_iterations=50)
    with pytest.raises(RepeatedToolCallError):
        await agent.prompt("find x")
    assert log == []


async def test_concurrent_runs_on_one_agent_keep_their_own_counts() -> None:
    log: list[str] = []
    counter = itertools.count()

    async def reply(request: ChatRequest) -> ChatResponse | str:
        # Every run asks for the same call three times; the runs' turns interleave, so a count
        # shared between runs would trip the guard in the second round.
        await asyncio.sleep(0)
        if len(request.messages) >= 7:  # user + 3 (call, result) pairs: three calls each
            return "done"
        return ChatResponse.tool_use(
            ToolCall(id=f"c{next(counter)}", name="search", arguments={"query": "x"})
        )

    agent = Agent(FunctionModel(reply), tools=[searcher(log)], max_iterations=50)
    responses = await asyncio.gather(*(agent.prompt("find x") for _ in range(4)))
    assert [r.text for r in responses] == ["done"] * 4
    assert len(log) == 12


async def test_repeats_count_across_turns_even_with_other_calls_in_between() -> None:
    log: list[str] = []
    agent = Agent(
        looping_model({"query": "a"}, {"query": "b"}), tools=[searcher(log)], max_iterations=50
    )
    with pytest.raises(RepeatedToolCallError) as info:
        await agent.prompt("find")
    assert log == ["a", "b"] * 3
    assert info.value.arguments == {"query": "a"}


async def test_a_tool_failing_the_same_way_each_time_trips_the_guard() -> None:
    attempts: list[str] = []

    @tool
    async def fetch(url: str) -> str:
        """Fetch.

        Args:
            url: Where from.
        """
        attempts.append(url)
        raise ConnectionError("host unreachable")

    agent = Agent(looping_model({"url": "http://x"}, name="fetch"), tools=[fetch])
    with pytest.raises(RepeatedToolCallError):
        await agent.prompt("fetch x")
    assert attempts == ["http://x"] * 3
