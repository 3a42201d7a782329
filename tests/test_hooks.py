from __future__ import annotations

import pytest

from daimon import (
    Agent,
    AgentHook,
    AgentResponse,
    ChatResponse,
    RunState,
    ToolCall,
    ToolOutput,
    tool,
)
from daimon.models import ScriptedModel


@tool
def double(x: int) -> int:
    """Double x."""
    return 2 * x


class Recorder(AgentHook):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def on_run_start(self, state: RunState) -> None:
        self.calls.append("run")

    async def on_run_end(self, response: AgentResponse, state: RunState) -> None:
        self.calls.append(f"done:{response.text}")

    async def on_iteration_start(self, state: RunState) -> None:
        self.calls.append(f"start:{state.iteration}")

    async def on_model_response(self, response: ChatResponse, state: RunState) -> None:
        self.calls.append(f"response:{len(response.message.tool_calls)}")

    async def on_tool_call(self, call: ToolCall, state: RunState) -> None:
        self.calls.append(f"tool:{call.name}")

    async def on_tool_result(self, call: ToolCall, output: ToolOutput, state: RunState) -> None:
        self.calls.append(f"result:{output.content}")

    async def on_iteration_end(self, state: RunState) -> None:
        self.calls.append(f"end:{state.iteration}")

    async def on_error(self, error: BaseException, state: RunState) -> None:
        self.calls.append(f"error:{type(error).__name__}")


async def test_hooks_fire_in_the_seed_order() -> None:
    recorder = Recorder()
    model = ScriptedModel(
        [ChatResponse.tool_use(ToolCall(id="1", name="double", arguments={"x": 4})), "8"]
    )
    await Agent(model, tools=[double], hooks=[recorder]).prompt("q")
    assert recorder.calls == [
        "run",
        "start:0",
        "response:1",
        "tool:double",
        "result:8",
        "end:1",
        "start:1",
        "response:0",
        "done:8",
    ]


async def test_on_error_sees_the_failure_and_a_raising_hook_fails_the_run() -> None:
    recorder = Recorder()
    with pytest.raises(Exception, match="ran out"):
        await Agent(ScriptedModel([]), hooks=[recorder]).prompt("q")
    assert recorder.calls == ["run", "start:0", "error:ModelError"]

    class Broken(AgentHook):
        async def on_iteration_start(self, state: RunState) -> None:
            raise RuntimeError("hook bug")

    with pytest.raises(RuntimeError, match="hook bug"):
        await Agent(ScriptedModel(["x"]), hooks=[Broken()]).prompt("q")
