"""Durable agents on Temporal (extra ``temporal``): every run a workflow, every call an activity.

A worker serves agents::

    client = await connect("localhost:7233")
    async with serving(client, [agent], task_queue="agents"):
        ...

and any process starts, streams, approves, queries, cancels and awaits runs::

    run = await start_run(client, "agent", "Refund order 42", task_queue="agents")
    await run.approve(approval_id)  # later, from anywhere: TemporalRun.get(client, id)
    response = await run.result()

The command line: ``daimon temporal worker module:agent --task-queue agents``.
"""

from __future__ import annotations

from daimon.core.optional import require

require("temporalio", extra="temporal")

from daimon.temporal._activities import HEARTBEAT  # noqa: E402
from daimon.temporal._client import RunFailedError, TemporalRun, start_run  # noqa: E402
from daimon.temporal._converter import (  # noqa: E402
    DaimonJsonPayloadConverter,
    DaimonPayloadConverter,
    data_converter,
)
from daimon.temporal._promptable import TemporalAgent  # noqa: E402
from daimon.temporal._types import ActivityOptions, Decision, RunRequest, RunStatus  # noqa: E402
from daimon.temporal._worker import TOKEN_HEARTBEAT, connect, serving, worker  # noqa: E402
from daimon.temporal._workflow import WORKFLOW_NAME, AgentWorkflow  # noqa: E402

__all__ = (
    "ActivityOptions",
    "AgentWorkflow",
    "DaimonJsonPayloadConverter",
    "DaimonPayloadConverter",
    "Decision",
    "HEARTBEAT",
    "RunFailedError",
    "RunRequest",
    "RunStatus",
    "TOKEN_HEARTBEAT",
    "TemporalAgent",
    "TemporalRun",
    "WORKFLOW_NAME",
    "connect",
    "data_converter",
    "serving",
    "start_run",
    "worker",
)
