"""Serving a daimon agent as an A2A agent, with the official SDK's server pieces.

The agent card is at ``/.well-known/agent-card.json``. Three bindings share one request handler
(the SDK's ``DefaultRequestHandler``) and so one set of tasks: JSON-RPC at ``/``, HTTP+JSON
(REST: ``/message:send``, ``/tasks/{id}``, ...) beside it, and gRPC on a port of its own when
:func:`serve_a2a` is given ``grpc_port``. Each speaks A2A 1.0 and, unless ``legacy=False``, 0.3
(the SDK's compatibility layer tells them apart by the request); the card lists every binding
at both versions, 1.0 first, and carries 0.3's own fields (``url``, ``preferredTransport``,
``additionalInterfaces``) for 0.3 clients. Every operation is served: send and stream, get,
list, cancel, subscribe to a running task, push-notification configs (see ``_push``) and, when
a token is set, the authenticated extended card (it also lists the tools that need approval;
without a token the card does not declare it and every binding refuses it as an unsupported
operation, since the spec has it require authentication). Errors are the spec's, with its
codes: task not found, not cancelable, unsupported operation (e.g. subscribing to a finished
task), content type not supported (a file whose media type the card does not list).

Any :class:`~daimon.core.protocols.Promptable` is served (an agent, a supervisor, a handoff
network, a flow). Each message is a run of it on the message's text and files (images, audio,
PDFs and text files, as daimon's media parts, with AG-UI's limits: see ``_media``), within the
conversation its ``contextId`` names. The answer is one artifact, ``answer``: while the agent
runs, each piece of its text is a chunk appended to it (``append``), and the last event carries
the whole answer (``append`` false, ``lastChunk`` true), replacing the pieces, so the stored task
holds it as one part. The task's history holds whole messages only (the user's, the approval
questions). The task ends ``completed``, ``failed`` (with the error as its status message) or
``canceled``.

Approvals: a run that pauses for a person's approval ends its turn ``input-required``, its status
message naming each call waiting (a text part, and a data part ``{"approvals": [{"id", "tool",
"arguments"}]}``; its metadata names the paused run). The task's next message decides them: a
data part ``{"approvals": {"<id>": true|false}}``, or the text ``approve`` (approves them all;
any other text rejects them all and tells the agent why); the run then resumes where it paused,
in the same task. Paused runs are kept in the server's memory, at most ``max_paused`` (the
oldest forgotten first); an agent with a ``checkpoint`` resumes a forgotten one, or one paused
before a restart (with a persistent ``task_store``), from its checkpoint; otherwise such a task
fails, saying why. A promptable that cannot resume (a handoff network, a flow: their agents'
pauses raise) fails the task instead, naming the tools waiting.

Replicas: with ``store`` (a :class:`~daimon.core.StateStore` or its URL), the SDK runs in its
cluster mode on that store (see ``_task_store``): tasks are written over the version read, and a
running task's events pass through the store. Any replica sharing it answers ``tasks/get`` and
``tasks/list`` for a task another made, follows a task running on another
(``tasks/subscribe``), cancels it (the run stops at its next event), and resumes a run another
paused (paused runs are kept there too). Of racing answers to one question exactly one resumes
the run (the others leave the task alone); a message to a task whose run is going on is refused
(unsupported operation). Push-notification configs stay in each process unless ``push_store``
is shared; a ``task_store`` of your own keeps the tasks instead (then without shared events).
A store named by its URL is made by the app, set up on the first request and closed when the app
shuts down; a store given is set up on the first request too, and left open.

Conversations: the A2A context ``<contextId>`` is the daimon session ``a2a:<contextId>``, so the
agent's memory carries the earlier turns of the context (a ``SlidingWindowMemory`` by default;
give the agent a persistent memory to keep them across restarts). A message without a contextId
gets a new one from the SDK (a random UUID, returned on the task): a new conversation. A
contextId the server has not seen is accepted and kept (A2A 1.0, section 3.4.1, lets an agent
accept client-chosen ids): it starts a new conversation under that id. A follow-up message to a
task still open (by its ``taskId``, such as an ``input-required`` one) continues that task's
context. The ``a2a:`` prefix keeps A2A clients to conversations made over A2A: no contextId can
name a session created through daimon's HTTP API or any other front-end. Anyone holding the
token and a contextId can continue that conversation, so a client choosing its own ids should
make them unguessable.

A contextId must be 1 to 252 characters: letters, digits and ``. _ : @ + = ~ -``, starting with a
letter or digit (so that ``a2a:<contextId>`` is a valid session id everywhere in daimon, the HTTP
server's ``/sessions/{id}`` included). Any other is refused with a JSON-RPC invalid-params error
(-32602) before a task exists, never swapped for a new id. (:class:`DaimonAgentExecutor` used
with a request handler of your own rejects the task instead, its status message saying why.)

The HTTP gate is daimon's one gate, with the same rules as ``daimon.server`` and ``daimon.mcp``:
loopback by default, a bearer token required off loopback (every route but the agent card, which
is public so that clients can discover how to authenticate), ``Host`` and ``Origin`` checked
against DNS rebinding, request bodies bounded (``max_body_bytes``); refusals are plain text.
The card declares the bearer scheme (``securitySchemes`` and ``security``) when a token is set,
and the gate enforces it on every binding (gRPC: the ``authorization`` metadata).

Each request continues the caller's trace: the W3C trace context of its HTTP headers or gRPC
metadata (``traceparent``, ``tracestate``, ``baggage``; sent by
:class:`~daimon.a2a.RemoteA2AAgent`) is attached while the request is handled, its streamed
response included. The spans a2a-sdk makes
(given a global tracer provider; the SDK neither sends nor reads trace context itself) and the
run's own (an instrumented agent's ``invoke_agent``) are all in the caller's trace. Without
OpenTelemetry set up this costs nothing, and a malformed ``traceparent`` only means a new trace.
"""

from __future__ import annotations

from daimon.a2a import _sdk  # noqa: F401  # isort: skip - first: names the extra

import asyncio
import contextlib
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx
from a2a.helpers import (
    get_data_parts,
    get_text_parts,
    new_data_part,
    new_task_from_user_message,
)
from a2a.server.agent_execution import (
    AgentExecutor,
    RequestContext,
    SimpleRequestContextBuilder,
)
from a2a.server.cluster import StoredTask, TaskEventStream, VersionedTaskStore
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import (
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    PushNotificationConfigStore,
    TaskStore,
    TaskUpdater,
)
from a2a.types import AgentCard, Message, Part, Role, SendMessageRequest, Task, TaskState
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import A2AError, InvalidParamsError, UnsupportedOperationError
from starlette.applications import Starlette
from starlette.types import ASGIApp

from daimon._http_gate import (
    DEFAULT_MAX_BODY_BYTES,
    HttpGate,
    check_exposure,
    default_hosts,
    hosts_for,
    is_loopback,
)
from daimon._paused_runs import KEPT_PAUSED_RUNS, PausedRuns
from daimon.a2a._convert import agent_card_for, interfaces_for
from daimon.a2a._media import FileRules, accepted_types, file_rules, input_modes, prompt_of
from daimon.a2a._push import push_sender, webhook_check
from daimon.a2a._state import OpenedStore
from daimon.core.cancel import CancelToken
from daimon.core.errors import (
    ApprovalRequiredError,
    BuilderError,
    DaimonError,
    RunCancelled,
)
from daimon.core.events import Done, TextDelta
from daimon.core.messages import Message as ChatMessage
from daimon.core.protocols import Promptable, Resumable
from daimon.core.results import AgentResponse, ApprovalDecision
from daimon.core.state_store import StateStore
from daimon.kit.checks import check_non_negative, check_seconds
from daimon.kit.lifecycle import serve_until_cancelled
from daimon.kit.media import DEFAULT_FILE_TYPES, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_FILES_BYTES
from daimon.serverstate import MemoryStateStore
from daimon.telemetry._asgi import TraceContextMiddleware
from daimon.telemetry._propagation import join_trace
from daimon.tools import ToolRegistry

__all__ = ("DaimonAgentExecutor", "a2a_app", "agent_card", "serve_a2a")

_SESSION_PREFIX = "a2a:"
_CONTEXT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=~-]{0,251}")
_SHOWN_CHARS = 40
_IDLE_PAUSED_SECONDS = 300.0
"""After this long waiting for input, the SDK lets go of a task's in-memory state (a follow-up
recreates it from the task store): the SDK keeps it forever by default."""
DEFAULT_MAX_PAUSED = KEPT_PAUSED_RUNS
"""How many runs waiting for approval a server keeps in memory by default (every front end's)."""
DEFAULT_KEEP_FOR = 30 * 24 * 3600.0
"""Seconds a shared ``store`` keeps a task and a paused run after its last change by default (as
``daimon serve`` keeps paused runs)."""
_TRACE_KEYS = ("traceparent", "tracestate", "baggage")  # W3C trace context and baggage headers


def _session_for(context_id: str) -> str:
    """The daimon session holding the A2A context ``context_id``.

    Raises:
        InvalidParamsError: ``context_id`` is not a contextId daimon accepts.
    """
    if _CONTEXT_ID.fullmatch(context_id) is None:
        shown = context_id[:_SHOWN_CHARS] + ("..." if len(context_id) > _SHOWN_CHARS else "")
        raise InvalidParamsError(
            message=(
                f"contextId {shown!r} ({len(context_id)} characters) is not accepted: use 1 to "
                "252 letters, digits or . _ : @ + = ~ -, starting with a letter or digit; or "
                "send no contextId to start a new conversation"
            )
        )
    return _SESSION_PREFIX + context_id


class _RequestCheck(SimpleRequestContextBuilder):
    """Checks a message's contextId and files before the SDK makes a task for it.

    A contextId that cannot name a session is refused, and so is a file the agent does not
    take (see ``_media``); a follow-up naming only its task gets that task's context.
    """

    def __init__(
        self, tasks: TaskStore | VersionedTaskStore, files: FileRules, *, shared: bool = False
    ) -> None:
        super().__init__()
        self._tasks = tasks
        self._files = files
        self._shared = shared

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        given = context_id or (params.message.context_id if params is not None else "")
        if params is not None:
            prompt_of("", params.message.parts, self._files)  # refuses what the run would
        if given:
            _session_for(given)
        if task_id and (self._shared or not given):
            stored = await self._tasks.get(task_id, context)
            found = stored.task if isinstance(stored, StoredTask) else stored
            if found is not None and self._shared and found.status.state in _BUSY:
                raise UnsupportedOperationError(
                    message=f"task {task_id} is working on an earlier message (on this replica "
                    "or another): send the next one when it asks for input (follow it with "
                    "tasks/get or tasks/subscribe)"
                )
            if found is not None and not given:
                # A2A 1.0 (section 3.4.3): the context is inferred from the task. a2a-sdk 1.3
                # makes up a new one instead, which then fails the task (a2a-python #1206).
                context_id = found.context_id
        return await super().build(context, params, task_id, context_id, task)


class DaimonAgentExecutor(AgentExecutor):
    """Runs a daimon agent (any promptable) for the A2A SDK's request handler: one run per message.

    Each run is in the session ``a2a:<contextId>`` of the task's context, so runs in one context
    share the agent's memory (see this module's description). Runs waiting for approval are kept
    in memory, at most ``max_paused`` (the oldest forgotten first), or, with ``store`` (set up
    already), in that state store for ``keep_for`` seconds, where every executor on it can
    resume them (exactly one of racing approvals does); ``max_paused=0`` keeps none. An agent with a
    ``checkpoint`` resumes one forgotten, or left by an earlier process, from its checkpoint (the
    task's input-required message names the run). A message's files reach the agent as media
    parts when their media type is one of ``file_types`` and they are within the byte limits
    (a flow takes text only); the task of any other is rejected, its status message saying why.
    """

    def __init__(
        self,
        agent: Promptable,
        *,
        max_paused: int = DEFAULT_MAX_PAUSED,
        file_types: Iterable[str] = DEFAULT_FILE_TYPES,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_files_bytes: int = DEFAULT_MAX_FILES_BYTES,
        store: StateStore | None = None,
        keep_for: float | None = DEFAULT_KEEP_FOR,
    ) -> None:
        self.agent = agent
        self.max_paused = check_non_negative("max_paused", max_paused)
        self._files = file_rules(agent, file_types, max_file_bytes, max_files_bytes)
        kept = MemoryStateStore(limit=max(max_paused, 1)) if store is None else store
        self._paused = PausedRuns(kept, "a2a", None if store is None else keep_for)
        """Runs waiting for approvals, by task id: the task's next message decides them."""
        self._shared = store is not None

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run the agent on the message (its text and files), publishing its progress and answer.

        The run is part of the caller's trace when the request's HTTP headers carry one.
        """
        with _caller_trace(context.call_context):
            await self._execute(context, event_queue)

    async def _execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            if context.message is None:
                raise ValueError("an A2A request without a message")
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        # The task's context, not the request's: a follow-up naming only the task id gets a
        # freshly generated context id in the request, while the task keeps its own.
        parts = list(context.message.parts) if context.message is not None else []
        try:
            session_id = _session_for(task.context_id)
            prompt = prompt_of(context.get_user_input(), parts, self._files)
        except A2AError as exc:  # only reached with a request handler of your own
            await updater.reject(updater.new_agent_message([Part(text=f"Error: {exc.message}")]))
            return
        try:
            if self._shared and context.current_task is not None and task.status.state in _BUSY:
                raise _AnsweredElsewhere  # the task's run is going on, on another replica
            waiting = await self._waiting(task)
        except _AnsweredElsewhere:  # the task is left as the run going on elsewhere makes it
            return
        except Exception as exc:  # its run is gone or unreadable: the client reads why
            await updater.failed(updater.new_agent_message([Part(text=_failure(exc))]))
            return
        await updater.start_work()
        await self._go(task, updater, waiting, prompt, session_id, context.message)

    async def _go(
        self,
        task: Task,
        updater: TaskUpdater,
        waiting: tuple[AgentResponse | str, list[str]] | None,
        prompt: str | ChatMessage,
        session_id: str,
        message: Message | None,
    ) -> None:
        """Run the agent (or resume its paused run) and publish how the task goes."""
        cancel = CancelToken()
        answer = _Answer(updater)
        try:
            if waiting is None:
                response = await self._run(prompt, session_id, cancel, answer)
            else:
                response = await self._resume(*waiting, message, cancel)
            if response.paused and response.state is not None and isinstance(self.agent, Resumable):
                if self.max_paused:
                    await self._paused.keep(self.agent.name, response, task.id)
                await updater.requires_input(_approvals_asked(updater, response))
                return
            response.require_finished("an A2A task")
        except asyncio.CancelledError:
            cancel.cancel("the A2A task was cancelled")  # reaches sub-agents sharing the token
            raise
        except RunCancelled:
            await updater.cancel()
            return
        except ApprovalRequiredError as exc:  # a network or flow, whose runs cannot resume
            await updater.failed(updater.new_agent_message([Part(text=f"Error: {exc}")]))
            return
        except Exception as exc:  # the client reads why in the failed status
            await updater.failed(updater.new_agent_message([Part(text=_failure(exc))]))
            return
        await answer.whole(response.text)
        await updater.complete()

    async def _waiting(self, task: Task) -> tuple[AgentResponse | str, list[str]] | None:
        """The paused run ``task`` waits on (or its run id), and its pending approval ids.

        ``None`` if the task waits for no approval. Of racing messages answering one question
        (on any replica sharing the store), exactly one gets the run.

        Raises:
            _AnsweredElsewhere: Another message to the task answered the question first.
            UnknownPausedRunError: The task waits for approval but its run is gone: forgotten
                (more than ``max_paused`` waiting) or left by a server that stopped, and the
                agent has no checkpoint to resume it from.
        """
        asked = _asked(task)
        if asked is not None and not await self._claim(task, asked[2]):
            raise _AnsweredElsewhere
        kept = await self._paused.get(self.agent.name, task.id)
        if kept is not None:
            if not await self._paused.take(kept):
                raise _AnsweredElsewhere
            return kept.response, [a.id for a in kept.response.pending_approvals]
        if asked is None:
            return None
        run_id, pending, _ = asked
        if getattr(self.agent, "checkpoint", None) is None or not isinstance(self.agent, Resumable):
            raise self._paused.unknown(
                self.agent.name,
                task.id,
                f"task {task.id!r} (run {run_id})",
                "give the agent a checkpoint to resume runs across restarts, or send the "
                "request again as a new task",
            )
        return run_id, pending

    async def _claim(self, task: Task, asked: str) -> bool:
        """Whether this message is the first to answer the question ``asked`` (its id)."""
        key = hashlib.sha256(f"{self.agent.name}\x1f{task.id}\x1f{asked}".encode()).hexdigest()
        store, ttl = self._paused.store, self._paused.ttl
        return await store.replace(_ANSWERED, key, '{"v": 1}', version=0, ttl=ttl) is not None

    async def _run(
        self, prompt: str | ChatMessage, session_id: str, cancel: CancelToken, answer: _Answer
    ) -> AgentResponse:
        response: AgentResponse | None = None
        stream = self.agent.prompt_stream(prompt, session_id=session_id, cancel=cancel)
        async for event in stream:
            if type(event) is TextDelta and event.text:
                await answer.chunk(event.text)
            elif type(event) is Done:
                response = event.response
        if response is None:  # pragma: no cover - an agent stream always ends with Done
            raise DaimonError("the agent run ended without a response")
        return response

    async def _resume(
        self,
        paused: AgentResponse | str,
        pending: list[str],
        message: Message | None,
        cancel: CancelToken,
    ) -> AgentResponse:
        """Continue a paused run with the decisions ``message`` carries."""
        assert isinstance(self.agent, Resumable)  # only their runs are kept paused
        return await self.agent.resume(paused, _decisions(message, pending), cancel=cancel)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task canceled (the SDK has already cancelled the running ``execute``)."""
        kept = await self._paused.get(self.agent.name, context.task_id or "")
        if kept is not None:
            await self._paused.take(kept)  # a run waiting for approvals ends here
        if context.task_id is None or context.context_id is None:
            return
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class _AnsweredElsewhere(Exception):
    """Another message to the task (on this replica or another) answered its question first."""


_BUSY = frozenset({TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING})
"""The states of a task whose run is going on."""
_ANSWERED = "a2a_answered"
"""The state kind marking the input-required questions already answered (by status message)."""


class _Answer:
    """A run's answer as one artifact: streamed chunk by chunk, then replaced by the whole.

    Each piece of text is a ``TaskArtifactUpdateEvent`` appending to the artifact ``answer``;
    the last event (``append`` false, ``lastChunk`` true) carries the whole answer, so the task
    keeps it as one part. Nothing goes to the task's history: that holds whole messages only
    (a streamed piece sent as a status message would be kept there, one entry per piece).
    """

    __slots__ = ("_id", "_sent", "_updater")

    def __init__(self, updater: TaskUpdater) -> None:
        self._updater = updater
        self._id = uuid.uuid4().hex
        self._sent = False

    async def chunk(self, text: str) -> None:
        """Stream one piece of the answer."""
        await self._updater.add_artifact(
            [Part(text=text)],
            artifact_id=self._id,
            name="answer",
            append=self._sent,
            last_chunk=False,
        )
        self._sent = True

    async def whole(self, text: str) -> None:
        """The whole answer, replacing the pieces streamed."""
        await self._updater.add_artifact(
            [Part(text=text)], artifact_id=self._id, name="answer", append=False, last_chunk=True
        )


def _caller_trace(call: ServerCallContext | None) -> contextlib.AbstractContextManager[None]:
    """Continue the trace (and baggage) the request's HTTP headers or gRPC metadata carry.

    The SDK's routes keep the headers in ``call.state["headers"]``. In :func:`a2a_app` the
    middleware in front has already attached that trace (the SDK's spans are in it), so the
    current span stays the run's parent and only the baggage is taken again; this extraction
    serves gRPC (the SDK keeps the call's context in ``call.state["grpc_context"]``) and
    request handlers of your own.
    """
    headers = call.state.get("headers") if call is not None else None
    if not isinstance(headers, Mapping) and call is not None:
        headers = _grpc_metadata(call.state.get("grpc_context"))
    if not isinstance(headers, Mapping):
        return contextlib.nullcontext()
    lowered = {str(key).lower(): value for key, value in headers.items()}
    carrier = {key: lowered[key] for key in _TRACE_KEYS if isinstance(lowered.get(key), str)}
    return join_trace(carrier)


def _grpc_metadata(grpc_context: Any) -> dict[str, str] | None:
    """A gRPC call's text metadata, by lowercase key; ``None`` without a gRPC call."""
    read = getattr(grpc_context, "invocation_metadata", None)
    if read is None:
        return None
    return {str(k).lower(): v for k, v in (read() or ()) if isinstance(v, str)}


_PAUSED_RUN = "daimon_paused_run"
"""The metadata key of an input-required message naming the paused run (its run id)."""


def _approvals_asked(updater: TaskUpdater, response: AgentResponse) -> Message:
    """The input-required message: what waits for approval, in words and as data."""
    pending = response.pending_approvals
    listed = "; ".join(
        f"{a.call.name}({json.dumps(a.call.arguments, ensure_ascii=False)}) [id {a.id}]"
        for a in pending
    )
    text = (
        f"Approval needed before the run goes on: {listed}. Answer 'approve' to let every call "
        "run (anything else rejects them, your words telling the agent why), or send a data "
        'part {"approvals": {"<id>": true or false}}.'
    )
    data = {
        "approvals": [
            {"id": a.id, "tool": a.call.name, "arguments": a.call.arguments} for a in pending
        ]
    }
    return updater.new_agent_message(
        [Part(text=text), new_data_part(data)], {_PAUSED_RUN: response.run_id}
    )


def _question(task: Task) -> Message | None:
    """The question an input-required task asks: its status message.

    A message being taken as the answer (on another replica) moves the question to the task's
    history first: it is then the latest message there from the agent.
    """
    if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        return None
    if task.status.HasField("message"):
        return task.status.message
    return next((m for m in reversed(task.history) if m.role == Role.ROLE_AGENT), None)


def _asked(task: Task) -> tuple[str, list[str], str] | None:
    """The run id and approval ids an input-required task's question asks about, and its id."""
    message = _question(task)
    if message is None:
        return None
    run = message.metadata.fields.get(_PAUSED_RUN) if message.HasField("metadata") else None
    if run is None or not run.string_value:
        return None
    ids = [
        str(item["id"])
        for data in get_data_parts(list(message.parts))
        if isinstance(data, dict) and isinstance(data.get("approvals"), list)
        for item in data["approvals"]
        if isinstance(item, dict) and "id" in item
    ]
    return run.string_value, ids, message.message_id


_APPROVE = frozenset({"approve", "approved", "yes", "y", "ok"})


def _decisions(message: Message | None, pending: list[str]) -> dict[str, ApprovalDecision]:
    """The decisions a reply to an input-required task carries, for every pending call.

    A data part ``{"approvals": {id: bool}}`` decides the calls it names; otherwise text that
    says ``approve`` (or yes, ok) approves them all and any other text rejects them all, with
    that text as the reason. A call no part names is rejected: nothing runs unless approved.
    """
    parts = list(message.parts) if message is not None else []
    given: dict[str, bool] = {}
    for data in get_data_parts(parts):
        approvals = data.get("approvals") if isinstance(data, dict) else None
        if isinstance(approvals, dict):
            given.update({str(k): v for k, v in approvals.items() if isinstance(v, bool)})
    text = " ".join(get_text_parts(parts)).strip()
    approve_all = not given and text.lower().rstrip(".!") in _APPROVE
    reason = text or "not approved"
    return {
        an_id: ApprovalDecision.approve()
        if given.get(an_id, approve_all)
        else ApprovalDecision.reject(reason)
        for an_id in pending
    }


def _failure(exc: Exception) -> str:
    # daimon's own errors are written to be read; anything else may carry internals.
    if isinstance(exc, DaimonError):
        return f"Error: {type(exc).__name__}: {exc}"
    return f"Error: the agent failed ({type(exc).__name__})"


def agent_card(
    agent: Promptable,
    *,
    url: str,
    description: str | None = None,
    version: str | None = None,
    bearer: bool = False,
    grpc_url: str | None = None,
    legacy: bool = True,
    extended: bool = False,
    file_types: Iterable[str] = DEFAULT_FILE_TYPES,
) -> AgentCard:
    """The A2A agent card for ``agent`` served at ``url``.

    Args:
        agent: The agent.
        url: Where its JSON-RPC and HTTP+JSON endpoints are, as clients reach it.
        description: What it does (a generic sentence by default).
        version: The agent's version (daimon's by default).
        bearer: Announce (and require, in :func:`a2a_app`) a bearer token. The card
            declares the authenticated extended card with it only.
        grpc_url: Where its gRPC endpoint is, as an absolute URL (``grpc://host:port``, or
            ``grpcs://`` or ``https://`` behind TLS), if it has one.
        legacy: Offer each binding at A2A 0.3 too, besides 1.0.
        extended: The authenticated extended card: it also lists the tools that need a
            person's approval (the public card leaves them out).
        file_types: The media types of the files it takes (``type/subtype`` or ``type/*``),
            listed as its input modes beside ``text/plain`` (a flow takes text only).

    Raises:
        BuilderError: ``grpc_url`` is not an absolute URL, or a media type is malformed.
    """
    own = getattr(agent, "tools", None)  # an Agent's skills are its tools; others show none
    tools = (
        [spec for spec, t in zip(own.specs, own, strict=True) if extended or _public(t)]
        if isinstance(own, ToolRegistry)
        else []
    )
    if grpc_url is not None:
        _check_grpc_url(grpc_url)
    return agent_card_for(
        name=agent.name,
        description=description or f"The {agent.name} agent, built with daimon.",
        interfaces=interfaces_for(url, grpc_url=grpc_url, legacy=legacy),
        version=version or _version(),
        tools=tools,
        bearer=bearer,
        input_modes=input_modes(accepted_types(agent, file_types)),
    )


def _check_grpc_url(grpc_url: str) -> None:
    """Refuse a gRPC address that is not an absolute URL (A2A 1.0 asks for one).

    Raises:
        BuilderError: ``grpc_url`` has no scheme or no host, such as a bare ``host:port``.
    """
    parts = urlsplit(grpc_url)
    if not parts.scheme or not parts.hostname:
        raise BuilderError(
            f"grpc_url must be an absolute URL such as 'grpc://host:port' (or 'grpcs://' or "
            f"'https://' behind TLS), got {grpc_url!r}"
        )


def _public(tool: Any) -> bool:
    return not getattr(tool, "requires_approval", False)


@dataclass(slots=True)
class _Service:
    """What every binding of one served agent shares: its card, request handler and webhooks."""

    card: AgentCard
    handler: DefaultRequestHandler
    webhooks: httpx.AsyncClient
    store: OpenedStore | None = None
    """The shared state store, if there is one (closed here if made from a URL)."""

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.handler.aclose()
        await self.webhooks.aclose()
        if self.store is not None:
            await self.store.aclose()


def _service(
    agent: Promptable,
    *,
    url: str,
    exposed: bool,
    bearer: bool,
    description: str | None,
    task_store: TaskStore | None,
    push_store: PushNotificationConfigStore | None,
    grpc_url: str | None,
    legacy: bool,
    max_paused: int,
    files: FileRules,
    store: StateStore | str | None = None,
    keep_for: float | None = DEFAULT_KEEP_FOR,
) -> _Service:
    card_args: dict[str, Any] = {
        "url": url,
        "description": description,
        "bearer": bearer,
        "grpc_url": grpc_url,
        "legacy": legacy,
        "file_types": files.types,
    }
    card = agent_card(agent, **card_args)
    if keep_for is not None:
        check_seconds("keep_for", keep_for)
    shared = None if store is None else OpenedStore(store)
    tasks, events = _tasks(task_store, shared, keep_for)
    pushes = push_store or InMemoryPushNotificationConfigStore()
    sender, webhooks = push_sender(pushes, exposed=exposed)
    executor = DaimonAgentExecutor(
        agent,
        max_paused=max_paused,
        file_types=files.types,
        max_file_bytes=files.max_file_bytes,
        max_files_bytes=files.max_files_bytes,
        store=shared,
        keep_for=keep_for,
    )
    handler = DefaultRequestHandler(
        executor,
        tasks,
        card,
        push_config_store=pushes,
        push_sender=sender,
        request_context_builder=_RequestCheck(tasks, files, shared=shared is not None),
        # declared with a token only (the card says so): without one the SDK refuses the call
        extended_agent_card=agent_card(agent, **card_args, extended=True) if bearer else None,
        push_url_validator=webhook_check(exposed),
        interrupted_task_timeout=_IDLE_PAUSED_SECONDS,
        event_stream=events,
    )
    return _Service(card, handler, webhooks, shared)


def _tasks(
    given: TaskStore | None, store: OpenedStore | None, keep_for: float | None
) -> tuple[TaskStore | VersionedTaskStore, TaskEventStream | None]:
    """Where tasks are kept, and how their events reach other replicas (if they do).

    ``given`` if there is one; else the shared state store's (the SDK's cluster mode), else
    this process's memory.
    """
    if given is not None:
        return given, None
    if store is None:
        return InMemoryTaskStore(), None
    from daimon.a2a._task_store import SharedTaskEvents, SharedTaskStore

    return SharedTaskStore(store, ttl=keep_for), SharedTaskEvents(store)


def _card_url(host: str, port: int, url: str | None) -> str:
    """The URL the card names: ``url``, or ``http://host:port/``.

    Raises:
        BuilderError: A wildcard bind without ``url``.
    """
    if url is not None:
        return url
    if default_hosts(host, port) is None:  # a wildcard bind
        raise BuilderError(
            f"an A2A server bound to {host!r} needs url=: the address clients reach it at, "
            "for its agent card"
        )
    return f"http://{_shown(host)}:{port}/"


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def a2a_app(
    agent: Promptable,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    url: str | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    description: str | None = None,
    task_store: TaskStore | None = None,
    push_store: PushNotificationConfigStore | None = None,
    legacy: bool = True,
    grpc_url: str | None = None,
    max_paused: int = DEFAULT_MAX_PAUSED,
    file_types: Iterable[str] = DEFAULT_FILE_TYPES,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_files_bytes: int = DEFAULT_MAX_FILES_BYTES,
    store: StateStore | str | None = None,
    keep_for: float | None = DEFAULT_KEEP_FOR,
) -> ASGIApp:
    """The A2A server for ``agent``, as an ASGI app (Starlette): JSON-RPC and HTTP+JSON.

    JSON-RPC is at ``/`` and HTTP+JSON (REST: ``/message:send``, ``/tasks/{id}``, ...) beside
    it, each speaking A2A 1.0 and, with ``legacy``, 0.3 (told apart by the request, as the SDK
    does). The card names both, and gRPC when ``grpc_url`` says where :func:`serve_a2a` serves it.

    Args:
        agent: The agent to serve: any :class:`~daimon.core.protocols.Promptable` (a
            Supervisor, a HandoffNetwork, a flow) as well as an Agent.
        host: The address it will be bound to; decides the defaults of the gate, and whether
            webhooks on non-public addresses are refused (off loopback they are).
        port: The port it will listen on (for the card's URL; the default ``Host`` names must
            carry it, any port when 0).
        url: Where clients reach it, for the agent card (``http://host:port/`` by default;
            required on a wildcard bind such as 0.0.0.0).
        token: The bearer token every request but the card's must carry: visible ASCII, no
            spaces. Required unless ``host`` is a loopback address.
        allowed_hosts: More ``Host`` patterns allowed (see :func:`daimon.mcp.mcp_http_app`).
        allowed_origins: More origins allowed to call from a browser.
        max_body_bytes: The largest request body accepted (413 beyond it).
        description: What the agent does, for the card.
        task_store: Where tasks are kept (in memory by default; the SDK's
            ``DatabaseTaskStore`` keeps them in PostgreSQL, MySQL or SQLite).
        push_store: Where push-notification configs are kept (in memory by default).
        legacy: Serve A2A 0.3 clients too.
        grpc_url: The gRPC endpoint to name in the card: an absolute URL such as
            ``grpc://host:port``.
        max_paused: How many runs waiting for approval are kept in memory (the oldest is
            forgotten first; an agent with a ``checkpoint`` resumes a forgotten one from it).
        file_types: The media types of the files a message may carry (``type/subtype`` or
            ``type/*``; images, audio, PDFs and text by default, as AG-UI); the card lists them
            as input modes. A file of another type is the spec's ContentTypeNotSupported error.
            A flow takes text only.
        max_file_bytes: The largest file (decoded) a message may carry (``max_body_bytes``
            bounds the whole request first).
        max_files_bytes: The most bytes of files one message may carry together.
        store: A :class:`~daimon.core.StateStore` or its URL (``redis://...``) where replicas
            share tasks and paused runs (see "Replicas" above). Default: this process's memory.
        keep_for: Seconds ``store`` keeps a task or paused run after its last change.

    Raises:
        BuilderError: Off loopback without a token, an unusable token or allowed host, a
            wildcard bind without ``url``, a ``grpc_url`` that is not an absolute URL, a
            malformed file limit, or an unknown ``store``.
    """
    return _served(
        agent,
        _Gate(host, port, url, token, allowed_hosts, allowed_origins, max_body_bytes),
        description=description,
        task_store=task_store,
        push_store=push_store,
        legacy=legacy,
        grpc_url=grpc_url,
        max_paused=max_paused,
        files=file_rules(agent, file_types, max_file_bytes, max_files_bytes),
        store=store,
        keep_for=keep_for,
    )[1]


class _Gate(NamedTuple):
    """Where a server listens and whom its gate lets in (see :func:`a2a_app`)."""

    host: str
    port: int
    url: str | None
    token: str | None
    allowed_hosts: Iterable[str]
    allowed_origins: Iterable[str]
    max_body_bytes: int


def _served(
    agent: Promptable,
    gate: _Gate,
    *,
    description: str | None,
    task_store: TaskStore | None,
    push_store: PushNotificationConfigStore | None,
    legacy: bool,
    grpc_url: str | None,
    max_paused: int,
    files: FileRules,
    store: StateStore | str | None,
    keep_for: float | None,
) -> tuple[_Service, ASGIApp]:
    """What :func:`a2a_app` and :func:`serve_a2a` serve: the bindings' service, its HTTP app.

    Raises:
        BuilderError: See :func:`a2a_app`.
    """
    check_exposure(gate.host, gate.token)
    service = _service(
        agent,
        url=_card_url(gate.host, gate.port, gate.url),
        exposed=not is_loopback(gate.host),
        bearer=gate.token is not None,
        description=description,
        task_store=task_store,
        push_store=push_store,
        grpc_url=grpc_url,
        legacy=legacy,
        max_paused=max_paused,
        files=files,
        store=store,
        keep_for=keep_for,
    )
    app = _http_app(
        service,
        host=gate.host,
        port=gate.port,
        token=gate.token,
        allowed_hosts=gate.allowed_hosts,
        allowed_origins=gate.allowed_origins,
        max_body_bytes=gate.max_body_bytes,
        legacy=legacy,
    )
    return service, app


def _http_app(
    service: _Service,
    *,
    host: str,
    port: int,
    token: str | None,
    allowed_hosts: Iterable[str],
    allowed_origins: Iterable[str],
    max_body_bytes: int,
    legacy: bool,
) -> ASGIApp:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await service.aclose()

    handler = service.handler
    routes = [
        *create_agent_card_routes(service.card),
        *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=legacy),
        *create_rest_routes(handler, enable_v0_3_compat=legacy),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    return HttpGate(
        TraceContextMiddleware(app),
        hosts=hosts_for(host, port, allowed_hosts),
        origins=allowed_origins,
        token=token,
        max_body_bytes=max_body_bytes,
        public_paths=(AGENT_CARD_WELL_KNOWN_PATH,),
        errors="text",
    )


async def serve_a2a(
    agent: Promptable,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    url: str | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    description: str | None = None,
    task_store: TaskStore | None = None,
    push_store: PushNotificationConfigStore | None = None,
    legacy: bool = True,
    grpc_port: int | None = None,
    grpc_url: str | None = None,
    max_paused: int = DEFAULT_MAX_PAUSED,
    file_types: Iterable[str] = DEFAULT_FILE_TYPES,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_files_bytes: int = DEFAULT_MAX_FILES_BYTES,
    store: StateStore | str | None = None,
    keep_for: float | None = DEFAULT_KEEP_FOR,
) -> None:
    """Serve ``agent`` as an A2A agent until stopped (SIGINT, SIGTERM, cancel).

    HTTP (JSON-RPC and HTTP+JSON) with uvicorn on ``host:port``; with ``grpc_port``, gRPC too
    on ``host:grpc_port`` (needs the ``grpc`` extra), sharing the tasks. See :func:`a2a_app`
    for the other arguments; ``grpc_url`` is where clients reach gRPC, an absolute URL
    (``grpc://<host>:<grpc_port>`` by default, the host of the card's URL; set it when a proxy
    or TLS terminator stands in front, e.g. ``grpcs://agents.example.com``).

    Raises:
        BuilderError: It would serve off loopback without a token (it refuses to start), or
            ``grpc_url`` is given without ``grpc_port`` or is not an absolute URL.
    """
    import uvicorn

    check_exposure(host, token)
    grpc_url = _grpc_card_url(host, port, url, grpc_port, grpc_url)
    service, app = _served(
        agent,
        _Gate(host, port, url, token, allowed_hosts, allowed_origins, max_body_bytes),
        description=description,
        task_store=task_store,
        push_store=push_store,
        legacy=legacy,
        grpc_url=grpc_url,
        max_paused=max_paused,
        files=file_rules(agent, file_types, max_file_bytes, max_files_bytes),
        store=store,
        keep_for=keep_for,
    )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5
    )
    if grpc_port is None:
        await serve_until_cancelled(uvicorn.Server(config))
        return
    from daimon.a2a._grpc import grpc_server

    server, _ = grpc_server(
        service.handler, host=host, port=grpc_port, token=token, max_message_bytes=max_body_bytes
    )
    await server.start()
    try:
        await serve_until_cancelled(uvicorn.Server(config))
    finally:
        await server.stop(grace=1)


def _grpc_card_url(
    host: str, port: int, url: str | None, grpc_port: int | None, grpc_url: str | None
) -> str | None:
    """The gRPC URL the card names: ``grpc_url``, or ``grpc://<card URL's host>:<grpc_port>``.

    Raises:
        BuilderError: ``grpc_url`` without ``grpc_port`` (nothing would serve it).
    """
    if grpc_port is None:
        if grpc_url is not None:
            raise BuilderError(
                "grpc_url names where clients reach the gRPC binding: serve it with grpc_port="
            )
        return None
    if grpc_url is not None:
        return grpc_url
    card_host = urlsplit(_card_url(host, port, url)).hostname or host
    return f"grpc://{_shown(card_host)}:{grpc_port}"


def _version() -> str:
    from daimon import __version__

    return __version__
