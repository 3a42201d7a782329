"""The agent the partition tests run on workers in network namespaces (not a test module).

Its model streams ``PARTITION_TICKS`` text deltas (default 40), one every ``PARTITION_PACE``
seconds (default 0.1), calls the tool ``record`` half-way, and ends with "done". ``record``
(``effect="once"``) appends a line (its note, the pid) to the file ``PARTITION_LEDGER`` names:
the workers share the file system, so a test counts how often it ran, wherever it ran. The
checkpoint is in the Redis ``PARTITION_CHECKPOINT`` names, reached over the test network, so a
worker cut off loses its run's lease (``PARTITION_RUN_LEASE`` seconds, default 2) as it loses
its task's.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

from daimon import Agent, ChatRequest, Role, ToolCall, tool
from daimon.checkpoint import RedisCheckpoint
from daimon.core.events import StreamEvent, ToolCallEnd
from daimon.models import FunctionModel

TICKS = int(os.environ.get("PARTITION_TICKS", "40"))
PACE = float(os.environ.get("PARTITION_PACE", "0.1"))
LEDGER = os.environ.get("PARTITION_LEDGER", os.devnull)


@tool(effect="once")
def record(note: str) -> str:
    """Write a note in the ledger (runs once per call, never again)."""
    with open(LEDGER, "a", encoding="utf-8") as ledger:
        ledger.write(f"{note} {os.getpid()}\n")
    return "recorded"


async def talk(request: ChatRequest) -> AsyncIterator[StreamEvent | str]:
    answered = any(m.role is Role.TOOL for m in request.messages)
    start, stop = (TICKS // 2, TICKS) if answered else (0, TICKS // 2)
    for tick in range(start, stop):
        await asyncio.sleep(PACE)
        yield f"t{tick} "
    if not answered:
        note = request.messages[-1].text or "note"
        yield ToolCallEnd(call=ToolCall(id="call-1", name="record", arguments={"note": note}))
    else:
        yield "done"


agent = Agent(
    FunctionModel(stream_function=talk),
    name="partition",
    tools=[record],
    checkpoint=RedisCheckpoint(
        os.environ["PARTITION_CHECKPOINT"],
        prefix=os.environ.get("PARTITION_PREFIX", "daimon:ckpt:"),
        lease=float(os.environ.get("PARTITION_RUN_LEASE", "2")),
    ),
)
