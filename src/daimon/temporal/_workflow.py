"""The run as a Temporal workflow: daimon's own loop, with every call an activity.

The workflow runs the agent's real loop (``Agent.prompt`` and ``Agent.resume``), so the
decisions a plain run makes (guardrails, hooks, budgets, structured output, the loop guard,
approvals) are made here by the same code. One extension, innermost in the agent's chains,
sends each model call and each tool call to an activity instead of calling the model or the
tool: the loop's decisions are replayed from history, and only the calls' results are stored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    TimeoutType,
    is_cancelled_exception,
)
from temporalio.exceptions import (
    TimeoutError as ActivityTimeout,
)

with workflow.unsafe.imports_passed_through():
    from daimon.agent import Agent
    from daimon.agent._effects import effect_of, intend, settle_doubts
    from daimon.core.chat import ChatRequest, ChatResponse
    from daimon.core.checkpoints import CheckpointState, Effect
    from daimon.core.codec import CODEC_VERSION, to_data
    from daimon.core.errors import (
        ApprovalRequiredError,
        DaimonError,
        ModelError,
        SerializationError,
    )
    from daimon.core.events import StreamEvent, TextDelta, ToolCallEnd, ToolResult
    from daimon.core.messages import ToolCall
    from daimon.core.results import AgentResponse, ApprovalDecision, ApprovalRequest
    from daimon.core.tools import ToolOutput
    from daimon.extensions import CallModel, CallTool, Extension
    from daimon.multiagent._agent_tool import sub_agent_failed
    from daimon.state import RunState
    from daimon.temporal._activities import (
        MODEL_ACTIVITY,
        PROMPT_ACTIVITY,
        TOOL_ACTIVITY,
        portable,
    )
    from daimon.temporal._registry import lookup, served_name
    from daimon.temporal._types import (
        WORKFLOW_NAME,
        ActivityOptions,
        Decision,
        EventPage,
        ModelCallInput,
        PromptInput,
        RunPhase,
        RunRequest,
        RunStatus,
        ToolCallInput,
        ToolCallResult,
    )
    from daimon.tools import EndRun

__all__ = (
    "AgentWorkflow",
    "CARRIED_EVENTS",
    "RunCheckpoint",
    "ToActivities",
    "WORKFLOW_NAME",
    "workflow_agent",
)

CARRIED_EVENTS = 1000
"""Stream events a continue-as-new carries to the next workflow run (the newest ones)."""

NEVER_RETRIED = ("SerializationError",)
"""Activity errors no attempt can mend: a value Temporal cannot carry fails its call once."""

LOST = (TimeoutType.HEARTBEAT, TimeoutType.START_TO_CLOSE)
"""How an activity attempt is lost: its worker died or hung (the call it made is in doubt)."""


def _digest(value: object) -> str:
    """A short fingerprint of an activity's input: its id changes when the input does.

    The input's versioned JSON (``codec.dumps``'s text) in UTF-8, a lone surrogate included
    (a plain run takes one in a prompt or arguments: so does the workflow).
    """
    envelope = {"daimon": CODEC_VERSION, "data": to_data(value)}
    text = json.dumps(envelope, ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class ToActivities(Extension):
    """Innermost in a served agent's chains: each model call and tool call becomes an activity.

    One instance serves every run; the run it acts for is the current workflow's. An
    activity's id holds a fingerprint of its input. On replay Temporal checks each scheduled
    activity against history, so an agent whose calls changed between deploys (its prompt,
    tools, or decisions) fails with a determinism error rather than reusing results recorded
    for different calls.
    """

    __slots__ = ()

    async def wrap_model_call(
        self, request: ChatRequest, ctx: RunState, call_next: CallModel
    ) -> ChatResponse:
        """Call the model in an activity."""
        run = _current()
        run.ctx = ctx
        run.continue_if_due(ctx)
        options = run.options
        call = ModelCallInput(agent=run.agent_name, request=request)
        try:
            response: ChatResponse = await workflow.execute_activity(
                MODEL_ACTIVITY,
                call,
                result_type=ChatResponse,
                activity_id=run.activity_id("model", request),
                start_to_close_timeout=_seconds(options.model_timeout),
                heartbeat_timeout=_seconds(options.heartbeat_timeout),
                retry_policy=run.retry_policy,
            )
        except ActivityError as exc:
            if is_cancelled_exception(exc):
                raise
            raise ModelError(_cause(exc)) from None
        run.record_model(response)
        return response

    async def wrap_tool_call(
        self, call: ToolCall, ctx: RunState, call_next: CallTool
    ) -> ToolOutput:
        """Run the tool in an activity; its result, its usage, and an ``EndRun`` come back.

        A call that hands a task to an agent this worker serves (an ``AgentTool``, a
        Supervisor's ``delegate``) runs that agent as a child workflow instead.
        """
        run = _current()
        child = run.delegation(call)
        if child is not None:
            output = await run.run_child(child, ctx)
            run.record_tool(call, output)
            return output
        payload = ToolCallInput(
            agent=run.agent_name,
            call=call,
            run_id=ctx.run_id,
            iteration=ctx.iteration,
            usage=ctx.usage,
            cost=ctx.cost,
            messages=tuple(ctx.messages),
            deps=run.deps,
        )
        result = await run.call_tool(payload, call, ctx)
        if result.usage is not None:
            ctx.report_usage(result.usage, result.cost)
        run.record_tool(call, result.output)
        if result.ended:
            raise EndRun(result.end_output, text=result.end_text)
        return result.output


class RunCheckpoint:
    """The checkpoint store of a served agent inside its workflow: the run's newest snapshot.

    It lives in the workflow's memory, not in a database (the workflow's history is what makes
    it durable): the loop saves a snapshot after each step as it does with any store, and a
    continue-as-new carries the newest one (daimon's codec, in the next run's input), from
    which the loop picks the run up as it would after a crash. One instance serves every run;
    each call acts for the current workflow's.
    """

    __slots__ = ()

    async def save(self, state: CheckpointState) -> None:
        """Keep ``state`` as the run's newest snapshot."""
        _current().checkpoint = state

    async def load(self, run_id: str) -> CheckpointState | None:
        """The run's newest snapshot (carried over by a continue-as-new, or saved since)."""
        saved = _current().checkpoint
        return saved if saved is not None and saved.run_id == run_id else None

    async def list_runs(self) -> list[str]:
        """The current workflow's run, when it has a snapshot."""
        saved = _current().checkpoint
        return [] if saved is None else [saved.run_id]

    async def delete(self, run_id: str) -> None:
        """Forget the run's snapshot."""
        run = _current()
        if run.checkpoint is not None and run.checkpoint.run_id == run_id:
            run.checkpoint = None


def workflow_agent(agent: Agent[Any, Any]) -> Agent[Any, Any]:
    """``agent`` as its workflow runs it: calls go to activities, snapshots to the workflow.

    Built once per agent by the worker, outside the workflow sandbox. The workflow's history
    is the run's checkpoint; :class:`RunCheckpoint` keeps the snapshot a continue-as-new takes.
    """
    return agent.replace(extensions=(*agent.extensions, ToActivities()), checkpoint=RunCheckpoint())


def _current() -> AgentWorkflow:
    run = workflow.instance()
    if not isinstance(run, AgentWorkflow):
        raise DaimonError("daimon.temporal.ToActivities runs only inside daimon's AgentWorkflow")
    return run


@workflow.defn(name=WORKFLOW_NAME, failure_exception_types=[DaimonError])
class AgentWorkflow:
    """One agent run; approvals by update (or signal), its state and events by query."""

    def __init__(self) -> None:
        self.ctx: RunState | None = None
        self.agent_name = ""
        self.deps: Any = None
        self.options = ActivityOptions()
        self.retry_policy = RetryPolicy()
        self.run_once = RetryPolicy(maximum_attempts=1)
        """The retry policy of a ``once`` or ``ask`` tool's activity: one attempt."""
        self._agent: Agent[Any, Any] | None = None
        self._calls = 0
        self._calls_at_start = 0
        self._request: RunRequest | None = None
        self.checkpoint: CheckpointState | None = None
        """The run's newest snapshot (see :class:`RunCheckpoint`)."""
        self._phase: RunPhase = "running"
        self._pending: tuple[ApprovalRequest, ...] = ()
        self._decisions: dict[str, ApprovalDecision] = {}
        self._events: list[StreamEvent] = []
        self._events_before = 0
        self._paused: AgentResponse[Any] | None = None

    @workflow.run
    async def run(self, request: RunRequest) -> AgentResponse[Any]:
        """Run the agent to its answer, waiting (durably) for every approval it needs."""
        try:
            response = portable(await self._run(request))
            _check_carried(response)  # here, the run fails; later, every workflow task would
        except workflow.ContinueAsNewError:
            raise
        except BaseException as exc:
            self._phase = "cancelled" if is_cancelled_exception(exc) else "failed"
            raise
        self._phase = "completed"
        return response

    async def _run(self, request: RunRequest) -> AgentResponse[Any]:
        agent = self._start(request)
        run_id = request.run_id or workflow.info().workflow_id
        if agent is None:  # a team or flow: one activity
            return await self._prompt_activity(request, run_id)
        self._paused = request.paused
        response = request.paused or await agent.prompt(
            request.prompt,
            run_id=run_id,
            instructions=request.instructions,
            history=request.history or None,
        )
        if response.paused and not request.pausable:
            response.require_finished(f"agent {request.agent!r}, delegated to,")
        while response.paused:
            self._pending = response.pending_approvals
            self._phase = "awaiting_approval"
            if response is not request.paused and self._history_full():
                # a long run sheds its history while it waits: the paused state is all it needs
                self._continue_as_new(self._next(paused=response))
            await workflow.wait_condition(self._all_decided)
            decisions = {p.id: self._decisions.pop(p.id) for p in self._pending}
            self._pending = ()
            self._phase = "running"
            response = await agent.resume(response, decisions)
        return response

    def _start(self, request: RunRequest) -> Agent[Any, Any] | None:
        self._request = request
        self.checkpoint = request.resume
        self._events = list(request.events)
        self._events_before = request.events_before
        self._calls = self._calls_at_start = request.calls_before
        self.agent_name = request.agent
        self.deps = request.deps
        options = self.options = request.options
        self.retry_policy = RetryPolicy(
            initial_interval=_seconds(options.initial_interval),
            backoff_coefficient=options.backoff,
            maximum_interval=_seconds(options.max_interval),
            maximum_attempts=options.max_attempts,
            non_retryable_error_types=NEVER_RETRIED,
        )
        self.run_once = dataclasses.replace(self.retry_policy, maximum_attempts=1)
        self._agent = lookup(workflow.info().task_queue, request.agent).workflow_agent
        return self._agent

    async def _prompt_activity(self, request: RunRequest, run_id: str) -> AgentResponse[Any]:
        call = PromptInput(
            agent=request.agent,
            prompt=request.prompt,
            run_id=run_id,
            instructions=request.instructions,
            options=self.options,
        )
        response: AgentResponse[Any] = await workflow.execute_activity(
            PROMPT_ACTIVITY,
            call,
            result_type=AgentResponse,
            activity_id=self.activity_id("prompt", call),
            start_to_close_timeout=_seconds(self.options.tool_timeout),
            heartbeat_timeout=_seconds(self.options.heartbeat_timeout),
            retry_policy=self.retry_policy,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        return response

    # -------------------------------------------------------------------- sub-agents

    def delegation(self, call: ToolCall) -> _Child | None:
        """The served agent ``call`` hands its task to, when the call is a plain delegation.

        The tool says (``delegation``: an ``AgentTool`` or a Supervisor's ``delegate``); the
        sub-agent must be served on this task queue (by the very object the tool holds).
        """
        tool = self._agent.tools.get(call.name) if self._agent is not None else None
        delegate = getattr(tool, "delegation", None)
        found = delegate(call.arguments) if callable(delegate) else None
        if found is None:
            return None
        target, label, prompt = found
        name = served_name(workflow.info().task_queue, target)
        return None if name is None else _Child(name, label, prompt)

    async def run_child(self, child: _Child, ctx: RunState) -> ToolOutput:
        """Run the sub-agent as a child workflow; its answer, or the error the model reads.

        Its usage and cost are added to this run's, as a plain run's sub-agent's are.
        """
        assert self._request is not None
        request = RunRequest(
            agent=child.agent,
            prompt=child.prompt,
            deps=self.deps,
            options=self.options,
            continue_after=self._request.continue_after,
            pausable=False,
        )
        info = workflow.info()
        try:
            response: AgentResponse[Any] = await workflow.execute_child_workflow(
                WORKFLOW_NAME,
                request,
                id=f"{info.workflow_id}-{self.activity_id('agent', request)}",
                task_queue=info.task_queue,
                result_type=AgentResponse,
            )
        except ChildWorkflowError as exc:
            if is_cancelled_exception(exc):
                raise
            return _child_failed(child.label, exc)
        ctx.report_usage(response.usage, response.cost)
        return ToolOutput(content=response.text)

    # -------------------------------------------------------------------- tool calls

    async def call_tool(
        self, payload: ToolCallInput, call: ToolCall, ctx: RunState
    ) -> ToolCallResult:
        """The call's result, or the error the model reads; a call in doubt as its tool declared.

        Each run of the call (a first one, one a person approved after it was in doubt) is an
        activity of its own.
        """
        effect = self.effect(call)
        while True:
            try:
                return await self.tool_activity(payload, call, effect)
            except ActivityError as exc:
                if is_cancelled_exception(exc):
                    raise
                if effect not in ("once", "ask") or not _lost(exc):
                    # out of attempts: the model reads it, as in a plain run
                    return ToolCallResult(output=ToolOutput.error(f"Error: {_cause(exc)}"))
            doubt = await self.in_doubt(call, ctx)
            if doubt is not None:
                return ToolCallResult(output=doubt)

    def effect(self, call: ToolCall) -> Effect:
        """What the called tool declares its call does when in doubt (``@tool(effect=...)``)."""
        return "repeatable" if self._agent is None else effect_of(self._agent, call)

    async def tool_activity(
        self, payload: ToolCallInput, call: ToolCall, effect: Effect
    ) -> ToolCallResult:
        """Run the call as an activity; Temporal retries it by the run's policy.

        A ``once`` or ``ask`` call's activity has one attempt: one lost (its worker died, a
        heartbeat or start-to-close timeout) fails it, and the call is in doubt. Its tool's own
        errors are still retried by the agent's ``tool_retry_policy`` (the tool finished), in
        that attempt (see :func:`~daimon.temporal._activities.call_tool`).
        """
        options = self.options
        in_doubt_is_final = effect in ("once", "ask")
        result: ToolCallResult = await workflow.execute_activity(
            TOOL_ACTIVITY,
            payload,
            result_type=ToolCallResult,
            activity_id=self.activity_id("tool", call),
            start_to_close_timeout=_seconds(options.tool_timeout),
            heartbeat_timeout=_seconds(options.heartbeat_timeout),
            retry_policy=self.run_once if in_doubt_is_final else self.retry_policy,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )
        return result

    async def in_doubt(self, call: ToolCall, ctx: RunState) -> ToolOutput | None:
        """What the model reads of a ``once`` or ``ask`` call whose attempt was lost.

        ``None``: a person approved running an ``ask`` call again (its intent is recorded
        again). The run's effect ledger is told as a resumed plain run's is.
        """
        if call.id not in ctx.effects:  # always recorded by the loop; kept safe regardless
            assert self._agent is not None
            intend(self._agent, ctx, [call])
        completed: dict[str, ToolOutput] = {}
        waiting = settle_doubts(ctx, [call], completed, {})
        if not waiting:  # once: the outcome is unknown
            return completed[call.id]
        decision = await self._ask(
            ApprovalRequest(id=call.id, call=call, run_id=ctx.run_id, in_doubt=True)
        )
        settle_doubts(ctx, [call], completed, {call.id: decision})
        if call.id in completed:  # rejected: not run again
            return completed[call.id]
        assert self._agent is not None
        intend(self._agent, ctx, [call])
        return None

    async def _ask(self, request: ApprovalRequest) -> ApprovalDecision:
        """Wait, durably, for a person's decision on ``request`` (the run is awaiting approval).

        A run that may not pause (a sub-agent's) fails with ``ApprovalRequiredError``, as it
        does when one of its calls needs approval.
        """
        assert self._request is not None
        if not self._request.pausable:
            raise ApprovalRequiredError((request,), f"agent {self.agent_name!r}, delegated to,")
        self._pending = (*self._pending, request)
        self._phase = "awaiting_approval"
        try:
            await workflow.wait_condition(lambda: request.id in self._decisions)
        finally:
            self._pending = tuple(p for p in self._pending if p is not request)
            if not self._pending:
                self._phase = "running"
        return self._decisions.pop(request.id)

    # ------------------------------------------------------------------ continue-as-new

    def continue_if_due(self, ctx: RunState) -> None:
        """Continue as a new workflow run, from the run's snapshot, when the history is full.

        Called before each model call. It acts only when this workflow run has called an
        activity (a fresh one never loops) and the newest snapshot is exactly the run's state
        now (taken at the end of the last tool turn, nothing pending since): the next run
        then makes this same model call, as a run resumed from its checkpoint would.
        """
        saved = self.checkpoint
        if saved is None or self._calls == self._calls_at_start or not self._history_full():
            return
        if _is_state(saved, ctx):
            self._continue_as_new(self._next(resume=saved))

    def _continue_as_new(self, request: RunRequest) -> None:
        """Continue as a new workflow run from ``request``, when Temporal can carry it.

        A request over the payload limit (a run whose messages hold megabytes) goes on in this
        workflow run instead: checked here, it would otherwise fail every workflow task.
        """
        try:
            _check_carried(request)
        except SerializationError:
            return
        workflow.continue_as_new(request)

    def _history_full(self) -> bool:
        info = workflow.info()
        assert self._request is not None
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._request.continue_after
        )

    def _next(
        self, *, paused: AgentResponse[Any] | None = None, resume: CheckpointState | None = None
    ) -> RunRequest:
        """The next workflow run's input: the run's state, the newest events, the counters."""
        assert self._request is not None
        kept = self._events[-CARRIED_EVENTS:]
        return dataclasses.replace(
            self._request,
            paused=paused,
            resume=resume,
            events_before=self._events_before + len(self._events) - len(kept),
            events=tuple(kept),
            calls_before=self._calls,
        )

    def activity_id(self, kind: str, value: object) -> str:
        """The next activity's id: its kind, its number in the run, its input's fingerprint."""
        self._calls += 1
        return f"{kind}-{self._calls}-{_digest(value)}"

    def _all_decided(self) -> bool:
        return all(p.id in self._decisions for p in self._pending)

    def _undecided(self) -> tuple[ApprovalRequest, ...]:
        """The calls still waiting for a decision (a decided one waits only for the run)."""
        return tuple(p for p in self._pending if p.id not in self._decisions)

    # ------------------------------------------------------------------------- approvals

    @workflow.update(name="decide")
    async def decide(self, decision: Decision) -> RunStatus:
        """Approve or reject one pending call; the run's status after it."""
        self._decisions[decision.approval_id] = ApprovalDecision(
            approved=decision.approved, reason=decision.reason
        )
        return self.status()

    @decide.validator
    def _check_decision(self, decision: Decision) -> None:
        undecided = self._undecided()
        if not any(p.id == decision.approval_id for p in undecided):
            pending = ", ".join(p.id for p in undecided) or "none"
            raise ApplicationError(
                f"no pending approval {decision.approval_id!r} (pending: {pending})",
                type="ApprovalNotPending",
                non_retryable=True,
            )

    @workflow.signal(name="decide_signal")
    def decide_signal(self, decision: Decision) -> None:
        """Approve or reject by signal (fire and forget); an unknown id is ignored."""
        if any(p.id == decision.approval_id for p in self._pending):
            self._decisions[decision.approval_id] = ApprovalDecision(
                approved=decision.approved, reason=decision.reason
            )

    # --------------------------------------------------------------------------- queries

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        """The run's phase, messages, usage, cost, effect ledger and its pending approvals.

        A call in doubt whose tool's effect is ``ask`` is pending too (``in_doubt``). A decided
        call is no longer pending, even before the run has resumed with it; once
        every call is decided the run is ``running``.
        """
        ctx = self.ctx
        events = self._events_before + len(self._events)
        paused = self._paused
        pending = self._undecided()
        waiting = self._phase == "awaiting_approval"
        phase: RunPhase = "running" if waiting and not pending else self._phase
        if ctx is None and paused is not None:  # continued as new: the paused run's state
            return RunStatus(
                phase=phase,
                iteration=paused.iterations,
                usage=paused.usage,
                cost=paused.cost,
                messages=paused.messages,
                pending_approvals=pending,
                events=events,
                effects=dict(paused.state.effects) if paused.state is not None else {},
            )
        saved = self.checkpoint
        if ctx is None and saved is not None:  # continued as new: the carried snapshot
            return RunStatus(
                phase=self._phase,
                iteration=saved.iteration,
                usage=saved.usage,
                cost=saved.cost,
                messages=saved.messages,
                events=events,
                effects=dict(saved.effects),
            )
        if ctx is None:
            return RunStatus(phase=self._phase, events=events)
        return RunStatus(
            phase=phase,
            iteration=ctx.iteration,
            usage=ctx.usage,
            cost=ctx.cost,
            messages=tuple(ctx.messages),
            pending_approvals=pending,
            events=events,
            effects=dict(ctx.effects),
        )

    @workflow.query(name="events")
    def events(self, after: int) -> EventPage:
        """The run's events from index ``after`` on (a client polls them to stream).

        Indexes count from the run's start; a continue-as-new carries the newest
        ``CARRIED_EVENTS`` events over (a client further behind skips the older ones).
        """
        first = max(after - self._events_before, 0)
        return EventPage(start=self._events_before + first, events=tuple(self._events[first:]))

    # ---------------------------------------------------------------------------- events

    def record_model(self, response: ChatResponse) -> None:
        """A model turn's events: its text, and each tool call it asked for."""
        message = response.message
        if message.text:
            self._events.append(TextDelta(text=message.text))
        for index, call in enumerate(message.tool_calls):
            self._events.append(ToolCallEnd(call=call, index=index))

    def record_tool(self, call: ToolCall, output: ToolOutput) -> None:
        """A tool call's result."""
        self._events.append(ToolResult(call_id=call.id, name=call.name, output=output))


@dataclasses.dataclass(frozen=True, slots=True)
class _Child:
    """A sub-agent run: the served agent's name, the name the caller knows, the prompt."""

    agent: str
    label: str
    prompt: str


def _child_failed(label: str, exc: ChildWorkflowError) -> ToolOutput:
    """What the calling model reads of a failed sub-agent (as ``run_sub_agent`` words it)."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError):
        return ToolOutput.error(f"Error: agent {label!r} failed: {_cause(exc)}")
    if cause.type == "ApprovalRequiredError":
        return ToolOutput.error(f"Error: {cause.message}")
    return sub_agent_failed(label, cause.type or "ApplicationError", cause.message)


def _is_state(saved: CheckpointState, ctx: RunState) -> bool:
    """Whether ``saved`` is the run's state now: between turns, and nothing changed since."""
    progress = saved.progress
    return (
        progress is not None
        and progress.status == "running"
        and not saved.pending_tool_calls
        and not saved.completed_tool_results
        and saved.iteration == ctx.iteration
        and saved.cost == ctx.cost
        and saved.usage == ctx.usage
        and len(saved.messages) == len(ctx.messages)
        and all(map(operator.is_, saved.messages, ctx.messages))
    )


def _check_carried(value: object) -> None:
    """Raise :class:`SerializationError` when Temporal cannot carry ``value`` (see the converter).

    The SDK encodes a workflow's result and a continue-as-new's input after the workflow's code
    has run, where an error fails the workflow task again and again; checked in the code, the
    run fails, or goes on, at once.
    """
    workflow.payload_converter().to_payloads([value])


def _lost(exc: ActivityError) -> bool:
    """Whether the activity failed by losing its attempt (its worker died or hung)."""
    cause = exc.cause
    return isinstance(cause, ActivityTimeout) and cause.type in LOST


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def _cause(exc: FailureError) -> str:
    cause = exc.cause
    return str(cause) if cause is not None else str(exc)
