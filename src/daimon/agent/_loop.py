"""The one ReAct loop: an async generator of stream events that every entry point drains."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from daimon.agent._budget import RunBudget
from daimon.agent._checkpointing import RunCheckpointer
from daimon.agent._output import OUTPUT_TOOL, InvalidOutput, OutputSpec
from daimon.core._fastinit import fast_new
from daimon.core.cancel import CancelToken
from daimon.core.chat import ChatRequest, ChatResponse, Usage
from daimon.core.checkpoints import CheckpointState
from daimon.core.errors import (
    MaxIterationsError,
    OutputValidationError,
    RepeatedToolCallError,
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
from daimon.core.ids import check_id
from daimon.core.messages import Message, Role, ToolCall
from daimon.core.results import AgentResponse, ApprovalDecision, ApprovalRequest
from daimon.core.streaming import StreamAccumulator
from daimon.core.tools import ToolOutput
from daimon.cost import Budget, CostTracker, SpendRecord
from daimon.guardrails import check_input, check_output
from daimon.state import RunState
from daimon.tools import EndRun, RunContext

if TYPE_CHECKING:
    from daimon.agent._agent import Agent
    from daimon.middleware import MiddlewareStack

__all__ = ("run_events",)

_FORWARDED = (TextDelta, ToolCallStart, ToolCallDelta, ToolCallEnd)
_NO_DECISIONS: Mapping[str, ApprovalDecision] = MappingProxyType({})
# The loop builds these on every model call: fast_new skips the cost of calling the class.
_new_request = fast_new(ChatRequest)
_new_response = fast_new(AgentResponse)
_new_message = fast_new(Message)
_new_done = fast_new(Done)


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

    With ``stream`` the model streams and every event is yielded. Without it the model is called
    with ``generate`` and only the final ``Done`` is yielded: ``prompt()`` and ``resume()`` read
    nothing else, so building usage and tool-result events for them would be wasted work.

    A run continues instead of starting when ``resume`` holds a paused run's state, or when the
    agent has a checkpoint store holding ``run_id``; ``decisions`` answer pending approvals.
    """
    # Ids are checked before anything runs: a backend refusing one later would lose the turn.
    if session_id is not None:
        check_id("session", session_id)
    if run_id is not None:
        check_id("run", run_id)
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
    # Without a checkpoint store there is nothing to write: no checkpointer, no snapshots.
    checkpointer = (
        RunCheckpointer(agent.checkpoint, state) if agent.checkpoint is not None else None
    )
    decisions = decisions or _NO_DECISIONS
    output = agent.output
    record = SpendRecord.claim()  # a sub-agent's caller reads its totals however it ends
    budget: RunBudget | None = None
    try:
        messages = state.messages
        pending: tuple[ToolCall, ...] = ()
        completed: dict[str, ToolOutput] = {}
        output_attempts = 0
        # The repeated-call guard's counts, made at the first tool call; never checkpointed.
        repeats: dict[str, list[list[Any]]] | None = None
        restored = None
        if checkpointer is not None:
            checkpointer.hold()
        if resume is not None or checkpointer is not None:
            restored = await (checkpointer or RunCheckpointer(None, state)).restore(resume)
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
            if agent.system_prompt is not None:  # no coroutine to await for a run without one
                system = await agent.system_message(state)
                if system is not None:
                    messages.append(system)
            messages.extend(agent.examples)
            messages.extend(history)
            new_start = memory_mark = len(messages)
            messages.append(user)
        tracker = CostTracker(agent.cost_model) if agent.cost_model is not None else None
        enclosing = Budget.enclosing()  # the budget of the run whose tool started this one
        if agent.max_budget is not None or enclosing is not None:
            ledger = Budget(agent.max_budget, enclosing, spent=state.cost)
            budget = RunBudget(ledger, tracker, agent.model.model_name)
        rollup = _Rollup(state, tracker, agent.model.model_name, budget)
        hooks = agent.hooks
        for hook in hooks:
            await hook.on_run_start(state)
        # MiddlewareStack.__bool__ is Python code: ask once per run, not at every step.
        middleware = agent.middleware if agent.middleware else None
        model = agent.model
        tools = agent.tools.specs
        response_format = None
        if output is not None:
            if agent.native_output:
                response_format = output.response_format
            else:
                tools = (*tools, output.tool_spec)

        while True:
            if not pending:
                # ----------------------------------------------------------- the model's turn
                if cancel.cancelled:
                    raise RunCancelled(cancel.reason)
                if state.iteration >= agent.max_iterations:
                    raise MaxIterationsError(agent.max_iterations)
                if budget is not None:  # refused before the hooks: no call, no span
                    budget.reserve(messages, tools, agent.max_tokens, response_format)
                for hook in hooks:
                    await hook.on_iteration_start(state)
                request = _new_request(
                    messages=tuple(messages),
                    tools=tools,
                    temperature=agent.temperature,
                    max_tokens=agent.max_tokens,
                    response_format=response_format,
                    settings=agent.model_settings,
                )
                response: ChatResponse | None = None
                if middleware is not None:
                    request, response = await middleware.on_request(request, state)
                    if budget is not None and response is None:  # reserve what is sent
                        budget.reserve(
                            request.messages,
                            request.tools,
                            request.max_tokens,
                            request.response_format,
                        )
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
                call_cost = rollup.model_call(response.model, usage)
                if stream:
                    yield UsageEvent(usage=usage, cost=call_cost)
                if middleware is not None:
                    response = await middleware.on_response(response, state)
                for hook in hooks:
                    await hook.on_model_response(response, state)
                assistant = response.message
                if len(assistant.tool_calls) > 1:
                    assistant = _with_unique_call_ids(assistant)
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
                        result = _response(state, run_id, session_id, new_start, text, value)
                        if checkpointer is not None:
                            marks = _marks(new_start, memory_mark, output_attempts)
                            await checkpointer.finish(result, marks)
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
                    result = _response(state, run_id, session_id, new_start, text, None)
                    if checkpointer is not None:
                        marks = _marks(new_start, memory_mark, output_attempts)
                        await checkpointer.finish(result, marks)
                    for hook in hooks:
                        await hook.on_run_end(result, state)
                    yield _new_done(
                        stop_reason=response.stop_reason, model=response.model, response=result
                    )
                    return
                if checkpointer is not None:
                    marks = _marks(new_start, memory_mark, output_attempts)
                    await checkpointer.save(pending, completed, marks)

            # --------------------------------------------------------------- the tools' turn
            if cancel.cancelled:  # cancelled while a streaming consumer held the last event
                raise RunCancelled(cancel.reason)
            calls = pending
            waiting = _apply_decisions(agent, calls, completed, decisions)
            runnable = _runnable(calls, completed, waiting)
            if runnable and agent.max_repeated_tool_calls is not None:
                if repeats is None:
                    repeats = {}
                _check_repeats(runnable, repeats, agent.max_repeated_tool_calls)
            turn = _ToolTurn(agent, state, cancel, rollup, middleware, completed, stream)
            if checkpointer is not None:
                turn.checkpoint(
                    checkpointer, calls, _marks(new_start, memory_mark, output_attempts)
                )
            ended: _Ended | None = None
            if runnable:
                interrupt.armed = True
                try:
                    if len(runnable) == 1:  # most turns: one call, run in the loop's own task
                        await turn.run_one(runnable[0])
                    else:
                        await turn.run(runnable)
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
                marks = _marks(new_start, memory_mark, output_attempts)
                if checkpointer is not None:
                    await checkpointer.save(calls, completed, marks)
                paused = _paused(
                    state, run_id, session_id, new_start, waiting, calls, completed, marks
                )
                for hook in hooks:
                    await hook.on_run_end(paused, state)
                yield Done(response=paused)
                return
            if repeats is not None and ended is None:
                _count_repeats(runnable, completed, repeats)
            for event in _add_results(messages, calls, completed, turn.durations, ended):
                yield event
            # Nothing of the turn stays referenced while the next model call waits: with many
            # runs in flight, every object kept is one more for the garbage collector to scan.
            del turn
            pending = ()
            completed = {}
            if memory is not None:
                await memory.add_messages(session_id, messages[memory_mark:])  # type: ignore[arg-type]
                memory_mark = len(messages)
            if ended is not None:
                end = ended.end
                text = end.text if end.text is not None else _as_text(end.output)
                result = _response(state, run_id, session_id, new_start, text, end.output)
                if checkpointer is not None:
                    marks = _marks(new_start, memory_mark, output_attempts)
                    await checkpointer.finish(result, marks)
                for hook in hooks:
                    await hook.on_run_end(result, state)
                yield Done(response=result)
                return
            if checkpointer is not None:
                marks = _marks(new_start, memory_mark, output_attempts)
                await checkpointer.save((), completed, marks)
            for hook in hooks:
                await hook.on_iteration_end(state)
    except BaseException as exc:  # cancelled, interrupted or abandoned runs end their hooks too
        for hook in agent.hooks:
            await hook.on_error(exc, state)
        raise
    finally:
        detach()
        if checkpointer is not None:
            checkpointer.release()
        if record is not None:
            record.usage = state.usage
            record.cost = state.cost
        if budget is not None:
            budget.close()


def _with_unique_call_ids(assistant: Message) -> Message:
    """``assistant`` with every tool call under its own id, before any of them runs.

    Results are matched to calls by id; two calls sharing one (some models repeat ids) would both
    get one result. A repeated id gets the first free ``<id>~<n>`` (n from 2), in the message that
    is kept and sent back, so each result reaches the model under the call that produced it.
    """
    calls = assistant.tool_calls
    ids = {call.id for call in calls}
    if len(ids) == len(calls):
        return assistant
    seen: set[str] = set()
    unique: list[ToolCall] = []
    for call in calls:
        if call.id in seen:
            n = 2
            while f"{call.id}~{n}" in ids:
                n += 1
            call = dataclasses.replace(call, id=f"{call.id}~{n}")
            ids.add(call.id)
        seen.add(call.id)
        unique.append(call)
    return dataclasses.replace(assistant, tool_calls=tuple(unique))


def _add_results(
    messages: list[Message],
    calls: Sequence[ToolCall],
    completed: dict[str, ToolOutput],
    durations: dict[str, float] | None,
    ended: _Ended | None,
) -> Sequence[ToolResult]:
    """Append the turn's tool messages, in call order; the ToolResult events when streaming."""
    events: list[ToolResult] = []
    for call in calls:
        if ended is not None and call is ended.call:
            output = ToolOutput.text(ended.end.text or "Done.")
        else:
            output = completed.get(call.id) or ToolOutput.error("Not run: the run ended.")
        messages.append(
            _new_message(
                role=Role.TOOL,
                content=output.content,
                tool_call_id=call.id,
                name=call.name,
                is_error=output.is_error,
            )
        )
        if durations is not None and (
            call.id in durations or (ended is not None and call is ended.call)
        ):
            events.append(
                ToolResult(
                    call_id=call.id,
                    name=call.name,
                    output=output,
                    duration=durations.get(call.id, 0.0),
                )
            )
    return events


def _check_repeats(
    calls: Sequence[ToolCall], repeats: dict[str, list[list[Any]]], limit: int
) -> None:
    """Raise before anything of the turn runs if a call would go past ``limit``.

    A call that already returned the same result ``limit`` times in a row is refused, not run:
    it has shown it will bring nothing new. Calls are the same when their names are and their
    parsed arguments are equal (in any key order; equal as Python values, so ``1`` and ``1.0``
    match); unparseable arguments match as the model wrote them. Identical calls in one turn
    count one each.
    """
    for index, call in enumerate(calls):
        arguments = call.arguments
        count = 1
        entries = repeats.get(call.name)
        if entries is not None:
            for entry in entries:
                if entry[0] == arguments:
                    count += entry[1]
                    break
        if index:
            count += _earlier_copies(calls, index)
        if count > limit:
            raise RepeatedToolCallError(call.name, arguments, count)


def _earlier_copies(calls: Sequence[ToolCall], index: int) -> int:
    """How many calls before ``calls[index]`` in its turn are the same call."""
    call = calls[index]
    return sum(
        1
        for other in calls[:index]
        if other.name == call.name and other.arguments == call.arguments
    )


def _count_repeats(
    calls: Sequence[ToolCall],
    completed: dict[str, ToolOutput],
    repeats: dict[str, list[list[Any]]],
) -> None:
    """Count the turn's results: a result unlike the last one of the same call starts over.

    ``repeats`` holds, by tool name, one ``[arguments, count, content, is_error]`` per distinct
    call: a run makes few, and comparing dicts costs less than encoding them as keys.
    """
    for call in calls:
        output = completed.get(call.id)
        if output is None:
            continue
        arguments, content, is_error = call.arguments, output.content, output.is_error
        entries = repeats.get(call.name)
        if entries is None:
            repeats[call.name] = [[arguments, 1, content, is_error]]
            continue
        for entry in entries:
            if entry[0] == arguments:
                if entry[2] == content and entry[3] == is_error:
                    entry[1] += 1
                else:
                    entry[1], entry[2], entry[3] = 1, content, is_error
                break
        else:
            entries.append([arguments, 1, content, is_error])


def _runnable(
    calls: tuple[ToolCall, ...], completed: dict[str, ToolOutput], waiting: Sequence[ToolCall]
) -> Sequence[ToolCall]:
    """The calls to run now: not decided already (rejected, resumed) and not awaiting approval."""
    # Comprehensions and closures are kept out of run_events: in Python 3.11 each would turn the
    # locals they read into cells, allocated on every run.
    if not completed and not waiting:
        return calls
    return [c for c in calls if c.id not in completed and c not in waiting]


def _paused(
    state: RunState,
    run_id: str,
    session_id: str | None,
    new_start: int,
    waiting: Sequence[ToolCall],
    calls: tuple[ToolCall, ...],
    completed: dict[str, ToolOutput],
    marks: dict[str, int],
) -> AgentResponse:
    """The response of a run that waits for approvals: the pending calls and how to resume."""
    return AgentResponse(
        text="",
        messages=tuple(state.messages[new_start:]),
        iterations=state.iteration,
        usage=state.usage,
        cost=state.cost,
        run_id=run_id,
        session_id=session_id,
        pending_approvals=tuple(ApprovalRequest(id=c.id, call=c, run_id=run_id) for c in waiting),
        state=RunCheckpointer(None, state).snapshot(calls, completed, marks),
    )


def _marks(new_start: int, memory_mark: int, output_attempts: int) -> dict[str, int]:
    """The loop's own bookkeeping, saved with each checkpoint."""
    return {"new_start": new_start, "memory_mark": memory_mark, "output_attempts": output_attempts}


def _response(
    state: RunState, run_id: str, session_id: str | None, new_start: int, text: str, output: Any
) -> AgentResponse:
    """The finished run's response: the run's own messages, usage and cost."""
    return _new_response(
        text=text,
        messages=tuple(state.messages[new_start:]),
        iterations=state.iteration,
        usage=state.usage,
        cost=state.cost,
        run_id=run_id,
        session_id=session_id,
        output=output,
    )


class _Rollup:
    """Keeps the run's usage and cost: its own model calls plus what tools report."""

    __slots__ = ("_extra_cost", "_requested", "_state", "_tracker", "budget")

    def __init__(
        self,
        state: RunState,
        tracker: CostTracker | None,
        requested: str,
        budget: RunBudget | None,
    ) -> None:
        self._state = state
        self._tracker = tracker
        self._requested = requested
        self.budget = budget
        self._extra_cost = state.cost  # a resumed run starts from its saved cost

    def model_call(self, model_id: str | None, usage: Usage) -> float:
        """Count a model call; ``model_id`` is the model the response names, if it names one."""
        state = self._state
        state.usage = state.usage + usage
        cost = 0.0
        if self._tracker is not None:
            # Priced by the model that answered; by the one asked for when that has no price.
            requested = self._requested
            cost = self._tracker.record(model_id or requested, usage, requested=requested)
            state.cost = self._extra_cost + self._tracker.total
        if self.budget is not None:
            self.budget.settle(model_id, cost)
        return cost

    def report(self, usage: Usage, cost: float) -> None:
        """Usage and cost of nested work (a sub-agent) reported by a tool."""
        state = self._state
        state.usage = state.usage + usage
        self._extra_cost += cost
        state.cost = self._extra_cost + (self._tracker.total if self._tracker else 0.0)
        if self.budget is not None:
            self.budget.ledger.spend(cost)


def _apply_decisions(
    agent: Agent,
    calls: Sequence[ToolCall],
    completed: dict[str, ToolOutput],
    decisions: Mapping[str, ApprovalDecision],
) -> Sequence[ToolCall]:
    """Record rejections as results; the calls still waiting for a decision."""
    waiting: list[ToolCall] | None = None  # a list only when some call waits: most turns none
    for call in calls:
        if call.id in completed or not agent.requires_approval(call):
            continue
        decision = decisions.get(call.id)
        if decision is None:
            if waiting is None:
                waiting = []
            waiting.append(call)
        elif not decision.approved:
            reason = f": {decision.reason}" if decision.reason else "."
            completed[call.id] = ToolOutput.error(f"The user rejected this call{reason}")
    return waiting if waiting is not None else ()


class _ToolTurn:
    """Runs one turn's tool calls, recording each result in ``completed`` (and its checkpoint).

    One object per turn rather than a closure over the loop's locals, which would cost a cell per
    variable in every run, checkpoint store or not.
    """

    __slots__ = (
        "_agent",
        "_calls",
        "_cancel",
        "_checkpointer",
        "_marks",
        "_middleware",
        "_rollup",
        "_state",
        "completed",
        "durations",
    )

    def __init__(
        self,
        agent: Agent,
        state: RunState,
        cancel: CancelToken,
        rollup: _Rollup,
        middleware: MiddlewareStack | None,
        completed: dict[str, ToolOutput],
        timed: bool,
    ) -> None:
        self._agent = agent
        self._state = state
        self._cancel = cancel
        self._rollup = rollup
        self._middleware = middleware
        self.completed = completed
        self.durations: dict[str, float] | None = {} if timed else None
        """Seconds each call took, by call id, when the stream reports them."""
        self._checkpointer: RunCheckpointer | None = None
        self._calls: Sequence[ToolCall] = ()
        self._marks: dict[str, int] = {}

    def checkpoint(
        self, checkpointer: RunCheckpointer, calls: Sequence[ToolCall], marks: dict[str, int]
    ) -> None:
        """Save the turn after each result."""
        self._checkpointer = checkpointer
        self._calls = calls
        self._marks = marks

    async def run(self, calls: Sequence[ToolCall]) -> None:
        """Run calls concurrently, each in its own task."""
        try:
            async with asyncio.TaskGroup() as group:
                for call in calls:
                    group.create_task(self.run_one(call))
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

    async def run_one(self, call: ToolCall) -> None:
        """Run one call through hooks, middleware and the registry; record its result."""
        agent, state = self._agent, self._state
        key = call.id
        started = time.perf_counter()
        try:
            for hook in agent.hooks:
                await hook.on_tool_call(call, state)
            output: ToolOutput | None = None
            if self._middleware is not None:
                replaced = await self._middleware.on_tool_call(call, state)
                if isinstance(replaced, ToolOutput):
                    output = replaced
                else:
                    call = replaced
            if output is None:
                ctx: RunContext[Any] = RunContext(
                    run_id=state.run_id,
                    deps=state.deps,
                    cancel=self._cancel,
                    usage=state.usage,
                    call_id=call.id,
                    tool_name=call.name,
                    session_id=state.session_id,
                    iteration=state.iteration,
                    on_usage=self._rollup.report,
                )
                budget = self._rollup.budget
                # Runs the tool starts (sub-agents) spend from this run's budget.
                entered = None if budget is None else budget.ledger.enter()
                try:
                    output = await agent.tools.run(
                        call,
                        ctx,
                        validate=agent.validate_tool_inputs,
                        retry_policy=agent.tool_retry_policy,
                    )
                finally:
                    if entered is not None:
                        Budget.leave(entered)
            for hook in agent.hooks:
                await hook.on_tool_result(call, output, state)
        except EndRun as end:
            raise _Ended(end, call) from None
        self.completed[key] = output
        if self.durations is not None:
            self.durations[key] = time.perf_counter() - started
        if self._checkpointer is not None:
            await self._checkpointer.save(self._calls, self.completed, self._marks)


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
