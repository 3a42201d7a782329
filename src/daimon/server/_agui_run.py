"""One AG-UI run, without any web library: what a replica, or a worker, runs.

An :class:`AguiJob` is an accepted ``POST /agui`` for an agent: a new prompt, or the thread's
paused run continued (with approval decisions, or with front-end tools' results). Its
:meth:`~AguiJob.frames` are the run's AG-UI events, one SSE frame each (see
:mod:`daimon.server._agui_events`); a run that pauses is kept in the store's
:class:`~daimon._paused_runs.PausedRuns` (``"agui"``) before its ``RUN_FINISHED``. An
:class:`AguiFlowJob` is one for a flow (``PromptableFlow``): its nodes as steps and state
deltas, its agents' text and tool calls, its answer last. The frames go to the run's log from
the replica's own process or, with a broker (``daimon serve --broker``), from the worker that
runs the task: the job's ``spec()`` travels in the task's metadata and :func:`job_from_spec`
makes the job again there.

A later attempt of a worker's task (its worker died) goes on from what the lost attempt logged
(:meth:`AguiJob.resume`): no second ``RUN_STARTED``, the lost attempt's open text message and tool
calls ended first, then a ``CUSTOM`` ``daimon.attempt`` event; what came after the lost attempt's
last finished step may come again. A flow, or another promptable that cannot resume (a
HandoffNetwork: see :func:`daimon._run_logs.runs_again`), is never run again: it prompts agents
with fresh run ids and no record of the tools they ran, so a second run could run those tools
twice. A later attempt of such a run ends what the lost one left open and ends the stream with
``RUN_ERROR`` (``RunLost``); when the log holds the run's end, it adds nothing.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncGenerator, Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    StepFinishedEvent,
    TextMessageEndEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
)

from daimon._paused_runs import PausedRuns
from daimon._run_logs import lost_run, runs_again
from daimon.core import codec
from daimon.core.cancel import CancelToken
from daimon.core.errors import (
    ApprovalRequiredError,
    BuilderError,
    RunCancelled,
    SerializationError,
)
from daimon.core.errors import TimeoutError as RunTimeoutError
from daimon.core.events import Done, ToolResult
from daimon.core.messages import Message, Role
from daimon.core.protocols import Promptable, Resumable
from daimon.core.results import AgentResponse, ApprovalDecision
from daimon.core.state_store import StateStore
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.orchestration import PromptableFlow
from daimon.server._agui_events import (
    AguiRun,
    agent_state,
    encode,
    flow_state,
    messages_snapshot,
    node_events,
)
from daimon.server._failures import RunLost
from daimon.server._flow_run import as_flow

__all__ = (
    "AGUI_KIND",
    "AguiFlowJob",
    "AguiJob",
    "Continued",
    "RunInput",
    "failure_frames",
    "job_from_spec",
    "prompt_stream",
)

AGUI_KIND = "agui"
"""The kind of the paused runs this front end keeps, and of its runs sent to workers."""
_FORMAT = 1
"""The format of agents' runs sent to workers."""
_FLOW_FORMAT = 2
"""The format of flows' runs sent to workers: a worker that reads format 1 only would run a flow
as an agent's run, and run it again on a later attempt; it refuses this format instead."""
_STOPPED = (asyncio.CancelledError, RunCancelled, RunTimeoutError)
"""How a run the server stopped ends: its log's writer adds the ``RUN_ERROR`` that says so."""
_ENDS = frozenset({"RUN_FINISHED", "RUN_ERROR"})
_LOST = {"daimon": {"lost": True}}
"""The metadata of the events that end what a lost attempt left open."""


@dataclass(frozen=True, slots=True)
class RunInput:
    """What a run takes from its ``RunAgentInput``, checked."""

    thread_id: str
    run_id: str
    parent_run_id: str | None
    prompt: str | Message
    instructions: str | None
    state: dict[str, Any]
    """The client's state: the run's own goes beside it, under ``"daimon"``."""
    client_tools: tuple[ToolSpec, ...] = ()
    """The front-end tools, as the run's client tools."""


@dataclass(frozen=True, slots=True)
class Continued:
    """The thread's paused run, taken from the store to go on with answers."""

    paused: AgentResponse  # unparameterized: the codec decodes no parameterized class
    shown: tuple[str, ...] = ()
    """Calls whose results the paused run's stream sent (not sent again)."""
    decisions: dict[str, ApprovalDecision] | None = None
    """The approvals' answers (a ``resume``)..."""
    results: dict[str, ToolOutput] | None = None
    """... or the front-end tools' results (``tool`` messages)."""


class AguiJob:
    """One agent's AG-UI run: its frames, and the paused run it keeps (see the module docstring).

    Args:
        agent: The agent (the served promptable called ``name``).
        name: Its served name: paused runs are kept under it and the thread.
        model: The model its state names before the run says which answered.
        given: The run's input.
        paused: Where a run that pauses is kept.
        continued: The paused run this one continues, if any.
    """

    __slots__ = (
        "_after",
        "_agent",
        "_given",
        "_left",
        "_model",
        "_name",
        "_opening",
        "_paused",
        "_run",
        "_shown",
        "_started",
        "response",
    )

    keeps_pauses = True
    """A paused run is kept in the store's paused runs, not by a broker: its task completes."""

    def __init__(
        self,
        agent: Promptable,
        name: str,
        model: str,
        given: RunInput,
        paused: PausedRuns,
        continued: Continued | None = None,
    ) -> None:
        self._agent = agent
        self._name = name
        self._model = model
        self._given = given
        self._paused = paused
        self._after = continued
        state = {**given.state, "daimon": agent_state(name)}
        self._run = AguiRun(given.thread_id, given.run_id, state, given.parent_run_id)
        self._run.model(model)
        self._shown = set(continued.shown) if continued is not None else set[str]()
        self._started = False
        self._opening: list[BaseEvent] = []
        self._left: list[BaseEvent] | None = None
        """A later attempt's events, when the run cannot run again (see :attr:`retries`)."""
        self.response: AgentResponse[Any] | None = None

    @property
    def name(self) -> str:
        """The served name of the run's agent."""
        return self._name

    @property
    def retries(self) -> bool:
        """Whether a failed attempt may be tried again: see :func:`runs_again`.

        An agent's checkpoint says what already ran.
        """
        return runs_again(self._agent)

    async def put_back(self) -> None:
        """Keep again the paused run this one was to continue (it could not start)."""
        after = self._after
        if after is not None:
            shown = frozenset(after.shown)
            await self._paused.keep(self._name, after.paused, self._given.thread_id, shown)

    async def frames(self, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The run's AG-UI events, one SSE frame each."""
        if self._left is not None:
            for frame in _left_frames(self, self._left, self._given.run_id):
                yield frame
            return
        if self._started and self.response is not None:
            return  # the lost attempt logged the run's end: nothing is left to send
        batches = self._prompted(token) if self._after is None else self._resumed(token)
        try:
            async for batch in batches:
                for event in batch:
                    yield encode(event)
        finally:
            await batches.aclose()

    def on_error(self, exc: BaseException) -> bytes:
        """The ``RUN_ERROR`` that ends a run that failed, timed out or was cancelled."""
        return b"".join(encode(event) for event in self._run.failed(exc))

    async def end(self, exc: BaseException, reason: str | None) -> None:
        """Nothing to record: the log's ``RUN_ERROR`` says how the run ended."""

    def resume(self, logged: Sequence[str]) -> None:
        """Go on after the frames a lost attempt logged.

        The run is not started again: its state carries on from the logged snapshot and deltas,
        the results sent count as shown, and the open text message and tool calls are ended.
        A run that cannot run again ends as a flow's does (see :meth:`AguiFlowJob.resume`).
        """
        if not runs_again(self._agent):
            self._left, self.response = _lost(self._run, logged, self._name, self._given.run_id)
            return
        found = _Logged.scan(logged)
        if not found.started:
            return
        self._started = True
        self._shown |= found.shown
        if found.end is not None:
            self.response = _ended_response(found.end, self._given.run_id)
        self._opening = [
            *found.restore(self._run),
            *found.closing(),
            CustomEvent(name="daimon.attempt", value={"logged": found.count}),
        ]

    def _start(self) -> list[BaseEvent]:
        """The run's first events: ``RUN_STARTED`` and its state, or a later attempt's."""
        if self._started:
            return self._opening
        self._started = True
        return list(self._run.start())

    async def _prompted(self, token: CancelToken) -> AsyncGenerator[Sequence[BaseEvent], None]:
        """A new prompt's events, as its agent streams them."""
        run = self._run
        events = self._start()
        stream = prompt_stream(self._agent, self._given, token)
        try:
            async for event in stream:
                if isinstance(event, Done):
                    run.model(event.model)
                    if event.response is not None:
                        events += await self._ended(event.response, frozenset(self._shown))
                else:
                    if isinstance(event, ToolResult):
                        self._shown.add(event.call_id)
                    events += run.agent_event(event)
                if events:
                    yield events
                    events = []
        except _STOPPED:
            raise
        except Exception:
            yield [*events, *run.close_text()]  # then the RUN_ERROR of on_error
            raise
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def _resumed(self, token: CancelToken) -> AsyncGenerator[Sequence[BaseEvent], None]:
        """A paused run continued: the conversation so far, then what followed.

        Results the paused run's stream sent already are not sent again.
        """
        after = self._after
        assert after is not None
        run, paused, thread = self._run, after.paused, self._given.thread_id
        if self._started:
            yield self._opening
        else:
            # The conversation so far, the paused call included: the results below answer it.
            memory = _memory(self._agent)
            earlier = await memory.get_messages(thread) if memory is not None else []
            history = messages_snapshot(thread, [*earlier, *paused.messages])
            yield [*self._start(), history]
        response = await self._continue(after, token)
        added = [
            m
            for m in response.messages[len(paused.messages) :]
            if m.role is not Role.TOOL or m.tool_call_id not in self._shown
        ]
        yield [*run.replay(added), *await self._ended(response)]

    def _continue(self, after: Continued, token: CancelToken) -> Awaitable[AgentResponse[Any]]:
        agent: Any = self._agent  # Resumable: checked before the run was accepted
        if after.decisions is not None:
            resumed: Awaitable[AgentResponse[Any]] = agent.resume(
                after.paused, after.decisions, cancel=token
            )
            return resumed
        tools = self._given.client_tools or None
        return agent.resume(  # type: ignore[no-any-return]
            after.paused, results=after.results, client_tools=tools, cancel=token
        )

    async def _ended(
        self, response: AgentResponse[Any], shown: frozenset[str] = frozenset()
    ) -> list[BaseEvent]:
        """The end of the run; a paused one is kept for its resume, if it can have one."""
        self.response = response
        run = self._run
        if response.paused:
            if not isinstance(self._agent, Resumable):
                paused = ApprovalRequiredError(
                    response.pending_approvals, f"a promptable that cannot resume ({self._name!r})"
                )
                return [*run.close_text(), *run.update(status="failed"), *run.failed(paused)]
            await self._paused.keep(self._name, response, self._given.thread_id, shown)
        return run.finished(response)

    def spec(self) -> dict[str, Any]:
        """What a worker needs to run this again (JSON): see :func:`job_from_spec`."""
        return {
            "kind": AGUI_KIND,
            "format": _FORMAT,
            "agent": self._name,
            "model": self._model,
            "ttl": self._paused.ttl,
            "input": codec.to_data(self._given),
            "continued": None if self._after is None else codec.to_data(self._after),
        }


class AguiFlowJob:
    """One flow's AG-UI run: its nodes, its agents' events, its answer (see the module docstring).

    Args:
        flow: The flow (the served promptable called ``name``).
        name: Its served name.
        given: The run's input (its prompt is text: a flow takes no files).
    """

    __slots__ = ("_flow", "_given", "_left", "_name", "_run", "response")

    keeps_pauses = False
    """A flow does not pause: a node's agent that does fails the run."""
    retries = False
    """A failed attempt is not tried again: the flow's nodes would run again."""

    def __init__(self, flow: PromptableFlow, name: str, given: RunInput) -> None:
        self._flow = flow
        self._name = name
        self._given = given
        state = {**given.state, "daimon": flow_state(name, flow.kind)}
        self._run = AguiRun(given.thread_id, given.run_id, state, given.parent_run_id)
        self._left: list[BaseEvent] | None = None
        """A later attempt's events: what ends the lost attempt's run (the flow is not run)."""
        self.response: AgentResponse[Any] | None = None

    @property
    def name(self) -> str:
        """The served name of the run's flow."""
        return self._name

    async def put_back(self) -> None:
        """Nothing to keep again: a flow's run continues no paused run."""

    async def frames(self, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The run's AG-UI events, one SSE frame each; a later attempt's without the flow."""
        if self._left is not None:
            for frame in _left_frames(self, self._left, self._given.run_id):
                yield frame
            return
        batches = self._batches(token)
        try:
            async for batch in batches:
                for event in batch:
                    yield encode(event)
        finally:
            await batches.aclose()

    def on_error(self, exc: BaseException) -> bytes:
        """The ``RUN_ERROR`` that ends a run that was cancelled or timed out."""
        return b"".join(encode(event) for event in self._run.failed(exc))

    async def end(self, exc: BaseException, reason: str | None) -> None:
        """Nothing to record: the log's ``RUN_ERROR`` says how the run ended."""

    def resume(self, logged: Sequence[str]) -> None:
        """Stand in for the flow after a lost attempt, whose frames ``logged`` holds.

        The flow is not run again. When the log holds the run's end, nothing is left to send;
        otherwise what the lost attempt left open is ended (its text message, tool calls and
        steps, its state marked failed) and a ``RUN_ERROR`` (``RunLost``) ends the run.
        """
        self._left, self.response = _lost(self._run, logged, self._name, self._given.run_id)

    async def _batches(self, token: CancelToken) -> AsyncGenerator[Sequence[BaseEvent], None]:
        """The flow's events as its callbacks report them, its answer or failure last."""
        run, given = self._run, self._given
        queue: asyncio.Queue[list[BaseEvent] | None] = asyncio.Queue()
        on_agent = _agent_events(run, queue)
        yield run.start()
        text = given.prompt if isinstance(given.prompt, str) else given.prompt.text
        task = asyncio.create_task(
            self._flow.run(
                text,
                cancel=token,
                on_node=lambda event: queue.put_nowait(list(node_events(run, event))),
                on_agent_event=on_agent,
                run_id=given.run_id,
            )
        )
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (events := await queue.get()) is not None:
                if events:
                    yield events
            try:
                answer = task.result()
            except _STOPPED:
                raise
            except Exception as exc:
                self.response = AgentResponse(text="", run_id=given.run_id)
                yield [*run.close_text(), *run.update(status="failed"), *run.failed(exc)]
                return
            self.response = AgentResponse(
                text=answer.text,
                usage=answer.usage,
                cost=answer.cost,
                iterations=answer.usage.requests,
                run_id=given.run_id,
                output=answer.text if answer.output is None else answer.output,
            )
            yield run.flow_finished(answer.text, answer.output, answer.usage, answer.cost)
        finally:
            if not task.done():
                token.cancel("the stream ended")
                task.cancel()
                await asyncio.wait({task})
            if not task.cancelled():
                task.exception()

    def spec(self) -> dict[str, Any]:
        """What a worker needs to run this (JSON): see :func:`job_from_spec`."""
        return {
            "kind": AGUI_KIND,
            "format": _FLOW_FORMAT,
            "flow": True,
            "agent": self._name,
            "input": codec.to_data(self._given),
        }


def _agent_events(run: AguiRun, queue: asyncio.Queue[list[BaseEvent] | None]) -> Any:
    """The ``on_agent_event`` of a flow's run: each of its agents' events, scoped to its node."""
    prompts: dict[str, int] = {}

    def on_agent(event: Any) -> None:
        key = f"{event.node}/{event.step}"
        scope = run.scope(
            f"{key}/{prompts.get(key, 0)}", {"daimon": {"node": event.node, "step": event.step}}
        )
        if isinstance(event.event, Done):
            prompts[key] = prompts.get(key, 0) + 1
            run.model(event.event.model)
            queue.put_nowait(run.close_text())
        else:
            queue.put_nowait(run.agent_event(event.event, scope))

    return on_agent


def _lost(
    run: AguiRun, logged: Sequence[str], name: str, run_id: str
) -> tuple[list[BaseEvent], AgentResponse[Any] | None]:
    """A later attempt of a run of ``name`` that is not run again: its events, and response.

    When the lost attempt had logged the run's end, there are no events, and the response is
    the logged one's. Otherwise what the lost attempt left open is ended (its text message,
    tool calls and steps, its state marked failed) and a ``RUN_ERROR`` (``RunLost``) ends it.
    """
    found = _Logged.scan(logged)
    if found.end is not None:
        return [], _ended_response(found.end, run_id)
    lost = lost_run(name)
    if found.started:
        opening = [*found.restore(run), *found.closing(), *_end_lost_steps(run, found.steps, lost)]
        opening.append(CustomEvent(name="daimon.attempt", value={"logged": found.count}))
    else:
        opening = run.start()
    return [*opening, *run.update(status="failed"), *run.failed(lost)], None


def _left_frames(job: AguiJob | AguiFlowJob, left: Sequence[BaseEvent], run_id: str) -> list[bytes]:
    """The frames of a later attempt that does not run (see :func:`_lost`); sets its response."""
    if job.response is None:
        job.response = AgentResponse(text="", run_id=run_id)
    return [encode(event) for event in left]


def _end_lost_steps(run: AguiRun, steps: Mapping[str, Any], lost: RunLost) -> list[BaseEvent]:
    """End the steps (a flow's nodes) a lost attempt left running: failed, for the lost worker."""
    if not steps:
        return []
    events: list[BaseEvent] = [
        StepFinishedEvent(
            step_name=node,
            metadata={
                "daimon": {
                    "step": step,
                    "lost": True,
                    "errorType": "RunLost",
                    "message": str(lost),
                }
            },
        )
        for node, step in steps.items()
    ]

    def failed(state: dict[str, Any]) -> None:
        nodes = state.setdefault("nodes", {})
        for node in steps:
            entry = nodes.setdefault(node, {"runs": 1})
            if isinstance(entry, dict):
                entry["status"] = "failed"

    return [*events, *run.change(failed)]


def failure_frames(spec: Mapping[str, Any], exc: BaseException) -> list[bytes]:
    """The events that end a run whose job a worker could not make from ``spec``.

    A worker without the agent, say: ``RUN_STARTED``, then ``RUN_ERROR``, which clients read.
    """
    given = spec.get("input")
    ids = given if isinstance(given, Mapping) else {}
    parent = ids.get("parent_run_id")
    run = AguiRun(
        str(ids.get("thread_id", "")),
        str(ids.get("run_id", "")),
        {},
        parent if isinstance(parent, str) else None,
    )
    return [encode(event) for event in [*run.start()[:1], *run.failed(exc)]]


def job_from_spec(
    agent: Promptable, spec: Mapping[str, Any], store: StateStore
) -> AguiJob | AguiFlowJob:
    """The run an :meth:`AguiJob.spec` or :meth:`AguiFlowJob.spec` describes, with ``agent``.

    An agent's run keeps to ``store`` (its paused runs).

    Raises:
        SerializationError: The spec is of another format, or malformed.
        BuilderError: The spec is a flow's run and ``agent`` no flow, or the reverse.
    """
    form = spec.get("format")
    if form not in (_FORMAT, _FLOW_FORMAT):
        raise SerializationError(
            f"an AG-UI run of format {form!r}; this daimon reads {_FORMAT} and {_FLOW_FORMAT}"
        )
    name = str(spec["agent"])
    flow = as_flow(agent, name)
    if bool(spec.get("flow")) != (flow is not None):
        said = "a flow's" if spec.get("flow") else "an agent's"
        has = "not a flow" if flow is None else "a flow"
        raise BuilderError(
            f"the task is {said} AG-UI run of {name!r}, but this worker's {name!r} is {has} "
            f"({type(agent).__name__}): workers need the agents and flows their servers serve, "
            "by the same names"
        )
    given = codec.from_data(RunInput, spec["input"])
    if flow is not None:
        return AguiFlowJob(flow, name, given)
    continued = spec.get("continued")
    return AguiJob(
        agent,
        name,
        str(spec["model"]),
        given,
        PausedRuns(store, AGUI_KIND, spec.get("ttl")),
        None if continued is None else codec.from_data(Continued, continued),
    )


def prompt_stream(agent: Promptable, given: RunInput, token: CancelToken) -> Any:
    """The run's events; front-end tools go to the agent as client tools."""
    if given.client_tools:
        return agent.prompt_stream(  # type: ignore[call-arg]  # an Agent: checked
            given.prompt,
            session_id=given.thread_id,
            instructions=given.instructions,
            run_id=given.run_id,
            cancel=token,
            client_tools=given.client_tools,
        )
    return agent.prompt_stream(
        given.prompt,
        session_id=given.thread_id,
        instructions=given.instructions,
        run_id=given.run_id,
        cancel=token,
    )


def _memory(agent: Promptable) -> Any:
    """Where ``agent`` keeps sessions (``None``: nowhere)."""
    memory = getattr(agent, "memory", None)
    return memory if memory is not None and hasattr(memory, "get_messages") else None


def _logged_events(logged: Sequence[str]) -> list[dict[str, Any]]:
    """The AG-UI events in logged frames, in order (only their data lines are read)."""
    events: list[dict[str, Any]] = []
    for value in logged:
        for line in value.splitlines():
            if line.startswith("data: "):
                event = json.loads(line[len("data: ") :])
                if isinstance(event, dict):
                    events.append(event)
    return events


@dataclass(slots=True)
class _Logged:
    """What a lost attempt's logged events say: the state sent, what is open, the run's end."""

    count: int = 0
    """The events logged."""
    started: bool = False
    """Whether ``RUN_STARTED`` was logged."""
    state: Any = None
    """The state a client holds (``None``: no snapshot was logged)."""
    texts: dict[str, None] = field(default_factory=dict)
    """The open text messages."""
    calls: dict[str, str] = field(default_factory=dict)
    """The open tool calls, with their arguments so far."""
    steps: dict[str, Any] = field(default_factory=dict)
    """The open steps (a flow's nodes), with their step numbers."""
    shown: set[str] = field(default_factory=set)
    """The tool calls whose results were sent."""
    end: dict[str, Any] | None = None
    """The logged ``RUN_FINISHED`` or ``RUN_ERROR``."""

    @classmethod
    def scan(cls, logged: Sequence[str]) -> _Logged:
        """What the logged frames ``logged`` say."""
        found = _logged_events(logged)
        seen = cls(count=len(found))
        for event in found:
            seen._add(event)
        return seen

    def _add(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "RUN_STARTED":
            self.started = True
        elif kind == "STATE_SNAPSHOT":
            self.state = copy.deepcopy(event["snapshot"])
        elif kind == "STATE_DELTA" and self.state is not None:
            self.state = jsonpatch.apply_patch(self.state, event["delta"])
        elif kind == "TEXT_MESSAGE_START":
            self.texts[event["messageId"]] = None
        elif kind == "TEXT_MESSAGE_END":
            self.texts.pop(event.get("messageId", ""), None)
        elif kind == "TOOL_CALL_START":
            self.calls[event["toolCallId"]] = ""
        elif kind == "TOOL_CALL_ARGS" and event.get("toolCallId") in self.calls:
            self.calls[event["toolCallId"]] += str(event.get("delta", ""))
        elif kind == "TOOL_CALL_END":
            self.calls.pop(event.get("toolCallId", ""), None)
        elif kind == "TOOL_CALL_RESULT":
            self.shown.add(event["toolCallId"])
        elif kind == "STEP_STARTED":
            meta = event.get("metadata")
            daimon = meta.get("daimon") if isinstance(meta, dict) else None
            self.steps[event["stepName"]] = daimon.get("step") if isinstance(daimon, dict) else None
        elif kind == "STEP_FINISHED":
            self.steps.pop(event.get("stepName", ""), None)
        elif kind in _ENDS:
            self.end = event

    def restore(self, run: AguiRun) -> list[BaseEvent]:
        """Carry ``run`` on from the logged state; the snapshot to send when none was logged."""
        state = self.state
        if isinstance(state, dict) and isinstance(state.get("daimon"), dict):
            run.restore(state)
            return []
        return run.start()[1:]  # the lost attempt did not log its snapshot: deltas need one

    def closing(self) -> list[BaseEvent]:
        """End the open text messages and tool calls (their events marked lost)."""
        return [
            *(TextMessageEndEvent(message_id=text, metadata=_LOST) for text in self.texts),
            *(event for call, args in self.calls.items() for event in _end_lost_call(call, args)),
        ]


def _ended_response(event: Mapping[str, Any], run_id: str) -> AgentResponse[Any]:
    """The response a logged end stands for (its answer's text, when it finished)."""
    summary = event.get("metadata")
    daimon = summary.get("daimon") if isinstance(summary, Mapping) else None
    text = daimon.get("text") if isinstance(daimon, Mapping) else None
    return AgentResponse(text=text if isinstance(text, str) else "", run_id=run_id)


def _end_lost_call(call_id: str, args: str) -> list[BaseEvent]:
    """End a tool call a lost attempt left open; its arguments made whole JSON first.

    A client takes the arguments of an ended call as JSON: what the lost attempt sent is
    completed (the open string, array and object closed; a dangling key or token finished).
    """
    events: list[BaseEvent] = []
    rest = _json_completion(args)
    if rest:
        events.append(ToolCallArgsEvent(tool_call_id=call_id, delta=rest))
    events.append(ToolCallEndEvent(tool_call_id=call_id, metadata=_LOST))
    return events


_TOKEN_ENDS = ("", "0", "e", "ue", "rue", "se", "lse", "alse", "l", "ll", "ull")
"""What may finish a cut JSON token (a number, ``true``, ``false``, ``null``)."""
_VALUE_ENDS = ("", "null", ":null", '"":null')
"""What may finish a cut member: nothing, a value, a key's value, a member after a comma."""


def _json_completion(text: str) -> str:
    """The shortest tried text that makes the prefix ``text`` of a JSON value whole JSON.

    ``""`` when it is already whole (or nothing was sent); ``"{}"``-like closers otherwise.
    """
    if not text.strip():
        return ""
    closers: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            closers.append("}" if char == "{" else "]")
        elif char in "}]" and closers:
            closers.pop()
    tail = "".join(reversed(closers))
    quotes = (("\\" if escaped else "") + '"',) if in_string else ("",)
    for token in _TOKEN_ENDS if not in_string else ("", "0", "00", "000", "0000"):
        for quote in quotes:
            for value in _VALUE_ENDS:
                candidate = token + quote + value + tail
                try:
                    json.loads(text + candidate)
                except ValueError:
                    continue
                return candidate
    return ""  # no completion found: the call ends as it is
