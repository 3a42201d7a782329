"""The one ReAct loop: an async generator of stream events that every entry point drains."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from daimon.agent._checkpointing import RunCheckpointer
from daimon.agent._output import OUTPUT_TOOL, InvalidOutput, OutputSpec
from daimon.core.cancel import CancelToken
from daimon.core.chat import ChatRequest, ChatResponse, Usage
from daimon.core.checkpoints import CheckpointState
from daimon.core.errors import (
    BudgetExceededError,
    MaxIterationsError,
    OutputValidationError,
    RunCancelled,
)
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
from daimon.core.results import AgentResponse, ApprovalDecision, ApprovalRequest
from daimon.core.streaming import StreamAccumulator
from daimon.core.tools import ToolOutput
from daimon.cost import CostTracker
from daimon.guardrails import check_input, check_output
from daimon.state import RunState
from daimon.tools import EndRun, RunContext

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


class _Ended(Exception):
    """A tool raised EndRun; carries the call it came from (internal)."""

    def __init__(self, end: EndRun, call: ToolCall) -> None:
        super().__init__(str(end))
        self.end = end
        self.call = call


async def run_events(
    agent: Agent,
    prompt: str | Message | None,
    *,
    stream: bool,
    session_id: str | None,
    run_id: str | None,
    deps: Any,
    cancel: CancelToken | None,
    resume: CheckpointState | None = None,
    decisions: Mapping[str, ApprovalDecision] | None = None,
) -> AsyncIterator[StreamEvent]:
    """Run ``agent`` on ``prompt``, yielding events; the last is ``Done`` with the response.

    A run continues instead of starting when ``resume`` holds a paused run's state, or when the
    agent has a checkpoint store holding ``run_id``; ``decisions`` answer pending approvals.
    """
    run_id = run_id or (resume.run_id if resume is not None else os.urandom(16).hex())
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
    checkpointer = RunCheckpointer(agent.checkpoint, state)
    decisions = decisions or {}
    output = agent.output
    try:
        messages = state.messages
        pending: tuple[ToolCall, ...] = ()
        completed: dict[str, ToolOutput] = {}
        output_attempts = 0
        restored = None
        if resume is not None or agent.checkpoint is not None:
            restored = await checkpointer.restore(resume)
        if restored is not None:
            if restored.finished is not None:
                yield Done(response=restored.finished)
                return
            pending, completed = restored.pending, restored.completed
            new_start, memory_mark = restored.new_start, restored.memory_mark
            output_attempts = restored.output_attempts
            session_id = state.session_id
            memory = agent.memory if session_id is not None else None
        else:
            if prompt is None:
                raise ValueError(f"run {run_id!r} has no saved state to resume; give a prompt")
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
        rollup = _Rollup(state, tracker)
        hooks = agent.hooks
        for hook in hooks:
            await hook.on_run_start(state)
        middleware = agent.middleware
        model = agent.model
        tools = agent.tools.specs
        response_format = None
        if output is not None:
            if agent.native_output:
                response_format = output.response_format
            else:
                tools = (*tools, output.tool_spec)
        last_output_tokens = 0

        def marks() -> dict[str, int]:
            return {
                "new_start": new_start,
                "memory_mark": memory_mark,
                "output_attempts": output_attempts,
            }

        def finish(text: str, value: Any) -> AgentResponse:
            return AgentResponse(
                text=text,
                messages=tuple(messages[new_start:]),
                iterations=state.iteration,
                usage=state.usage,
                cost=state.cost,
                run_id=run_id,
                session_id=session_id,
                output=value,
            )

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
                    tools=tools,
                    temperature=agent.temperature,
                    max_tokens=agent.max_tokens,
                    response_format=response_format,
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
                last_output_tokens = usage.output_tokens
                call_cost = rollup.model_call(response.model or model.model_name, usage)
                yield UsageEvent(usage=usage, cost=call_cost)
                if middleware:
                    response = await middleware.on_response(response, state)
                for hook in hooks:
                    await hook.on_model_response(response, state)
                assistant = response.message
                messages.append(assistant)
                pending = assistant.tool_calls

                # ------------------------------------------------------- structured output
                if output is not None:
                    answer_call, value, failure = _read_output(output, assistant)
                    if failure is None and (answer_call is not None or not pending):
                        text = answer_call.arguments_json if answer_call else assistant.text
                        for call in pending:  # close every call so the history stays valid
                            note = "Final answer accepted." if call is answer_call else "Not run."
                            messages.append(Message.tool(call.id, note, name=call.name))
                        pending = ()
                        if memory is not None:
                            await memory.add_messages(session_id, messages[memory_mark:])  # type: ignore[arg-type]
                            memory_mark = len(messages)
                        result = finish(text, value)
                        await checkpointer.finish(result, marks())
                        for hook in hooks:
                            await hook.on_run_end(result, state)
                        yield Done(
                            stop_reason=response.stop_reason, model=response.model, response=result
                        )
                        return
                    if failure is not None:
                        output_attempts += 1
                        if output_attempts > agent.output_retries:
                            raise OutputValidationError([failure], output_attempts)
                        if answer_call is not None:
                            completed[answer_call.id] = ToolOutput.error(
                                f"Error: invalid final result: {failure}. Call {OUTPUT_TOOL} "
                                "again with corrected arguments."
                            )
                        else:
                            messages.append(
                                Message.user(_retry_prompt(failure, agent.native_output))
                            )
                            continue

                if not pending:
                    text = assistant.text
                    if agent.output_guardrails:
                        text = await check_output(agent.output_guardrails, response)
                    if memory is not None:
                        await memory.add_messages(session_id, messages[memory_mark:])  # type: ignore[arg-type]
                        memory_mark = len(messages)
                    result = finish(text, None)
                    await checkpointer.finish(result, marks())
                    for hook in hooks:
                        await hook.on_run_end(result, state)
                    yield Done(
                        stop_reason=response.stop_reason, model=response.model, response=result
                    )
                    return
                await checkpointer.save(pending, completed, marks())

            # --------------------------------------------------------------- the tools' turn
            calls = pending
            waiting = _apply_decisions(agent, calls, completed, decisions)
            runnable = [c for c in calls if c.id not in completed and c not in waiting]
            durations: dict[str, float] = {}
            ended: _Ended | None = None
            if runnable:
                interrupt.armed = True
                try:
                    await _run_tools(
                        agent, runnable, state, cancel, completed, durations, checkpointer,
                        calls, marks(), rollup,
                    )  # fmt: skip
                except _Ended as exc:
                    ended = exc
                except asyncio.CancelledError:
                    if interrupt.absorb():
                        raise RunCancelled(cancel.reason) from None
                    raise
                except RunCancelled:
                    interrupt.absorb()
                    raise
                finally:
                    interrupt.armed = False
            if waiting:
                await checkpointer.save(calls, completed, marks())
                paused = AgentResponse(
                    text="",
                    messages=tuple(messages[new_start:]),
                    iterations=state.iteration,
                    usage=state.usage,
                    cost=state.cost,
                    run_id=run_id,
                    session_id=session_id,
                    pending_approvals=tuple(
                        ApprovalRequest(id=c.id, call=c, run_id=run_id) for c in waiting
                    ),
                    state=checkpointer.snapshot(calls, completed, marks()),
                )
                for hook in hooks:
                    await hook.on_run_end(paused, state)
                yield Done(response=paused)
                return
            for call in calls:
                if ended is not None and call is ended.call:
                    result_output = ToolOutput.text(ended.end.text or "Done.")
                else:
                    result_output = completed.get(call.id) or ToolOutput.error(
                        "Not run: the run ended."
                    )
                messages.append(
                    Message.tool(
                        call.id,
                        result_output.content,
                        name=call.name,
                        is_error=result_output.is_error,
                    )
                )
                if call.id in durations or (ended is not None and call is ended.call):
                    yield ToolResult(
                        call_id=call.id,
                        name=call.name,
                        output=result_output,
                        duration=durations.get(call.id, 0.0),
                    )
            pending = ()
            completed = {}
            if memory is not None:
                await memory.add_messages(session_id, messages[memory_mark:])  # type: ignore[arg-type]
                memory_mark = len(messages)
            if ended is not None:
                end = ended.end
                text = end.text if end.text is not None else _as_text(end.output)
                result = finish(text, end.output)
                await checkpointer.finish(result, marks())
                for hook in hooks:
                    await hook.on_run_end(result, state)
                yield Done(response=result)
                return
            await checkpointer.save((), completed, marks())
            for hook in hooks:
                await hook.on_iteration_end(state)
    except Exception as exc:
        for hook in agent.hooks:
            await hook.on_error(exc, state)
        raise
    finally:
        detach()


class _Rollup:
    """Keeps the run's usage and cost: its own model calls plus what tools report."""

    __slots__ = ("_extra_cost", "_state", "_tracker")

    def __init__(self, state: RunState, tracker: CostTracker | None) -> None:
        self._state = state
        self._tracker = tracker
        self._extra_cost = state.cost  # a resumed run starts from its saved cost

    def model_call(self, model_id: str, usage: Usage) -> float:
        state = self._state
        state.usage = state.usage + usage
        if self._tracker is None:
            return 0.0
        cost = self._tracker.record(model_id, usage)
        state.cost = self._extra_cost + self._tracker.total
        return cost

    def report(self, usage: Usage, cost: float) -> None:
        """Usage and cost of nested work (a sub-agent) reported by a tool."""
        state = self._state
        state.usage = state.usage + usage
        self._extra_cost += cost
        state.cost = self._extra_cost + (self._tracker.total if self._tracker else 0.0)


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


def _apply_decisions(
    agent: Agent,
    calls: Sequence[ToolCall],
    completed: dict[str, ToolOutput],
    decisions: Mapping[str, ApprovalDecision],
) -> list[ToolCall]:
    """Record rejections as results; the calls still waiting for a decision."""
    waiting: list[ToolCall] = []
    for call in calls:
        if call.id in completed or not agent.requires_approval(call):
            continue
        decision = decisions.get(call.id)
        if decision is None:
            waiting.append(call)
        elif not decision.approved:
            reason = f": {decision.reason}" if decision.reason else "."
            completed[call.id] = ToolOutput.error(f"The user rejected this call{reason}")
    return waiting


async def _run_tools(
    agent: Agent,
    calls: Sequence[ToolCall],
    state: RunState,
    cancel: CancelToken,
    completed: dict[str, ToolOutput],
    durations: dict[str, float],
    checkpointer: RunCheckpointer,
    turn: Sequence[ToolCall],
    marks: dict[str, int],
    rollup: _Rollup,
) -> None:
    """Run calls concurrently, recording each result in ``completed`` (and its checkpoint)."""
    save = checkpointer.enabled

    async def one(call: ToolCall) -> None:
        try:
            result, duration = await _run_one(agent, call, state, cancel, rollup)
        except EndRun as end:
            raise _Ended(end, call) from None
        completed[call.id] = result
        durations[call.id] = duration
        if save:
            await checkpointer.save(turn, completed, marks)

    if len(calls) == 1:
        await one(calls[0])
        return
    try:
        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(one(call))
    except BaseExceptionGroup as failures:
        # Tools report their own errors as results, so only a signal, a hook or middleware
        # failure (or the process going down) lands here: surface a lone one as itself.
        if len(failures.exceptions) == 1:
            raise failures.exceptions[0] from failures
        ended = [e for e in failures.exceptions if isinstance(e, _Ended)]
        if ended:
            raise ended[0] from failures
        cancelled = [e for e in failures.exceptions if isinstance(e, RunCancelled)]
        if cancelled:  # several calls honoured the same cancelled token: one cancellation
            raise cancelled[0] from failures
        raise


async def _run_one(
    agent: Agent, call: ToolCall, state: RunState, cancel: CancelToken, rollup: _Rollup
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
            on_usage=rollup.report,
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


def _read_output(output: OutputSpec, assistant: Message) -> tuple[ToolCall | None, Any, str | None]:
    """The output-tool call (if any), the typed answer, and why it was refused (if it was)."""
    answer_call = next((c for c in assistant.tool_calls if c.name == OUTPUT_TOOL), None)
    try:
        if answer_call is not None:
            if isinstance(answer_call.arguments, str):
                raise InvalidOutput("the arguments were not a JSON object")
            return answer_call, output.parse(answer_call.arguments), None
        if not assistant.tool_calls:
            return None, output.parse_text(assistant.text), None
    except InvalidOutput as exc:
        return answer_call, None, str(exc)
    return None, None, None


def _retry_prompt(failure: str, native: bool) -> str:
    how = (
        "Reply again with only the JSON object."
        if native
        else f"Give your final answer by calling the {OUTPUT_TOOL} tool."
    )
    return f"Your answer did not match the required output format: {failure}. {how}"


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else repr(value)
