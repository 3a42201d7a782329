"""The one ReAct loop: an async generator of stream events that every entry point drains."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from daimon.agent._checkpointing import RunCheckpointer
from daimon.core.cancel import CancelToken
from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.errors import BudgetExceededError, MaxIterationsError, RunCancelled
from daimon.core.events import (
    Done,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    UsageEvent,
)
from daimon.core.messages import Message, ToolCall
from daimon.core.results import AgentResponse
from daimon.core.streaming import StreamAccumulator
from daimon.core.tools import ToolOutput
from daimon.cost import CostTracker
from daimon.guardrails import check_input, check_output
from daimon.state import RunState
from daimon.tools import RunContext

if TYPE_CHECKING:
    from daimon.agent._agent import Agent

__all__ = ("run_events",)

_FORWARDED = (TextDelta, ToolCallStart, ToolCallDelta, ToolCallEnd)


class _Interrupt:
    """Turns a token cancellation into a task cancellation, but only while the run awaits.

    The run's task is cancelled only while it is suspended inside the loop (a model call, tools),
    never while a streaming consumer is busy with its own awaits between events, and never from
    inside the run's own task (a tool cancelling its own run is seen at the next check).
    """

    __slots__ = ("armed", "fired", "task")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.armed = False
        self.fired = False

    def __call__(self) -> None:
        task = self.task
        if self.armed and task is not None and task is not asyncio.current_task():
            self.fired = True
            task.cancel()

    def absorb(self) -> bool:
        """Whether a CancelledError came from the token; if so, undo the task's cancel request."""
        if not self.fired:
            return False
        self.fired = False
        if self.task is not None:
            self.task.uncancel()
        return True


async def run_events(
    agent: Agent,
    prompt: str | Message | None,
    *,
    stream: bool,
    session_id: str | None,
    run_id: str | None,
    deps: Any,
    cancel: CancelToken | None,
) -> AsyncIterator[StreamEvent]:
    """Run ``agent`` on ``prompt``, yielding events; the last is ``Done`` with the response.

    With a checkpoint configured and a ``run_id`` that has one, the run continues from its last
    checkpoint instead (``prompt`` may then be ``None``).
    """
    run_id = run_id or uuid.uuid4().hex
    memory = agent.memory if session_id is not None else None
    state = RunState(
        run_id=run_id,
        agent_name=agent.name,
        messages=[],
        session_id=session_id,
        deps=deps,
        cancel=cancel,
    )
    if cancel is None:
        cancel = CancelToken()
    else:
        cancel.raise_if_cancelled()
    state.cancel = cancel
    interrupt = _Interrupt(asyncio.current_task())
    detach = cancel.on_cancel(interrupt)
    checkpointer = RunCheckpointer(agent.checkpoint, state) if agent.checkpoint else None
    try:
        messages = state.messages
        pending: tuple[ToolCall, ...] = ()
        completed: dict[str, ToolOutput] = {}
        restored = await checkpointer.restore() if checkpointer is not None else None
        if restored is not None:
            if restored.finished is not None:
                yield Done(response=restored.finished)
                return
            pending, completed = restored.pending, restored.completed
            new_start, memory_mark = restored.new_start, restored.memory_mark
        else:
            if prompt is None:
                raise ValueError(f"run {run_id!r} has no checkpoint to resume; give a prompt")
            history: Sequence[Message] = (
                await memory.get_messages(session_id) if memory is not None else ()  # type: ignore[arg-type]
            )
            if isinstance(prompt, Message):
                user = prompt
            else:
                text = prompt
                if agent.input_guardrails:
                    text = await check_input(agent.input_guardrails, text, history)
                user = Message.user(text)
            system = await agent.system_message(state)
            if system is not None:
                messages.append(system)
            messages.extend(agent.examples)
            messages.extend(history)
            new_start = memory_mark = len(messages)
            messages.append(user)
        tracker = CostTracker(agent.cost_model) if agent.cost_model is not None else None
        base_cost = state.cost
        hooks = agent.hooks
        middleware = agent.middleware
        model = agent.model
        last_output_tokens = 0

        while True:
            if not pending:
                # ----------------------------------------------------------- the model's turn
                if cancel.cancelled:
                    raise RunCancelled(cancel.reason)
                if state.iteration >= agent.max_iterations:
                    raise MaxIterationsError(agent.max_iterations)
                if agent.max_budget is not None:
                    _check_budget(agent, tracker, state, last_output_tokens)
                for hook in hooks:
                    await hook.on_iteration_start(state)
                request = ChatRequest(
                    messages=tuple(messages),
                    tools=agent.tools.specs,
                    temperature=agent.temperature,
                    max_tokens=agent.max_tokens,
                    settings=agent.model_settings,
                )
                response: ChatResponse | None = None
                if middleware:
                    request, response = await middleware.on_request(request, state)
                if response is None:
                    interrupt.armed = True
                    try:
                        if stream:
                            accumulator = StreamAccumulator()
                            add = accumulator.add
                            async for event in model.generate_stream(request):
                                add(event)
                                if isinstance(event, _FORWARDED):
                                    interrupt.armed = False
                                    yield event
                                    interrupt.armed = True
                            response = accumulator.response()
                        else:
                            response = await model.generate(request)
                    except asyncio.CancelledError:
                        if interrupt.absorb():
                            raise RunCancelled(cancel.reason) from None
                        raise
                    finally:
                        interrupt.armed = False
                state.iteration += 1
                usage = response.usage
                state.usage = state.usage + usage
                last_output_tokens = usage.output_tokens
                call_cost = 0.0
                if tracker is not None:
                    call_cost = tracker.record(response.model or model.model_name, usage)
                    state.cost = base_cost + tracker.total
                yield UsageEvent(usage=usage, cost=call_cost)
                if middleware:
                    response = await middleware.on_response(response, state)
                for hook in hooks:
                    await hook.on_model_response(response, state)
                assistant = response.message
                messages.append(assistant)
                pending = assistant.tool_calls
                if not pending:
                    text = assistant.text
                    if agent.output_guardrails:
                        text = await check_output(agent.output_guardrails, response)
                    if memory is not None:
                        await memory.add_messages(session_id, messages[memory_mark:])  # type: ignore[arg-type]
                        memory_mark = len(messages)
                    result = AgentResponse(
                        text=text,
                        messages=tuple(messages[new_start:]),
                        iterations=state.iteration,
                        usage=state.usage,
                        cost=state.cost,
                        run_id=run_id,
                        session_id=session_id,
                    )
                    if checkpointer is not None:
                        await checkpointer.finish(result, new_start, memory_mark)
                    yield Done(
                        stop_reason=response.stop_reason, model=response.model, response=result
                    )
                    return
                if checkpointer is not None:
                    await checkpointer.save(pending, completed, new_start, memory_mark)

            # --------------------------------------------------------------- the tools' turn
            calls = pending
            interrupt.armed = True
            try:
                results = await _run_tools(
                    agent, calls, state, cancel, completed, checkpointer, new_start, memory_mark
                )
            except asyncio.CancelledError:
                if interrupt.absorb():
                    raise RunCancelled(cancel.reason) from None
                raise
            finally:
                interrupt.armed = False
            for call, (output, duration) in zip(calls, results, strict=True):
                messages.append(
                    Message.tool(call.id, output.content, name=call.name, is_error=output.is_error)
                )
                yield ToolResult(call_id=call.id, name=call.name, output=output, duration=duration)
            pending = ()
            completed = {}
            if memory is not None:
                await memory.add_messages(session_id, messages[memory_mark:])  # type: ignore[arg-type]
                memory_mark = len(messages)
            if checkpointer is not None:
                await checkpointer.save((), completed, new_start, memory_mark)
            for hook in hooks:
                await hook.on_iteration_end(state)
    except Exception as exc:
        for hook in agent.hooks:
            await hook.on_error(exc, state)
        raise
    finally:
        detach()


def _check_budget(
    agent: Agent, tracker: CostTracker | None, state: RunState, last_output: int
) -> None:
    """Refuse a call whose worst case could take the run past its budget."""
    limit = agent.max_budget
    assert limit is not None and tracker is not None
    spent = state.cost
    messages = state.messages
    input_tokens = sum(len(m.text) for m in messages) // 4 + 4 * len(messages)
    output_tokens = agent.max_tokens if agent.max_tokens is not None else last_output
    estimate = tracker.estimate(agent.model.model_name, input_tokens, output_tokens)
    if spent >= limit or spent + estimate > limit:
        raise BudgetExceededError(spent, limit)


async def _run_tools(
    agent: Agent,
    calls: Sequence[ToolCall],
    state: RunState,
    cancel: CancelToken,
    completed: dict[str, ToolOutput],
    checkpointer: RunCheckpointer | None,
    new_start: int,
    memory_mark: int,
) -> list[tuple[ToolOutput, float]]:
    """Run one turn's calls concurrently; results keep the calls' order.

    Calls whose results a checkpoint already holds are not run again.
    """

    async def one(call: ToolCall) -> tuple[ToolOutput, float]:
        done = completed.get(call.id)
        if done is not None:
            return done, 0.0
        output, duration = await _run_one(agent, call, state, cancel)
        if checkpointer is not None:
            completed[call.id] = output
            await checkpointer.save(calls, completed, new_start, memory_mark)
        return output, duration

    if len(calls) == 1:
        return [await one(calls[0])]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(call)) for call in calls]
    except BaseExceptionGroup as failures:
        # Tools report their own errors as results, so only a hook or middleware failure (or the
        # process going down) lands here: surface a lone error as itself, not as a group.
        if len(failures.exceptions) == 1:
            raise failures.exceptions[0] from failures
        raise
    return [task.result() for task in tasks]


async def _run_one(
    agent: Agent, call: ToolCall, state: RunState, cancel: CancelToken
) -> tuple[ToolOutput, float]:
    started = time.perf_counter()
    for hook in agent.hooks:
        await hook.on_tool_call(call, state)
    output: ToolOutput | None = None
    if agent.middleware:
        replaced = await agent.middleware.on_tool_call(call, state)
        if isinstance(replaced, ToolOutput):
            output = replaced
        else:
            call = replaced
    if output is None:
        ctx: RunContext[Any] = RunContext(
            run_id=state.run_id,
            deps=state.deps,
            cancel=cancel,
            usage=state.usage,
            call_id=call.id,
            tool_name=call.name,
            session_id=state.session_id,
            iteration=state.iteration,
        )
        output = await agent.tools.run(
            call,
            ctx,
            validate=agent.validate_tool_inputs,
            retry_policy=agent.tool_retry_policy,
        )
    for hook in agent.hooks:
        await hook.on_tool_result(call, output, state)
    return output, time.perf_counter() - started
