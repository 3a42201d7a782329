"""The agent the replica tests serve from ``daimon serve`` processes (not a test module).

Its model (given a client tool ``lookup``, first calls it) streams ``REPLICA_TICKS`` text
deltas (env, default 20), one every ``REPLICA_PACE`` seconds (default 0.05), calls the tool
``record`` half-way, and ends with "done". ``record`` is an effect ("once"): it appends a line
to the file ``REPLICA_LEDGER`` names, so a test can count how often it ran, whichever process
ran it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

from daimon import Agent, ChatRequest, Role, ToolCall, tool
from daimon.core.events import StreamEvent, ToolCallEnd
from daimon.models import FunctionModel

TICKS = int(os.environ.get("REPLICA_TICKS", "20"))
PACE = float(os.environ.get("REPLICA_PACE", "0.05"))
LEDGER = os.environ.get("REPLICA_LEDGER", os.devnull)


@tool(effect="once")
def record(note: str) -> str:
    """Write a note in the ledger (runs once per call, never again)."""
    with open(LEDGER, "a", encoding="utf-8") as ledger:
        ledger.write(f"{note}\n")
    return "recorded"


async def talk(request: ChatRequest) -> AsyncIterator[StreamEvent | str]:
    answered = any(m.role is Role.TOOL for m in request.messages)
    if not answered and any(spec.name == "lookup" for spec in request.tools):
        # A client's tool (Responses function tools): ask the client, then go on as below.
        yield ToolCallEnd(call=ToolCall(id="call-l", name="lookup", arguments={"q": "x"}))
        return
    start, stop = (TICKS // 2, TICKS) if answered else (0, TICKS // 2)
    for tick in range(start, stop):
        await asyncio.sleep(PACE)
        yield f"t{tick} "
    if not answered:
        note = request.messages[-1].text or "note"
        yield ToolCallEnd(call=ToolCall(id="call-1", name="record", arguments={"note": note}))
    else:
        yield "done"


agent = Agent(FunctionModel(stream_function=talk), name="replica", tools=[record])
