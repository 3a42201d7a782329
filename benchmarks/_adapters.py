"""The same task for daimon and for a hand-written plain-asyncio loop (the floor).

The task: the model asks for add(a=2, b=3), the framework runs the tool, the model answers.
Each adapter offers: build() -> agent, run(agent) -> final text (async), stream(agent, n) -> count
of text deltas received, and a sleepy model for the concurrency metric.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

SLEEP = 0.05


# ----------------------------------------------------------------------------- floor
class FloorAgent:
    __slots__ = ("model", "tools")

    def __init__(self, model: Any, tools: dict[str, Any]) -> None:
        self.model = model
        self.tools = tools

    async def run(self, prompt: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        while True:
            reply = await self.model(messages)
            messages.append(reply)
            calls = reply.get("tool_calls")
            if not calls:
                return reply["content"]
            for call in calls:
                result = self.tools[call["name"]](**json.loads(call["arguments"]))
                messages.append({"role": "tool", "id": call["id"], "content": str(result)})


def floor_add(a: int, b: int) -> int:
    return a + b


async def floor_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    if messages[-1]["role"] == "tool":
        return {"role": "assistant", "content": f"The answer is {messages[-1]['content']}."}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'}],
    }


async def floor_sleepy_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    await asyncio.sleep(SLEEP)
    return await floor_model(messages)


class Floor:
    name = "floor"

    @staticmethod
    def build(sleepy: bool = False) -> Any:
        return FloorAgent(floor_sleepy_model if sleepy else floor_model, {"add": floor_add})

    @staticmethod
    async def run(agent: Any) -> str:
        return await agent.run("What is 2 + 3?")

    @staticmethod
    async def stream(n: int) -> int:
        async def deltas() -> Any:
            for _ in range(n):
                yield "x"

        count = 0
        async for _ in deltas():
            count += 1
        return count


# ----------------------------------------------------------------------------- daimon
def _daimon() -> Any:
    import daimon
    from daimon.models import FunctionModel

    @daimon.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    async def add_async(a: int, b: int) -> int:
        return a + b

    call = daimon.ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3})
    tool_turn = daimon.ChatResponse.tool_use(call)
    tool_role = daimon.Role.TOOL

    def respond(request: daimon.ChatRequest) -> daimon.ChatResponse:
        last = request.messages[-1]
        if last.role is tool_role:
            return daimon.ChatResponse.reply(f"The answer is {last.content}.")
        return tool_turn

    async def sleepy(request: daimon.ChatRequest) -> daimon.ChatResponse:
        await asyncio.sleep(SLEEP)
        return respond(request)

    async_add = daimon.tool(name="add")(add_async)
    return daimon, FunctionModel, async_add, respond, sleepy


class Daimon:
    name = "daimon"
    _parts: Any = None

    @classmethod
    def parts(cls) -> Any:
        if cls._parts is None:
            cls._parts = _daimon()
        return cls._parts

    @classmethod
    def build(cls, sleepy: bool = False) -> Any:
        daimon, function_model, add, respond, sleepy_fn = cls.parts()
        return daimon.Agent(function_model(sleepy_fn if sleepy else respond), tools=[add])

    @staticmethod
    async def run(agent: Any) -> str:
        return (await agent.prompt("What is 2 + 3?")).text

    @classmethod
    async def stream(cls, n: int) -> int:
        daimon, function_model, *_ = cls.parts()

        async def deltas(request: Any) -> Any:
            delta = daimon.TextDelta(text="x")
            for _ in range(n):
                yield delta

        agent = daimon.Agent(function_model(stream_function=deltas))
        count = 0
        text_delta = daimon.TextDelta
        async for event in agent.prompt_stream("go"):
            if type(event) is text_delta:
                count += 1
        return count


ADAPTERS = {"floor": Floor, "daimon": Daimon}
