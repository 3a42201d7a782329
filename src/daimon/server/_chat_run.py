"""One Chat Completions run, without any web library: what a replica, or a worker, runs.

A :class:`ChatRun` is an accepted ``POST /v1/chat/completions``: the agent, the conversation
(a new one, or a run paused for client calls given their results), whether it is streamed, and
where a run that pauses for client calls is kept (:class:`~daimon._paused_runs.PausedRuns`).
Streamed, :meth:`ChatRun.frames` is its ``chat.completion.chunk`` events, ``data: [DONE]`` last;
not streamed, it is one frame whose data is the ``chat.completion``. A replica without a broker
runs it in the request; with a broker (``daimon serve --broker``) :meth:`ChatRun.spec` travels
in a task's metadata, :func:`job_from_spec` makes the run again on the worker, and the worker
writes the frames to the run's log, which the replica reads while its client is connected.
Either way the same code builds the chunks and keeps the paused runs.

Chat Completions streams cannot be resumed, so a later attempt of a task (its worker was lost, or
its run failed and is tried again) does not start the stream again: when the lost attempt had
sent nothing (streamed: nothing but the opening chunk, which is not sent twice), the run starts
over; when it had sent more, the stream ends with a ``RunLost`` error (the client sends the request
again) and the agent does not run; when the log holds the run's last frame, nothing is left to
do. The task then completes: its log holds what the client was told. A run of a promptable
that cannot resume (a HandoffNetwork, a flow: see :func:`daimon._run_logs.runs_again`) is never
run again, as its tools could run twice: a failed attempt fails for good, and a later attempt
fails with ``RunLost``, unless the log holds the run's last frame.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from daimon._paused_runs import PausedRuns
from daimon._run_logs import frame_fields, lost_run, runs_again, sse_frame
from daimon.core import codec
from daimon.core.cancel import CancelToken
from daimon.core.errors import ApprovalRequiredError, SerializationError
from daimon.core.events import Done, TextDelta, UsageEvent
from daimon.core.protocols import Promptable
from daimon.core.results import AgentResponse
from daimon.core.state_store import StateStore
from daimon.server._client_tools import RunStart, text_with_calls, with_tool_choice
from daimon.server._encode import dump_json
from daimon.server._failures import RunLost, describe_failure

__all__ = (
    "CHAT_KIND",
    "ChatRun",
    "DONE",
    "NO_APPROVALS_HERE",
    "error_data",
    "error_frame",
    "job_from_spec",
)

CHAT_KIND = "chat"
"""The kind of run (:data:`daimon._run_logs.JOB_KEY`) and the front name of its paused runs."""
NO_APPROVALS_HERE = "the OpenAI-compatible API (use POST /prompt)"
DONE = b"data: [DONE]\n\n"
"""The frame that ends a streamed completion."""
_FORMAT = 1
"""The format of runs sent to workers."""
_LOST = (
    "the worker running this completion stopped after part of its stream was sent, and a Chat "
    "Completions stream cannot be resumed: send the request again"
)


def error_data(exc: BaseException) -> dict[str, Any]:
    """The error body of a run that raised ``exc``: ``{"error": {"type", "message"}}``."""
    if isinstance(exc, ApprovalRequiredError):
        kind, message = "approval_required", str(exc)
    else:
        _, kind, message = describe_failure(exc)
    return {"error": {"type": kind, "message": message}}


def error_frame(exc: BaseException) -> bytes:
    """The frame that ends a run that raised ``exc`` (streamed or not)."""
    return sse_frame(dump_json(error_data(exc)))


def _calls_body(response: AgentResponse) -> list[dict[str, Any]]:
    """The client calls a paused run waits for, as OpenAI's ``tool_calls``."""
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json},
        }
        for call in response.client_calls
    ]


def _paused_for_client(response: AgentResponse) -> bool:
    """Whether the run waits for client results only (approvals are not this API's)."""
    return bool(response.client_calls) and not response.pending_approvals


def _usage(response: AgentResponse) -> dict[str, Any]:
    usage = response.usage
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
    }


@dataclass(slots=True)
class ChatRun:
    """One accepted request: its agent (``tool_choice`` applied), conversation and options."""

    agent: Promptable
    model: str
    conversation: RunStart
    paused: PausedRuns
    stream: bool = False
    include_usage: bool = False
    """Streamed: end with a chunk holding the usage (``stream_options.include_usage``)."""
    tool_choice: str | None = None
    """The request's ``tool_choice`` (already applied to ``agent``), for a worker to apply."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))
    response: AgentResponse | None = field(default=None, init=False)
    """The finished run's response (``None`` until it finished)."""
    _opened: bool = field(default=False, init=False)
    """Whether the opening chunk was sent (by a lost attempt)."""
    _left: Literal["all", "nothing", "lost", "once"] = field(default="all", init=False)
    """What is left to do: ``all``, ``nothing``, to say the stream was ``lost``, or to fail a
    later attempt of a run that runs ``once`` (see :attr:`retries`)."""

    @property
    def id(self) -> str:
        """The completion's id (``chatcmpl-...``), and the name of its log."""
        return f"chatcmpl-{self.run_id}"

    @property
    def keeps_pauses(self) -> bool:
        """A run paused for client calls is kept here, not by a broker: its task completes."""
        return True

    @property
    def retries(self) -> bool:
        """Whether a failed attempt may be tried again: see :func:`runs_again`."""
        return runs_again(self.agent)

    def answer(self, token: CancelToken) -> Any:
        """The run's response, not streamed (an awaitable)."""
        return self.conversation.answer(self.agent, self.run_id, token)

    async def completion(self, response: AgentResponse) -> dict[str, Any]:
        """The ``chat.completion`` of a finished run; a run paused for client calls is kept.

        Raises:
            ApprovalRequiredError: The run paused for an approval (nobody can give it here).
        """
        reply: dict[str, Any] = {"role": "assistant", "content": response.text, "refusal": None}
        finish = "stop"
        if _paused_for_client(response):
            await self.paused.keep(self.model, response)
            reply["content"] = text_with_calls(response) or None
            reply["tool_calls"] = _calls_body(response)
            finish = "tool_calls"
        else:
            response.require_finished(NO_APPROVALS_HERE)
        choice = {"index": 0, "message": reply, "logprobs": None, "finish_reason": finish}
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": _usage(response),
            "system_fingerprint": None,
        }

    async def frames(self, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The run's frames: its chunks, ``[DONE]`` last; not streamed, its completion."""
        if self._left == "nothing":
            self.response = AgentResponse(text="", run_id=self.run_id)
            return
        if self._left == "lost":
            self.response = AgentResponse(text="", run_id=self.run_id)
            yield error_frame(RunLost(_LOST))
            return
        if self._left == "once":  # the run fails for good: its stream ends with this error
            raise lost_run(self.model)
        if not self.stream:
            response = await self.answer(token)
            body = await self.completion(response)
            self.response = response
            yield sse_frame(dump_json(body))
            return
        async for frame in self._chunks(token):
            yield frame

    async def _chunks(self, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The ``chat.completion.chunk`` events of the streamed run."""
        if not self._opened:
            yield self._chunk({"role": "assistant", "content": ""})
        response: AgentResponse | None = None
        wrote = separate = False
        async for event in self.conversation.events(self.agent, self.run_id, token):
            if isinstance(event, TextDelta):
                if not event.text:
                    continue
                if separate:
                    separate = False
                    yield self._chunk({"content": "\n\n"})
                wrote = True
                yield self._chunk({"content": event.text})
            elif isinstance(event, UsageEvent):  # a model call ended: later text is a new one
                separate, wrote = separate or wrote, False
            elif isinstance(event, Done):
                response = event.response
        if response is None:  # pragma: no cover - agent streams end with Done or raise
            raise RuntimeError("the run ended without a response")
        if _paused_for_client(response):
            await self.paused.keep(self.model, response)
            calls = [{"index": i, **call} for i, call in enumerate(_calls_body(response))]
            yield self._chunk({"tool_calls": calls})
            yield self._chunk({}, "tool_calls")
        else:
            response.require_finished(NO_APPROVALS_HERE)
            yield self._chunk({}, "stop")
        self.response = response
        if self.include_usage:
            yield sse_frame(dump_json({**self._head(), "choices": [], "usage": _usage(response)}))
        yield DONE

    def _head(self) -> dict[str, Any]:
        head: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
        }
        if self.include_usage:
            head["usage"] = None
        return head

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse_frame(dump_json({**self._head(), "choices": [choice]}))

    def resume(self, logged: Sequence[str]) -> None:
        """Go on after a lost attempt whose frames ``logged`` holds (see the module's doc)."""
        sent = [frame_fields(value)[1] for value in logged]
        if any(_ends(value, data) for value, data in zip(logged, sent, strict=True)):
            self._left = "nothing"
        elif not runs_again(self.agent):  # not run again (see retries)
            self._left = "once"
        elif not sent:
            return
        elif self.stream and len(sent) == 1:  # the opening chunk only: nothing shown yet
            self._opened = True
        else:
            self._left = "lost"

    def on_error(self, exc: BaseException) -> bytes:
        """The frame that ends a run that raised ``exc``."""
        return error_frame(exc)

    async def end(self, exc: BaseException, reason: str | None) -> None:
        """Nothing to record: a run that ended early left nothing kept."""

    def spec(self) -> dict[str, Any]:
        """What a worker needs to run this again (JSON): see :func:`job_from_spec`."""
        return {
            "kind": CHAT_KIND,
            "format": _FORMAT,
            "model": self.model,
            "run_id": self.run_id,
            "created": self.created,
            "stream": self.stream,
            "include_usage": self.include_usage,
            "tool_choice": self.tool_choice,
            "ttl": self.paused.ttl,
            "conversation": codec.to_data(self.conversation),
        }


def _ends(value: str, data: Any) -> bool:
    """Whether a logged frame ends a run: ``[DONE]``, an error, or a whole completion."""
    if "data: [DONE]" in value.splitlines():
        return True
    return isinstance(data, dict) and ("error" in data or data.get("object") == "chat.completion")


def job_from_spec(agent: Promptable, spec: Mapping[str, Any], store: StateStore) -> ChatRun:
    """The run a :meth:`ChatRun.spec` describes, with ``agent``, keeping paused runs in ``store``.

    Raises:
        SerializationError: The spec is of another format.
    """
    if spec.get("format") != _FORMAT:
        raise SerializationError(
            f"a chat completion run of format {spec.get('format')!r}; this daimon reads {_FORMAT}"
        )
    model = str(spec["model"])
    conversation = codec.from_data(RunStart, spec["conversation"])
    choice = spec.get("tool_choice")
    return ChatRun(
        agent=with_tool_choice(agent, model, choice, conversation.client_tools),
        model=model,
        conversation=conversation,
        paused=PausedRuns(store, CHAT_KIND, spec.get("ttl")),
        stream=bool(spec["stream"]),
        include_usage=bool(spec["include_usage"]),
        tool_choice=choice,
        run_id=str(spec["run_id"]),
        created=int(spec["created"]),
    )
