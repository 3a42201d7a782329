"""The floor: the same task in plain asyncio, with nothing a framework adds.

Every adapter offers what this one does:

- ``IMPORTS``: the import statements timed by the import metric;
- ``version()``: the framework's version;
- ``build(sleepy=False)``: a fake model and an agent with the one tool, which the adapter wraps
  once at module level in the framework's own way (sleepy: the model waits ``SLEEP`` seconds per
  call);
- ``run(agent)`` (async): one run of the task, returning the final text;
- ``stream(n)`` (async): one run whose model streams ``n`` text deltas; returns how many text
  delta events reached the caller;
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from common import COUNTS, PROMPT, SLEEP, TOOL_MODE, tool_function

IMPORTS = "import asyncio, json"


def version() -> str:
    return sys.version.split()[0]


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
                if TOOL_MODE != "sync":
                    result = await result
                messages.append({"role": "tool", "id": call["id"], "content": str(result)})


async def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    COUNTS["model"] += 1
    if messages[-1]["role"] == "tool":
        return {"role": "assistant", "content": f"The answer is {messages[-1]['content']}."}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'}],
    }


async def sleepy_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    await asyncio.sleep(SLEEP)
    return await model(messages)


def build(sleepy: bool = False) -> FloorAgent:
    return FloorAgent(sleepy_model if sleepy else model, {"add": tool_function()})


async def run(agent: FloorAgent) -> str:
    return await agent.run(PROMPT)


async def stream(n: int) -> int:
    async def deltas() -> Any:
        for _ in range(n):
            yield "x"

    count = 0
    async for _ in deltas():
        count += 1
    return count
