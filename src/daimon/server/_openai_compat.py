"""An OpenAI-compatible face: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Point the official ``openai`` SDK at ``<server>/v1`` (the token as ``api_key``) and each served
agent is a model. The request's messages become the conversation: system and developer messages
are added to the agent's own instructions, earlier user and assistant turns are the history, and
the last message (the user's) is the prompt. The agent runs with its own tools, on the server,
and its final answer is the completion. Streamed, every text delta of the run is sent as it comes
(text the model writes before calling a tool too, one blank line between turns); the non-streamed
``content`` is the final answer only.

Sessions are the client's: the conversation comes in with each request and nothing is kept.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from daimon.agent import Agent
from daimon.core.cancel import CancelToken
from daimon.core.events import Done, TextDelta, UsageEvent
from daimon.core.messages import ContentPart, ImagePart, Message, TextPart, ToolCall
from daimon.core.results import AgentResponse
from daimon.server._agents import ServedAgents
from daimon.server._encode import dump_json
from daimon.server._errors import describe_failure, error_body, error_response
from daimon.server._routes import CLIENT_CLOSED, error_responses
from daimon.server._runs import ClientDisconnected, run_supervised
from daimon.server._schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    ErrorResponse,
    ModelList,
    ModelObject,
)
from daimon.server._settings import ServerSettings
from daimon.server._sse import EventStreamResponse, sse_frame
from daimon.state import RunState

__all__ = ("add_openai_routes",)

_SESSION = "openai-chat"
_DONE = b"data: [DONE]\n\n"


class _BadConversation(ValueError):
    """The messages cannot be read as a conversation (400)."""


class _ApprovalRequired(Exception):
    """The run paused for approvals, which this API cannot ask for (409)."""

    def __init__(self, response: AgentResponse) -> None:
        tools = ", ".join(a.call.name for a in response.pending_approvals)
        super().__init__(
            f"the run paused: tool call(s) {tools} need a person's approval, which the "
            "OpenAI-compatible API cannot ask for; use POST /prompt"
        )


class _History:
    """A memory holding one request's conversation; what the run adds is not kept."""

    __slots__ = ("_messages",)

    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages = list(messages)

    async def get_messages(self, session_id: str) -> list[Message]:
        return list(self._messages)

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        return None

    async def clear(self, session_id: str) -> None:
        return None

    async def list_sessions(self) -> list[str]:
        return []  # one request's conversation, kept nowhere


def _text(message: ChatMessage) -> str:
    content = message.content
    if content is None or isinstance(content, str):
        return content or ""
    texts: list[str] = []
    for part in content:
        if part.type != "text":
            raise _BadConversation(f"{message.role} messages may hold text only, not {part.type}")
        texts.append(part.text)
    return "".join(texts)


def _user_content(message: ChatMessage) -> str | list[ContentPart]:
    content = message.content
    if content is None or isinstance(content, str):
        return content or ""
    if all(part.type == "text" for part in content):
        return _text(message)
    return [
        TextPart(text=part.text) if part.type == "text" else ImagePart(url=part.image_url.url)
        for part in content
    ]


def _conversation(messages: Sequence[ChatMessage]) -> tuple[str, list[Message], str | Message]:
    """The extra instructions, the history and the prompt that ``messages`` hold."""
    *earlier, last = messages
    if last.role != "user":
        raise _BadConversation(f"the last message must be the user's, not the {last.role}'s")
    instructions: list[str] = []
    history: list[Message] = []
    unanswered: set[str] = set()
    for message in earlier:
        role = message.role
        if role != "tool" and unanswered:
            raise _BadConversation(f"tool call(s) {sorted(unanswered)} have no tool message")
        if role in ("system", "developer"):
            instructions.append(_text(message))
        elif role == "user":
            history.append(Message.user(_user_content(message)))
        elif role == "assistant":
            calls = tuple(
                ToolCall.from_json(c.id, c.function.name, c.function.arguments)
                for c in message.tool_calls or ()
            )
            unanswered = {c.id for c in calls}
            history.append(Message.assistant(_text(message), calls))
        else:
            call_id = message.tool_call_id
            if call_id is None or call_id not in unanswered:
                raise _BadConversation(f"tool message answers no pending tool call: {call_id!r}")
            unanswered.discard(call_id)
            history.append(Message.tool(call_id, _text(message), name=message.name))
    if unanswered:
        raise _BadConversation(f"tool call(s) {sorted(unanswered)} have no tool message")
    content = _user_content(last)
    prompt = content if isinstance(content, str) else Message.user(content)
    return "\n\n".join(i for i in instructions if i), history, prompt


def _agent_for(agent: Agent, instructions: str, history: list[Message]) -> tuple[Agent, str | None]:
    """The agent to run (a copy that sees the request's conversation) and its session id."""
    if not instructions and not history:
        return agent, None
    clone = copy.copy(agent)
    if instructions:

        async def system_prompt(state: RunState) -> str:
            own = await agent.system_message(state)
            return f"{own.text}\n\n{instructions}" if own is not None and own.text else instructions

        clone.system_prompt = system_prompt
    if not history:
        return clone, None
    # Agent offers no per-run history, so the copy gets a memory holding this conversation.
    clone._memory = _History(history)
    return clone, _SESSION


def _usage(response: AgentResponse) -> dict[str, Any]:
    usage = response.usage
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def _stream_error(exc: BaseException) -> bytes:
    if isinstance(exc, _ApprovalRequired):
        return sse_frame(dump_json(error_body("approval_required", str(exc))))
    _, kind, message = describe_failure(exc)
    return sse_frame(dump_json(error_body(kind, message)))


def add_openai_routes(
    router: APIRouter, served: ServedAgents, settings: ServerSettings, started: int
) -> None:
    """Add the OpenAI-compatible routes, under ``/v1``, to ``router``."""
    timeout = settings.request_timeout

    def model(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": started, "owned_by": "daimon"}

    @router.get("/v1/models", response_model=ModelList, responses=error_responses(401, 403))
    async def list_models() -> Response:
        """The served agents, one model each."""
        body = {"object": "list", "data": [model(name) for name in served.by_name]}
        return Response(dump_json(body), media_type="application/json")

    @router.get(
        "/v1/models/{model_id}",
        response_model=ModelObject,
        responses=error_responses(401, 403, 404, 422),
    )
    async def get_model(model_id: str) -> Response:
        """One served agent, as a model."""
        if model_id not in served.by_name:
            return error_response(404, "not_found", served.unknown(model_id))
        return Response(dump_json(model(model_id)), media_type="application/json")

    @router.post(
        "/v1/chat/completions",
        response_model=ChatCompletion,
        responses={
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
            **error_responses(401, 403, 400, 404, 413, 422, 500, 502, 504),
            409: {"model": ErrorResponse, "description": "The run paused for an approval."},
        },
    )
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        """Run an agent on a conversation, as OpenAI Chat Completions would answer it."""
        agent = served.get(body.model)
        if agent is None:
            return error_response(404, "not_found", served.unknown(body.model))
        try:
            instructions, history, prompt = _conversation(body.messages)
        except _BadConversation as exc:
            return error_response(400, "invalid_request", str(exc))
        runner, session = _agent_for(agent, instructions, history)
        run_id = uuid.uuid4().hex
        created = int(time.time())
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return EventStreamResponse(
                lambda token: _chunks(
                    runner, body.model, prompt, session, run_id, created, usage, token
                ),
                on_error=_stream_error,
                heartbeat=settings.heartbeat_interval,
                timeout=timeout,
            )
        try:
            response = await run_supervised(
                lambda token: runner.prompt(
                    prompt, session_id=session, run_id=run_id, cancel=token
                ),
                request.receive,
                timeout,
            )
        except ClientDisconnected:
            return Response(status_code=CLIENT_CLOSED)
        except Exception as exc:
            status, kind, message = describe_failure(exc)
            return error_response(status, kind, message)
        if response.paused:
            return error_response(409, "approval_required", str(_ApprovalRequired(response)))
        completion = {
            "id": f"chatcmpl-{run_id}",
            "object": "chat.completion",
            "created": created,
            "model": body.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": response.text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": _usage(response),
            "system_fingerprint": None,
        }
        return Response(dump_json(completion), media_type="application/json")


async def _chunks(
    agent: Agent,
    model: str,
    prompt: str | Message,
    session: str | None,
    run_id: str,
    created: int,
    include_usage: bool,
    token: CancelToken,
) -> AsyncGenerator[bytes, None]:
    """The ``chat.completion.chunk`` events of one streamed run."""
    head: dict[str, Any] = {
        "id": f"chatcmpl-{run_id}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
    }
    if include_usage:
        head["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse_frame(dump_json({**head, "choices": [choice]}))

    yield chunk({"role": "assistant", "content": ""})
    response: AgentResponse | None = None
    wrote = separate = False
    async for event in agent.prompt_stream(prompt, session_id=session, run_id=run_id, cancel=token):
        if isinstance(event, TextDelta):
            if not event.text:
                continue
            if separate:
                separate = False
                yield chunk({"content": "\n\n"})
            wrote = True
            yield chunk({"content": event.text})
        elif isinstance(event, UsageEvent):  # a model call ended: later text is a new paragraph
            separate, wrote = separate or wrote, False
        elif isinstance(event, Done):
            response = event.response
    if response is None:  # pragma: no cover - agent streams end with Done or raise
        raise RuntimeError("the run ended without a response")
    if response.paused:
        raise _ApprovalRequired(response)
    yield chunk({}, "stop")
    if include_usage:
        yield sse_frame(dump_json({**head, "choices": [], "usage": _usage(response)}))
    yield _DONE
