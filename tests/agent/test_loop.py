"""The ReAct loop: tools, errors fed back to the model, limits, cancellation, budgets."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from daimon import (
    Agent,
    BudgetExceededError,
    CancelToken,
    ChatRequest,
    ChatResponse,
    Done,
    MaxIterationsError,
    Message,
    ModelPrice,
    PriceTable,
    Role,
    RunCancelled,
    RunContext,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    UsageEvent,
    tool,
)
from daimon.models import FunctionModel, ScriptedModel


@tool
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def tool_results(request: ChatRequest) -> list[Message]:
    return [m for m in request.messages if m.role is Role.TOOL]


def call(name: str, args: dict[str, Any] | str, id: str = "c1") -> ToolCall:
    if isinstance(args, str):
        return ToolCall(id=id, name=name, arguments=args)
    return ToolCall(id=id, name=name, arguments=args)


async def test_model_tool_model_round_trip() -> None:
    model = ScriptedModel([ChatResponse.tool_use(call("add", {"a": 2, "b": 3})), "The sum is 5."])
    agent = Agent(model, tools=[add])
    response = await agent.prompt("What is 2 + 3?")
    assert response.text == "The sum is 5."
    assert response.iterations == 2
    second = model.requests[1]
    results = tool_results(second)
    assert [m.content for m in results] == ["5"]
    assert results[0].tool_call_id == "c1"
    assert [m.role for m in response.messages] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
    ]
    assert model.requests[0].tools[0].name == "add"


async def test_unknown_tool_is_reported_to_the_model_and_the_loop_goes_on() -> None:
    model = ScriptedModel([ChatResponse.tool_use(call("multiply", {"a": 1})), "sorry"])
    response = await Agent(model, tools=[add]).prompt("hi")
    assert response.text == "sorry"
    [result] = tool_results(model.requests[1])
    assert result.is_error
    assert "multiply" in result.text and "add" in result.text


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": 2, "b":', "JSON"),
        ({"a": "two", "b": 3}, "a"),
        ({"a": 2}, "b"),
    ],
)
async def test_bad_arguments_go_back_to_the_model_and_the_tool_is_not_called(
    arguments: dict[str, Any] | str, expected: str
) -> None:
    calls: list[tuple[int, int]] = []

    @tool
    def add_numbers(a: int, b: int) -> int:
        """Add."""
        calls.append((a, b))
        return a + b

    model = ScriptedModel([ChatResponse.tool_use(call("add_numbers", arguments)), "ok"])
    response = await Agent(model, tools=[add_numbers]).prompt("hi")
    assert response.text == "ok"
    [result] = tool_results(model.requests[1])
    assert result.is_error
    assert expected in result.text
    assert calls == []


async def test_a_raising_tool_is_an_error_result_and_the_run_goes_on() -> None:
    @tool
    async def explode() -> str:
        """Fail."""
        raise ValueError("boom")

    model = ScriptedModel([ChatResponse.tool_use(call("explode", {})), "recovered"])
    events = [e async for e in Agent(model, tools=[explode]).prompt_stream("go")]
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.is_error
    assert "boom" in result.output.content
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert done.response.text == "recovered"


async def test_a_model_that_never_stops_calling_tools_hits_max_iterations() -> None:
    model = FunctionModel(lambda request: ChatResponse.tool_use(call("add", {"a": 1, "b": 1})))
    with pytest.raises(MaxIterationsError) as info:
        await Agent(model, tools=[add], max_iterations=3).prompt("loop")
    assert info.value.max_iterations == 3


async def test_parallel_tool_calls_run_concurrently_and_keep_their_order() -> None:
    started: list[str] = []
    release = asyncio.Event()

    @tool
    async def wait(label: str, delay: float) -> str:
        """Wait."""
        started.append(label)
        if len(started) == 3:
            release.set()
        await asyncio.wait_for(release.wait(), 2)
        await asyncio.sleep(delay)
        return label

    turn = ChatResponse.tool_use(
        call("wait", {"label": "first", "delay": 0.03}, "a"),
        call("wait", {"label": "second", "delay": 0.0}, "b"),
        call("wait", {"label": "third", "delay": 0.01}, "c"),
    )
    model = ScriptedModel([turn, "done"])
    await Agent(model, tools=[wait]).prompt("go")
    results = tool_results(model.requests[1])
    assert [m.content for m in results] == ["first", "second", "third"]
    assert [m.tool_call_id for m in results] == ["a", "b", "c"]
    assert sorted(started) == ["first", "second", "third"]


async def test_cancel_token_stops_the_run_and_no_tool_keeps_running() -> None:
    token = CancelToken()
    finished: list[str] = []
    running = asyncio.Event()

    @tool
    async def slow(label: str) -> str:
        """Slow."""
        running.set()
        await asyncio.sleep(5)
        finished.append(label)
        return label

    turn = ChatResponse.tool_use(
        call("slow", {"label": "x"}, "a"), call("slow", {"label": "y"}, "b")
    )
    agent = Agent(ScriptedModel([turn, "never"]), tools=[slow])
    task = asyncio.create_task(agent.prompt("go", cancel=token))
    await asyncio.wait_for(running.wait(), 2)
    token.cancel("user pressed stop")
    with pytest.raises(RunCancelled, match="user pressed stop"):
        await task
    assert finished == []
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_a_cancelled_token_fails_before_any_model_call() -> None:
    token = CancelToken()
    token.cancel()
    model = ScriptedModel(["never"])
    with pytest.raises(RunCancelled):
        await Agent(model).prompt("hi", cancel=token)
    assert model.requests == []


async def test_cancel_during_a_model_call_raises_run_cancelled_and_leaves_the_task_usable() -> None:
    token = CancelToken()

    async def slow_model(request: ChatRequest) -> ChatResponse:
        await asyncio.sleep(5)
        return ChatResponse.reply("late")

    async def runner() -> str:
        try:
            await Agent(FunctionModel(slow_model)).prompt("hi", cancel=token)
        except RunCancelled:
            await asyncio.sleep(0.01)  # the task was not left with a pending cancellation
            return "cancelled cleanly"
        return "not cancelled"

    task = asyncio.create_task(runner())
    await asyncio.sleep(0.05)
    token.cancel()
    assert await task == "cancelled cleanly"


@pytest.mark.parametrize("extended", [False, True], ids=["plain", "through-an-extension"])
async def test_a_consumer_cancelling_between_streamed_events_stops_the_stream(
    extended: bool,
) -> None:
    """The consumer's own task cancels the token while the model is still streaming."""
    from daimon import Extension

    async def endless(request: ChatRequest) -> Any:
        while True:
            yield "la "
            await asyncio.sleep(0)

    class Passing(Extension):
        pass

    agent = Agent(
        FunctionModel(stream_function=endless), extensions=[Passing()] if extended else []
    )
    token = CancelToken()
    seen = 0
    with pytest.raises(RunCancelled):
        async for event in agent.prompt_stream("sing", cancel=token):
            if isinstance(event, TextDelta):
                seen += 1
                if seen == 3:
                    token.cancel("enough")
            assert seen < 50, "the run went on streaming after its token was cancelled"
    assert seen == 3
    await asyncio.sleep(0.01)  # the task was left with no pending cancellation


async def test_cancelling_the_task_cancels_the_tools_and_propagates() -> None:
    finished: list[str] = []
    running = asyncio.Event()

    @tool
    async def slow() -> str:
        """Slow."""
        running.set()
        await asyncio.sleep(5)
        finished.append("slow")
        return "x"

    turn = ChatResponse.tool_use(call("slow", {}, "a"), call("slow", {}, "b"))
    task = asyncio.create_task(Agent(ScriptedModel([turn, "x"]), tools=[slow]).prompt("go"))
    await asyncio.wait_for(running.wait(), 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    assert finished == []
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_a_tool_can_cancel_its_own_run() -> None:
    @tool
    async def stop(ctx: RunContext[None]) -> str:
        """Stop the run."""
        ctx.cancel.cancel("tool said stop")
        return "stopping"

    model = ScriptedModel([ChatResponse.tool_use(call("stop", {})), "never"])
    with pytest.raises(RunCancelled, match="tool said stop"):
        await Agent(model, tools=[stop]).prompt("go")
    assert len(model.requests) == 1


PRICES = PriceTable({"pricey": ModelPrice(input=1_000_000.0, output=1_000_000.0)}, as_of="test")


async def test_the_budget_stops_the_run_before_the_call_that_would_pass_it() -> None:
    # $1 an output token, $0.001 an input token: each call costs 10 * 0.001 + 10 * 1 = $10.01,
    # and its reservation is max_tokens (10) dollars plus under a dollar of input.
    def respond(request: ChatRequest) -> ChatResponse:
        return ChatResponse.tool_use(
            call("add", {"a": 1, "b": 2}, f"c{len(request.messages)}"),
            usage=Usage(input_tokens=10, output_tokens=10, requests=1),
            model="pricey",
        )

    prices = PriceTable({"pricey": ModelPrice(input=1_000.0, output=1_000_000.0)}, as_of="test")
    model = FunctionModel(respond, model_name="pricey")
    agent = Agent(model, tools=[add], cost_model=prices, max_budget=25.0, max_tokens=10)
    with pytest.raises(BudgetExceededError) as info:
        await agent.prompt("go")
    assert info.value.limit == 25.0
    assert info.value.spent == pytest.approx(20.02)  # two calls made; a third could pass 25


async def test_usage_and_cost_add_up_over_the_run() -> None:
    turn = ChatResponse.tool_use(
        call("add", {"a": 1, "b": 2}), usage=Usage(input_tokens=3, output_tokens=2), model="pricey"
    )
    final = ChatResponse.reply("3", usage=Usage(input_tokens=5, output_tokens=1), model="pricey")
    response = await Agent(ScriptedModel([turn, final]), tools=[add], cost_model=PRICES).prompt("q")
    assert response.usage == Usage(input_tokens=8, output_tokens=3)
    assert response.cost == pytest.approx(11.0)


async def test_run_context_carries_deps_ids_and_usage() -> None:
    seen: list[tuple[str, str, Any]] = []

    @tool
    async def whoami(ctx: RunContext[dict[str, str]]) -> str:
        """Who."""
        seen.append((ctx.idempotency_key, ctx.call_id, ctx.deps))
        return ctx.deps["user"]

    model = ScriptedModel([ChatResponse.tool_use(call("whoami", {}, "call-7")), "done"])
    agent = Agent(model, tools=[whoami])
    await agent.prompt("who?", run_id="run-1", deps={"user": "ada"})
    assert seen == [("run-1:call-7", "call-7", {"user": "ada"})]
    assert "ctx" not in json.dumps(model.requests[0].tools[0].parameters)


async def test_streaming_forwards_deltas_and_ends_with_done() -> None:
    def stream(request: ChatRequest) -> list[str]:
        return ["Hel", "lo", "!"]

    agent = Agent(FunctionModel(stream_function=stream))
    events = [e async for e in agent.prompt_stream("hi")]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo", "!"]
    assert isinstance(events[-2], UsageEvent)
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert done.response.text == "Hello!"


async def test_streamed_tool_calls_run_between_model_calls() -> None:
    model = ScriptedModel([ChatResponse.tool_use(call("add", {"a": 20, "b": 22})), "42"])
    events = [e async for e in Agent(model, tools=[add]).prompt_stream("q")]
    kinds = [e.kind for e in events]
    assert (
        kinds.index("tool_call_start") < kinds.index("tool_call_end") < kinds.index("tool_result")
    )
    assert kinds[-1] == "done"
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.output.content == "42" and not result.is_error and result.duration >= 0


def test_prompt_sync_runs_the_same_loop() -> None:
    model = ScriptedModel([ChatResponse.tool_use(call("add", {"a": 1, "b": 1})), "2"])
    response = Agent(model, tools=[add]).prompt_sync("1+1")
    assert response.text == "2" and response.iterations == 2


async def test_prompt_sync_refuses_to_run_inside_a_loop() -> None:
    from daimon import DaimonError

    with pytest.raises(DaimonError, match="await prompt"):
        Agent(ScriptedModel(["x"])).prompt_sync("hi")


async def test_parallel_tools_that_all_honour_the_token_give_one_run_cancelled() -> None:
    token = CancelToken()
    both_running = asyncio.Barrier(2)

    @tool
    async def careful(ctx: RunContext[None], label: str) -> str:
        """Stops when the run is cancelled."""
        await both_running.wait()
        if label == "a":
            ctx.cancel.cancel("stop")
        await asyncio.sleep(0)
        ctx.cancel.raise_if_cancelled()
        return label

    turn = ChatResponse.tool_use(
        call("careful", {"label": "a"}, "a"), call("careful", {"label": "b"}, "b")
    )

    async def runner() -> str:
        try:
            await Agent(ScriptedModel([turn, "never"]), tools=[careful]).prompt("go", cancel=token)
        except RunCancelled:
            await asyncio.sleep(0.01)  # no cancel request was left on this task
            return "cancelled once"
        return "not cancelled"

    assert await asyncio.create_task(runner()) == "cancelled once"
