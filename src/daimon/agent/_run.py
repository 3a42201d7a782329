"""One run of an agent: its state, and the seed's phases as methods the loop calls in turn."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from daimon.agent._budget import Rollup, RunBudget
from daimon.agent._chain import Relayed, model_chain, tool_chain
from daimon.agent._checkpointing import Restored, RunCheckpointer, snapshot
from daimon.agent._client_tools import ClientTools, to_custom
from daimon.agent._effects import intend, settle_doubts
from daimon.agent._output import OUTPUT_TOOL, InvalidOutput, OutputSpec
from daimon.agent._repeats import RepeatGuard
from daimon.agent._tool_choice import called_a_tool, check_tool_choice
from daimon.agent._tool_turn import (
    NO_PROGRESS,
    Ended,
    ToolTurn,
    add_results,
    apply_decisions,
    ran_results,
    runnable,
    with_unique_call_ids,
)
from daimon.core._fastinit import fast_new
from daimon.core.cancel import CancelToken
from daimon.core.chat import ChatRequest, ChatResponse, ResponseFormat, StopReason
from daimon.core.checkpoints import CheckpointState, RunProgress
from daimon.core.errors import (
    BuilderError,
    MaxIterationsError,
    OutputValidationError,
    RunCancelled,
)
from daimon.core.events import (
    Done,
    RateLimitWait,
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
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.cost import Budget, CostTracker, SpendRecord
from daimon.extensions import CallModel, CallTool
from daimon.guardrails import check_input, check_output
from daimon.kit.streaming import StreamAccumulator
from daimon.tools import RunContext

if TYPE_CHECKING:
    from daimon.agent._agent import Agent
    from daimon.core.protocols import Memory

__all__ = ("Run",)

_NO_DECISIONS: Mapping[str, ApprovalDecision] = MappingProxyType({})
# Built once or more per run: fast_new skips calling the class; its uses save 0.3-0.6 µs each
# (benchmarks/micro_ab.py; docs/benchmarks.md).
_new_request = fast_new(ChatRequest)
_new_response = fast_new(AgentResponse)
_new_done = fast_new(Done)
_new_message = fast_new(Message)
_new_progress = fast_new(RunProgress)
_FORWARDED = (TextDelta, ToolCallStart, ToolCallDelta, ToolCallEnd, RateLimitWait)


class Interrupt:
    """Turns a token cancellation into a task cancellation, but only while the run awaits.

    The run's task is cancelled only while it is suspended inside the loop (a model call, tools),
    never while a streaming consumer is busy with its own awaits between events, and never from
    inside the run's own task (a tool cancelling its own run is seen at the next check).
    """

    __slots__ = ("armed", "cancel", "fired", "task")

    def __init__(self, task: asyncio.Task[Any] | None, cancel: CancelToken) -> None:
        self.task = task
        self.cancel = cancel
        self.armed = False
        self.fired = False

    def __enter__(self) -> Interrupt:
        """Armed for the block: a model call or the tools."""
        self.armed = True
        return self

    def __exit__(self, kind: type[BaseException] | None, error: object, tb: object) -> None:
        """A cancellation the token caused leaves the block as ``RunCancelled``."""
        self.armed = False
        if kind is asyncio.CancelledError and self.absorb():
            raise RunCancelled(self.cancel.reason) from None
        if kind is RunCancelled:  # a tool honoured the token itself: no task cancel is left
            self.absorb()

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


class Run:
    """The state of one run and its phases: open, the model's turn, the tools' turn, the end.

    The loop (:func:`daimon.agent._loop.run_events`) calls the phases in the seed's order; each
    phase that ends the run returns the final :class:`Done`.
    """

    __slots__ = (
        "_budget",
        "_checkpointer",
        "_client",
        "_decisions",
        "_detach",
        "_memory",
        "_record",
        "_repeats",
        "_request",
        "_reserved",
        "_rollup",
        "agent",
        "assistant",
        "calls",
        "cancel",
        "completed",
        "interrupt",
        "model_chain",
        "pending",
        "progress",
        "relay",
        "response_format",
        "state",
        "stream",
        "tool_chain",
        "tool_choice",
        "tools",
    )

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        stream: bool,
        session_id: str | None,
        run_id: str | None,
        deps: Any,
        cancel: CancelToken | None,
        decisions: Mapping[str, ApprovalDecision] | None,
        client: ClientTools | None = None,
    ) -> None:
        # Ids are checked before anything runs: a backend refusing one later would lose the turn.
        if session_id is not None:
            check_id("session", session_id)
        if run_id is not None:
            check_id("run", run_id)
        if cancel is None:
            cancel = CancelToken()
        else:
            cancel.raise_if_cancelled()
        self.agent = agent
        self.stream = stream
        self.cancel = cancel
        self.state: RunContext[Any] = RunContext(
            run_id=run_id or os.urandom(16).hex(),
            agent_name=agent.name,
            session_id=session_id,
            deps=deps,
            cancel=cancel,
        )
        """The run's context: what hooks, extensions and (as a view per call) tools see."""
        self.interrupt = Interrupt(asyncio.current_task(), cancel)
        """Arm it while the run awaits a model or tools: the cancel token then interrupts."""
        self._detach = cancel.on_cancel(self.interrupt)
        # Without a checkpoint store there is nothing to write: no checkpointer, no snapshots.
        self._checkpointer = (
            RunCheckpointer(agent.checkpoint, self.state) if agent.checkpoint is not None else None
        )
        self._decisions = decisions or _NO_DECISIONS
        self._client = client
        """The caller's client tools and the results it supplied; ``None`` when it gave none."""
        self._record = SpendRecord.claim()  # a sub-agent's caller reads its totals however it ends
        self._budget: RunBudget | None = None
        self._rollup: Rollup | None = None
        self._memory: Memory | None = agent.memory if session_id is not None else None
        self.calls = 0
        """Model responses counted so far (the model's, and those extensions made up)."""
        self._request: ChatRequest | None = None
        self._reserved = False
        self.relay = False
        """Whether a model call in an extension chain streams (relaying its events)."""
        model_layers, tool_layers = agent.layers
        self.model_chain: CallModel | None = (
            model_chain(model_layers, self.state, self._call_model, self) if model_layers else None
        )
        """The model call through the agent's extensions; ``None`` when it has none."""
        self.tool_chain: CallTool | None = (
            tool_chain(tool_layers, self.state, self._call_tool) if tool_layers else None
        )
        """A tool call through the agent's extensions; ``None`` when it has none."""
        self._repeats: RepeatGuard | None = None  # made at the run's first tool call
        self.pending: tuple[ToolCall, ...] = ()
        """The calls of the last model turn that have no result yet."""
        self.completed: dict[str, ToolOutput] = {}
        """Results of this turn's calls, by call id."""
        self.progress = NO_PROGRESS
        self.assistant: Message | None = None
        """The last model turn's message."""
        self.tools: tuple[ToolSpec, ...] = agent.tools.specs
        self.response_format: ResponseFormat | None = None
        self.tool_choice = agent.tool_choice
        """Sent with each model call until the model calls a tool (then ``None``)."""

    # ------------------------------------------------------------------------------ opening

    async def open(
        self,
        prompt: str | Message | None,
        resume: CheckpointState | None,
        history: Sequence[Message] | None,
        instructions: str | None,
    ) -> Done | None:
        """Continue a saved run or start a new one; the answer when the run had finished."""
        restored = None
        if self._checkpointer is not None:
            self._checkpointer.hold()
        if resume is not None or self._checkpointer is not None:
            checkpointer = self._checkpointer or RunCheckpointer(None, self.state)
            restored = await checkpointer.restore(resume)
        client = self._client
        if restored is None:
            if client is not None and client.results:
                client.check_results((), {})  # nothing waits: every id is unknown
            await self._start(prompt, history, instructions)
        elif restored.finished is not None:
            if self._checkpointer is not None:
                await self._checkpointer.end_lease()
            return Done(response=restored.finished)
        else:
            self._continue(restored)
        agent = self.agent
        if client is not None and client.specs:
            self.tools = (*self.tools, *client.specs)
        tracker = CostTracker(agent.cost_model) if agent.cost_model is not None else None
        enclosing = Budget.enclosing()  # the budget of the run whose tool started this one
        if agent.max_budget is not None or enclosing is not None:
            ledger = Budget(agent.max_budget, enclosing, spent=self.state.cost)
            self._budget = RunBudget(ledger, tracker, agent.model.model_name)
        self._rollup = Rollup(self.state, tracker, agent.model.model_name, self._budget)
        self.state.on_usage = self._rollup.report  # tools' report_usage
        if agent.output is not None:
            if agent.native_output:
                self.response_format = agent.output.response_format
            else:
                self.tools = (*self.tools, agent.output.tool_spec)
        if self.tool_choice is not None:
            self._check_tool_choice(self.tool_choice, resumed=restored is not None)
        for hook in agent.hooks:
            await hook.on_run_start(self.state)
        return None

    def _continue(self, restored: Restored) -> None:
        """Take up a saved run where it stopped: its pending calls, results and bookkeeping."""
        self.pending, self.completed = restored.pending, restored.completed
        self.progress = restored.progress
        if self.state.session_id is not None:  # the saved run's session
            self._memory = self.agent.memory
        if self._client is not None:
            self._client.check_results(self.pending, self.completed)

    def _check_tool_choice(self, choice: str, *, resumed: bool) -> None:
        """Refuse a choice the run's tools cannot honour; drop it once the run called a tool."""
        check_tool_choice(choice, self.tools)
        if resumed and called_a_tool(self.state.messages[self.progress.new_start :]):
            self.tool_choice = None

    async def _start(
        self,
        prompt: str | Message | None,
        history: Sequence[Message] | None,
        instructions: str | None,
    ) -> None:
        """The opening messages of a new run: system, examples, history and the prompt."""
        agent, state = self.agent, self.state
        if prompt is None:
            raise ValueError(f"run {state.run_id!r} has no saved state to resume; give a prompt")
        memory, session_id = self._memory, state.session_id
        if history is not None and memory is not None:
            raise BuilderError("give a run history or a session_id, not both")
        if history is None:
            history = (
                ()
                if memory is None or session_id is None
                else await memory.get_messages(session_id)
            )
        if isinstance(prompt, Message):
            user = prompt
        else:
            text = prompt
            if agent.input_guardrails:
                text = await check_input(agent.input_guardrails, text, history)
            user = _new_message(role=Role.USER, content=text)  # Message.user(text), faster
        messages = state.messages
        system = (
            await agent.system_message(state)
            if agent.system_prompt is not None or agent.skills is not None
            else None
        )
        if instructions:
            system = Message.system(f"{system.text}\n\n{instructions}" if system else instructions)
        if system is not None:
            messages.append(system)
        messages.extend(agent.examples)
        messages.extend(history)
        start = len(messages)
        self.progress = _new_progress(new_start=start, memory_mark=start)
        messages.append(user)

    # ------------------------------------------------------------------------ the model's turn

    def request(self) -> ChatRequest:
        """The next model request, after the checks (a run without hooks: no coroutine)."""
        self._check()
        return self._build_request()

    async def hooked_request(self) -> ChatRequest:
        """The next model request: the checks, the hooks' ``on_iteration_start``, the request."""
        self._check()
        for hook in self.agent.hooks:
            await hook.on_iteration_start(self.state)
        return self._build_request()  # after the hooks: they may change the messages

    def _check(self) -> None:
        """Refuse the next model call: cancelled, out of iterations, or over the budget."""
        agent, state, budget = self.agent, self.state, self._budget
        if self.cancel.cancelled:
            raise RunCancelled(self.cancel.reason)
        if state.iteration >= agent.max_iterations:
            raise MaxIterationsError(agent.max_iterations)
        if budget is not None:  # refused before the hooks: no call, no span
            budget.reserve(state.messages, self.tools, agent.max_tokens, self.response_format)
            self._reserved = True

    def _build_request(self) -> ChatRequest:
        agent = self.agent
        request = self._request = _new_request(
            messages=tuple(self.state.messages),
            tools=self.tools,
            temperature=agent.temperature,
            max_tokens=agent.max_tokens,
            response_format=self.response_format,
            tool_choice=self.tool_choice,
            settings=agent.model_settings,
        )
        return request

    async def _call_model(self, request: ChatRequest) -> ChatResponse:
        """The innermost step of the model chain: the model itself, counted as it answers."""
        budget = self._budget
        if budget is not None and (not self._reserved or request is not self._request):
            # reserve what is sent: changed by an extension, or a retry
            budget.reserve(
                request.messages, request.tools, request.max_tokens, request.response_format
            )
        self._reserved = False
        if not self.relay:
            response = await self.agent.model.generate(request)
        else:
            accumulator = StreamAccumulator()
            async for event in self.agent.model.generate_stream(request):
                accumulator.add(event)
                if isinstance(event, _FORWARDED):
                    await Relayed(event)  # to the caller, through the chain's driver
            response = accumulator.response()
        await self.counted(response)
        return response

    async def counted(self, response: ChatResponse) -> None:
        """Count a response that reached the chain (the stream reports it)."""
        cost = self.count(response)
        if self.relay:
            await Relayed(UsageEvent(usage=response.usage, cost=cost))

    def count(self, response: ChatResponse) -> float:
        """Count the call's usage and cost; what it cost."""
        assert self._rollup is not None
        self.state.iteration += 1
        self.calls += 1
        return self._rollup.model_call(response.model, response.usage)

    async def take(self, response: ChatResponse) -> Done | None:
        """Read the model's turn: the final answer ends the run, tool calls become pending."""
        agent, state = self.agent, self.state
        assistant = response.message
        if len(assistant.tool_calls) > 1:
            assistant = with_unique_call_ids(assistant)
        state.messages.append(assistant)
        self.assistant = assistant
        self.pending = assistant.tool_calls
        if agent.output is not None:
            return await self._structured_answer(agent.output, response)
        if self.pending:
            if self._checkpointer is not None:
                await self._save()
            return None
        text = assistant.text
        if agent.output_guardrails:
            text = await check_output(agent.output_guardrails, response)
        return await self.finish(text, None, response.stop_reason, response.model)

    async def _structured_answer(self, output: OutputSpec, response: ChatResponse) -> Done | None:
        """Accept a typed answer, or ask again; ``None`` while the run goes on."""
        assert self.assistant is not None
        answer_call, value, failure = _read_output(output, self.assistant)
        if failure is None and (answer_call is not None or not self.pending):
            text = answer_call.arguments_json if answer_call else self.assistant.text
            for call in self.pending:  # close every call so the history stays valid
                note = "Final answer accepted." if call is answer_call else "Not run."
                self.state.messages.append(Message.tool(call.id, note, name=call.name))
            self.pending = ()
            return await self.finish(text, value, response.stop_reason, response.model)
        if failure is not None:
            attempts = self.progress.output_attempts + 1
            if attempts > self.agent.output_retries:
                raise OutputValidationError([failure], attempts)
            self._advance(output_attempts=attempts)
            if answer_call is None:
                retry = _retry_prompt(failure, self.agent.native_output)
                self.state.messages.append(Message.user(retry))
                return None
            self.completed[answer_call.id] = ToolOutput.error(
                f"Error: invalid final result: {failure}. Call {OUTPUT_TOOL} "
                "again with corrected arguments."
            )
        if self.pending:
            await self._save()
        return None

    # ------------------------------------------------------------------------ the tools' turn

    async def tool_turn(self) -> tuple[Sequence[ToolResult], Done | None]:
        """Run the pending calls; their result events, and the end when the turn ends the run."""
        agent, state = self.agent, self.state
        if self.cancel.cancelled:  # cancelled while a streaming consumer held the last event
            raise RunCancelled(self.cancel.reason)
        self.tool_choice = None  # the model called a tool: from now on it chooses
        calls, completed = self.pending, self.completed
        waiting = self._waiting(calls, completed)
        todo = runnable(calls, completed, waiting)
        limit = agent.max_repeated_tool_calls
        if todo and limit is not None:
            if self._repeats is None:
                self._repeats = RepeatGuard(limit)
            self._repeats.check(todo)
        assert self._rollup is not None
        turn = ToolTurn(self.tool_chain or self._call_tool, state, completed, self.stream)
        if self._checkpointer is not None:
            turn.checkpoint(self._checkpointer, calls, self.progress)
            if todo and intend(agent, state, todo):
                await self._save()  # write-ahead: the intents are stored before any call runs
        ended: Ended | None = None
        if todo:
            try:
                with self.interrupt:  # the cancel token interrupts the calls
                    if len(todo) == 1:  # most turns: one call, run in the loop's own task
                        await turn.run_one(todo[0])
                    else:
                        await turn.run(todo)
            except Ended as end_run:
                ended = end_run
        if waiting:  # the calls that ran are reported; their messages come on resume
            ran = ran_results(todo, completed, turn.durations) if turn.durations else ()
            return ran, await self._pause(waiting)
        if self._repeats is not None and ended is None:
            self._repeats.count(todo, completed)
        events = add_results(state.messages, calls, completed, turn.durations, ended)
        self.pending, self.completed = (), {}
        if self._memory is not None:
            await self._remember()
        if ended is not None:
            end = ended.end
            text = end.text if end.text is not None else _as_text(end.output)
            return events, await self.finish(text, end.output)
        if self._checkpointer is not None:
            await self._save()
        for hook in agent.hooks:
            await hook.on_iteration_end(state)
        return events, None

    def _waiting(
        self, calls: Sequence[ToolCall], completed: dict[str, ToolOutput]
    ) -> Sequence[ToolCall]:
        """The calls that wait for someone: a person (in doubt, or to approve), or the caller.

        Decides what it can first: calls in doubt by their tools' effects, approvals given.
        """
        state = self.state
        doubts = settle_doubts(state, calls, completed, self._decisions) if state.effects else ()
        waiting = apply_decisions(self.agent, calls, completed, self._decisions)
        if doubts:
            waiting = [*doubts, *(c for c in waiting if c not in doubts)]
        if self._client is not None:  # client calls wait for the caller's results
            waiting = [*waiting, *self._client.take(calls, completed)]
        return waiting

    def _call_tool(self, call: ToolCall) -> Awaitable[ToolOutput]:
        """The innermost step of the tool chain: the tool itself, through the registry.

        A plain function handing back the registry's coroutine: without a budget there is nothing
        to do around the call, so the run awaits one coroutine level less per tool call.
        """
        agent = self.agent
        assert self._rollup is not None
        if self._checkpointer is not None:  # a runner stalled past its lease starts no tool
            self._checkpointer.check_lease()
        called = agent.tools.run(
            call,
            self.state.for_call(call.id, call.name),  # a view: nothing copied
            validate=agent.validate_tool_inputs,
            retry_policy=agent.tool_retry_policy,
        )
        budget = self._rollup.budget
        return called if budget is None else _within(budget, called)

    # ------------------------------------------------------------------------------- the end

    async def finish(
        self,
        text: str,
        output: Any,
        stop_reason: StopReason | None = None,
        model: str | None = None,
    ) -> Done:
        """End the run with its answer: memory, the checkpoint, the hooks, and ``Done``."""
        if self._memory is not None:
            await self._remember()
        result = self._response(text, output)
        if self._checkpointer is not None:
            finished = self._advance(status="completed", text=result.text)
            await self._checkpointer.save((), {}, finished)
            await self._checkpointer.end_lease()
        for hook in self.agent.hooks:
            await hook.on_run_end(result, self.state)
        if stop_reason is None:
            return Done(response=result)
        return _new_done(stop_reason=stop_reason, model=model, response=result)

    async def _pause(self, waiting: Sequence[ToolCall]) -> Done:
        """End the run's turn waiting for approvals or client results: the calls, how to resume."""
        state, run_id = self.state, self.state.run_id
        await self._save()
        if self._checkpointer is not None:
            await self._checkpointer.end_lease()
        client = self._client
        names = client.names if client is not None else frozenset()
        paused = AgentResponse(
            text="",
            messages=tuple(state.messages[self.progress.new_start :]),
            iterations=state.iteration,
            usage=state.usage,
            cost=state.cost,
            run_id=run_id,
            session_id=state.session_id,
            pending_approvals=tuple(
                ApprovalRequest(id=c.id, call=c, run_id=run_id, in_doubt=_in_doubt(state, c.id))
                for c in waiting
                if c.name not in names
            ),
            client_calls=tuple(c for c in waiting if c.name in names),
            state=snapshot(
                state,
                self.pending,
                self.completed,
                self.progress,
                to_custom(client.specs) if client is not None else None,
            ),
        )
        for hook in self.agent.hooks:
            await hook.on_run_end(paused, state)
        return Done(response=paused)

    async def failed(self, exc: BaseException) -> None:
        """A run that raised, was cancelled or abandoned gives its lease up and ends its hooks."""
        if self._checkpointer is not None:
            await self._checkpointer.end_lease()
        for hook in self.agent.hooks:
            await hook.on_error(exc, self.state)

    def close(self) -> None:
        """Release what the run holds, however it ended.

        Its references to itself go too (the context's usage callback, the extension chains), so
        the run's objects are freed as it ends, not by the garbage collector: a cycle left here
        cost a bare run 1.4 µs (25 objects for the collector per run; CHANGELOG.md).
        """
        self._detach()
        self.state.on_usage = None  # a tool's report after the run's end has no run to add to
        self.model_chain = self.tool_chain = None
        if self._checkpointer is not None:
            self._checkpointer.release()
        if self._record is not None:
            self._record.usage = self.state.usage
            self._record.cost = self.state.cost
        if self._budget is not None:
            self._budget.close()

    # ----------------------------------------------------------------------------- helpers

    def _response(self, text: str, output: Any) -> AgentResponse[Any]:
        state = self.state
        if output is None and self.agent.output is None:
            output = text  # a text agent's answer is its text
        return _new_response(
            text=text,
            messages=tuple(state.messages[self.progress.new_start :]),
            iterations=state.iteration,
            usage=state.usage,
            cost=state.cost,
            run_id=state.run_id,
            session_id=state.session_id,
            output=output,
        )

    async def _remember(self) -> None:
        """Write the messages not yet in the session's memory."""
        memory, session_id = self._memory, self.state.session_id
        if memory is None or session_id is None:
            return
        messages = self.state.messages
        if self.progress.memory_mark < len(messages):
            await memory.add_messages(session_id, messages[self.progress.memory_mark :])
            self._advance(memory_mark=len(messages))

    async def _save(self) -> None:
        if self._checkpointer is not None:
            await self._checkpointer.save(self.pending, self.completed, self.progress)

    def _advance(self, **changes: Any) -> RunProgress:
        progress = self.progress
        self.progress = RunProgress(
            status=changes.get("status", progress.status),
            new_start=progress.new_start,
            memory_mark=changes.get("memory_mark", progress.memory_mark),
            output_attempts=changes.get("output_attempts", progress.output_attempts),
            text=changes.get("text", progress.text),
        )
        return self.progress


async def _within(budget: RunBudget, called: Awaitable[ToolOutput]) -> ToolOutput:
    """Await a tool call inside the run's budget: runs the tool starts (sub-agents) spend it."""
    entered = budget.ledger.enter()
    try:
        return await called
    finally:
        Budget.leave(entered)


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


def _in_doubt(state: RunContext[Any], call_id: str) -> bool:
    """Whether the call waits for a person because it is in doubt (rather than for approval)."""
    record = state.effects.get(call_id)
    return record is not None and record.status == "in_doubt"


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else repr(value)
