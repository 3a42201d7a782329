"""A process that runs (or resumes) one agent run on a FileCheckpoint; the test kills it."""

from __future__ import annotations

import asyncio
import os
import sys
import time

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.checkpoint import FileCheckpoint
from daimon.core.errors import RunLeasedError
from daimon.models import FunctionModel

directory, log_path, run_id, generation = sys.argv[1:5]
PLAN = [["s1"], ["s2", "s3"], ["s4"], ["s5", "s6"], ["s7"]]


def log(line: str) -> None:
    with open(log_path, "a") as handle:
        handle.write(f"{generation} {line}\n")
        handle.flush()
        os.fsync(handle.fileno())


@tool
async def work(step: str) -> str:
    """Do one step of the plan."""
    log(f"start {step}")
    await asyncio.sleep(0.02)
    return step.upper()


def planner(request: ChatRequest) -> ChatResponse:
    done = sum(1 for m in request.messages if m.role is Role.ASSISTANT and m.tool_calls)
    if done < len(PLAN):
        calls = [ToolCall(id=f"call-{s}", name="work", arguments={"step": s}) for s in PLAN[done]]
        return ChatResponse.tool_use(*calls)
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    return ChatResponse.reply(" ".join(results))


async def main() -> None:
    # A short lease: the killed generation's lease expires soon after its death.
    store = FileCheckpoint(directory, lease=0.3)
    agent = Agent(FunctionModel(planner), tools=[work], checkpoint=store)
    print("ready", flush=True)
    while True:
        try:
            response = await agent.prompt("run the plan", run_id=run_id)
            break
        except RunLeasedError as leased:  # the killed generation's lease: wait for its end
            await asyncio.sleep(max(0, leased.expires_at - time.time() * 1000) / 1000 + 0.01)
    print(response.text, flush=True)


asyncio.run(main())
