"""What an activity cannot hand back as it is: the run ends as in process, at once, one attempt.

Each case runs the same agent in process and on the dev server. A value JSON cannot hold (NaN,
an object) is made storable as a tool result's data is; a result over Temporal's payload limit
is an error the model reads; neither is ever retried.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from temporalio.client import Client

from daimon import Agent, ChatRequest, ChatResponse, ToolCall, tool
from daimon.models import FunctionModel
from daimon.temporal import RunFailedError, serving, start_run
from daimon.tools import EndRun

ran: Counter[str] = Counter()
"""How often each tool ran (and the model asked for the NaN call), in this process."""


class Receipt:
    """An object JSON cannot hold, with a stable text."""

    def __repr__(self) -> str:
        return "Receipt(42)"


@tool
def end_with_nan() -> str:
    """End the run with NaN."""
    ran["end_with_nan"] += 1
    raise EndRun(float("nan"))


@tool
def end_with_object() -> str:
    """End the run with an object."""
    ran["end_with_object"] += 1
    raise EndRun(Receipt())


@tool
def read_everything() -> str:
    """Return 3 MB."""
    ran["read_everything"] += 1
    return "x" * 3_000_000


@tool
def add(a: float, b: float) -> str:
    """Add two numbers."""
    ran["add"] += 1
    return str(a + b)


def _calls_the_prompted_tool(request: ChatRequest) -> ChatResponse:
    """Call the tool the prompt names (``add`` with NaN), then say what it read."""
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(f"read {len(last.text)}: {last.text[:200]}")
    name = request.messages[0].text
    arguments = {"a": float("nan"), "b": 1.0} if name == "add" else {}
    ran["model asked"] += 1
    return ChatResponse.tool_use(ToolCall(id="c1", name=name, arguments=arguments))


awkward = Agent(
    FunctionModel(_calls_the_prompted_tool),
    name="awkward",
    tools=[end_with_nan, end_with_object, read_everything, add],
)


@pytest.mark.parametrize("name", ["end_with_nan", "end_with_object", "read_everything", "add"])
async def test_a_value_temporal_cannot_carry_ends_the_run_as_in_process_in_one_attempt(
    client: Client, task_queue: str, name: str
) -> None:
    ran.clear()
    plain = await awkward.prompt(name)
    assert ran == {name: 1, "model asked": 1}
    ran.clear()
    async with serving(client, [awkward], task_queue=task_queue):
        started = time.monotonic()
        run = await start_run(client, awkward, name, task_queue=task_queue)
        response = await asyncio.wait_for(run.result(), 30)
        took = time.monotonic() - started
        status = await run.status()
    assert status.phase == "completed"  # as in process: the run ends normally
    assert took < 5
    assert ran["model asked"] == 1  # nothing was asked or run twice
    if name == "end_with_nan":
        assert plain.text == response.text == "nan"
        assert response.output == "nan"  # as a tool result's data holds NaN
    elif name == "end_with_object":
        assert plain.text == response.text == "Receipt(42)"
        assert response.output == "Receipt(42)"
    elif name == "read_everything":
        assert plain.text.startswith("read 3000000: xxx")
        assert response.text.startswith("read ")
        assert "over Temporal's payload limit of 2,097,152 bytes" in response.text
    else:  # in process the tool got NaN; JSON cannot carry it: the model is told, as for a
        # provider's NaN in argument text, that the arguments are not valid JSON
        assert plain.text == "read 3: nan"
        assert "not a valid JSON object" in response.text
    assert ran[name] == (0 if name == "add" else 1)


@tool
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo {text}"


def _echoes(request: ChatRequest) -> ChatResponse:
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(last.text)
    return ChatResponse.tool_use(ToolCall(id="e1", name="echo", arguments={"text": last.text}))


echoer = Agent(FunctionModel(_echoes), name="echoer", tools=[echo])


async def test_a_lone_surrogate_in_the_prompt_and_arguments_runs_as_in_process(
    client: Client, task_queue: str
) -> None:
    prompt = "caf\udce9 au lait"
    plain = await echoer.prompt(prompt)
    async with serving(client, [echoer], task_queue=task_queue):
        run = await start_run(client, echoer, prompt, task_queue=task_queue)
        response = await asyncio.wait_for(run.result(), 30)
    assert response.text == plain.text == "echo caf\ufffd au lait"
    assert response.messages[0].text == plain.messages[0].text == prompt
    assert response.messages[1].tool_calls == plain.messages[1].tool_calls


@tool
def read_half() -> str:
    """Return 1.5 MB: one result Temporal carries, two in one request it cannot."""
    ran["read_half"] += 1
    return "y" * 1_500_000


def _reads_twice(request: ChatRequest) -> ChatResponse:
    read = sum(1 for m in request.messages if m.role.value == "tool")
    if read < 2:
        return ChatResponse.tool_use(ToolCall(id=f"r{read}", name="read_half", arguments={}))
    return ChatResponse.reply("read both")


hoarder = Agent(FunctionModel(_reads_twice), name="hoarder", tools=[read_half])


async def test_a_run_whose_messages_outgrow_a_payload_fails_at_once_with_a_serialization_error(
    client: Client, task_queue: str
) -> None:
    ran.clear()
    async with serving(client, [hoarder], task_queue=task_queue):
        started = time.monotonic()
        run = await start_run(client, hoarder, "read", task_queue=task_queue)
        with pytest.raises(RunFailedError) as failed:
            await asyncio.wait_for(run.result(), 30)
        took = time.monotonic() - started
    assert failed.value.error_type == "SerializationError"
    assert "over Temporal's payload limit of 2,097,152 bytes" in str(failed.value)
    assert took < 10
    assert ran["read_half"] == 2  # each result crossed once; the next model call could not
