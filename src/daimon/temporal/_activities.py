"""The activities: one model call, one tool call, run by the worker on the real agent.

Temporal owns the retries: a model wrapped in :class:`~daimon.models.retry.RetryingModel` is
called without it here, and the agent's ``tool_retry_policy`` decides whether a tool's error is
thrown to Temporal (retried by the activity's policy) or returned to the model. A ``once`` or
``ask`` tool's activity has one attempt: its errors are retried here, by that policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import operator
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from temporalio import activity
from temporalio.exceptions import ApplicationError

from daimon.agent._effects import effect_of
from daimon.core.chat import ChatRequest, ChatResponse, Usage
from daimon.core.checkpoints import Effect
from daimon.core.codec import from_data, to_data
from daimon.core.errors import ModelError, SerializationError
from daimon.core.events import TextDelta
from daimon.core.messages import ToolCall
from daimon.core.protocols import Model
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput, json_data
from daimon.kit.streaming import StreamAccumulator
from daimon.models.retry import RetryingModel
from daimon.orchestration._common import agent_caller
from daimon.temporal._flow_agents import AgentWorkflows
from daimon.temporal._registry import Served, lookup
from daimon.temporal._types import ModelCallInput, PromptInput, ToolCallInput, ToolCallResult
from daimon.tools import EndRun, RunContext
from daimon.tools._retry import ToolRetryPolicy

__all__ = (
    "HEARTBEAT",
    "MODEL_ACTIVITY",
    "PROMPT_ACTIVITY",
    "TOOL_ACTIVITY",
    "call_model",
    "call_tool",
    "portable",
    "run_promptable",
    "storable",
)

HEARTBEAT = 2.0
"""Seconds between two heartbeats of a running call, at most. Temporal tells an activity it is
cancelled in its answer to a heartbeat, so this is how soon a cancelled run reaches its tool."""
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
            response = await _heartbeating(model.generate(call.request), None)
        else:
            shown = _Shown()
            work = _streamed(model, call.request, shown)
            response = await _heartbeating(work, None, shown.details)
    except ModelError as exc:
        raise ApplicationError(
            str(exc), type=type(exc).__name__, non_retryable=not exc.retryable
        ) from exc
    return _json_arguments(response)


def _json_arguments(response: ChatResponse) -> ChatResponse:
    """The response, each call's arguments that JSON cannot hold (NaN, an object) as raw text.

    That is the call a provider makes of argument text that is not JSON (``ToolCall.from_json``
    keeps it raw): the model is told its arguments were not a valid JSON object.
    """
    calls = response.message.tool_calls
    carried = tuple(map(_as_json, calls))
    if all(map(operator.is_, carried, calls)):
        return response
    message = dataclasses.replace(response.message, tool_calls=carried)
    return dataclasses.replace(response, message=message)


def _as_json(call: ToolCall) -> ToolCall:
    arguments = call.arguments
    if isinstance(arguments, str):
        return call
    try:
        json.dumps(to_data(arguments), allow_nan=False)
    except ValueError:  # NaN, an infinity; SerializationError: an object
        return dataclasses.replace(call, arguments=json.dumps(arguments, default=repr))
    return call


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
    """The response with its ``output`` as JSON data (see :func:`storable`)."""
    output: Any = response.output
    data = storable(output)
    if data is output:
        return response
    return dataclasses.replace(response, output=data)


def storable(value: Any) -> Any:
    """``value`` as JSON data Temporal carries, as close to it as JSON allows.

    A typed value becomes its fields (a pydantic model's ``model_dump``, a dataclass through
    daimon's codec); what JSON cannot hold is then made strict JSON as a tool result's data is
    in process (:func:`daimon.core.tools.json_data`: NaN becomes ``"nan"``, an object its
    ``str()``). Text is kept as it is (the payload carries a lone surrogate escaped).
    """
    if value is None or isinstance(value, str):
        return value
    dump: Callable[..., Any] | None = getattr(value, "model_dump", None)
    if dump is not None:
        value = dump(mode="json")
    with contextlib.suppress(SerializationError):  # not a daimon value: json_data reads it
        value = to_data(value)
    return json_data(value)


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
    retries = _retries(policy, effect_of(agent, call.call), failures)
    try:
        output = await _heartbeating(
            agent.tools.run(
                call.call, ctx, validate=agent.validate_tool_inputs, retry_policy=retries
            ),
            ctx,
        )
    except EndRun as end:
        return _ended(end, reported)
    if policy is not None and failures and _temporal_retries(policy, failures[-1]):
        raise ApplicationError(f"tool {call.call.name!r} failed: {failures[-1]}") from failures[-1]
    usage, cost = _sum(reported)
    return ToolCallResult(output=output, usage=usage, cost=cost)


def _retries(
    policy: ToolRetryPolicy | None, effect: Effect, failures: list[Exception]
) -> ToolRetryPolicy | None:
    """The retry policy the registry applies to a tool without one of its own.

    Temporal retries a tool's error (the registry keeps it in ``failures``), except a ``once``
    or ``ask`` tool's: its activity has one attempt (a lost one must not run again), so its own
    errors, which mean it finished, are retried here, in that attempt.
    """
    if policy is None or effect in ("once", "ask"):
        return policy
    return cast(ToolRetryPolicy, _Capture(failures))


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
    """The result that ends the run; its text is the one a plain run shows (the value's repr)."""
    usage, cost = _sum(reported)
    output = storable(end.output)
    text = end.text if end.text is not None or output is end.output else repr(end.output)
    return ToolCallResult(
        output=ToolOutput.text(end.text or "Done."),
        usage=usage,
        cost=cost,
        ended=True,
        end_text=text,
        end_output=output,
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
    every = min(timeout.total_seconds() / 3, HEARTBEAT) if timeout else HEARTBEAT
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
