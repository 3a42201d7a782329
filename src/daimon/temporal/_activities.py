"""The activities: one model call, one tool call, run by the worker on the real agent.

Temporal owns the retries: a model wrapped in :class:`~daimon.models.retry.RetryingModel` is
called without it here, and the agent's ``tool_retry_policy`` decides whether a tool's error is
thrown to Temporal (retried by the activity's policy) or returned to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from temporalio import activity
from temporalio.exceptions import ApplicationError

from daimon.core.chat import ChatRequest, ChatResponse, Usage
from daimon.core.codec import from_data, to_data
from daimon.core.errors import ModelError
from daimon.core.events import TextDelta
from daimon.core.protocols import Model
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput
from daimon.kit.streaming import StreamAccumulator
from daimon.models.retry import RetryingModel
from daimon.orchestration._common import agent_caller
from daimon.temporal._flow_agents import AgentWorkflows
from daimon.temporal._registry import Served, lookup
from daimon.temporal._types import ModelCallInput, PromptInput, ToolCallInput, ToolCallResult
from daimon.tools import EndRun, RunContext
from daimon.tools._retry import ToolRetryPolicy

__all__ = (
    "MODEL_ACTIVITY",
    "PROMPT_ACTIVITY",
    "TOOL_ACTIVITY",
    "call_model",
    "call_tool",
    "portable",
    "run_promptable",
)

MODEL_ACTIVITY = "daimon.model_call"
TOOL_ACTIVITY = "daimon.tool_call"
PROMPT_ACTIVITY = "daimon.prompt"
T = TypeVar("T")


def _served(agent: str) -> Served:
    return lookup(activity.info().task_queue, agent)


@activity.defn(name=MODEL_ACTIVITY)
async def call_model(call: ModelCallInput) -> ChatResponse:
    """Call the agent's model once (Temporal retries what a provider marks retryable)."""
    served = _served(call.agent)
    agent = served.runner
    assert agent is not None
    model = _unretried(agent.model)
    try:
        if not served.stream_tokens:
            return await _heartbeating(model.generate(call.request), None)
        shown = _Shown()
        return await _heartbeating(_streamed(model, call.request, shown), None, shown.details)
    except ModelError as exc:
        raise ApplicationError(
            str(exc), type=type(exc).__name__, non_retryable=not exc.retryable
        ) from exc


class _Shown:
    """The text a streamed model call has produced so far: its heartbeats' details."""

    __slots__ = ("text",)

    def __init__(self) -> None:
        self.text = ""

    def details(self) -> tuple[str]:
        return (self.text,)


async def _streamed(model: Model, request: ChatRequest, shown: _Shown) -> ChatResponse:
    """Stream the call, heartbeating the text so far at each delta (the SDK throttles them).

    A client reads the details of the call's pending activity (``TemporalRun.stream`` with
    ``tokens=True``); the response the activity returns stays what the workflow records.
    """
    accumulator = StreamAccumulator()
    async for event in model.generate_stream(request):
        accumulator.add(event)
        if isinstance(event, TextDelta) and event.text:
            shown.text += event.text
            activity.heartbeat(shown.text)
    return accumulator.response()


@activity.defn(name=PROMPT_ACTIVITY)
async def run_promptable(call: PromptInput) -> AgentResponse[Any]:
    """Run a team or flow to its answer in one activity (it cannot pause for approvals).

    The agents its nodes prompt that this worker serves run as workflows of their own
    (:class:`~daimon.temporal._flow_agents.AgentWorkflows`).
    """
    served = _served(call.agent).agent
    taken = agent_caller.set(AgentWorkflows.for_activity(call.options))
    try:  # the context is copied into the task _heartbeating makes: set before it
        work = served.prompt(call.prompt, run_id=call.run_id, instructions=call.instructions)
        response = await _heartbeating(work, None)
    finally:
        agent_caller.reset(taken)
    return portable(response.require_finished("a team or flow on Temporal"))


def portable(response: AgentResponse[Any]) -> AgentResponse[Any]:
    """The response with its ``output`` as JSON data (a typed answer becomes its fields)."""
    output: Any = response.output
    dump: Callable[..., Any] | None = getattr(output, "model_dump", None)
    data = dump(mode="json") if dump is not None else to_data(output)
    if data is output:
        return response
    return dataclasses.replace(response, output=data)


@activity.defn(name=TOOL_ACTIVITY)
async def call_tool(call: ToolCallInput) -> ToolCallResult:
    """Run one tool call through the agent's registry (validation, timeout) on a fresh context."""
    served = _served(call.agent)
    agent = served.runner
    assert agent is not None
    reported: list[tuple[Usage, float]] = []
    ctx: RunContext[Any] = RunContext(
        run_id=call.run_id,
        agent_name=agent.name,
        deps=_deps(served, call.deps),
        messages=list(call.messages),
        usage=call.usage,
        cost=call.cost,
        iteration=call.iteration,
        call_id=call.call.id,
        tool_name=call.call.name,
        on_usage=lambda usage, cost: reported.append((usage, cost)),
    )
    policy = agent.tool_retry_policy
    failures: list[Exception] = []
    capture = cast(ToolRetryPolicy, _Capture(failures)) if policy is not None else None
    try:
        output = await _heartbeating(
            agent.tools.run(
                call.call, ctx, validate=agent.validate_tool_inputs, retry_policy=capture
            ),
            ctx,
        )
    except EndRun as end:
        return _ended(end, reported)
    if policy is not None and failures and _temporal_retries(policy, failures[-1]):
        raise ApplicationError(f"tool {call.call.name!r} failed: {failures[-1]}") from failures[-1]
    usage, cost = _sum(reported)
    return ToolCallResult(output=output, usage=usage, cost=cost)


class _Capture:
    """Read by the registry as a retry policy: retries nothing in-process, keeps the error."""

    max_retries = 1

    def __init__(self, failures: list[Exception]) -> None:
        self._failures = failures

    def is_retryable(self, error: BaseException) -> bool:
        if isinstance(error, Exception):
            self._failures.append(error)
        return False


def _temporal_retries(policy: ToolRetryPolicy, error: Exception) -> bool:
    """Whether Temporal should run the tool again: retryable, and attempts are left."""
    try:
        retryable = policy.is_retryable(error)
    except Exception:  # a faulty retry_on predicate: the model reads the error
        return False
    return retryable and activity.info().attempt <= policy.max_retries


def _unretried(model: Model) -> Model:
    while isinstance(model, RetryingModel):
        model = model.model
    return model


def _deps(served: Served, data: Any) -> Any:
    if data is None:
        return served.deps
    deps_type = getattr(served.runner, "deps_type", None)
    return data if deps_type is None else from_data(deps_type, data)


def _ended(end: EndRun, reported: list[tuple[Usage, float]]) -> ToolCallResult:
    usage, cost = _sum(reported)
    return ToolCallResult(
        output=ToolOutput.text(end.text or "Done."),
        usage=usage,
        cost=cost,
        ended=True,
        end_text=end.text,
        end_output=to_data(end.output),
    )


def _sum(reported: list[tuple[Usage, float]]) -> tuple[Usage | None, float]:
    if not reported:
        return None, 0.0
    usage = reported[0][0]
    for more, _ in reported[1:]:
        usage = usage + more
    return usage, sum(cost for _, cost in reported)


async def _heartbeating(
    work: Awaitable[T],
    ctx: RunContext[Any] | None,
    details: Callable[[], tuple[Any, ...]] | None = None,
) -> T:
    """Await ``work`` while heartbeating; a cancelled activity cancels it (and ``ctx.cancel``).

    Each heartbeat carries ``details()`` when given (a streamed model call's text so far).
    """
    task = asyncio.ensure_future(work)
    timeout = activity.info().heartbeat_timeout
    every = timeout.total_seconds() / 3 if timeout else 10.0
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            activity.heartbeat(*(details() if details is not None else ()))
    except asyncio.CancelledError:
        if ctx is not None:
            ctx.cancel.cancel("the Temporal activity was cancelled")
        task.cancel()
        with contextlib.suppress(BaseException):  # the cancellation is what is reported
            await task
        raise
