"""The OpenAI Responses API face: ``POST /v1/responses`` and its stored responses.

Point the official ``openai`` SDK at ``<server>/v1`` and call ``client.responses.create`` (or
``client.responses.stream``) with a served agent's name as ``model``. ``input`` (a string, or
items) is the conversation: ``system`` and ``developer`` messages and ``instructions`` are added
to the agent's own instructions, earlier items (messages, ``function_call`` and
``function_call_output`` pairs) are the history, and the last item, a user message, is the
prompt. Reasoning items in the input are another model's and are left out. The agent runs with
its own tools, on the server; the answer's ``output`` holds one ``message`` item for each model
turn that wrote text (the last one is the answer). Function tools sent by the client
(``tools``) are client tools (``daimon.server._client_tools``): when the model calls one, the
run pauses and the response (``completed``) ends with a ``function_call`` item per call; the
next request, with ``previous_response_id`` and a ``function_call_output`` item per call,
continues the paused run (kept in the server's state store, ``ServerSettings.keep_for``
seconds). Other tool types, and client tools in a background response, are refused with 400,
and so is a JSON-schema ``text.format`` (the agent's output type decides its answer's shape).

Responses are kept (``store``, on by default as at OpenAI) in the server's state store
(``ServerSettings.store``; memory by default) for ``keep_for`` seconds, as versioned JSON, so
``previous_response_id`` continues a conversation (the earlier response's whole conversation is
the new run's history; its ``instructions`` are not carried over, as at OpenAI) and
``GET /v1/responses/{id}`` reads one back. Replicas sharing a store answer each other's
follow-ups: retrieval, deletion, cancellation, continuation and function call outputs.

``background: true`` answers at once with a ``queued`` response and runs the agent in a task of
its own (within the request timeout); its status is kept as it changes (``in_progress``, then
``completed``, ``failed`` or ``cancelled``), so ``GET /v1/responses/{id}`` on any replica polls
it, and ``POST /v1/responses/{id}/cancel`` on any replica stops it (``cancelled``; a finished
response is returned as it is: of a run ending and a cancel, exactly one wins). Streamed, the
answer is the documented event sequence: ``response.created``, ``response.in_progress``, then
per message ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta``..., ``response.output_text.done``, ``response.content_part.done``,
``response.output_item.done``, and finally ``response.completed`` (or ``response.failed``, whose
response says ``failed`` with the error, or ``cancelled``). A streamed or background run writes
its events to a log in the store (:mod:`daimon.server._run_log`) and goes on if its client
leaves; ``GET /v1/responses/{id}?stream=true&starting_after=N`` (or with a ``Last-Event-ID``
header), on any replica, streams the events after sequence number ``N`` again. Bad requests
answer 400 in OpenAI's error shape with ``param`` naming the field (an unknown
``previous_response_id`` included, code ``previous_response_not_found``); an unknown response
id answers 404.

The run itself (:class:`~daimon.server._responses_run.ResponseRun`: its events, and keeping the
response as it changes) is web-free: without a broker it runs in this process; with one
(``daimon serve --broker``) every request's run is a task a worker runs, from the run's spec,
writing the events to the same log and keeping the response in the same store; a plain request
reads the log to its end and answers with the response its last event carries.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncGenerator, Sequence
from typing import Annotated, Any, Literal, get_args

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, Tag
from starlette.responses import Response

from daimon._paused_runs import PausedRuns
from daimon._run_logs import frame_fields, sse_frame
from daimon.core.cancel import CancelToken
from daimon.core.errors import ApprovalRequiredError, InvalidIdError, UnknownPausedRunError
from daimon.core.messages import ContentPart, ImagePart, Message, TextPart, ToolCall
from daimon.core.protocols import Promptable
from daimon.core.tools import ToolSpec
from daimon.server._agents import ServedAgents
from daimon.server._broker_runs import failure_status, job_task, submit_run
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
from daimon.server._openai_compat import _OpenAIRoute
from daimon.server._responses_run import (
    BY_CLIENT,
    NO_APPROVALS_HERE,
    KeptResponse,
    ResponseRun,
    ResponseStore,
    fail,
    finish,
    for_client,
    output,
    paused_output,
)
from daimon.server._routes import error_responses
from daimon.server._run_log import EventId, RunLogs, StreamGone
from daimon.server._runs import ClientDisconnected, run_supervised
from daimon.server._schemas import ErrorResponse, OpenAIErrorResponse
from daimon.server._settings import ServerSettings
from daimon.server._sse import Source
from daimon.server._state import ServerState

__all__ = ("add_responses_routes",)


# ------------------------------------------------------------------------------ the request


class _Item(BaseModel):
    model_config = ConfigDict(extra="ignore")


class InputText(_Item):
    """Text in a message (``output_text`` in an earlier assistant turn)."""

    type: Literal["input_text", "output_text"]
    text: str


class InputImage(_Item):
    """An image in a user message, by URL (``https:`` or ``data:``)."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None


class Refusal(_Item):
    """An earlier assistant turn's refusal."""

    type: Literal["refusal"]
    refusal: str


InputPart = Annotated[InputText | InputImage | Refusal, Field(discriminator="type")]


class MessageItem(_Item):
    """A message; without ``type`` it is one too (OpenAI's "easy" input message)."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | Annotated[list[InputPart], Field(min_length=1)]


class FunctionCallItem(_Item):
    """A tool call of an earlier assistant turn."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(_Item):
    """The result of the function call with ``call_id``."""

    type: Literal["function_call_output"]
    call_id: str
    output: str | list[InputText]


class ReasoningItem(_Item):
    """Another model's reasoning: accepted and left out."""

    type: Literal["reasoning"]


def _item_type(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("type", "message"))
    return str(getattr(value, "type", "message"))


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(
        _item_type,
        custom_error_type="invalid_value",
        custom_error_message="unsupported item type: the input takes message, function_call, "
        "function_call_output and reasoning items",
    ),
]


class TextFormat(BaseModel):
    """The answer's format: only ``text`` here."""

    model_config = ConfigDict(extra="ignore")
    type: str


class TextOptions(BaseModel):
    """Text options."""

    model_config = ConfigDict(extra="ignore")
    format: TextFormat | None = None


class FunctionChoice(BaseModel):
    """``tool_choice`` naming one function: the model must call it."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function"]
    name: str


_Mode = Literal["none", "auto", "required"]
ToolChoice = _Mode | FunctionChoice
"""Whether the model must call a tool: a mode, or one function by name."""


class ResponsesRequest(BaseModel):
    """An OpenAI Responses request; sampling parameters are the agent's and are ignored.

    ``model`` names the agent, whose own tools run on the server; function ``tools`` are client
    tools. ``tool_choice`` (any of the agent's tools or the client's) holds for the run's model
    calls until the model calls a tool.
    """

    model_config = ConfigDict(extra="ignore")

    model: str
    input: str | Annotated[list[InputItem], Field(min_length=1)]
    instructions: str | None = None
    previous_response_id: str | None = None
    stream: StrictBool | None = False
    background: StrictBool | None = False
    store: StrictBool | None = True
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    """Holds for the run's model calls until the model calls a tool."""
    text: TextOptions | None = None
    conversation: Any = None
    metadata: dict[str, str] | None = None


# ------------------------------------------------------------------------------ the document


class OutputText(BaseModel):
    """The text of a message."""

    type: Literal["output_text"]
    text: str
    annotations: list[Any]


class OutputMessage(BaseModel):
    """One model turn's text."""

    id: str
    type: Literal["message"]
    status: Literal["in_progress", "completed"]
    role: Literal["assistant"]
    content: list[OutputText]


class ResponseError(BaseModel):
    """Why a response failed."""

    code: str
    message: str


class InputTokensDetails(BaseModel):
    """Input tokens detail."""

    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(BaseModel):
    """Output tokens detail."""

    reasoning_tokens: int


class ResponseUsage(BaseModel):
    """Tokens used by the whole run (every model call)."""

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseObject(BaseModel):
    """An OpenAI ``response`` object (its sampling fields are placeholders: the agent's rule)."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["queued", "in_progress", "completed", "failed", "cancelled"]
    background: bool
    error: ResponseError | None
    model: str
    output: list[OutputMessage]
    previous_response_id: str | None
    store: bool
    tool_choice: ToolChoice
    """The run's ``tool_choice``: the request's, else the agent's (``"auto"`` when neither)."""
    usage: ResponseUsage | None
    metadata: dict[str, str]


class DeletedResponse(BaseModel):
    """What ``DELETE /v1/responses/{id}`` answers."""

    id: str
    object: Literal["response.deleted"]
    deleted: bool


# ------------------------------------------------------------------------------ errors


class _BadRequest(ValueError):
    """A request OpenAI would refuse: 400 (or ``status``), naming the field at fault."""

    def __init__(
        self, message: str, param: str | None, code: str | None = None, status: int = 400
    ) -> None:
        super().__init__(message)
        self.param = param
        self.code = code
        self.status = status


def _openai_error(exc: _BadRequest) -> Response:
    error = {"message": str(exc), "type": "invalid_request_error", "param": exc.param}
    error["code"] = exc.code
    return Response(
        dump_json({"error": error}), status_code=exc.status, media_type="application/json"
    )


def _not_found(response_id: str) -> Response:
    message = f"Response with id '{response_id[:100]}' not found."
    return _openai_error(_BadRequest(message, None, "not_found", status=404))


# ------------------------------------------------------------------------------ the conversation


def _text(content: str | Sequence[InputText | InputImage | Refusal]) -> str:
    if isinstance(content, str):
        return content
    return "".join(_part_text(p) for p in content)


def _part_text(part: InputText | InputImage | Refusal) -> str:
    if isinstance(part, Refusal):
        return part.refusal
    return part.text if isinstance(part, InputText) else ""


def _user_content(item: MessageItem, where: str) -> str | list[ContentPart]:
    content = item.content
    if isinstance(content, str) or all(p.type != "input_image" for p in content):
        return _text(content)
    parts: list[ContentPart] = []
    for index, part in enumerate(content):
        if isinstance(part, InputImage):
            if part.image_url is None:
                raise _BadRequest(
                    "input_image needs an image_url here (file ids are not supported)",
                    f"{where}.content[{index}].image_url",
                    "missing_required_parameter",
                )
            parts.append(ImagePart(url=part.image_url))
        else:
            parts.append(TextPart(text=_text([part])))
    return parts


def _history(items: Sequence[Any], instructions: list[str]) -> list[Message]:
    """The messages ``items`` hold; system and developer text goes to ``instructions``."""
    history: list[Message] = []
    unanswered: dict[str, str] = {}
    joining = False  # whether a function call joins the assistant turn before it
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if isinstance(item, FunctionCallItem):
            call = ToolCall.from_json(item.call_id, item.name, item.arguments)
            if joining:
                last = history[-1]
                history[-1] = Message.assistant(last.text, [*last.tool_calls, call])
            else:
                history.append(Message.assistant("", [call]))
            unanswered[item.call_id] = where
            joining = True
            continue
        if not isinstance(item, ReasoningItem):
            joining = isinstance(item, MessageItem) and item.role == "assistant"
        if isinstance(item, FunctionCallOutputItem):
            if item.call_id not in unanswered:
                raise _BadRequest(
                    f"No tool call found for function call output with call_id {item.call_id}.",
                    f"{where}.call_id",
                )
            del unanswered[item.call_id]
            output = item.output if isinstance(item.output, str) else _text(item.output)
            history.append(Message.tool(item.call_id, output))
            continue
        if unanswered:
            call_id, at = next(iter(unanswered.items()))
            raise _BadRequest(f"No tool output found for function call {call_id}.", at)
        if isinstance(item, ReasoningItem):
            continue
        if item.role in ("system", "developer"):
            instructions.append(_text(item.content))
        elif item.role == "assistant":
            history.append(Message.assistant(_text(item.content)))
        else:
            history.append(Message.user(_user_content(item, where)))
    if unanswered:
        call_id, at = next(iter(unanswered.items()))
        raise _BadRequest(f"No tool output found for function call {call_id}.", at)
    return history


def _client_tools(body: ResponsesRequest) -> tuple[ToolSpec, ...]:
    """The request's function tools, as client tools (any other kind is refused)."""
    specs: list[ToolSpec] = []
    for index, given in enumerate(body.tools or ()):
        kind, name = given.get("type"), given.get("name")
        if kind != "function":
            raise _BadRequest(
                f"tool type {kind!r} is not supported: only function tools (client tools)",
                f"tools[{index}].type",
                "unsupported_value",
            )
        if not isinstance(name, str):
            where = f"tools[{index}].name"
            message = f"Missing required parameter: '{where}'."
            raise _BadRequest(message, where, "missing_required_parameter")
        parameters, description = given.get("parameters"), given.get("description")
        if parameters is not None and not isinstance(parameters, dict):
            where = f"tools[{index}].parameters"
            raise _BadRequest("parameters must be a JSON Schema object", where, "invalid_type")
        specs.append(spec(name, description if isinstance(description, str) else None, parameters))
    return tuple(specs)


def _conversation(body: ResponsesRequest, earlier: Sequence[Message]) -> RunStart:
    """The prompt, the history (``earlier`` first) and the added instructions of a request."""
    instructions = [body.instructions] if body.instructions else []
    if isinstance(body.input, str):
        prompt: str | Message = body.input
        history = list(earlier)
    else:
        *before, last = body.input
        where = f"input[{len(before)}]"
        if not isinstance(last, MessageItem) or last.role != "user":
            role = last.role if isinstance(last, MessageItem) else last.type
            raise _BadRequest(f"the last input item must be a user message, not {role}", where)
        history = [*earlier, *_history(before, instructions)]
        content = _user_content(last, where)
        prompt = content if isinstance(content, str) else Message.user(content)
    text = "\n\n".join(i for i in instructions if i)
    return RunStart(prompt, history, text or None, _client_tools(body))


async def _continued(body: ResponsesRequest, paused: PausedRuns) -> RunStart | None:
    """A request answering a paused run's function calls: that run, given the results.

    The run is taken from the store: of two requests answering it at once, one continues it and
    the other is told, as for an unknown call, that no run waits for these calls.
    """
    items = body.input
    if isinstance(items, str) or not isinstance(items[-1], FunctionCallOutputItem):
        return None
    first = len(items)
    while first > 0 and isinstance(items[first - 1], FunctionCallOutputItem):
        first -= 1
    outputs = [i for i in items[first:] if isinstance(i, FunctionCallOutputItem)]
    results = {
        o.call_id: o.output if isinstance(o.output, str) else _text(o.output) for o in outputs
    }
    where = [f"input[{first + n}].call_id" for n in range(len(outputs))]
    try:
        found = await paused.waiting_for(body.model, results, where)
    except UnknownPausedRunError as exc:
        param = where[list(results).index(exc.key)] if exc.key in results else "input"
        raise _BadRequest(str(exc), param, "tool_call_not_found") from None
    previous = body.previous_response_id
    if previous is not None and found.key != previous:  # not this request's to take
        raise _BadRequest(
            f"the function call outputs answer response {found.key!r}, not {previous!r}",
            "previous_response_id",
        )
    if not await paused.take(found):  # another request answered it meanwhile
        call_id = outputs[0].call_id
        gone = paused.unknown(body.model, call_id, f"tool call {call_id!r} ({where[0]})")
        raise _BadRequest(str(gone), where[0], "tool_call_not_found")
    return RunStart("", [], body.instructions, _client_tools(body), found.response, results)


def _check_options(body: ResponsesRequest) -> None:
    if body.tools and body.background:
        raise _BadRequest(
            "client tools are not supported in a background response",
            "tools",
            "unsupported_parameter",
        )
    fmt = body.text.format if body.text is not None else None
    if fmt is not None and fmt.type != "text":
        raise _BadRequest(
            f"text.format {fmt.type!r} is not supported: the agent's output type decides its "
            "answer's format",
            "text.format.type",
            "unsupported_value",
        )
    if body.conversation is not None:
        raise _BadRequest(
            "conversations are not supported: continue with previous_response_id",
            "conversation",
            "unsupported_parameter",
        )
    if body.background and not body.store:
        raise _BadRequest("background responses must be stored (store: true)", "store")
    if body.background and body.stream:
        raise _BadRequest("a background response cannot be streamed here", "stream")


# ------------------------------------------------------------------------------ response objects


def _new_response(body: ResponsesRequest, status: str, agent: Promptable) -> dict[str, Any]:
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "background": bool(body.background),
        "error": None,
        "incomplete_details": None,
        "instructions": body.instructions,
        "max_output_tokens": None,
        "metadata": body.metadata or {},
        "model": body.model,
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "store": bool(body.store),
        "temperature": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": _tool_choice_field(getattr(agent, "tool_choice", None)),
        "tools": body.tools or [],
        "top_p": None,
        "truncation": "disabled",
        "usage": None,
        "user": None,
    }


def _tool_choice_field(choice: str | None) -> str | dict[str, str]:
    """The run's ``tool_choice`` as a response reports it."""
    if choice is None:
        return "auto"
    return choice if choice in get_args(_Mode) else {"type": "function", "name": choice}


# ------------------------------------------------------------------------------ the routes


def add_responses_routes(
    router: APIRouter,
    served: ServedAgents,
    settings: ServerSettings,
    state: ServerState,
    logs: RunLogs,
) -> ResponseStore:
    """Add ``/v1/responses`` (create, retrieve, cancel, delete) to ``router``; the store used."""
    routes = _Routes(served, settings, state, logs)

    def add(path: str, endpoint: Any, method: str, model: Any, codes: tuple[int, ...]) -> None:
        responses: dict[int | str, dict[str, Any]] = {code: _DOCUMENTED[code] for code in codes}
        router.add_api_route(
            path,
            endpoint,
            methods=[method],
            response_model=model,
            responses={**responses, "4XX": _DOCUMENTED["4XX"]},
            route_class_override=_OpenAIRoute,
        )

    one = "/v1/responses/{response_id}"
    kept = (401, 403, 404, 413)
    add("/v1/responses", routes.create, "POST", ResponseObject, (200, 400, 409, *_RUN_CODES))
    add(one, routes.retrieve, "GET", ResponseObject, (200, 400, *kept))
    add(one, routes.delete, "DELETE", DeletedResponse, kept)
    add(one + "/cancel", routes.cancel, "POST", ResponseObject, (400, *kept))
    return routes.kept


class _Routes:
    """The handlers of ``/v1/responses``, sharing the served agents and the server's state."""

    __slots__ = ("kept", "logs", "paused", "served", "settings", "state")

    def __init__(
        self, served: ServedAgents, settings: ServerSettings, state: ServerState, logs: RunLogs
    ) -> None:
        self.served = served
        self.settings = settings
        self.state = state
        self.logs = logs
        self.kept = ResponseStore(state.open, settings.keep_for)
        self.paused = PausedRuns(state.store, "responses", settings.keep_for)
        """Runs paused for client tools, by call id and response id."""

    async def _accept(self, body: ResponsesRequest) -> ResponseRun | Response:
        """The run a request asks for, or the error answer that refuses it."""
        agent = self.served.get(body.model)
        if agent is None:
            unknown = _BadRequest(self.served.unknown(body.model), "model", "model_not_found", 404)
            return _openai_error(unknown)
        await self.state.open()
        choice = body.tool_choice
        choice_name = choice.name if isinstance(choice, FunctionChoice) else choice
        try:
            _check_options(body)
            specs = _client_tools(body)
            if specs:
                _takes_client_tools(agent, body.model, specs)
            agent = _with_tool_choice(agent, body.model, choice_name, specs)
            resumed = await _continued(body, self.paused)
            if resumed is not None:
                conversation = await self._with_history(resumed, body.previous_response_id)
            else:
                conversation = _conversation(body, await self._earlier(body))
        except _BadRequest as exc:
            return _openai_error(exc)
        status = "queued" if body.background else "in_progress"
        return ResponseRun(
            agent=agent,
            conversation=conversation,
            obj=_new_response(body, status, agent),
            keep=bool(body.store),
            kept=self.kept,
            paused=self.paused,
            timeout=self.settings.request_timeout,
            tool_choice=choice_name,
        )

    async def _earlier(self, body: ResponsesRequest) -> list[Message]:
        """The conversation ``previous_response_id`` ended (none without one)."""
        previous_id = body.previous_response_id
        if previous_id is None:
            return []
        previous = await self.kept.get(previous_id)
        if previous is None or previous.body["status"] != "completed":
            raise _BadRequest(
                f"Previous response with id '{previous_id[:100]}' not found (or not completed).",
                "previous_response_id",
                "previous_response_not_found",
            )
        waiting = await self.paused.get(previous.body["model"], previous_id)
        if waiting is not None:  # its function calls wait for their outputs
            call_id = waiting.response.client_calls[0].id
            raise _BadRequest(f"No tool output found for function call {call_id}.", "input")
        return previous.conversation

    async def _with_history(self, resumed: RunStart, previous_id: str | None) -> RunStart:
        """A resumed run with the conversation before it, so a follow-up keeps it all."""
        previous = await self.kept.get(previous_id) if previous_id is not None else None
        if previous is None or resumed.resumed is None:
            return resumed
        own = len(resumed.resumed.messages)
        before = previous.conversation[: max(len(previous.conversation) - own, 0)]
        return dataclasses.replace(resumed, history=before)

    async def create(self, body: ResponsesRequest, request: Request) -> Response:
        """Run an agent on a conversation, as the OpenAI Responses API would answer it."""
        run = await self._accept(body)
        if isinstance(run, Response):
            return run
        if body.background or body.stream:
            if run.keep or body.background:
                await self.kept.put(KeptResponse(dict(run.obj)))
            refused = await self._start(run, background=bool(body.background))
            if refused is not None or body.background:
                return refused or _json(dict(run.obj))
            return self._reader(EventId(run.obj["id"], 0))
        if self.logs.broker is not None:
            return await self._answer_on_workers(run, request)
        try:
            response = await run_supervised(run.answer, request.receive, run.timeout)
        except ClientDisconnected:
            return Response(status_code=499)
        except Exception as exc:
            return _run_error(exc)
        if for_client(response):
            finish(run.obj, response, paused_output(response, run.conversation))
            await self.paused.keep(body.model, response, run.obj["id"])
        elif response.paused:
            paused = ApprovalRequiredError(response.pending_approvals, NO_APPROVALS_HERE)
            return error_response(409, "approval_required", str(paused))
        else:
            finish(run.obj, response, output(response, run.conversation))
        if run.keep:
            conversation = [*run.conversation.history, *response.messages]
            await self.kept.put(KeptResponse(run.obj, conversation))
        return _json(run.obj)

    async def _start(self, run: ResponseRun, *, background: bool) -> Response | None:
        """Start ``run`` writing its events to its log, here or on a worker; a refusal, if any.

        A ``background`` run goes on whether or not anybody reads its events.
        """
        stream = run.obj["id"]
        if self.logs.broker is None:
            await self.logs.start(stream, _source(run), run.on_error, background=background)
            return None
        model = str(run.obj["model"])
        task = job_task(self.logs, stream, model, run.spec(), background=background)
        refused = await submit_run(self.logs, stream, task)
        if refused is not None:
            await self.kept.delete(stream)
        return refused

    async def _answer_on_workers(self, run: ResponseRun, request: Request) -> Response:
        """Run a request that is neither streamed nor background on a worker; its response."""
        if run.keep:  # the worker keeps it as it ends
            await self.kept.put(KeptResponse(dict(run.obj)))
        refused = await self._start(run, background=False)
        if refused is not None:
            return refused
        stream = run.obj["id"]

        async def last_event(token: CancelToken) -> dict[str, Any]:
            last: dict[str, Any] = {}
            async for frame in self.logs.follow(EventId(stream, 0), token):
                _, data = frame_fields(frame)
                last = data if isinstance(data, dict) else {}
            return last

        try:
            last = await run_supervised(last_event, request.receive, run.timeout + 5.0)
        except ClientDisconnected:
            await self._stop({**run.obj, "status": "cancelled"}, "the client left")
            return Response(status_code=499)
        except Exception as exc:  # the store failed while we read, or the worker never ended it
            await self._stop({**run.obj, "status": "cancelled"}, "the server stopped the run")
            return _run_error(exc)
        obj = last.get("response")
        if not isinstance(obj, dict) or obj.get("status") != "completed":
            return _worker_failure(obj)
        return _json(obj)

    def _reader(self, at: EventId) -> Response:
        return self.logs.reader(at, _reader_error, self.settings.heartbeat_interval)

    async def retrieve(
        self,
        response_id: str,
        request: Request,
        stream: bool = False,
        starting_after: Annotated[
            str | None,
            Query(
                description="A sequence number: the events after it are sent.",
                json_schema_extra={"pattern": "^[0-9]{1,18}$"},  # checked here, for its 400
            ),
        ] = None,
    ) -> Response:
        """A kept response (a background one as it is now).

        With `stream=true`, its events instead, as they were streamed (a streamed or background
        response's, kept for the server's stream retention): those whose `sequence_number` is
        above `starting_after`, or after the event a `Last-Event-ID` header names.
        """
        if stream:
            try:
                after = _sequence_number(starting_after)
            except _BadRequest as exc:
                return _openai_error(exc)
            return await self._resume(response_id, after, request)
        kept = await self.kept.get(response_id)
        if kept is not None and kept.running and await self.logs.owner_alive(response_id) is False:
            kept = await self._lost(response_id)
        return _not_found(response_id) if kept is None else _json(kept.body)

    async def _lost(self, response_id: str) -> KeptResponse | None:
        """Mark failed a response whose run died with the replica running it."""
        lost = RunLost(f"the server running response {response_id!r} stopped before it ended")

        def failed(kept: KeptResponse) -> KeptResponse:
            body = dict(kept.body)
            fail(body, lost)
            return dataclasses.replace(kept, body=body)

        return await self.kept.settle(response_id, failed)

    async def _resume(self, response_id: str, after: int | None, request: Request) -> Response:
        """The events of a response's stream from where the client says it is."""
        try:
            at = EventId.parse(request.headers.get("last-event-id"))
        except ValueError as exc:
            return _openai_error(_BadRequest(str(exc), None))
        if at is not None and at.stream != response_id:
            message = f"Last-Event-ID {str(at)[:200]!r} names an event of another response"
            return _openai_error(_BadRequest(message, None))
        from_header = at is not None
        if at is None:
            at = EventId(response_id, 0 if after is None else after + 1)
        try:
            await self.logs.check(at)
        except (StreamGone, InvalidIdError):
            if from_header or at.number == 0 or not await self._has_log(response_id):
                return _not_found(response_id)
            message = f"No event with sequence_number {after} was sent in this response's stream."
            return _openai_error(_BadRequest(message, "starting_after", "invalid_value"))
        return self._reader(at)

    async def _has_log(self, response_id: str) -> bool:
        try:
            await self.logs.check(EventId(response_id, 0))
        except (StreamGone, InvalidIdError):
            return False
        return True

    async def cancel(self, response_id: str) -> Response:
        """Stop a background response; a finished one is returned as it is."""
        kept = await self.kept.get(response_id)
        if kept is None:
            return _not_found(response_id)
        if not kept.body["background"]:
            message = "Only background responses can be cancelled."
            return _openai_error(_BadRequest(message, None))
        cancelled = await self.kept.settle(
            response_id, lambda k: KeptResponse({**k.body, "status": "cancelled"})
        )
        if cancelled is None:  # deleted meanwhile
            return _not_found(response_id)
        if cancelled.body["status"] == "cancelled":
            await self._stop(cancelled.body, BY_CLIENT)
        return _json(cancelled.body)

    async def delete(self, response_id: str) -> Response:
        """Forget a kept response (stopping it if it runs)."""
        kept = await self.kept.delete(response_id)
        if kept is None:
            return _not_found(response_id)
        if kept.running:
            await self._stop({**kept.body, "status": "cancelled"}, "deleted by the client")
        return _json({"id": response_id, "object": "response.deleted", "deleted": True})

    async def _stop(self, body: dict[str, Any], reason: str) -> None:
        """Stop the run of the response ``body``, wherever it runs.

        A worker's run log is ended here, with the ``response.failed`` event its run would
        have sent (numbered after the events logged so far).
        """

        def ending(logged: int) -> bytes:
            event = {"type": "response.failed", "sequence_number": logged, "response": body}
            return sse_frame(dump_json(event), event="response.failed")

        await self.logs.cancel(body["id"], reason, ending=ending)


def _source(run: ResponseRun) -> Source:
    """The run's events, as a replica's own run log takes them; an early end is recorded."""

    async def source(token: CancelToken) -> AsyncGenerator[bytes, None]:
        try:
            async for frame in run.frames(token):
                yield frame
        except BaseException as exc:
            await run.end(exc, token.reason if token.cancelled else None)
            raise

    return source


def _run_error(exc: BaseException) -> Response:
    """The answer to a run that failed with ``exc``."""
    status, kind, message = describe_failure(exc)
    return _failure_response(status, kind, message)


def _failure_response(status: int, kind: str, message: str) -> Response:
    if status == 400:
        return _openai_error(_BadRequest(message, None, kind))
    return error_response(status, kind, message)


def _worker_failure(obj: Any) -> Response:
    """The answer to a run a worker ran that did not complete (its ``response`` object)."""
    error = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(error, dict):
        return error_response(500, "internal_error", "the run ended without a response")
    kind, message = str(error.get("code")), str(error.get("message"))
    return _failure_response(failure_status(kind), kind, message)


_RUN_CODES = (401, 403, 404, 413, 500, 502, 504)
_DOCUMENTED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A `response` object; with `stream: true`, server-sent events "
        "(`response.created` ... `response.completed` or `response.failed`).",
        "content": {
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "description": "One server-sent event: its type, then its JSON data.",
                    "required": ["data"],
                    "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
                }
            }
        },
    },
    400: {
        "model": OpenAIErrorResponse,
        "description": "A request OpenAI would refuse (a missing or mistyped field, client "
        "tools, an unknown `previous_response_id`, malformed JSON, a `starting_after` past the "
        "events sent); `param` names the field.",
    },
    409: {"model": ErrorResponse, "description": "The run paused for an approval."},
    "4XX": {"model": ErrorResponse, "description": "Any other client error."},
}
_DOCUMENTED.update(error_responses(401, 403, 413, 500, 502, 504))
_DOCUMENTED[404] = {
    "model": OpenAIErrorResponse,
    "description": "No such agent, or no such response (or its events) kept.",
}


def _sequence_number(text: str | None) -> int | None:
    """``starting_after`` as a number; anything but an integer of at least 0 is a 400."""
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise _BadRequest(
            f"starting_after must be an event's sequence_number (an integer of at least 0), "
            f"got {text[:50]!r}.",
            "starting_after",
            "invalid_value",
        )
    return int(text)


def _reader_error(exc: BaseException) -> bytes:
    """The ``error`` event that ends a stream whose reading failed (not its run)."""
    _, code, message = describe_failure(exc)
    body = {"type": "error", "code": code, "message": message, "param": None}
    return sse_frame(dump_json(body), event="error")


def _with_tool_choice(
    agent: Promptable, model: str, choice: str | None, specs: Sequence[ToolSpec]
) -> Promptable:
    """``agent`` with the request's ``tool_choice``; one it cannot honour is a 400."""
    try:
        return with_tool_choice(agent, model, choice, specs)
    except BadToolChoice as exc:
        raise _BadRequest(str(exc), "tool_choice", "invalid_value") from None


def _takes_client_tools(agent: Promptable, model: str, specs: Sequence[ToolSpec]) -> None:
    try:
        takes_client_tools(agent, model, specs)
    except NoClientTools as exc:
        raise _BadRequest(str(exc), "tools", "invalid_value") from None


def _json(body: Any) -> Response:
    return Response(dump_json(body), media_type="application/json")
