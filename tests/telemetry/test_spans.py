"""Spans of instrumented runs, checked with the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from daimon import (
    Agent,
    BudgetExceededError,
    ChatRequest,
    ChatResponse,
    ModelError,
    ModelPrice,
    PriceTable,
    Role,
    StreamEvent,
    ToolCall,
    Usage,
    tool,
)
from daimon.hooks import AgentHook
from daimon.models import FunctionModel
from daimon.multiagent import AgentTool
from daimon.telemetry import instrument

from .conftest import Spans

PRICES = PriceTable({"m-1": ModelPrice(input=1.0, output=2.0)}, as_of="2025-01-01")
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


def used(input_tokens: int, output_tokens: int) -> Usage:
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


def calls_then_answers(*calls: ToolCall, answer: str = "done") -> FunctionModel:
    """Calls ``calls`` in the first turn, then answers from the tool results."""

    def model(request: ChatRequest) -> ChatResponse:
        results = [m.text for m in request.messages if m.role is Role.TOOL]
        if not results and calls:
            return ChatResponse.tool_use(*calls, usage=used(10, 5), model="m-1")
        return ChatResponse.reply(f"{answer}: {', '.join(results)}", usage=used(20, 7), model="m-1")

    return FunctionModel(model, model_name="m")


def calculator(spans: Spans, **options: Any) -> Agent:
    model = calls_then_answers(ToolCall(id="call-1", name="add", arguments={"a": 2, "b": 3}))
    agent = Agent(
        model,
        name="calc",
        tools=[add],
        system_prompt="You add.",
        cost_model=PRICES,
        temperature=0.2,
        max_tokens=50,
    )
    return instrument(agent, tracer_provider=spans.provider, **options)


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_run_is_an_invoke_agent_span_over_chat_and_tool_spans(spans: Spans) -> None:
    response = await calculator(spans).prompt("2 + 3?", session_id="conv-7")
    assert response.text == "done: 5"
    (run,) = spans.roots()
    assert spans.tree(run) == (
        "invoke_agent calc",
        [("chat m", []), ("execute_tool add", []), ("chat m", [])],
    )
    assert run.kind is SpanKind.INTERNAL
    assert attrs(run) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "calc",
        "gen_ai.conversation.id": "conv-7",
        "gen_ai.request.model": "m",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 50,
        "daimon.run.id": response.run_id,
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 12,
        "daimon.cost": pytest.approx(response.cost),
        "daimon.iterations": 2,
    }
    first, second = spans.named("chat m")
    assert first.kind is SpanKind.CLIENT
    assert attrs(first) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 50,
        "gen_ai.conversation.id": "conv-7",
        "gen_ai.response.model": "m-1",
        "gen_ai.response.finish_reasons": ("tool_call",),
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "daimon.cost": pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6),
    }
    assert attrs(second)["gen_ai.response.finish_reasons"] == ("stop",)
    tool_span = spans.one("execute_tool add")
    assert attrs(tool_span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call-1",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Add two numbers.",
        "daimon.tool.effect": "repeatable",
    }
    assert all(s.status.status_code is StatusCode.UNSET for s in spans.all)
    assert len({s.context.trace_id for s in spans.all}) == 1


async def test_streamed_runs_make_the_same_spans(spans: Spans) -> None:
    async for _ in calculator(spans).prompt_stream("2 + 3?"):
        pass
    (run,) = spans.roots()
    assert spans.tree(run) == (
        "invoke_agent calc",
        [("chat m", []), ("execute_tool add", []), ("chat m", [])],
    )
    assert "gen_ai.conversation.id" not in attrs(run)


async def test_sub_agents_nest_under_the_tool_call_that_started_them(spans: Spans) -> None:
    def researcher_model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply(f"facts on {request.messages[-1].text}", usage=used(3, 2))

    researcher = instrument(
        Agent(FunctionModel(researcher_model, model_name="r"), name="researcher"),
        tracer_provider=spans.provider,
    )
    writer = instrument(
        Agent(
            calls_then_answers(
                ToolCall(id="a", name="research", arguments={"task": "owls"}),
                ToolCall(id="b", name="research", arguments={"task": "bats"}),
            ),
            name="writer",
            tools=[AgentTool(researcher, name="research", description="Finds facts")],
        ),
        tracer_provider=spans.provider,
    )
    response = await writer.prompt("write")
    assert response.usage.input_tokens == 10 + 20 + 3 + 3  # the sub-agents' usage rolled up
    (run,) = spans.roots()
    sub_run = ("invoke_agent researcher", [("chat r", [])])
    assert spans.tree(run) == (
        "invoke_agent writer",
        [
            ("chat m", []),
            ("execute_tool research", [sub_run]),
            ("execute_tool research", [sub_run]),
            ("chat m", []),
        ],
    )
    # Each sub-agent run is under its own call (parallel calls run in separate tasks).
    for tool_span in spans.named("execute_tool research"):
        (child,) = spans.children(tool_span)
        (chat,) = spans.children(child)
        task = attrs(tool_span)["gen_ai.tool.call.id"]
        assert chat.name == "chat r"
        assert attrs(child)["gen_ai.usage.input_tokens"] == 3
        assert task in ("a", "b")
    assert attrs(run)["gen_ai.usage.input_tokens"] == 36
    assert len({s.context.trace_id for s in spans.all}) == 1


async def test_a_run_continues_the_callers_trace_and_restores_its_context(spans: Spans) -> None:
    tracer = spans.provider.get_tracer("app")
    seen: list[str] = []

    @tool
    def where() -> str:
        """Reports the current span."""
        seen.append(getattr(trace.get_current_span(), "name", "?"))
        return "here"

    agent = instrument(
        Agent(
            calls_then_answers(ToolCall(id="w", name="where", arguments={})),
            name="a",
            tools=[where],
        ),
        tracer_provider=spans.provider,
    )
    with tracer.start_as_current_span("request") as request:
        await agent.prompt("hi")
        assert trace.get_current_span() is request
    assert seen == ["execute_tool where"]  # the tool's span is current while it runs
    (root,) = spans.roots()
    assert root.name == "request"
    assert spans.tree(root)[1][0][0] == "invoke_agent a"
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_concurrent_runs_keep_their_spans_apart(spans: Spans) -> None:
    agent = calculator(spans)
    first, second = await asyncio.gather(agent.prompt("one"), agent.prompt("two"))
    runs = spans.named("invoke_agent calc")
    assert len(runs) == 2
    for run in runs:
        assert spans.tree(run) == (
            "invoke_agent calc",
            [("chat m", []), ("execute_tool add", []), ("chat m", [])],
        )
    assert {attrs(r)["daimon.run.id"] for r in runs} == {first.run_id, second.run_id}


async def test_content_is_not_recorded_by_default(spans: Spans) -> None:
    await calculator(spans).prompt("secret question")
    for span in spans.all:
        assert not CONTENT_KEYS & set(attrs(span)), span.name
        assert "secret" not in json.dumps(attrs(span), default=str)


async def test_content_is_recorded_when_switched_on(spans: Spans) -> None:
    await calculator(spans, capture_content=True).prompt("2 + 3?")
    first, second = spans.named("chat m")
    assert json.loads(attrs(first)["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "You add."}
    ]
    assert json.loads(attrs(first)["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "2 + 3?"}]}
    ]
    assert json.loads(attrs(first)["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "call-1", "name": "add", "arguments": {"a": 2, "b": 3}}
            ],
            "finish_reason": "tool_call",
        }
    ]
    assert json.loads(attrs(second)["gen_ai.input.messages"])[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call-1", "response": "5"}],
    }
    tool_span = spans.one("execute_tool add")
    assert attrs(tool_span)["gen_ai.tool.call.arguments"] == '{"a":2,"b":3}'
    assert attrs(tool_span)["gen_ai.tool.call.result"] == "5"
    run = spans.one("invoke_agent calc")
    assert json.loads(attrs(run)["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "done: 5"}]}
    ]


async def test_the_standard_environment_variable_switches_content_on(
    spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    await calculator(spans).prompt("2 + 3?")
    assert "gen_ai.input.messages" in attrs(spans.named("chat m")[0])
    spans.exporter.clear()
    await calculator(spans, capture_content=False).prompt("2 + 3?")  # the argument wins
    assert not any(CONTENT_KEYS & set(attrs(s)) for s in spans.all)


async def test_a_failed_model_call_is_recorded_on_the_chat_and_run_spans(spans: Spans) -> None:
    def broken(request: ChatRequest) -> ChatResponse:
        raise ModelError("provider down", provider="test")

    agent = instrument(Agent(FunctionModel(broken), name="a"), tracer_provider=spans.provider)
    with pytest.raises(ModelError, match="provider down"):
        await agent.prompt("hi")
    run, chat = spans.one("invoke_agent a"), spans.one("chat function")
    assert spans.parent(chat) is run
    for span in (run, chat):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "provider down"
        assert attrs(span)["error.type"] == "daimon.core.errors.ModelError"
        (event,) = span.events
        assert event.name == "exception"
        assert dict(event.attributes or {})["exception.type"] == "daimon.core.errors.ModelError"
    assert trace.get_current_span() is trace.INVALID_SPAN  # the run's context was let go


async def test_a_refused_budget_fails_the_run_span(spans: Spans) -> None:
    agent = instrument(
        Agent(
            calls_then_answers(),
            name="a",
            cost_model=PriceTable({"m": ModelPrice(input=1e6, output=1e6)}, as_of="x"),
            max_budget=0.5,
            max_tokens=10,
        ),
        tracer_provider=spans.provider,
    )
    with pytest.raises(BudgetExceededError):
        await agent.prompt("hi")
    (run,) = spans.all  # refused before any model call
    assert run.status.status_code is StatusCode.ERROR
    assert attrs(run)["error.type"] == "daimon.core.errors.BudgetExceededError"


async def test_a_failing_tool_marks_its_span_and_the_run_goes_on(spans: Spans) -> None:
    agent = instrument(
        Agent(
            calls_then_answers(ToolCall(id="x", name="explode", arguments={})),
            name="a",
            tools=[explode],
        ),
        tracer_provider=spans.provider,
    )
    await agent.prompt("hi")
    tool_span = spans.one("execute_tool explode")
    assert tool_span.status.status_code is StatusCode.ERROR
    assert attrs(tool_span)["error.type"] == "tool_error"
    assert "kaboom" not in (tool_span.status.description or "")  # content stays out
    assert spans.one("invoke_agent a").status.status_code is StatusCode.UNSET


async def test_a_paused_run_ends_its_span(spans: Spans) -> None:
    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Deletes a file."""
        return "deleted"

    agent = instrument(
        Agent(
            calls_then_answers(ToolCall(id="d", name="delete", arguments={"path": "/x"})),
            name="a",
            tools=[delete],
        ),
        tracer_provider=spans.provider,
    )
    paused = await agent.prompt("clean up")
    assert paused.paused
    assert attrs(spans.one("invoke_agent a"))["daimon.run.paused"] is True
    done = await agent.resume(paused, {"d": True})
    assert done.text == "done: deleted"
    first, second = spans.named("invoke_agent a")
    assert attrs(second)["daimon.run.id"] == attrs(first)["daimon.run.id"]
    assert [c.name for c in spans.children(second)] == ["execute_tool delete", "chat m"]


async def test_instrument_copies_the_agent_and_replaces_earlier_tracing(spans: Spans) -> None:
    class Counting(AgentHook):
        runs = 0

        async def on_run_start(self, state: Any) -> None:
            Counting.runs += 1

    counting = Counting()
    plain = Agent(calls_then_answers(), name="a", hooks=[counting])
    once = instrument(plain, tracer_provider=spans.provider)
    twice = instrument(once, tracer_provider=spans.provider)
    assert plain.hooks == (counting,)
    assert len(once.hooks) == len(twice.hooks) == 2
    assert twice.hooks[1] is counting
    await twice.prompt("hi")
    assert spans.names() == ["chat m", "invoke_agent a"]
    assert Counting.runs == 1


async def test_the_global_tracer_provider_is_used_by_default(spans: Spans) -> None:
    # A proxy tracer: spans go wherever the global provider points when they start. With no SDK
    # provider set globally they are non-recording, and nothing is exported.
    agent = instrument(Agent(calls_then_answers(), name="a"))
    response = await agent.prompt("hi")
    assert response.text.startswith("done")
    assert spans.all == ()


async def abandon_a_stream(agent: Agent) -> None:
    """Starts a streamed run and leaves it after its first event."""
    stream = agent.prompt_stream("2 + 3?")
    await anext(stream)
    await stream.aclose()  # GeneratorExit at the loop's yield


async def first_event(stream: AsyncIterator[StreamEvent]) -> StreamEvent:
    return await anext(stream)


async def test_runs_left_open_are_ended_as_abandoned_past_the_limit(
    spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daimon.telemetry import _otel

    monkeypatch.setattr(_otel, "_MAX_OPEN_RUNS", 1)
    agent = calculator(spans)
    held = agent.prompt_stream("2 + 3?")
    await asyncio.create_task(first_event(held))  # its own task: its context stays there
    assert spans.all == ()  # the held run's spans are still open
    await agent.prompt("again")
    abandoned = [s for s in spans.all if s.status.description == "abandoned"]
    assert sorted(s.name for s in abandoned) == ["chat m", "invoke_agent calc"]
    assert len(spans.named("invoke_agent calc")) == 2
    ended = len(spans.all)
    await held.aclose()  # ended already: nothing more is recorded
    assert len(spans.all) == ended


async def test_an_abandoned_stream_ends_its_spans(spans: Spans) -> None:
    await abandon_a_stream(calculator(spans))
    (chat, run) = sorted(spans.all, key=lambda s: s.name)
    assert (chat.name, run.name) == ("chat m", "invoke_agent calc")
    for span in (chat, run):
        assert span.status.status_code is StatusCode.ERROR
        assert attrs(span)["error.type"] == "GeneratorExit"


async def test_a_cancelled_run_ends_its_spans_with_its_cost(spans: Spans) -> None:
    answered = asyncio.Event()

    @tool
    async def wait() -> str:
        """Waits forever."""
        answered.set()
        await asyncio.Event().wait()
        return "never"

    agent = instrument(
        Agent(
            calls_then_answers(ToolCall(id="w", name="wait", arguments={})),
            name="a",
            tools=[wait],
            cost_model=PRICES,
        ),
        tracer_provider=spans.provider,
    )
    run = asyncio.create_task(agent.prompt("hi"))
    await answered.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    names = sorted(s.name for s in spans.all)
    assert names == ["chat m", "execute_tool wait", "invoke_agent a"]
    invoke = spans.one("invoke_agent a")
    assert invoke.status.status_code is StatusCode.ERROR
    assert attrs(invoke)["error.type"] == "asyncio.exceptions.CancelledError"
    assert attrs(invoke)["daimon.cost"] == pytest.approx(10 * 1.0 / 1e6 + 5 * 2.0 / 1e6)
    assert spans.one("execute_tool wait").status.status_code is StatusCode.ERROR


async def test_gap_an_abandoned_stream_lets_go_of_the_runs_context(spans: Spans) -> None:
    await abandon_a_stream(calculator(spans))
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_spans_are_written_through_the_extension_chain(spans: Spans) -> None:
    from daimon import CallModel, Extension, RunState

    class RetryEmpty(Extension):  # the user's extension, outside the tracing one
        async def wrap_model_call(
            self, request: ChatRequest, ctx: RunState, call_next: CallModel
        ) -> ChatResponse:
            response = await call_next(request)
            return response if response.text else await call_next(request)

    answers = iter(["", "second try"])

    def model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply(next(answers), usage=used(1, 1))

    agent = instrument(
        Agent(FunctionModel(model, model_name="m"), name="a", extensions=[RetryEmpty()]),
        tracer_provider=spans.provider,
    )
    assert agent.extensions[0].__class__ is RetryEmpty  # tracing is the innermost layer
    response = await agent.prompt("hi")
    assert response.text == "second try"
    (run,) = spans.roots()
    assert spans.tree(run) == ("invoke_agent a", [("chat m", []), ("chat m", [])])
    assert attrs(run)["daimon.iterations"] == 2
