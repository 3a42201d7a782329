"""An OpenAI-compatible face: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Point the official ``openai`` SDK at ``<server>/v1`` (the token as ``api_key``) and each served
agent (any promptable: a supervisor, a handoff network, a flow) is a model. The request's
messages become the conversation: system and developer messages are added to the agent's own
instructions, earlier user and assistant turns are the history, and the last message (the
user's) is the prompt; a flow keeps no conversation, so it answers one user message only (400
otherwise). The agent runs with its own tools, on the server,
and its final answer is the completion.

Function ``tools`` in the request are client tools (``daimon.server._client_tools``): the model
sees them beside the agent's own, and when it calls one the run pauses and the answer is the
calls, ``finish_reason: "tool_calls"``, as OpenAI answers. The client runs them and sends the
conversation again ending with the assistant message and one ``tool`` message per call; that
continues the paused run (the server keeps it under the calls' ids, in its state store: any
replica sharing the store continues it, for ``keep_for`` seconds), so the results of server tools
the same turn ran are not lost; of two requests answering the same calls, one continues the run
and the other gets the 400 below. A ``tool`` message for a call no kept run waits
for is a 400 (``tool_call_not_found``). Streamed, every text delta of the run is sent as it comes
(text the model writes before calling a tool too, one blank line between turns); the non-streamed
``content`` is the final answer only. A stream lives in its request, as OpenAI's do: it is not
kept for a client to rejoin, and the run stops when its client goes.

With a broker (``daimon serve --broker``), every run (a flow's too) is a task a worker runs
(:mod:`daimon.server._chat_run`, the run both sides share): the worker writes the chunks, or the
one ``chat.completion``, to the run's log in the shared store and keeps a run paused for client
calls there, and the replica reads the log while its client waits. A client that leaves, or a
run past the request timeout, cancels the task; a broker that cannot take the run is a 503.

``tool_choice`` is the run's (:class:`daimon.Agent`'s ``tool_choice``): sent with the model calls
until the model calls a tool, then the model chooses again. It may name the agent's tools or the
client's; one the run cannot honour (an unknown name, a flow or a team asked for anything but
``"auto"``) is a 400 naming ``tool_choice``.

Sessions are the client's: the conversation comes in with each request and nothing is kept.

Requests are checked as strictly as OpenAI checks them: what each role's message must hold
(``content`` for user, system, developer and tool messages, ``tool_call_id`` for tool messages,
``content`` or ``tool_calls`` for assistant ones), JSON booleans and integers where the API has
them. A request refused is answered 400 in OpenAI's error shape, ``{"error": {"message",
"type": "invalid_request_error", "param", "code"}}``, ``param`` naming the field at fault
(``messages[0].content``), so OpenAI clients read it as they would OpenAI's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine, Mapping, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.responses import Response

from daimon._paused_runs import PausedRuns
from daimon._run_logs import frame_fields
from daimon.core.cancel import CancelToken
from daimon.core.errors import RunCancelled, UnknownPausedRunError
from daimon.core.messages import ContentPart, ImagePart, Message, TextPart, ToolCall
from daimon.core.protocols import Promptable
from daimon.core.tools import ToolSpec
from daimon.server._agents import ServedAgents
from daimon.server._broker_runs import failure_status, job_task, submit_run
from daimon.server._chat_run import CHAT_KIND, DONE, ChatRun, error_frame
from daimon.server._client_tools import (
    BadToolChoice,
    NoClientTools,
    RunStart,
    spec,
    takes_client_tools,
    with_tool_choice,
)
from daimon.server._encode import dump_json
from daimon.server._errors import RunLost, describe_failure, error_response
from daimon.server._routes import CLIENT_CLOSED, error_responses
from daimon.server._run_log import EventId, RunLogs
from daimon.server._runs import ClientDisconnected, run_supervised
from daimon.server._schemas import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    ErrorResponse,
    ModelList,
    ModelObject,
    OpenAIErrorResponse,
    ToolMessage,
    UserMessage,
)
from daimon.server._settings import ServerSettings
from daimon.server._sse import EventStreamResponse
from daimon.server._state import ServerState

__all__ = ("add_openai_routes",)

logger = logging.getLogger("daimon.server")


class _BadConversation(ValueError):
    """The messages cannot be read as a conversation (400, naming the field at fault)."""

    def __init__(self, message: str, param: str = "messages", code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def _client_specs(body: ChatCompletionRequest) -> tuple[ToolSpec, ...]:
    """The request's function tools, as client tools."""
    return tuple(
        spec(t.function.name, t.function.description, t.function.parameters)
        for t in body.tools or ()
    )


async def _read_request(
    body: ChatCompletionRequest,
    specs: tuple[ToolSpec, ...],
    agent: Promptable,
    paused: PausedRuns,
) -> RunStart:
    """What ``body`` asks of ``agent``: a new run, or a paused one given its client results."""
    if specs:
        try:
            takes_client_tools(agent, body.model, specs)
        except NoClientTools as exc:
            raise _BadConversation(str(exc), "tools", "invalid_value") from None
    messages = body.messages
    if not isinstance(messages[-1], ToolMessage):
        instructions, history, prompt = _conversation(messages)
        return RunStart(prompt, history, instructions or None, specs)
    first = len(messages)
    while first > 0 and isinstance(messages[first - 1], ToolMessage):
        first -= 1
    before = messages[first - 1] if first else None
    if not isinstance(before, AssistantMessage) or not before.tool_calls:
        raise _BadConversation(
            "tool messages must follow an assistant message with tool_calls",
            f"messages[{first}].role",
        )
    answers = [m for m in messages[first:] if isinstance(m, ToolMessage)]
    results = {m.tool_call_id: _text(m) for m in answers}
    where = [f"messages[{first + i}].tool_call_id" for i in range(len(answers))]
    try:
        found = await paused.waiting_for(body.model, results, where)
        if not await paused.take(found):  # another request continued it first
            raise paused.unknown(body.model, "", "these tool calls")
    except UnknownPausedRunError as exc:
        param = where[list(results).index(exc.key)] if exc.key in results else "messages"
        raise _BadConversation(str(exc), param, "tool_call_not_found") from None
    return RunStart("", [], None, specs, found.response, results)


def _text(message: ChatMessage) -> str:
    content = message.content
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(part.text for part in content if part.type == "text")


def _user_content(message: UserMessage) -> str | list[ContentPart]:
    content = message.content
    if isinstance(content, str):
        return content
    if all(part.type == "text" for part in content):
        return _text(message)
    return [
        TextPart(text=part.text) if part.type == "text" else ImagePart(url=part.image_url.url)
        for part in content
    ]


def _conversation(messages: Sequence[ChatMessage]) -> tuple[str, list[Message], str | Message]:
    """The extra instructions, the history and the prompt that ``messages`` hold."""
    *earlier, last = messages
    if not isinstance(last, UserMessage):
        raise _BadConversation(
            f"the last message must be the user's, not the {last.role}'s",
            f"messages[{len(earlier)}].role",
        )
    instructions: list[str] = []
    history: list[Message] = []
    unanswered: set[str] = set()
    for index, message in enumerate(earlier):
        if not isinstance(message, ToolMessage) and unanswered:
            raise _BadConversation(
                f"tool call(s) {sorted(unanswered)} have no tool message", f"messages[{index}]"
            )
        if isinstance(message, UserMessage):
            history.append(Message.user(_user_content(message)))
        elif isinstance(message, AssistantMessage):
            history.append(_assistant_turn(message, index))
            unanswered = {c.id for c in message.tool_calls or ()}
        elif isinstance(message, ToolMessage):
            if message.tool_call_id not in unanswered:
                raise _BadConversation(
                    f"tool message answers no pending tool call: {message.tool_call_id!r}",
                    f"messages[{index}].tool_call_id",
                )
            unanswered.discard(message.tool_call_id)
            history.append(Message.tool(message.tool_call_id, _text(message), name=message.name))
        else:
            instructions.append(_text(message))
    if unanswered:
        raise _BadConversation(
            f"tool call(s) {sorted(unanswered)} have no tool message", f"messages[{len(earlier)}]"
        )
    content = _user_content(last)
    prompt = content if isinstance(content, str) else Message.user(content)
    return "\n\n".join(i for i in instructions if i), history, prompt


def _assistant_turn(message: AssistantMessage, index: int) -> Message:
    """An earlier assistant turn; it must say something or call a tool, as at OpenAI."""
    if message.content is None and not message.tool_calls:
        where = f"messages[{index}].content"
        raise _BadConversation(
            f"Missing required parameter: '{where}' (an assistant message without tool_calls "
            "needs content).",
            where,
            "missing_required_parameter",
        )
    calls = tuple(
        ToolCall.from_json(c.id, c.function.name, c.function.arguments)
        for c in message.tool_calls or ()
    )
    return Message.assistant(_text(message), calls)


# ------------------------------------------------------------------ invalid requests, as OpenAI

_EXPECTED = {
    "string_type": "a string",
    "bool_type": "a boolean",
    "int_type": "an integer",
    "float_type": "a number",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}
_Path = list[str | int]


def _openai_error(
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    type: str = "invalid_request_error",
) -> Response:
    """A 400 answer in OpenAI's error shape."""
    error = {"message": message, "type": type, "param": param, "code": code}
    return Response(dump_json({"error": error}), status_code=400, media_type="application/json")


class _OpenAIRoute(APIRoute):
    """A route answering a request its schema refuses as OpenAI would: 400, OpenAI's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handle(request)
            except RequestValidationError as exc:
                return _invalid_request(exc)
            except HTTPException as exc:
                if exc.status_code != 400:  # the body could not be read at all (not UTF-8)
                    raise
                return _openai_error(f"We could not parse the body of your request: {exc.detail}.")

        return route


def _invalid_request(exc: RequestValidationError) -> Response:
    """The most specific of the schema's complaints, said the way OpenAI says it."""
    problems = [p for p in exc.errors() if isinstance(p, Mapping)]
    if not problems or any(p.get("type") == "json_invalid" for p in problems):
        return _openai_error(
            "We could not parse the JSON body of your request: send a JSON object."
        )
    located = [(_path(p, exc.body), p) for p in problems]
    # Deepest first; at one place, a wrong value says more than a union member's wrong type.
    path, problem = max(located, key=lambda pair: (len(pair[0]), pair[1]["type"] not in _EXPECTED))
    expected = [_EXPECTED[p["type"]] for at, p in located if at == path and p["type"] in _EXPECTED]
    expected = expected if problem["type"] in _EXPECTED else []  # a type problem: all it could be
    message, code, path = _describe(problem, path, expected)
    return _openai_error(message, param=_param(path), code=code)


def _path(problem: Mapping[str, Any], body: object) -> _Path:
    """Where in the request ``problem`` is, as the client wrote it.

    pydantic's location also names the union member and discriminator tag it tried
    (``messages.0.user.content.str``): only the steps that exist in the body are kept, and the
    field a ``missing`` problem names.
    """
    loc = list(problem.get("loc", ()))
    steps = loc[1:] if loc[:1] == ["body"] else loc
    path: _Path = []
    value = body
    for index, step in enumerate(steps):
        found, child = _step_into(value, step)
        if found:
            value = child
        elif not (problem["type"] == "missing" and index == len(steps) - 1):
            continue
        path.append(step)
    return path


def _step_into(value: object, step: object) -> tuple[bool, object]:
    """Whether ``value`` has ``step`` (a list index, an object key), and what is there."""
    if isinstance(step, int) and isinstance(value, list) and 0 <= step < len(value):
        return True, value[step]
    if isinstance(step, str) and isinstance(value, dict) and step in value:
        return True, value[step]
    return False, None


def _param(path: _Path) -> str | None:
    """``["messages", 0, "content"]`` as OpenAI names it: ``messages[0].content``."""
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else f".{step}" if text else step
    return text or None


_BOUNDS = {
    "greater_than_equal": ("below minimum", ">=", "ge", "integer_below_min_value"),
    "less_than_equal": ("above maximum", "<=", "le", "integer_above_max_value"),
}


def _describe(
    problem: Mapping[str, Any], path: _Path, expected: list[str]
) -> tuple[str, str | None, _Path]:
    """OpenAI's message and code for ``problem`` at ``path`` (which a tag problem extends)."""
    kind, ctx, value = problem["type"], problem.get("ctx") or {}, problem.get("input")
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        path = [*path, str(ctx.get("discriminator", "")).strip("'")]
    param = _param(path)
    where = f"'{param}'" if param else "the request body"
    if kind in ("missing", "union_tag_not_found"):
        return f"Missing required parameter: {where}.", "missing_required_parameter", path
    if kind == "union_tag_invalid":
        supported = ctx.get("expected_tags", "")
        message = f"Invalid value for {where}: '{ctx.get('tag')}'. Supported: {supported}."
        return message, "invalid_value", path
    if expected:
        wanted = expected[0] if len(expected) == 1 else "one of " + " or ".join(expected)
        message = f"Invalid type for {where}: expected {wanted}, but got {_json_kind(value)}"
        return message + " instead.", "invalid_type", path
    if kind == "too_short" and value == []:
        least = ctx.get("min_length", 1)
        message = f"Invalid {where}: empty array. Expected an array with minimum length {least}"
        return message + ", but got an empty array instead.", "empty_array", path
    if kind in _BOUNDS:
        side, sign, key, code = _BOUNDS[kind]
        message = f"Invalid {where}: integer {side} value. Expected a value {sign} {ctx.get(key)}"
        return message + f", but got {value} instead.", code, path
    return f"Invalid {where}: {problem.get('msg', 'invalid value')}.", "invalid_value", path


def _json_kind(value: object) -> str:
    """What JSON ``value`` is, in OpenAI's words ("a string", "null", ...)."""
    kinds = ((bool, "a boolean"), (int, "an integer"), (float, "a decimal"), (str, "a string"))
    for kind, words in (*kinds, (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return words
    return "null"


def add_openai_routes(
    router: APIRouter,
    served: ServedAgents,
    settings: ServerSettings,
    started: int,
    state: ServerState,
) -> None:
    """Add the OpenAI-compatible routes, under ``/v1``, to ``router``."""
    _add_model_routes(router, served, started)
    _add_chat_route(router, served, settings, state)


def _add_model_routes(router: APIRouter, served: ServedAgents, started: int) -> None:
    """``GET /v1/models`` and ``GET /v1/models/{model_id}``: the served agents, as models."""

    def model(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": started, "owned_by": "daimon"}

    @router.get("/v1/models", response_model=ModelList, responses=error_responses(401, 403))
    async def list_models() -> Response:
        """The served agents (and other promptables), one model each."""
        body = {"object": "list", "data": [model(name) for name in served.by_name]}
        return Response(dump_json(body), media_type="application/json")

    @router.get(
        "/v1/models/{model_id}",
        response_model=ModelObject,
        responses=error_responses(401, 403, 404, 422),
    )
    async def get_model(model_id: str) -> Response:
        """One served agent (or other promptable), as a model."""
        if model_id not in served.by_name:
            return error_response(404, "not_found", served.unknown(model_id))
        return Response(dump_json(model(model_id)), media_type="application/json")


def _add_chat_route(
    router: APIRouter, served: ServedAgents, settings: ServerSettings, state: ServerState
) -> None:
    """``POST /v1/chat/completions``."""
    timeout = settings.request_timeout
    paused_runs = PausedRuns(state.store, CHAT_KIND, settings.keep_for)

    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        """Run an agent on a conversation, as OpenAI Chat Completions would answer it."""
        run = await _accept(body, served, state, paused_runs)
        if isinstance(run, Response):
            return run
        logs: RunLogs = request.app.state.daimon_logs
        if logs.broker is not None:
            return await _on_workers(run, logs, settings, request)
        if run.stream:
            return EventStreamResponse(
                run.frames,
                on_error=error_frame,
                heartbeat=settings.heartbeat_interval,
                timeout=timeout,
            )
        try:
            response = await run_supervised(run.answer, request.receive, timeout)
            completion = await run.completion(response)  # a paused run: 409
        except ClientDisconnected:
            return Response(status_code=CLIENT_CLOSED)
        except Exception as exc:
            return _run_error(exc)
        return Response(dump_json(completion), media_type="application/json")

    router.add_api_route(
        "/v1/chat/completions",
        chat_completions,
        methods=["POST"],
        response_model=ChatCompletion,
        responses=_COMPLETION_RESPONSES,
        route_class_override=_OpenAIRoute,
    )


async def _accept(
    body: ChatCompletionRequest, served: ServedAgents, state: ServerState, paused: PausedRuns
) -> ChatRun | Response:
    """The run a request asks for, or the error answer that refuses it."""
    agent = served.get(body.model)
    if agent is None:
        return error_response(404, "not_found", served.unknown(body.model))
    specs = _client_specs(body)
    await state.open()
    try:
        agent = with_tool_choice(agent, body.model, body.chosen_tool, specs)
        conversation = await _read_request(body, specs, agent, paused)
    except _BadConversation as exc:
        return _openai_error(str(exc), param=exc.param, code=exc.code)
    except BadToolChoice as exc:
        return _openai_error(str(exc), param="tool_choice", code="invalid_value")
    if served.flow(body.model) is not None and (conversation.history or conversation.instructions):
        message = f"model {body.model!r} is a flow: send one user message, nothing before it"
        return _openai_error(message, param="messages", code="flow_takes_one_message")
    options = body.stream_options
    return ChatRun(
        agent=agent,
        model=body.model,
        conversation=conversation,
        paused=paused,
        stream=bool(body.stream),
        include_usage=bool(body.stream and options is not None and options.include_usage),
        tool_choice=body.chosen_tool,
    )


def _run_error(exc: BaseException) -> Response:
    """The answer to a run that failed with ``exc`` (a run paused for an approval: 409)."""
    status, kind, message = describe_failure(exc)
    return _failure_response(status, kind, message)


def _failure_response(status: int, kind: str, message: str) -> Response:
    if status == 400:  # a prompt the agent refused: 400s here are all OpenAI-shaped
        return _openai_error(message, type=kind)
    return error_response(status, kind, message)


# ------------------------------------------------------------------ runs on workers


async def _on_workers(
    run: ChatRun, logs: RunLogs, settings: ServerSettings, request: Request
) -> Response:
    """Run ``run`` as a task a worker takes; the answer reads its log while the client waits.

    The stream is not kept for a client to rejoin: a client that leaves, and a run past the
    request timeout, cancel the task.
    """
    stream = run.id
    refused = await submit_run(logs, stream, job_task(logs, stream, run.model, run.spec()))
    if refused is not None:
        return refused
    if run.stream:
        return EventStreamResponse(
            lambda token: _relay(logs, stream, token),
            on_error=error_frame,
            heartbeat=settings.heartbeat_interval,
            timeout=settings.request_timeout,
        )
    return await _completion_from(logs, stream, request, settings.request_timeout)


async def _relay(logs: RunLogs, stream: str, token: CancelToken) -> AsyncGenerator[bytes, None]:
    """The frames a worker writes to the log ``stream``, as the client takes them.

    The relay ends with the stream's last frame (``[DONE]``, or an error), as a replica's own
    stream does; one that stops before it (its client left, the timeout) cancels the run.
    """
    ended = False
    try:
        async with contextlib.aclosing(logs.follow(EventId(stream, 0), token)) as frames:
            async for frame in frames:
                wire = _wire(frame)
                yield wire
                if wire == DONE or wire.startswith(_ERROR):
                    break
        ended = True
    finally:
        if not ended:
            await _cancel(logs, stream, token.reason or "the stream ended")


async def _completion_from(
    logs: RunLogs, stream: str, request: Request, seconds: float
) -> Response:
    """The answer of a run that is not streamed: the one frame its worker writes."""

    async def first(token: CancelToken) -> Any:
        async with contextlib.aclosing(logs.follow(EventId(stream, 0), token)) as frames:
            async for frame in frames:
                return frame_fields(frame)[1]
        raise RunLost(f"the log of run {stream!r} ended without its answer")

    try:
        data = await run_supervised(first, request.receive, seconds)
    except ClientDisconnected:
        await _cancel(logs, stream, "the client left")
        return Response(status_code=CLIENT_CLOSED)
    except Exception as exc:
        await _cancel(logs, stream, "the answer could not be read")
        return _run_error(exc)
    if not isinstance(data, dict) or "error" in data:
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, dict):
            return error_response(500, "internal_error", "the run ended without an answer")
        kind, message = str(error.get("type")), str(error.get("message"))
        return _failure_response(failure_status(kind), kind, message)
    return Response(dump_json(data), media_type="application/json")


_ERROR = b'data: {"error":'
"""How the frame that ends a failed stream starts (see ``_chat_run.error_frame``)."""


def _wire(frame: bytes) -> bytes:
    """A logged frame as the client gets it: without its ``id`` line and attempt mark."""
    return b"\n".join(line for line in frame.split(b"\n") if not line.startswith((b"id: ", b":")))


async def _cancel(logs: RunLogs, stream: str, reason: str) -> None:
    """Cancel the task writing ``stream``, in a task of its own (the caller may be cancelled)."""

    async def cancel() -> None:
        ending = error_frame(RunCancelled(reason))
        await logs.cancel(stream, reason, ending=lambda logged: ending)

    try:
        await asyncio.shield(asyncio.ensure_future(cancel()))
    except Exception:
        logger.warning("cannot cancel the run of chat completion %s", stream, exc_info=True)


_COMPLETION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A `chat.completion`; with `stream: true`, server-sent "
        "`chat.completion.chunk` events ending with `data: [DONE]` (or, on failure, "
        'a `data: {"error": {...}}` event).',
        "content": {
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "description": "One server-sent event: a chunk, an error or [DONE].",
                    "required": ["data"],
                    "properties": {"data": {"type": "string"}},
                }
            }
        },
    },
    400: {
        "model": OpenAIErrorResponse,
        "description": "The request is not one OpenAI would accept (a missing or mistyped "
        "field, malformed JSON), its messages are not a conversation, or the agent's "
        "guardrails refused it; `param` names the field at fault.",
    },
    **error_responses(401, 403, 404, 413, 500, 502, 503, 504),
    409: {"model": ErrorResponse, "description": "The run paused for an approval."},
    # Documented so that FastAPI adds no 422 of its own: this route never answers 422.
    "4XX": {"model": ErrorResponse, "description": "Any other client error."},
}
