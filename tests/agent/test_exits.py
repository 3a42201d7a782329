"""Every run that starts ends its hooks: finished, failed, cancelled, interrupted or abandoned."""

from __future__ import annotations

import asyncio
import gc

import pytest

from daimon import (
    Agent,
    AgentHook,
    AgentResponse,
    ChatRequest,
    ChatResponse,
    ModelPrice,
    PriceTable,
    RunState,
    ToolCall,
    Usage,
    tool,
)
from daimon.models import FunctionModel

PRICES = PriceTable({"m": ModelPrice(input=1_000_000, output=1_000_000)}, as_of="test")
"""$1 a token, so a call's cost is its token count."""


class Ends(AgentHook):
    """Records how each run ended, and what it had spent by then."""

    def __init__(self) -> None:
        self.ended: list[tuple[str, float]] = []

    async def on_run_end(self, response: AgentResponse, state: RunState) -> None:
        self.ended.append(("end", state.cost))

    async def on_error(self, error: BaseException, state: RunState) -> None:
        self.ended.append((type(error).__name__, state.cost))


def waiting_agent(hook: Ends, reached: asyncio.Event) -> Agent:
    """Calls ``wait`` (3 tokens: $3), which never returns; the run is stuck in its tool."""

    @tool
    async def wait() -> str:
        """Waits forever."""
        reached.set()
        await asyncio.Event().wait()
        return "never"

    def model(request: ChatRequest) -> ChatResponse:
        call = ToolCall(id="w", name="wait", arguments={})
        return ChatResponse.tool_use(call, usage=Usage(input_tokens=2, output_tokens=1), model="m")

    return Agent(
        FunctionModel(model, model_name="m"), tools=[wait], hooks=[hook], cost_model=PRICES
    )


def chatty_agent(hook: Ends) -> Agent:
    """Streams a reply of several deltas (1 token: $1)."""

    def model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply("one two three", usage=Usage(output_tokens=1), model="m")

    return Agent(FunctionModel(model, model_name="m"), hooks=[hook], cost_model=PRICES)


async def test_a_finished_run_ends_once() -> None:
    hook = Ends()
    await chatty_agent(hook).prompt("hi")
    assert hook.ended == [("end", 1.0)]


async def test_a_run_cancelled_as_a_task_ends_its_hooks_with_its_cost() -> None:
    hook, reached = Ends(), asyncio.Event()
    run = asyncio.create_task(waiting_agent(hook, reached).prompt("go"))
    await reached.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert hook.ended == [("CancelledError", 3.0)]


async def test_a_run_under_a_timeout_ends_its_hooks() -> None:
    hook, reached = Ends(), asyncio.Event()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await waiting_agent(hook, reached).prompt("go")
    assert hook.ended == [("CancelledError", 3.0)]


def test_a_keyboard_interrupt_ends_the_runs_hooks() -> None:
    hook = Ends()

    def model(request: ChatRequest) -> ChatResponse:
        raise KeyboardInterrupt

    agent = Agent(FunctionModel(model, model_name="m"), hooks=[hook], cost_model=PRICES)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(agent.prompt("go"))
    assert hook.ended == [("KeyboardInterrupt", 0.0)]


async def test_a_stream_closed_early_ends_its_hooks() -> None:
    hook = Ends()
    stream = chatty_agent(hook).prompt_stream("hi")
    await anext(stream)  # the first delta; the model call is not even counted yet
    await stream.aclose()
    assert hook.ended == [("GeneratorExit", 0.0)]


async def test_a_stream_left_to_the_garbage_collector_ends_its_hooks() -> None:
    hook = Ends()
    async for _ in chatty_agent(hook).prompt_stream("hi"):
        break  # the stream is dropped here, unfinished
    gc.collect()
    for _ in range(20):  # asyncio closes a dropped generator in a task of its own
        if hook.ended:
            break
        await asyncio.sleep(0)
    assert hook.ended == [("GeneratorExit", 0.0)]


async def test_a_stream_abandoned_after_a_model_call_reports_its_cost() -> None:
    hook, reached = Ends(), asyncio.Event()
    stream = waiting_agent(hook, reached).prompt_stream("go")
    events = [await anext(stream)]
    while type(events[-1]).__name__ != "UsageEvent":
        events.append(await anext(stream))
    await stream.aclose()
    assert hook.ended == [("GeneratorExit", 3.0)]
