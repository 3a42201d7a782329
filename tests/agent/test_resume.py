"""Resumable runs: a run that dies continues from its last checkpoint, never repeating work."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.core import CheckpointCorruptError, CheckpointState, codec
from daimon.memory import SlidingWindowMemory
from daimon.models import FunctionModel


class MemoryCheckpoint:
    """A core Checkpoint kept in a dict, through the JSON codec like a real backend."""

    def __init__(self) -> None:
        self.saved: dict[str, list[str]] = {}

    async def save(self, state: CheckpointState) -> None:
        self.saved.setdefault(state.run_id, []).append(codec.dumps(state))

    async def load(self, run_id: str) -> CheckpointState | None:
        records = self.saved.get(run_id)
        return codec.loads(records[-1], CheckpointState) if records else None

    async def list_runs(self) -> list[str]:
        return sorted(self.saved)

    async def delete(self, run_id: str) -> None:
        self.saved.pop(run_id, None)


class Crash(BaseException):
    """Stands in for the process dying: nothing in daimon catches a BaseException."""


def planner(request: ChatRequest) -> ChatResponse:
    """Asks for two parallel calls, then one more, then answers with the results."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(
            ToolCall(id="a", name="work", arguments={"step": "a"}),
            ToolCall(id="b", name="work", arguments={"step": "b"}),
        )
    if len(results) == 2:
        return ChatResponse.tool_use(ToolCall(id="c", name="work", arguments={"step": "c"}))
    return ChatResponse.reply(" ".join(results))


async def test_a_crashed_run_resumes_and_never_reruns_a_saved_tool_call() -> None:
    executions: Counter[str] = Counter()
    crash_on = {"b"}

    @tool
    async def work(step: str) -> str:
        """Do one step."""
        if step in crash_on:
            crash_on.discard(step)
            await asyncio.sleep(0.01)  # let "a" finish and be checkpointed first
            raise Crash
        executions[step] += 1
        return step.upper()

    checkpoint = MemoryCheckpoint()
    with pytest.raises(Crash):
        await Agent(FunctionModel(planner), tools=[work], checkpoint=checkpoint).prompt(
            "go", run_id="run-1"
        )
    assert executions == Counter({"a": 1})
    saved = await checkpoint.load("run-1")
    assert saved is not None and set(saved.completed_tool_results) == {"a"}
    assert [c.id for c in saved.pending_tool_calls] == ["a", "b"]

    # a new process: a new agent on the same checkpoint store
    agent = Agent(FunctionModel(planner), tools=[work], checkpoint=checkpoint)
    response = await agent.prompt("go", run_id="run-1")
    assert response.text == "A B C"
    assert executions == Counter({"a": 1, "b": 1, "c": 1})
    assert response.iterations == 3
    assert [m.role for m in response.messages] == [
        Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT,
    ]  # fmt: skip

    # a finished run answers again from its checkpoint without calling anything
    again = await agent.prompt("go", run_id="run-1")
    assert again.text == "A B C" and executions == Counter({"a": 1, "b": 1, "c": 1})


async def test_a_crash_during_the_model_call_resumes_before_the_call() -> None:
    calls = Counter[str]()
    fail_once = [True]

    def flaky(request: ChatRequest) -> ChatResponse:
        results = [m for m in request.messages if m.role is Role.TOOL]
        if results and fail_once[0]:
            fail_once[0] = False
            raise Crash
        return planner(request)

    @tool
    def work(step: str) -> str:
        """Do one step."""
        calls[step] += 1
        return step

    checkpoint = MemoryCheckpoint()
    agent = Agent(FunctionModel(flaky), tools=[work], checkpoint=checkpoint)
    with pytest.raises(Crash):
        await agent.prompt("go", run_id="r")
    response = await agent.prompt("go", run_id="r")
    assert response.text == "a b c"
    assert calls == Counter({"a": 1, "b": 1, "c": 1})


async def test_resumed_runs_write_memory_once() -> None:
    crash = [True]

    @tool
    def work(step: str) -> str:
        """Do one step."""
        if step == "c" and crash[0]:
            crash[0] = False
            raise Crash
        return step

    memory = SlidingWindowMemory()
    checkpoint = MemoryCheckpoint()
    agent = Agent(FunctionModel(planner), tools=[work], checkpoint=checkpoint, memory=memory)
    with pytest.raises(Crash):
        await agent.prompt("go", run_id="r", session_id="s")
    await agent.prompt("go", run_id="r", session_id="s")
    stored = await memory.get_messages("s")
    assert [m.role for m in stored].count(Role.USER) == 1
    assert [m.tool_call_id for m in stored if m.role is Role.TOOL] == ["a", "b", "c"]


async def test_a_checkpoint_that_is_not_a_run_state_is_reported() -> None:
    checkpoint = MemoryCheckpoint()
    await checkpoint.save(CheckpointState(run_id="x", custom={"daimon": {"status": "weird"}}))
    with pytest.raises(CheckpointCorruptError, match="unknown status"):
        await Agent(FunctionModel(planner), checkpoint=checkpoint).prompt("go", run_id="x")
