"""The flow the flow-worker tests serve and work (not a test module).

A DAG of two nodes: ``record`` appends a line (the prompt and its process id) to the file
``REPLICA_LEDGER`` names, as a tool with a side effect would; ``wait`` then answers, after 30 s
for a prompt that starts with ``slow``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from daimon.orchestration import DagBuilder, PromptableFlow

LEDGER = os.environ.get("REPLICA_LEDGER", os.devnull)


def record(inputs: Mapping[str, Any]) -> str:
    with open(LEDGER, "a", encoding="utf-8") as ledger:
        ledger.write(f"{inputs['input']} {os.getpid()}\n")
    return f"recorded {inputs['input']}"


async def wait(inputs: Mapping[str, Any]) -> str:
    if inputs["record"].startswith("recorded slow"):
        await asyncio.sleep(30)
    return f"after {inputs['record']}"


flow = PromptableFlow(
    DagBuilder("ledgered")
    .add_node("record", record)
    .add_node("wait", wait, depends_on=["record"])
    .build()
)
