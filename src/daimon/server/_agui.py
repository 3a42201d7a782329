"""AG-UI 1.0 for front ends: ``POST /agui`` (the default agent) and ``POST /agui/{agent}``.

The body is a ``RunAgentInput``; the answer is a ``text/event-stream`` of AG-UI events (see
:mod:`daimon.server._agui_events` for how a run becomes them). What the server does with the
input:

- ``threadId`` is the session: an agent keeps the conversation in its memory under it, so the
  prompt is the last message (a user message) and earlier ones are what the client shows. A
  flow keeps no conversation: it answers the last user message.
- The prompt may carry files: AG-UI's image, audio and document parts become daimon's, within
  the server's limits (:mod:`daimon.server._agui_media`; 413, 415 or 422 otherwise). A flow
  takes text only (422 for files).
- ``runId`` names the run (daimon's run id for an agent's run). For an agent with a checkpoint
  store, the id of a run the store holds unfinished (its process died) resumes that run where
  it stopped; the prompt is not added again.
- ``state`` is the state the run starts from: it comes back in the first ``STATE_SNAPSHOT``
  with the run's own state under ``"daimon"`` (status, model and tool calls, usage; a flow's
  nodes), which ``STATE_DELTA`` patches keep up to date.
- ``tools`` are front-end tools, the run's client tools (``daimon.server._client_tools``): the
  model sees them beside the agent's own. A call to one streams as ``TOOL_CALL_START``/``ARGS``/
  ``END`` and the run ends with ``RUN_FINISHED`` (success; the run's state says ``paused``)
  without its result: the front end runs the tool and starts the thread's next run with a
  ``tool`` message per call (``toolCallId``; ``error`` marks a failure), which continues the
  paused run. A tool message for a call the thread's run does not wait for is 422; front-end
  tools that clash with the agent's, or whose parameters are no object schema, are 422 too.
- ``context`` entries are added to the agent's instructions.
- ``resume`` answers the interrupts that paused the thread's last run (below).

Approvals: a run that stops for a person's approval ends with ``RUN_FINISHED`` whose outcome is
``interrupt``, one interrupt per pending tool call (``reason: "tool_approval"``, ``toolCallId``, its
id the approval's). An interrupt whose ``metadata.daimon.inDoubt`` is true asks about a call in
doubt (its tool's effect is ``ask``): it started in an earlier attempt of the run and its outcome is
unknown, so approving runs it again. The client resumes with a new run on the same thread whose
``resume`` answers every interrupt: ``status: "resolved"`` approves (unless ``payload`` is ``false``
or ``{"approved": false, "reason"?}``), ``"cancelled"`` rejects. The resumed run streams what
followed (the tool's result, the answer) and ends like any run. A resume for a thread with no paused
run is 409, one that leaves an interrupt unanswered or names an unknown one is 422, and a new run on
a thread whose run waits for answers is 409: the paused run is kept in each case. Paused runs are
kept in the server's state store (:mod:`daimon._paused_runs`), for ``keep_for`` seconds: any
replica sharing the store resumes them, and of two resumes racing one wins (the other is that 409).
A resume of one no longer kept (past ``keep_for``; with the in-memory store, past the newest 1,000
or across a restart) is that 409 too.

Streams: a run goes on in a task of its own, writing its events to a log in the state store
(:mod:`daimon.server._run_log`), and the client reads the log: each event has an SSE ``id``. A
client that lost its stream sends the request again with ``Last-Event-ID`` (to any replica sharing
the store) and gets the events after that one, each once, in order; a malformed id is 400, one
whose stream is not kept (unknown, or ended past the server's retention) 404. A run nobody reads
goes on for the server's ``stream_grace``, then is cancelled (its log ends with ``RUN_ERROR``).

Workers: with a broker (``daimon serve --broker``), a run (an agent's, new, resumed or continued,
or a flow's) is a task a worker runs (:mod:`daimon.server._agui_run`, the run without the web): the
worker writes its events to the log and keeps a run that pauses in the store, as the replica would;
503 when the broker cannot take it (a paused run it was to continue is kept again). A flow's run is
not run again when its worker is lost: the stream ends with ``RUN_ERROR`` (``RunLost``), as its
nodes' tools could run twice.

Errors: a body that is not a ``RunAgentInput`` is 422 (400 for invalid JSON), an unknown agent
404, all before the stream starts; a run that fails ends its stream with ``RUN_ERROR`` (``code``:
daimon's error type, ``TimeoutError`` past the request timeout).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ag_ui.core import RunAgentInput
from fastapi import Request
from pydantic import ValidationError
from starlette.responses import Response

from daimon._paused_runs import PausedRun, PausedRuns
from daimon.core.messages import Message
from daimon.core.protocols import Promptable, Resumable
from daimon.core.results import AgentResponse, ApprovalDecision
from daimon.core.tools import ToolOutput, ToolSpec
from daimon.orchestration import PromptableFlow
from daimon.server._agents import ServedAgents
from daimon.server._agui_events import AguiRun, encode
from daimon.server._agui_media import MediaRefused, user_prompt
from daimon.server._agui_run import AGUI_KIND, AguiFlowJob, AguiJob, Continued, RunInput
from daimon.server._broker_runs import job_task, submit_run
from daimon.server._client_tools import NoClientTools, spec, takes_client_tools
from daimon.server._errors import error_response
from daimon.server._run_log import EventId, RunLogs, StreamGone
from daimon.server._settings import ServerSettings
from daimon.server._sse import Source
from daimon.server._state import ServerState

__all__ = ("Endpoint",)


class _Refused(Exception):
    """A request answered with a 4xx before any event is sent."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


@dataclass(frozen=True, slots=True)
class _Input:
    """A ``RunAgentInput`` and what a run takes from it, checked."""

    body: RunAgentInput
    run: RunInput

    @property
    def prompt(self) -> str | Message:
        return self.run.prompt

    @property
    def client_tools(self) -> tuple[ToolSpec, ...]:
        return self.run.client_tools


class Endpoint:
    """Answers AG-UI requests for the served promptables (see the module docstring)."""

    __slots__ = ("logs", "paused", "served", "settings", "state")

    def __init__(
        self, served: ServedAgents, settings: ServerSettings, state: ServerState, logs: RunLogs
    ) -> None:
        self.served = served
        self.settings = settings
        self.state = state
        self.logs = logs
        self.paused = PausedRuns(state.store, AGUI_KIND, settings.keep_for)

    async def answer(self, name: str, request: Request) -> Response:
        try:
            found = self.served.get(name)
            if found is None:
                raise _Refused(404, "not_found", self.served.unknown(name))
            rejoin = _event_id(request)
            if rejoin is not None:
                return await self._rejoin(rejoin)
            given = _parse(await request.body(), self.settings)
            await self.state.open()
            if given.client_tools:
                _check_tools(found, name, given.client_tools)
            if given.body.resume:
                return await self._run(await self._resumed(name, found, given))
            waiting = await self.paused.get(name, given.body.thread_id)
            if (
                waiting is not None
                and _answers(given.body.messages)
                and not waiting.response.pending_approvals
            ):
                return await self._run(await self._continued(name, found, given, waiting))
            if waiting is not None:
                raise _Refused(
                    409,
                    "run_paused",
                    f"thread {given.body.thread_id!r} has a run waiting for its interrupts to "
                    "be answered: resume it (a resume entry per interrupt; status 'cancelled' "
                    "rejects a call) before starting another run",
                )
            if _answers(given.body.messages):
                raise _Refused(
                    422,
                    "invalid_request",
                    f"messages: thread {given.body.thread_id!r} has no run waiting for a "
                    "front-end tool's result",
                )
            _need_prompt(given)
            if isinstance(found, PromptableFlow):
                _text_only(given, name)
                return await self._run(AguiFlowJob(found, name, given.run))
            return await self._run(self._job(name, found, given))
        except _Refused as refused:
            return error_response(refused.status, refused.kind, str(refused))

    async def _stream(self, source: Source, on_error: Callable[[BaseException], bytes]) -> Response:
        """Start a run in a task of its own, writing its log; the client reads the log."""
        stream = uuid.uuid4().hex
        await self.logs.start(stream, source, on_error)
        return self.logs.reader(EventId(stream, 0), _run_error, self.settings.heartbeat_interval)

    async def _run(self, job: AguiJob | AguiFlowJob) -> Response:
        """Start a run here, or with a broker on a worker; the client reads its log."""
        if self.logs.broker is None:
            return await self._stream(job.frames, job.on_error)
        stream = uuid.uuid4().hex
        refused = await submit_run(
            self.logs, stream, job_task(self.logs, stream, job.name, job.spec())
        )
        if refused is not None:
            await job.put_back()
            return refused
        return self.logs.reader(EventId(stream, 0), _run_error, self.settings.heartbeat_interval)

    async def _rejoin(self, at: EventId) -> Response:
        """The events of a run's stream after ``at`` (a client back with ``Last-Event-ID``)."""
        try:
            await self.logs.check(at)
        except StreamGone as exc:
            raise _Refused(404, "not_found", str(exc)) from None
        return self.logs.reader(at, _run_error, self.settings.heartbeat_interval)

    # ------------------------------------------------------------------------- the runs

    def _job(
        self, name: str, agent: Promptable, given: _Input, after: Continued | None = None
    ) -> AguiJob:
        model = str(self.served.describe(name)["model"])
        return AguiJob(agent, name, model, given.run, self.paused, after)

    async def _resumed(self, name: str, agent: Promptable, given: _Input) -> AguiJob:
        thread = given.body.thread_id
        waiting = await self.paused.get(name, thread)
        if waiting is None:
            raise self._not_paused(name, thread)
        if not isinstance(agent, Resumable):
            raise _Refused(409, "not_resumable", f"{name!r} cannot resume paused runs")
        decisions = _decisions(waiting.response, given.body.resume or [])
        await self._take(waiting)
        continued = Continued(waiting.response, tuple(sorted(waiting.shown)), decisions=decisions)
        return self._job(name, agent, given, continued)

    def _not_paused(self, name: str, thread: str) -> _Refused:
        unknown = self.paused.unknown(name, thread, f"thread {thread!r}")
        return _Refused(409, "not_paused", f"{unknown}; send a run without 'resume'")

    async def _take(self, waiting: PausedRun) -> None:
        """Stop keeping ``waiting`` to resume it; 409 when another request resumed it first."""
        if not await self.paused.take(waiting):
            raise self._not_paused(waiting.owner, waiting.key)

    async def _continued(
        self, name: str, agent: Promptable, given: _Input, waiting: PausedRun
    ) -> AguiJob:
        """The thread's paused run, continued with the front-end tools' results."""
        results = _results(waiting.response, given.body.messages)
        await self._take(waiting)
        continued = Continued(waiting.response, tuple(sorted(waiting.shown)), results=results)
        return self._job(name, agent, given, continued)


# --------------------------------------------------------------------------------- the input


def _parse(raw: bytes, settings: ServerSettings) -> _Input:
    """The request's ``RunAgentInput``, checked (422 with what is wrong, 400 for bad JSON)."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _Refused(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    try:
        body = RunAgentInput.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise _Refused(422, "invalid_request", f"not a RunAgentInput: {problems}") from None
    state = body.state if isinstance(body.state, dict) else {}
    notes = [f"{c.description}: {c.value}" for c in body.context or []]
    prompt = _last_user_prompt(body.messages, settings)
    tools = tuple(spec(t.name, t.description, _schema(t.parameters)) for t in body.tools or ())
    run = RunInput(
        thread_id=body.thread_id,
        run_id=body.run_id,
        parent_run_id=body.parent_run_id,
        prompt=prompt,
        instructions="\n".join(notes) or None,
        state=dict(state),
        client_tools=tools,
    )
    return _Input(body, run)


def _schema(parameters: Any) -> Any:
    """A front-end tool's parameters (none: an empty object schema)."""
    return None if parameters is None or parameters == {} else parameters


def _check_tools(agent: Promptable, name: str, specs: Sequence[ToolSpec]) -> None:
    try:
        takes_client_tools(agent, name, specs)
    except NoClientTools as exc:
        raise _Refused(422, "invalid_request", f"tools: {exc}") from None


def _answers(messages: Sequence[Any]) -> bool:
    """Whether the input ends with tool messages: front-end tools' results."""
    return bool(messages) and getattr(messages[-1], "role", None) == "tool"


def _results(waiting: AgentResponse[Any], messages: Sequence[Any]) -> dict[str, ToolOutput]:
    """The trailing tool messages as results, each for a call the paused run waits for."""
    pending = {call.id for call in waiting.client_calls}
    results: dict[str, ToolOutput] = {}
    first = len(messages)
    while first > 0 and getattr(messages[first - 1], "role", None) == "tool":
        first -= 1
    for index in range(first, len(messages)):
        message = messages[index]
        if message.tool_call_id not in pending:
            raise _Refused(
                422,
                "invalid_request",
                f"messages[{index}].toolCallId: {message.tool_call_id!r} is not a call the "
                f"paused run waits for (waiting: {', '.join(sorted(pending)) or 'none'})",
            )
        error = getattr(message, "error", None)
        content = message.content if isinstance(message.content, str) else str(message.content)
        results[message.tool_call_id] = (
            ToolOutput.error(error or content) if error else ToolOutput.text(content)
        )
    return results


def _last_user_prompt(messages: Sequence[Any], settings: ServerSettings) -> str | Message:
    """The last message's text, or a user message with its files (see ``_agui_media``)."""
    if not messages or getattr(messages[-1], "role", None) != "user":
        return ""
    try:
        return user_prompt(messages[-1].content, settings)
    except MediaRefused as refused:
        raise _Refused(refused.status, refused.kind, str(refused)) from None


def _need_prompt(given: _Input) -> None:
    messages = given.body.messages
    if not messages or messages[-1].role != "user":
        role = messages[-1].role if messages else "none"
        raise _Refused(
            422,
            "invalid_request",
            f"messages: the last message must be the user's prompt (got {role})",
        )
    if isinstance(given.prompt, str) and not given.prompt.strip():
        raise _Refused(422, "invalid_request", "messages: the user's prompt has no text or file")


def _text_only(given: _Input, name: str) -> None:
    if isinstance(given.prompt, Message):
        raise _Refused(
            422,
            "invalid_request",
            f"{name!r} is a flow: it takes a text prompt, not files",
        )


def _decisions(waiting: AgentResponse[Any], entries: Sequence[Any]) -> dict[str, ApprovalDecision]:
    """A decision per pending approval from the resume entries: each answered, none unknown."""
    pending = {a.id for a in waiting.pending_approvals}
    decisions: dict[str, ApprovalDecision] = {}
    for index, entry in enumerate(entries):
        if entry.interrupt_id not in pending:
            raise _Refused(
                422,
                "invalid_request",
                f"resume[{index}].interruptId: {entry.interrupt_id!r} is not an interrupt of "
                f"the paused run (waiting: {', '.join(sorted(pending))})",
            )
        decisions[entry.interrupt_id] = _decision(entry, index)
    missing = sorted(pending - decisions.keys())
    if missing:
        raise _Refused(
            422,
            "invalid_request",
            f"resume: answer every interrupt of the paused run; unanswered: {', '.join(missing)}",
        )
    return decisions


def _decision(entry: Any, index: int) -> ApprovalDecision:
    if entry.status == "cancelled":
        return ApprovalDecision.reject("the user cancelled the call")
    payload = entry.payload
    if payload is None or payload is True:
        return ApprovalDecision.approve()
    if payload is False:
        return ApprovalDecision.reject()
    if isinstance(payload, Mapping):
        approved = payload.get("approved", True)
        reason = payload.get("reason")
        if isinstance(approved, bool) and (reason is None or isinstance(reason, str)):
            return ApprovalDecision(approved=approved, reason=reason)
    raise _Refused(
        422,
        "invalid_request",
        f"resume[{index}].payload: an approval's answer is true, false or "
        '{"approved": bool, "reason"?: string}',
    )


def _run_error(exc: BaseException) -> bytes:
    """The ``RUN_ERROR`` that ends a stream whose run failed, timed out or was cancelled."""
    return b"".join(encode(event) for event in AguiRun("", "", {}).failed(exc))


def _event_id(request: Request) -> EventId | None:
    """Where a client rejoining a run's stream left it (``Last-Event-ID``); 400 if malformed."""
    try:
        return EventId.parse(request.headers.get("last-event-id"))
    except ValueError as exc:
        raise _Refused(400, "invalid_request", str(exc)) from None
