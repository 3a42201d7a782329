"""The worker: serves agents' workflows and activities on a task queue."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import NondeterminismError

from daimon.core.errors import BuilderError
from daimon.core.protocols import Promptable
from daimon.temporal._activities import HEARTBEAT, call_model, call_tool, run_promptable
from daimon.temporal._converter import data_converter
from daimon.temporal._registry import register, unregister
from daimon.temporal._workflow import AgentWorkflow, workflow_agent

__all__ = ("TOKEN_HEARTBEAT", "connect", "serving", "worker")

TOKEN_HEARTBEAT = 0.1
"""Seconds between two heartbeats of a streamed model call, at most (``stream_tokens``)."""

_PASSED_THROUGH = ("daimon", "docstring_parser", "fastjsonschema")


async def connect(
    target: str = "localhost:7233", *, namespace: str = "default", **options: Any
) -> Client:
    """A Temporal client that speaks daimon's codec (``options`` go to ``Client.connect``)."""
    return await Client.connect(
        target, namespace=namespace, data_converter=data_converter, **options
    )


def _by_name(
    agents: Iterable[Promptable] | Mapping[str, Promptable],
) -> dict[str, Promptable]:
    if isinstance(agents, Mapping):
        named = dict(agents)
    else:
        named = {}
        for agent in agents:
            if agent.name in named:
                raise BuilderError(f"two agents are named {agent.name!r}: give them distinct names")
            named[agent.name] = agent
    for name, agent in named.items():
        if not callable(getattr(agent, "prompt", None)):
            raise BuilderError(
                f"{name!r} is a {type(agent).__name__}: serve an Agent, a team or a flow"
            )
    if not named:
        raise BuilderError("a worker needs at least one agent")
    return named


def worker(
    client: Client,
    agents: Iterable[Promptable] | Mapping[str, Promptable],
    *,
    task_queue: str,
    deps: Any = None,
    fail_on_nondeterminism: bool = True,
    stream_tokens: bool = False,
    **options: Any,
) -> Worker:
    """A Temporal ``Worker`` running ``agents``' workflows and their model and tool activities.

    Args:
        client: From :func:`connect` (it must use daimon's data converter).
        agents: The agents, by their ``name`` (or a mapping of names to agents).
        task_queue: The queue runs are started on.
        deps: What tools get as ``ctx.deps`` when a run brings none.
        fail_on_nondeterminism: A run whose replay no longer matches its history (the agent
            changed between deploys) fails with the determinism error; with ``False`` its
            workflow task is retried instead, until a deploy that matches comes back.
        stream_tokens: Stream each model call, its text so far in the activity's heartbeat
            details, which ``TemporalRun.stream(tokens=True)`` reads before the call ends.
            Heartbeats are then sent every ``TOKEN_HEARTBEAT`` seconds at most, else every
            ``HEARTBEAT`` seconds (unless ``max_heartbeat_throttle_interval`` is given).
        options: Passed to ``temporalio.worker.Worker``.
    """
    if not isinstance(
        client.data_converter.payload_converter, type(data_converter.payload_converter)
    ):
        raise BuilderError("the Temporal client must use daimon's data converter: use connect()")
    named = _by_name(agents)
    register(task_queue, named, deps, workflow_agent, stream_tokens)
    # The SDK sends a heartbeat every 80% of the heartbeat timeout at most (24 s for 30 s):
    # daimon's are more frequent, so a cancellation reaches a running tool within seconds.
    throttle = timedelta(seconds=TOKEN_HEARTBEAT if stream_tokens else HEARTBEAT)
    options.setdefault("max_heartbeat_throttle_interval", throttle)
    options.setdefault("default_heartbeat_throttle_interval", throttle)
    # daimon's modules (and the libraries they load lazily) come from outside the sandbox:
    # they are the same code the plain run uses, and hold no per-run state of their own.
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*_PASSED_THROUGH)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=[call_model, call_tool, run_promptable],
        workflow_runner=SandboxedWorkflowRunner(restrictions=restrictions),
        workflow_failure_exception_types=[NondeterminismError] if fail_on_nondeterminism else [],
        **options,
    )


@asynccontextmanager
async def serving(
    client: Client,
    agents: Iterable[Promptable] | Mapping[str, Promptable],
    *,
    task_queue: str,
    deps: Any = None,
    stream_tokens: bool = False,
    **options: Any,
) -> AsyncIterator[Worker]:
    """Run a :func:`worker` for the block's duration."""
    named = _by_name(agents)
    running = worker(
        client, named, task_queue=task_queue, deps=deps, stream_tokens=stream_tokens, **options
    )
    try:
        async with running:
            yield running
    finally:
        unregister(task_queue, list(named))
