"""A run on Temporal behaves as a plain run: structured output, guardrails, limits, budgets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.client import Client

from daimon import (
    Agent,
    ChatRequest,
    ChatResponse,
    Message,
    ModelPrice,
    PriceTable,
    ToolCall,
    Usage,
    tool,
)
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput
from daimon.guardrails import GuardrailResult
from daimon.hooks import AgentHook
from daimon.models import FunctionModel
from daimon.multiagent import AgentTool
from daimon.orchestration import DagBuilder
from daimon.state import RunState
from daimon.temporal import RunFailedError, serving, start_run


@dataclass(frozen=True)
class Total:
    total: int


def _typed(request: ChatRequest) -> ChatResponse:
    retried = any("did not match" in m.text for m in request.messages if m.role.value == "user")
    return ChatResponse.reply('{"total": 7}' if retried else '{"total": "seven"}')


typed = Agent(FunctionModel(_typed, supports_json_schema=True), name="typed", output_type=Total)


async def test_structured_output_is_retried_and_decoded(client: Client, task_queue: str) -> None:
    async with serving(client, [typed], task_queue=task_queue):
        run = await start_run(client, typed, "how many?", task_queue=task_queue)
        response = await run.result(Total)
    assert response.output == Total(total=7)
    assert response.iterations == 2  # the first answer did not match: asked again


class NoSecrets:
    async def check(self, input: str, messages: Sequence[Message]) -> GuardrailResult:
        return GuardrailResult.block("no secrets") if "secret" in input else GuardrailResult.allow()


guarded = Agent(FunctionModel(lambda request: "ok"), name="guarded", input_guardrails=[NoSecrets()])


async def test_an_input_guardrail_blocks_the_run(client: Client, task_queue: str) -> None:
    async with serving(client, [guarded], task_queue=task_queue):
        ok = await start_run(client, guarded, "hello", task_queue=task_queue)
        assert (await ok.result()).text == "ok"
        blocked = await start_run(client, guarded, "the secret", task_queue=task_queue)
        with pytest.raises(RunFailedError) as failed:
            await blocked.result()
    assert failed.value.error_type == "GuardrailBlockedError"
    assert "no secrets" in str(failed.value)


@tool
def look(page: int) -> str:
    """Look at a page."""
    return f"page {page}"


def _new_page(request: ChatRequest) -> ChatResponse:
    page = len(request.messages)  # a new page each turn: never a repeat
    return ChatResponse.tool_use(ToolCall(id=f"c{page}", name="look", arguments={"page": page}))


def _same_page(request: ChatRequest) -> ChatResponse:
    turn = len(request.messages)
    return ChatResponse.tool_use(ToolCall(id=f"c{turn}", name="look", arguments={"page": 1}))


endless = Agent(FunctionModel(_new_page), name="endless", tools=[look], max_iterations=3)
looping = Agent(FunctionModel(_same_page), name="looping", tools=[look], max_repeated_tool_calls=2)


async def test_max_iterations_and_the_loop_guard_end_runs(client: Client, task_queue: str) -> None:
    async with serving(client, [endless, looping], task_queue=task_queue):
        first = await start_run(client, endless, "read", task_queue=task_queue)
        second = await start_run(client, looping, "read", task_queue=task_queue)
        with pytest.raises(RunFailedError) as too_long:
            await first.result()
        with pytest.raises(RunFailedError) as repeated:
            await second.result()
    assert too_long.value.error_type == "MaxIterationsError"
    assert repeated.value.error_type == "RepeatedToolCallError"


def _expensive(request: ChatRequest) -> ChatResponse:
    call = ToolCall(id=f"c{len(request.messages)}", name="look", arguments={"page": 2})
    return ChatResponse.tool_use(call, usage=Usage(input_tokens=1000), model="m")


budgeted = Agent(
    FunctionModel(_expensive, model_name="m"),
    name="budgeted",
    tools=[look],
    cost_model=PriceTable({"m": ModelPrice(input=1_000_000, output=0)}, as_of="t"),
    max_budget=1500.0,  # a dollar a token: the first call fits, its 1000 tokens spend most
)


async def test_the_budget_refuses_the_call_that_would_pass_it(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [budgeted], task_queue=task_queue):
        run = await start_run(client, budgeted, "go", task_queue=task_queue)
        with pytest.raises(RunFailedError) as failed:
            await run.result()
        status = await run.status()
    assert failed.value.error_type == "BudgetExceededError"
    assert status.phase == "failed"
    assert status.cost == 1000.0 and status.iteration == 1


def _sub(request: ChatRequest) -> ChatResponse:
    return ChatResponse.reply(f"sub did: {request.messages[-1].text}", usage=Usage(input_tokens=10))


def _boss(request: ChatRequest) -> ChatResponse:
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(last.text, usage=Usage(input_tokens=1))
    call = ToolCall(id="d1", name="helper", arguments={"task": "file the report"})
    return ChatResponse.tool_use(call, usage=Usage(input_tokens=1))


boss = Agent(
    FunctionModel(_boss),
    name="boss",
    tools=[AgentTool(Agent(FunctionModel(_sub), name="sub"), name="helper", description="Helps.")],
)


async def test_a_sub_agent_runs_in_its_tool_activity_and_its_usage_adds_up(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [boss], task_queue=task_queue):
        run = await start_run(client, boss, "delegate", task_queue=task_queue)
        response = await run.result()
    assert response.text == "sub did: file the report"
    assert response.usage.input_tokens == 12  # the boss's two calls and the sub-agent's one


shout = DagBuilder("shout").add_node("upper", lambda inputs: inputs["input"].upper()).build()


async def test_a_flow_runs_whole_in_one_activity(client: Client, task_queue: str) -> None:
    async with serving(client, [shout], task_queue=task_queue):
        run = await start_run(client, shout, "quiet please", task_queue=task_queue)
        response = await run.result()
    assert response.output == "QUIET PLEASE"
    history = await run.handle.fetch_history()
    kinds = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert kinds == ["daimon.prompt"]


class Recorder(AgentHook):
    """Records what the hooks see (in the workflow: one worker, its workflow cache on)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_run_start(self, state: RunState) -> None:
        self.seen.append(f"start {state.run_id}")

    async def on_model_response(self, response: ChatResponse, state: RunState) -> None:
        self.seen.append(f"model {response.text or response.message.tool_calls[0].name}")

    async def on_tool_result(self, call: ToolCall, output: ToolOutput, state: RunState) -> None:
        self.seen.append(f"tool {call.name} -> {output.content}")

    async def on_run_end(self, response: AgentResponse[Any], state: RunState) -> None:
        self.seen.append(f"end {response.text}")


recorder = Recorder()
hooked = Agent(
    FunctionModel(lambda request: _after_look(request)),
    name="hooked",
    tools=[look],
    hooks=[recorder],
)


def _after_look(request: ChatRequest) -> ChatResponse:
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(f"saw {last.text}")
    return ChatResponse.tool_use(ToolCall(id="h1", name="look", arguments={"page": 3}))


async def test_hooks_see_the_run_as_in_a_plain_run(client: Client, task_queue: str) -> None:
    plain = await hooked.prompt("look", run_id="plain")
    in_process = list(recorder.seen)
    recorder.seen.clear()
    async with serving(client, [hooked], task_queue=task_queue):
        run = await start_run(client, hooked, "look", task_queue=task_queue, workflow_id="durable")
        response = await run.result()
    assert response.text == plain.text == "saw page 3"
    assert (
        [line.replace("plain", "durable") for line in in_process]
        == recorder.seen
        == [
            "start durable",
            "model look",
            "tool look -> page 3",
            "model saw page 3",
            "end saw page 3",
        ]
    )
