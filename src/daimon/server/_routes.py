"""daimon's own routes: prompts (whole or streamed), sessions, agents, health and readiness.

Any promptable answers ``/prompt`` and ``/prompt/stream`` (an agent, a supervisor, a handoff
network; its stream is its events); sessions are those of the promptables that keep some.

A served flow (graph, DAG or workflow) answers ``/prompt`` and ``/prompt/stream`` like an agent;
its stream carries ``node_started``/``node_finished``/``node_failed``/``node_skipped`` events,
``node_event`` for each stream event of an agent a node prompts, and ends with ``done`` (data:
``{"kind": "done", "response": <the /prompt answer>}``) or ``error``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.responses import Response

from daimon._run_logs import event_frame
from daimon.core import codec
from daimon.core.cancel import CancelToken
from daimon.core.protocols import Broker
from daimon.server._agents import ServedAgents
from daimon.server._broker_runs import flow_on_workers, job_task, prompt_on_workers, submit_run
from daimon.server._encode import (
    dump_json,
    prompt_body,
)
from daimon.server._errors import describe_failure, error_response
from daimon.server._flow_run import FlowJob, flow_body, run_error_frame
from daimon.server._run_log import EventId, RunLogs, StreamGone
from daimon.server._runs import ClientDisconnected, run_supervised
from daimon.server._schemas import (
    SESSION_PATTERN,
    AgentsResponse,
    ErrorResponse,
    HealthResponse,
    PromptRequest,
    PromptResponse,
    ReadyResponse,
    SessionResponse,
    SessionsResponse,
)
from daimon.server._settings import ServerSettings
from daimon.server._sse import EventStreamResponse, Source
from daimon.server._state import ServerState

__all__ = ("CLIENT_CLOSED", "add_native_routes", "error_responses")

logger = logging.getLogger("daimon.server")

CLIENT_CLOSED = 499
"""The status logged for a run whose client went away (nobody receives it)."""

_ERROR_DESCRIPTIONS = {
    400: "Malformed JSON, or a request the agent's guardrails refused.",
    401: "The bearer token is missing or wrong (when the server has one).",
    403: "The Host or Origin header is not allowed.",
    404: "No such agent (or route).",
    409: "The run paused for a person's approval (not supported on this route).",
    413: "The request body is larger than the limit.",
    422: "The request body does not match the schema; `details` says where.",
    500: "The run failed (the error type names the daimon exception).",
    501: "The agent's memory (or the store it wraps) has no `list_sessions`.",
    502: "The model provider failed.",
    503: "The task broker cannot take the run (a server with a broker).",
    504: "The run took longer than the request timeout.",
}


def error_responses(*codes: int, streaming: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for error answers, all with the ``ErrorResponse`` JSON body.

    A route whose own answer is not JSON (``streaming``) gets the body by reference, as FastAPI
    would otherwise give it the route's media type.
    """
    if streaming:
        content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
        return {
            code: {"description": _ERROR_DESCRIPTIONS[code], "content": content} for code in codes
        }
    return {
        code: {"model": ErrorResponse, "description": _ERROR_DESCRIPTIONS[code]} for code in codes
    }


_GATED = (401, 403)
_READY_WAIT = 3.0
"""Seconds ``/ready`` waits for the task broker's answer."""
_READY_PROBE = "daimon-ready-probe"
"""The task id ``/ready`` asks the broker about (no such task: any answer says it is up)."""
_WITH_INPUT = (*_GATED, 400, 404, 413, 422)
_RUN = (*_WITH_INPUT, 500, 502, 504)

SessionId = Annotated[str, Path(pattern=SESSION_PATTERN, description="The conversation's id.")]
StreamName = Annotated[
    str,
    Path(
        pattern=r"^[A-Za-z0-9_-]{1,128}$",
        description="The stream's name: an event id's part before its last `:`.",
    ),
]
AgentName = Annotated[
    str | None, Query(description="The agent whose memory holds the session; default agent.")
]
ListedAgent = Annotated[
    str | None, Query(description="The agent whose sessions to list; default agent.")
]
SessionLimit = Annotated[
    int, Query(ge=1, le=1000, description="The most sessions to answer with (1-1000).")
]

_STREAM_DOC = {
    "description": (
        "Server-sent events: one per agent stream event, `event: <kind>` (`text_delta`, "
        "`tool_call_start`, `tool_call_delta`, `tool_call_end`, `tool_result`, `usage`) with "
        "`data:` its JSON encoding; `: ping` comments while idle; and a last event that is "
        "either `done` (data: the `Done` event carrying the response) or `error` (data: "
        '`{"message", "error_type", "kind": "error"}`). A flow (graph, DAG, workflow) sends '
        "`node_started`, `node_finished`, `node_failed` and `node_skipped` events (data: "
        '`{"kind", "node", "step"?, "seconds"?, "error_type"?, "message"?}`), `node_event` for '
        'each stream event of an agent a node prompts (data: `{"kind", "node", "step", "event"}`, '
        "`event` encoded as in an agent's own stream), and ends with "
        '`done` (data: `{"kind": "done", "response": <the /prompt answer>}`) or `error`.'
    ),
    "content": {
        "text/event-stream": {
            "schema": {
                "type": "object",
                "description": "One server-sent event.",
                "required": ["event", "data"],
                "properties": {
                    "event": {
                        "type": "string",
                        "enum": [
                            "text_delta",
                            "tool_call_start",
                            "tool_call_delta",
                            "tool_call_end",
                            "tool_result",
                            "usage",
                            "node_started",
                            "node_finished",
                            "node_failed",
                            "node_skipped",
                            "node_event",
                            "attempt",
                            "done",
                            "error",
                        ],
                    },
                    "data": {"type": "string", "description": "The event's JSON encoding."},
                },
            }
        }
    },
}


async def reject_unknown_query(request: Request) -> None:
    """Refuse query parameters the route does not declare (422), as bodies refuse extra fields."""
    if not request.query_params:
        return
    route = request.scope.get("route")
    declared = (
        {p.alias for p in route.dependant.query_params} if isinstance(route, APIRoute) else set()
    )
    unknown = [name for name in request.query_params if name not in declared]
    if unknown:
        raise RequestValidationError(
            [
                {
                    "type": "extra_forbidden",
                    "loc": ("query", name),
                    "msg": "Unknown query parameter",
                }
                for name in unknown
            ]
        )


def add_native_routes(
    router: APIRouter,
    served: ServedAgents,
    settings: ServerSettings,
    ready: Callable[[], bool],
    state: ServerState,
    logs: RunLogs,
) -> None:
    """Add the routes of daimon's own API to ``router`` (the app's own: no nested routers)."""
    _add_prompt_routes(router, served, settings, logs)
    _add_stream_route(router, served, settings, logs)
    _add_stream_cancel_route(router, logs)
    _add_status_routes(router, served, ready, state, logs.broker)
    _add_session_routes(router, served)


def _add_prompt_routes(
    router: APIRouter, served: ServedAgents, settings: ServerSettings, logs: RunLogs
) -> None:
    """``POST /prompt``."""
    timeout = settings.request_timeout

    @router.post("/prompt", response_model=PromptResponse, responses=error_responses(*_RUN, 503))
    async def prompt(body: PromptRequest, request: Request) -> Response:
        """Ask an agent; answers once the run is finished.

        A client that disconnects cancels its run. A run longer than the request timeout is
        cancelled and answered with 504. With a broker (`daimon serve --broker`), an agent's run
        is a task a worker runs (503 when the broker cannot take it).
        """
        name = body.agent or served.default
        flow = served.flow(name)
        if flow is not None and logs.broker is not None:
            job = FlowJob(flow, name, body.input)
            return await flow_on_workers(logs, job, request.receive, timeout)
        if flow is not None:
            try:
                answer = await run_supervised(
                    lambda token: flow.run(body.input, cancel=token), request.receive, timeout
                )
            except ClientDisconnected:
                return Response(status_code=CLIENT_CLOSED)
            except Exception as exc:
                status, kind, message = describe_failure(exc)
                return error_response(status, kind, message)
            return Response(dump_json(flow_body(name, answer)), media_type="application/json")
        agent = served.get(name)
        if agent is None:
            return error_response(404, "not_found", served.unknown(name))
        if logs.broker is not None:
            return await prompt_on_workers(
                logs.broker, name, body.input, body.session_id, request.receive, timeout
            )
        try:
            response = await run_supervised(
                lambda token: agent.prompt(body.input, session_id=body.session_id, cancel=token),
                request.receive,
                timeout,
            )
        except ClientDisconnected:
            return Response(status_code=CLIENT_CLOSED)
        except Exception as exc:
            status, kind, message = describe_failure(exc)
            return error_response(status, kind, message)
        return Response(dump_json(prompt_body(name, response)), media_type="application/json")


def _add_stream_route(
    router: APIRouter, served: ServedAgents, settings: ServerSettings, logs: RunLogs
) -> None:
    """``POST /prompt/stream``."""

    @router.post(
        "/prompt/stream",
        status_code=200,
        response_class=EventStreamResponse,
        responses={200: _STREAM_DOC, **error_responses(*_WITH_INPUT, 503, streaming=True)},
    )
    async def prompt_stream(body: PromptRequest, request: Request) -> Response:
        """Ask an agent and stream its events as they happen (server-sent events).

        Each event has an `id`; a client that lost its connection sends the same request again
        with a `Last-Event-ID` header (to any replica sharing the server's store) and gets the
        events after it. The run goes on while no client listens, for the server's stream grace
        (30 s by default), then is cancelled. Runs that fail, or pass the request timeout, end
        with an `error` event. `DELETE /prompt/stream/{stream}` cancels a run.

        With a broker (`daimon serve --broker`), an agent's run is a task a worker runs: if the
        worker dies, another takes the run over from its last checkpoint, and the stream goes on
        with an `attempt` event (data: `{"kind": "attempt", "attempt": <n>}`): the text of the
        step the lost worker had not finished may come again.
        """
        try:
            at = EventId.parse(request.headers.get("last-event-id"))
        except ValueError as exc:
            return error_response(400, "invalid_request", str(exc))
        if at is not None:
            try:
                await logs.check(at)
            except StreamGone as exc:
                return error_response(404, "not_found", str(exc))
            return logs.reader(at, run_error_frame, settings.heartbeat_interval)
        name = body.agent or served.default
        if logs.broker is not None and served.get(name) is not None:
            return await _submit_stream(logs, settings, served, name, body)
        source = _prompt_source(served, body)
        if source is None:
            return error_response(404, "not_found", served.unknown(name))
        stream = uuid.uuid4().hex
        await logs.start(stream, source, run_error_frame)
        return logs.reader(EventId(stream, 0), run_error_frame, settings.heartbeat_interval)


async def _broker_problem(broker: Broker | None) -> str | None:
    """Why the task broker cannot take runs right now; ``None`` when it can (or there is none)."""
    if broker is None:
        return None
    try:
        async with asyncio.timeout(_READY_WAIT):
            await broker.status(_READY_PROBE)
    except KeyError:  # it answered: no such task
        return None
    except Exception as exc:  # any failure of a broker's client means "not ready"
        return f"the task broker cannot be reached: {type(exc).__name__}: {exc}"
    return None


def _add_stream_cancel_route(router: APIRouter, logs: RunLogs) -> None:
    """``DELETE /prompt/stream/{stream}``."""

    @router.delete(
        "/prompt/stream/{stream}",
        status_code=204,
        response_class=Response,
        responses=error_responses(*_GATED, 404, 422),
    )
    async def cancel_stream(stream: StreamName) -> Response:
        """Cancel a streamed run (of `/prompt/stream` or `/agui`), wherever it runs.

        `stream` is the part of an event's `id` before its last `:`. Its readers get an
        `error` event (`RunCancelled`); a run that has ended already is left as it is.
        """
        if not await logs.known(stream):
            return error_response(404, "not_found", f"no stream {stream!r} is kept")
        await logs.cancel(stream)
        return Response(status_code=204)


async def _submit_stream(
    logs: RunLogs, settings: ServerSettings, served: ServedAgents, name: str, body: PromptRequest
) -> Response:
    """Send the run ``body`` asks for to the workers; the response reads its log."""
    stream = uuid.uuid4().hex
    flow = served.flow(name)
    spec = None if flow is None else FlowJob(flow, name, body.input).spec()
    task = job_task(logs, stream, name, spec, text=body.input, session_id=body.session_id)
    refused = await submit_run(logs, stream, task)
    if refused is not None:
        return refused
    return logs.reader(EventId(stream, 0), run_error_frame, settings.heartbeat_interval)


def _prompt_source(served: ServedAgents, body: PromptRequest) -> Source | None:
    """The frames of the run ``body`` asks for; ``None`` when no such agent is served."""
    name = body.agent or served.default
    flow = served.flow(name)
    if flow is not None:
        return FlowJob(flow, name, body.input).frames
    agent = served.get(name)
    if agent is None:
        return None

    async def events(token: CancelToken) -> AsyncGenerator[bytes, None]:
        stream = agent.prompt_stream(body.input, session_id=body.session_id, cancel=token)
        async for event in stream:
            yield event_frame(event)

    return events


def _add_status_routes(
    router: APIRouter,
    served: ServedAgents,
    ready: Callable[[], bool],
    state: ServerState,
    broker: Broker | None,
) -> None:
    """``GET /health``, ``GET /ready`` and ``GET /agents``."""

    @router.get("/health", response_model=HealthResponse, responses=error_responses(*_GATED))
    async def health() -> Response:
        """Liveness: the process is up."""
        return Response(b'{"status":"ok"}', media_type="application/json")

    @router.get(
        "/ready",
        response_model=ReadyResponse,
        responses={
            **error_responses(*_GATED),
            503: {
                "model": ErrorResponse,
                "description": "Starting or shutting down, or the state store (or the task "
                "broker) is unreachable.",
            },
        },
    )
    async def ready_() -> Response:
        """Readiness: the server accepts prompts, and its state store (and task broker) answer."""
        if not ready():
            return error_response(503, "not_ready", "the server is starting or shutting down")
        problem = await state.check() or await _broker_problem(broker)
        if problem is not None:
            return error_response(503, "not_ready", problem)
        body = {"status": "ready", "agents": list(served.names)}
        return Response(dump_json(body), media_type="application/json")

    @router.get("/agents", response_model=AgentsResponse, responses=error_responses(*_GATED))
    async def agents() -> Response:
        """The served agents and flows: names, models and tools; for a flow, its drawing."""
        listed = [served.describe(name) for name in served.names]
        body = {"default": served.default, "agents": listed}
        return Response(dump_json(body), media_type="application/json")


def _add_session_routes(router: APIRouter, served: ServedAgents) -> None:
    """``GET /sessions``, ``GET /sessions/{session_id}`` and ``DELETE /sessions/{session_id}``."""
    strict_query = [Depends(reject_unknown_query)]

    @router.get(
        "/sessions",
        response_model=SessionsResponse,
        dependencies=strict_query,
        responses=error_responses(*_GATED, 404, 422, 501),
    )
    async def list_sessions(agent: ListedAgent = None, limit: SessionLimit = 100) -> Response:
        """The conversations the agent's memory holds, sorted by id (the first `limit`)."""
        memory = served.memory(agent)
        if memory is None:
            return error_response(404, "not_found", served.unknown(agent or served.default))
        lister = getattr(memory, "list_sessions", None)
        if lister is None:  # a Memory written before the protocol gained list_sessions
            kind = type(memory).__name__
            return error_response(501, "not_implemented", f"{kind} cannot list its sessions")
        try:
            ids = await lister()
        except NotImplementedError as exc:  # a wrapper (a token window, say) over such a memory
            return error_response(501, "not_implemented", str(exc))
        body = {
            "agent": agent or served.default,
            "sessions": [{"session_id": session_id} for session_id in ids[:limit]],
            "truncated": len(ids) > limit,
        }
        return Response(dump_json(body), media_type="application/json")

    @router.get(
        "/sessions/{session_id}",
        response_model=SessionResponse,
        dependencies=strict_query,
        responses=error_responses(*_GATED, 404, 422),
    )
    async def get_session(session_id: SessionId, agent: AgentName = None) -> Response:
        """A conversation's messages, as the agent's memory keeps them (its window)."""
        memory = served.memory(agent)
        if memory is None:
            return error_response(404, "not_found", served.unknown(agent or served.default))
        messages = await memory.get_messages(session_id)
        body = {
            "session_id": session_id,
            "agent": agent or served.default,
            "messages": [codec.to_data(m) for m in messages],
        }
        return Response(dump_json(body), media_type="application/json")

    @router.delete(
        "/sessions/{session_id}",
        status_code=204,
        dependencies=strict_query,
        response_class=Response,
        responses=error_responses(*_GATED, 404, 422),
    )
    async def delete_session(session_id: SessionId, agent: AgentName = None) -> Response:
        """Forget a conversation."""
        memory = served.memory(agent)
        if memory is None:
            return error_response(404, "not_found", served.unknown(agent or served.default))
        await memory.clear(session_id)
        return Response(status_code=204)
