"""Extensions: one wrap-style interface around every model call and every tool call."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from daimon import (
    Agent,
    AgentHook,
    CallModel,
    CallTool,
    ChatRequest,
    ChatResponse,
    Done,
    Extension,
    ExtensionError,
    MaxIterationsError,
    Message,
    Middleware,
    ModelError,
    RunState,
    ShortCircuit,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolOutput,
    ToolResult,
    Usage,
    UsageEvent,
    tool,
)
from daimon.models import FunctionModel, ScriptedModel


@tool
def double(x: int) -> int:
    """Double x."""
    return 2 * x


def doubling_model() -> ScriptedModel:
    """Asks for ``double(4)``, then answers ``8``."""
    call = ToolCall(id="1", name="double", arguments={"x": 4})
    return ScriptedModel([ChatResponse.tool_use(call), "8"])


class Log(Extension):
    """Records when each call enters and leaves it."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def wrap_model_call(
        self, request: ChatRequest, ctx: RunState, call_next: CallModel
    ) -> ChatResponse:
        self.log.append(f"{self.name}>model")
        response = await call_next(request)
        self.log.append(f"{self.name}<model")
        return response

    async def wrap_tool_call(
        self, call: ToolCall, ctx: RunState, call_next: CallTool
    ) -> ToolOutput:
        self.log.append(f"{self.name}>{call.name}")
        output = await call_next(call)
        self.log.append(f"{self.name}<{call.name}")
        return output


async def test_the_first_extension_listed_is_the_outermost() -> None:
    log: list[str] = []
    agent = Agent(doubling_model(), tools=[double], extensions=[Log("a", log), Log("b", log)])
    response = await agent.prompt("q")
    assert response.text == "8"
    assert log == [
        "a>model",
        "b>model",
        "b<model",
        "a<model",
        "a>double",
        "b>double",
        "b<double",
        "a<double",
        "a>model",
        "b>model",
        "b<model",
        "a<model",
    ]


async def test_hooks_and_middleware_run_outside_the_extensions() -> None:
    log: list[str] = []

    class Hook(AgentHook):
        async def on_model_response(self, response: ChatResponse, state: RunState) -> None:
            log.append("hook:response")

        async def on_tool_call(self, call: ToolCall, state: RunState) -> None:
            log.append("hook:tool")

    class Watch(Middleware):
        async def on_request(self, request: ChatRequest, state: RunState) -> None:
            log.append("middleware:request")

        async def on_tool_call(self, call: ToolCall, state: RunState) -> None:
            log.append("middleware:tool")

    agent = Agent(
        doubling_model(),
        tools=[double],
        hooks=[Hook()],
        middleware=[Watch()],
        extensions=[Log("ext", log)],
    )
    await agent.prompt("q")
    assert log[:7] == [
        "middleware:request",
        "ext>model",
        "ext<model",
        "hook:response",
        "hook:tool",
        "middleware:tool",
        "ext>double",
    ]


async def test_an_extension_can_change_the_request_and_the_response() -> None:
    class Shout(Extension):
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            request = replace(request, messages=(Message.system("be loud"), *request.messages))
            response = await call_next(request)
            return ChatResponse.reply(response.text.upper(), usage=response.usage)

    model = ScriptedModel(["hello"])
    response = await Agent(model, extensions=[Shout()]).prompt("q")
    assert response.text == "HELLO"
    assert model.requests[0].messages[0].text == "be loud"


async def test_an_extension_can_change_a_tool_call_and_its_result() -> None:
    class Triple(Extension):
        async def wrap_tool_call(
            self, call: ToolCall, ctx: RunState, call_next: CallTool
        ) -> ToolOutput:
            output = await call_next(replace(call, arguments={"x": 5}))
            return ToolOutput.text(f"result: {output.content}")

    model = doubling_model()
    await Agent(model, tools=[double], extensions=[Triple()]).prompt("q")
    assert model.requests[1].messages[-1].text == "result: 10"


async def test_a_short_circuit_skips_the_model_and_counts_as_an_iteration() -> None:
    class Cache(Extension):
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            return ChatResponse.reply("cached", usage=Usage(input_tokens=1, requests=1))

    model = ScriptedModel([])
    response = await Agent(model, extensions=[Cache()]).prompt("q")
    assert response.text == "cached"
    assert model.requests == []
    assert response.iterations == 1
    assert response.usage.input_tokens == 1

    class Loop(Extension):  # always asks for a tool: max_iterations still ends the run
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            call = ToolCall(id=f"c{ctx.iteration}", name="double", arguments={"x": ctx.iteration})
            return ChatResponse.tool_use(call)

    agent = Agent(model, tools=[double], extensions=[Loop()], max_iterations=3)
    with pytest.raises(MaxIterationsError):
        await agent.prompt("q")


async def test_a_tool_short_circuit_skips_the_tool() -> None:
    ran: list[int] = []

    @tool
    def launch(x: int) -> str:
        """Launch."""
        ran.append(x)
        return "launched"

    class Deny(Extension):
        async def wrap_tool_call(
            self, call: ToolCall, ctx: RunState, call_next: CallTool
        ) -> ToolOutput:
            return ToolOutput.error(f"{call.name} is not allowed")

    call = ToolCall(id="1", name="launch", arguments={"x": 1})
    model = ScriptedModel([ChatResponse.tool_use(call), "ok"])
    await Agent(model, tools=[launch], extensions=[Deny()]).prompt("q")
    assert ran == []
    assert model.requests[1].messages[-1].text == "launch is not allowed"


async def test_a_retry_inside_an_extension_counts_every_model_call() -> None:
    attempts: list[int] = []

    def flaky(request: ChatRequest) -> ChatResponse:
        attempts.append(1)
        if len(attempts) == 1:
            raise ModelError("overloaded", provider="test", retryable=True)
        if len(attempts) == 2:
            return ChatResponse.reply("", usage=Usage(output_tokens=2, requests=1))
        return ChatResponse.reply("answer", usage=Usage(output_tokens=3, requests=1))

    class Retry(Extension):
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            for _ in range(5):
                try:
                    response = await call_next(request)
                except ModelError:
                    continue
                if response.text:
                    return response
            raise AssertionError("no answer")

    response = await Agent(FunctionModel(flaky), extensions=[Retry()]).prompt("q")
    assert response.text == "answer"
    assert len(attempts) == 3
    assert response.usage.output_tokens == 5  # both answers were paid for
    assert response.iterations == 2  # the failed call never answered


async def test_stream_events_reach_the_caller_through_an_extension() -> None:
    seen: list[ChatResponse] = []

    class Watch(Extension):
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            response = await call_next(request)
            seen.append(response)
            return response

    agent = Agent(doubling_model(), tools=[double], extensions=[Watch()])
    events = [event async for event in agent.prompt_stream("q")]
    kinds = [type(event).__name__ for event in events]
    assert "ToolCallStart" in kinds and "TextDelta" in kinds
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["8"]
    assert sum(isinstance(e, UsageEvent) for e in events) == 2
    assert [e.output.content for e in events if isinstance(e, ToolResult)] == ["8"]
    assert isinstance(events[-1], Done) and events[-1].response.text == "8"
    assert [r.text for r in seen] == ["", "8"]  # the whole response, after its events


async def test_a_made_up_response_in_a_stream_reaches_done_without_deltas() -> None:
    class Cache(Extension):
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            return ChatResponse.reply("cached")

    events = [e async for e in Agent(ScriptedModel([]), extensions=[Cache()]).prompt_stream("q")]
    assert [type(e).__name__ for e in events] == ["UsageEvent", "Done"]
    assert isinstance(events[-1], Done) and events[-1].response.text == "cached"


async def test_a_caller_leaving_a_stream_is_seen_by_the_extension() -> None:
    ended: list[str] = []

    class Watch(Extension):
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            try:
                return await call_next(request)
            except BaseException as exc:
                ended.append(type(exc).__name__)
                raise

    errors: list[str] = []

    class OnError(AgentHook):
        async def on_error(self, error: BaseException, state: RunState) -> None:
            errors.append(type(error).__name__)

    agent = Agent(doubling_model(), tools=[double], extensions=[Watch()], hooks=[OnError()])
    stream = agent.prompt_stream("q")
    await anext(stream)
    await stream.aclose()
    assert ended == ["GeneratorExit"]
    assert errors == ["GeneratorExit"]


async def test_a_cancel_token_interrupts_a_streamed_call_in_an_extension_chain() -> None:
    from daimon import CancelToken, RunCancelled

    started = asyncio.Event()

    async def slow(request: ChatRequest) -> Any:
        yield "first "
        started.set()
        await asyncio.Event().wait()
        yield "never"

    token = CancelToken()
    agent = Agent(FunctionModel(stream_function=slow), extensions=[Log("x", [])])
    events: list[StreamEvent] = []

    async def consume() -> None:
        async for event in agent.prompt_stream("q", cancel=token):
            events.append(event)

    task = asyncio.create_task(consume())
    await started.wait()
    token.cancel("stop")
    with pytest.raises(RunCancelled):
        await task
    assert isinstance(events[0], TextDelta)


async def test_an_extension_raising_fails_the_run_and_its_hooks_see_it() -> None:
    errors: list[BaseException] = []

    class OnError(AgentHook):
        async def on_error(self, error: BaseException, state: RunState) -> None:
            errors.append(error)

    class Broken(Extension):
        async def wrap_tool_call(
            self, call: ToolCall, ctx: RunState, call_next: CallTool
        ) -> ToolOutput:
            raise RuntimeError("extension bug")

    agent = Agent(doubling_model(), tools=[double], extensions=[Broken()], hooks=[OnError()])
    with pytest.raises(RuntimeError, match="extension bug"):
        await agent.prompt("q")
    assert [str(e) for e in errors] == ["extension bug"]


async def test_an_extension_that_forgets_to_return_gets_a_clear_error() -> None:
    class Forgetful(Extension):
        async def wrap_model_call(  # type: ignore[override]
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> None:
            await call_next(request)

    class Wrong(Extension):
        async def wrap_tool_call(  # type: ignore[override]
            self, call: ToolCall, ctx: RunState, call_next: CallTool
        ) -> str:
            return "plain text"

    with pytest.raises(
        ExtensionError, match=r"Forgetful.wrap_model_call returned NoneType.*return"
    ):
        await Agent(ScriptedModel(["x"]), extensions=[Forgetful()]).prompt("q")
    agent = Agent(doubling_model(), tools=[double], extensions=[Wrong()])
    with pytest.raises(
        ExtensionError, match=r"Wrong\.wrap_tool_call returned str, not a ToolOutput"
    ):
        await agent.prompt("q")


def test_only_overridden_methods_make_chains() -> None:
    class ModelOnly(Extension):
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            return await call_next(request)

    class Observer(AgentHook):
        async def on_run_start(self, state: RunState) -> None:
            pass

    plain = Agent(ScriptedModel([]), hooks=[Observer()])
    assert plain.layers == ((), ())  # the fast path: the loop calls model and tools directly
    extension = ModelOnly()
    agent = Agent(ScriptedModel([]), extensions=[extension])
    assert agent.layers == ((extension,), ())
    assert agent.replace(name="b").extensions == (extension,)


def test_extensions_must_be_extensions() -> None:
    from daimon import BuilderError

    with pytest.raises(BuilderError, match="Extension instances, not Middleware"):
        Agent(ScriptedModel([]), extensions=[Middleware()])  # type: ignore[list-item]


async def test_old_middleware_short_circuits_through_the_adapter_in_streams() -> None:
    class Cache(Middleware):
        async def on_request(self, request: ChatRequest, state: RunState) -> ShortCircuit:
            return ShortCircuit(ChatResponse.reply("from cache"))

    model = ScriptedModel([])
    events = [e async for e in Agent(model, middleware=[Cache()]).prompt_stream("q")]
    assert isinstance(events[-1], Done) and events[-1].response.text == "from cache"
    assert events[-1].response.iterations == 1
    assert model.requests == []


async def test_a_streamed_retry_streams_again_and_awaits_pass_through() -> None:
    attempts: list[int] = []

    async def deltas(request: ChatRequest) -> Any:
        attempts.append(1)
        await asyncio.sleep(0.001)  # the model's own awaits go to the event loop as usual
        yield f"try {len(attempts)}"

    class RetryFirst(Extension):
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            await asyncio.sleep(0)  # and so do the extension's
            response = await call_next(request)
            if response.text == "try 1":
                await asyncio.sleep(0.001)
                response = await call_next(request)
            return response

    agent = Agent(FunctionModel(stream_function=deltas), extensions=[RetryFirst()])
    events = [e async for e in agent.prompt_stream("q")]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["try 1", "try 2"]
    assert sum(isinstance(e, UsageEvent) for e in events) == 2  # each call, as it was counted
    assert isinstance(events[-1], Done) and events[-1].response.text == "try 2"
