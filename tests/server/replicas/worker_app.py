"""The agent the worker tests run in ``daimon worker`` processes (not a test module).

As :mod:`replica_app`: its model streams ``REPLICA_TICKS`` text deltas (default 20), one every
``REPLICA_PACE`` seconds (default 0.1), calls the tool ``record`` half-way, and ends with
"done"; ``record`` (``effect="once"``) appends a line to the file ``REPLICA_LEDGER`` names. Its
checkpoint is in PostgreSQL (``WORKER_CHECKPOINT``, tables prefixed ``WORKER_PREFIX``; a run's
lease ``WORKER_RUN_LEASE`` seconds, default 2), so a task another worker takes over resumes where
the lost one stopped, and the tool never runs twice.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

from daimon import Agent, ChatRequest, Role, ToolCall, tool
from daimon.checkpoint import PostgresCheckpoint
from daimon.core.events import StreamEvent, ToolCallEnd
from daimon.models import FunctionModel

TICKS = int(os.environ.get("REPLICA_TICKS", "20"))
PACE = float(os.environ.get("REPLICA_PACE", "0.1"))
LEDGER = os.environ.get("REPLICA_LEDGER", os.devnull)


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
    name="replica",
    tools=[record],
    checkpoint=PostgresCheckpoint(
        os.environ["WORKER_CHECKPOINT"],
        prefix=os.environ.get("WORKER_PREFIX", "daimon_"),
        lease=float(os.environ.get("WORKER_RUN_LEASE", "2")),
    ),
)
