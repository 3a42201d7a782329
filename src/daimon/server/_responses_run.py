"""One Responses API run, without any web library: what a replica, or a worker, runs.

A :class:`ResponseRun` is an accepted ``POST /v1/responses``: the agent, the conversation, the
``response`` object being built and where what the run leaves is kept (a
:class:`ResponseStore` for the response, :class:`~daimon._paused_runs.PausedRuns` for a run
paused for client calls). :meth:`ResponseRun.frames` is its stream of events; they go to the
run's log, from the replica's own process or, with a broker (``daimon serve --broker``), from
the worker that runs the task (:meth:`ResponseRun.spec` travels in the task's metadata and
:func:`job_from_spec` makes the run again there). Either way the same code builds the events,
and keeps the response as it changes, in the store every replica reads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daimon._paused_runs import PausedRuns
from daimon._run_logs import frame_fields, lost_run, runs_again, sse_frame
from daimon.core import codec
from daimon.core.cancel import CancelToken
from daimon.core.errors import (
    ApprovalRequiredError,
    InvalidIdError,
    RunCancelled,
    SerializationError,
)
from daimon.core.errors import TimeoutError as RunTimeoutError
from daimon.core.events import Done, TextDelta, UsageEvent
from daimon.core.messages import Message, Role
from daimon.core.protocols import Promptable
from daimon.core.results import AgentResponse
from daimon.core.state_store import StateStore
from daimon.server._client_tools import RunStart, with_tool_choice
from daimon.server._encode import dump_json
from daimon.server._failures import describe_failure

__all__ = (
    "BY_CLIENT",
    "ENDED_EARLY",
    "KeptResponse",
    "NO_APPROVALS_HERE",
    "RESPONSES_KIND",
    "ResponseRun",
    "ResponseStore",
    "fail",
    "finish",
    "for_client",
    "job_from_spec",
    "output",
    "paused_output",
)

logger = logging.getLogger("daimon.server")

RESPONSES_KIND = "responses"
"""The kind of the store's records that hold responses."""
NO_APPROVALS_HERE = "the OpenAI Responses API (use POST /prompt)"
BY_CLIENT = "cancelled by the client"
ENDED_EARLY = ("failed", "cancelled")
_RUNNING = ("queued", "in_progress")
_FORMAT = 1
"""The format of kept responses and of runs sent to workers."""


# ------------------------------------------------------------------------------ kept responses


@dataclass(slots=True)
class KeptResponse:
    """One response the server keeps: its object and the conversation it ends."""

    body: dict[str, Any]
    """The ``response`` object as the API returns it (its ``status`` changes while it runs)."""
    conversation: list[Message] = field(default_factory=list[Message])
    """History, prompt and the run's turns: what a follow-up continues."""

    @property
    def running(self) -> bool:
        """Whether its run has not ended yet (``queued`` or ``in_progress``)."""
        return self.body["status"] in _RUNNING


class ResponseStore:
    """The responses a server keeps, in its state store: any replica (or worker) reads them.

    Each is versioned JSON (the conversation's messages through :mod:`daimon.core.codec`), kept
    ``ttl`` seconds from its last write (``None``: until deleted).

    Args:
        open_store: Gives the store, set up (a server's opens it on first use).
        ttl: Seconds each response is kept from its last write.
    """

    __slots__ = ("_open", "ttl")

    def __init__(self, open_store: Callable[[], Awaitable[StateStore]], ttl: float | None) -> None:
        self._open = open_store
        self.ttl = ttl

    async def put(self, kept: KeptResponse) -> None:
        """Keep ``kept`` under its id, whatever was there."""
        store = await self._open()
        await store.put(RESPONSES_KIND, kept.body["id"], _encode(kept), ttl=self.ttl)

    async def get(self, response_id: str) -> KeptResponse | None:
        """The response with ``response_id``, if kept."""
        found = await self._read(response_id)
        return None if found is None else found[0]

    async def settle(
        self, response_id: str, change: Callable[[KeptResponse], KeptResponse]
    ) -> KeptResponse | None:
        """Write ``change(kept)`` over the response while it runs; what is kept after.

        A compare-and-set: of a run ending and a cancel racing, exactly one is written, and a
        response that has ended (or is gone: ``None``) stays as it is.
        """
        store = await self._open()
        while True:
            found = await self._read(response_id)
            if found is None or not found[0].running:
                return None if found is None else found[0]
            changed = change(found[0])
            value = _encode(changed)
            written = await store.replace(
                RESPONSES_KIND, response_id, value, version=found[1], ttl=self.ttl
            )
            if written is not None:
                return changed

    async def delete(self, response_id: str) -> KeptResponse | None:
        """Forget a response; what was kept, if anything (for exactly one of racing callers)."""
        store = await self._open()
        try:
            value = await store.take(RESPONSES_KIND, response_id)
        except InvalidIdError:
            return None
        return None if value is None else _decode(value)

    async def _read(self, response_id: str) -> tuple[KeptResponse, int] | None:
        store = await self._open()
        try:
            record = await store.read(RESPONSES_KIND, response_id)
        except InvalidIdError:  # no id this server gives: never kept
            return None
        return None if record is None else (_decode(record.value), record.version)


def _encode(kept: KeptResponse) -> str:
    conversation = [codec.to_data(message) for message in kept.conversation]
    data = {"format": _FORMAT, "response": kept.body, "conversation": conversation}
    return dump_json(data).decode("utf-8")


def _decode(value: str) -> KeptResponse:
    data = json.loads(value)
    _check_format(data, "a kept response")
    conversation = [codec.from_data(Message, message) for message in data["conversation"]]
    return KeptResponse(data["response"], conversation)


def _check_format(data: Any, what: str) -> None:
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise SerializationError(f"{what} of format {found!r}; this daimon reads {_FORMAT}")


# ------------------------------------------------------------------------------ response objects


def usage(response: AgentResponse | None) -> dict[str, Any] | None:
    """A run's token usage as a ``response`` object reports it."""
    if response is None:
        return None
    used = response.usage
    return {
        "input_tokens": used.input_tokens,
        "input_tokens_details": {
            "cached_tokens": used.cached_tokens,
            "cache_write_tokens": used.cache_write_tokens,
        },
        "output_tokens": used.output_tokens,
        "output_tokens_details": {"reasoning_tokens": used.reasoning_tokens},
        "total_tokens": used.input_tokens + used.output_tokens,
    }


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [_text_part(text)] if status == "completed" else []
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def output(response: AgentResponse, start: RunStart | None = None) -> list[dict[str, Any]]:
    """One message item per model turn that wrote text (the last is the answer).

    A continued run's turns before its pause were the earlier response's output: left out.
    """
    skip = len(start.resumed.messages) if start is not None and start.resumed else 0
    texts = [m.text for m in response.messages[skip:] if m.role is Role.ASSISTANT and m.text]
    if not texts or texts[-1] != response.text:
        texts.append(response.text)  # a structured answer, given through its output tool
    return [_message_item(f"msg_{uuid.uuid4().hex}", text) for text in texts]


def _call_items(response: AgentResponse) -> list[dict[str, Any]]:
    """The client calls a paused run waits for, as ``function_call`` output items."""
    return [
        {
            "id": f"fc_{uuid.uuid4().hex}",
            "type": "function_call",
            "status": "completed",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments_json,
        }
        for call in response.client_calls
    ]


def paused_output(response: AgentResponse, start: RunStart) -> list[dict[str, Any]]:
    """A run paused for client calls: the texts so far (this request's), then the calls."""
    skip = len(start.resumed.messages) if start.resumed else 0
    texts = [m.text for m in response.messages[skip:] if m.role is Role.ASSISTANT and m.text]
    messages = [_message_item(f"msg_{uuid.uuid4().hex}", text) for text in texts]
    return [*messages, *_call_items(response)]


def for_client(response: AgentResponse) -> bool:
    """Whether the run waits for client results only (approvals are not this API's)."""
    return bool(response.client_calls) and not response.pending_approvals


def finish(obj: dict[str, Any], response: AgentResponse, items: list[dict[str, Any]]) -> None:
    """Mark the ``response`` object completed, with ``items`` as its output."""
    obj.update(status="completed", output=items, usage=usage(response))
    obj["completed_at"] = int(time.time())


def fail(obj: dict[str, Any], exc: BaseException) -> None:
    """Mark the ``response`` object failed by ``exc``."""
    if isinstance(exc, ApprovalRequiredError):
        code, message = "approval_required", str(exc)
    else:
        _, code, message = describe_failure(exc)
    obj.update(status="failed", error={"code": code, "message": message})


# ------------------------------------------------------------------------------ one run


@dataclass(slots=True)
class ResponseRun:
    """One accepted request: its agent, conversation, ``response`` object and stores."""

    agent: Promptable
    conversation: RunStart
    obj: dict[str, Any]
    keep: bool
    kept: ResponseStore
    paused: PausedRuns
    timeout: float
    """Seconds the run may take (how a timeout is reported)."""
    tool_choice: str | None = None
    """The request's ``tool_choice`` (already applied to ``agent``), for a worker to apply."""
    events: ResponseEvents = field(init=False)
    _lost: bool = field(default=False, init=False)
    """Whether this is a later attempt of a run that cannot run again (see :meth:`resume`)."""

    def __post_init__(self) -> None:
        self.events = ResponseEvents(self.obj)

    @property
    def response(self) -> AgentResponse | None:
        """The finished run's response (``None`` until it finished)."""
        return self.events.response

    @property
    def keeps_pauses(self) -> bool:
        """A run paused for client calls is kept here, not by a broker: its task completes."""
        return True

    @property
    def retries(self) -> bool:
        """Whether a failed attempt may be tried again: see :func:`runs_again`."""
        return runs_again(self.agent)

    def answer(self, token: CancelToken) -> Awaitable[AgentResponse]:
        """The run's response, not streamed."""
        return self.conversation.answer(self.agent, self.run_id, token)

    @property
    def run_id(self) -> str:
        """The agent run's id: the response's, without its ``resp_`` prefix."""
        return str(self.obj["id"]).removeprefix("resp_")

    async def frames(self, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The run's events, the last ``response.completed`` (or ``failed``, if cancelled)."""
        if self._lost:
            raise lost_run(str(self.obj["model"]))
        if self.obj["background"] and not await self._set_in_progress():
            return  # cancelled (or deleted) before it started
        async for frame in self.events.stream(self, token):
            yield frame
        assert self.events.response is not None
        ended = await self._conclude(self.events.response)
        kind = "response.completed" if ended else "response.failed"
        yield self.events.frame(kind, response=self.obj)

    def resume(self, logged: Sequence[str]) -> None:
        """Go on after a lost attempt whose frames ``logged`` holds (see ResponseEvents.resume).

        A run that cannot run again (see :attr:`retries`) fails with ``RunLost``.
        """
        self.events.resume(logged)
        self._lost = not runs_again(self.agent)

    def on_error(self, exc: BaseException) -> bytes:
        """The ``response.failed`` event that ends a run that raised ``exc``."""
        if self.obj["status"] not in ENDED_EARLY:
            fail(self.obj, exc)
        return self.events.frame("response.failed", response=self.obj)

    async def end(self, exc: BaseException, reason: str | None) -> None:
        """Record why a run ended early (failed or cancelled), unless it is recorded already.

        ``reason`` is its cancel token's, if it was cancelled. A run may fail after it finished
        (keeping it did): a response kept as finished stays so.
        """
        if self.obj["status"] in ENDED_EARLY:
            return
        if reason == BY_CLIENT:
            self.obj["status"] = "cancelled"
        elif reason == "timeout" or _is_timeout(exc):
            fail(self.obj, RunTimeoutError(self.timeout, "the run"))
        elif isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            fail(self.obj, RunCancelled(reason or "the server stopped the run"))
        else:
            fail(self.obj, exc)
        if not self.keep:
            return
        ended = dict(self.obj)
        try:
            kept = await self.kept.settle(ended["id"], lambda k: KeptResponse(ended))
        except Exception:  # the store is down: the response stays as last written
            logger.warning("cannot record how response %s ended", ended["id"], exc_info=True)
            return
        if kept is not None:
            self.obj.update(kept.body)

    async def _set_in_progress(self) -> bool:
        """Mark a background response ``in_progress``; ``False`` when it ended first."""
        self.obj["status"] = "in_progress"
        kept = await self.kept.settle(
            self.obj["id"], lambda k: KeptResponse({**k.body, "status": "in_progress"})
        )
        if kept is None or not kept.running:
            if kept is not None:
                self.obj.update(kept.body)
            return False
        return True

    async def _conclude(self, response: AgentResponse) -> bool:
        """Keep what a finished run leaves (a paused run, the response); ``False`` if cancelled.

        This comes before the final event, so a client that saw it finds the response kept.
        """
        if for_client(response):
            await self.paused.keep(self.obj["model"], response, self.obj["id"])
        if not self.keep:
            return True
        conversation = [*self.conversation.history, *response.messages]
        finished = KeptResponse(dict(self.obj), conversation)
        kept = await self.kept.settle(self.obj["id"], lambda _: finished)
        if kept is not None and kept.body["status"] != "completed":  # a cancel came first
            self.obj.update(kept.body)
            return False
        return True

    def spec(self) -> dict[str, Any]:
        """What a worker needs to run this again (JSON): see :func:`job_from_spec`."""
        return {
            "kind": RESPONSES_KIND,
            "format": _FORMAT,
            "response": self.obj,
            "keep": self.keep,
            "ttl": self.kept.ttl,
            "timeout": self.timeout,
            "tool_choice": self.tool_choice,
            "conversation": codec.to_data(self.conversation),
        }


def job_from_spec(agent: Promptable, spec: Mapping[str, Any], store: StateStore) -> ResponseRun:
    """The run a :meth:`ResponseRun.spec` describes, with ``agent``, keeping to ``store``.

    Raises:
        SerializationError: The spec is of another format.
    """
    _check_format(spec, "a response run")
    obj = dict(spec["response"])
    conversation = codec.from_data(RunStart, spec["conversation"])
    choice = spec.get("tool_choice")
    agent = with_tool_choice(agent, obj["model"], choice, conversation.client_tools)

    async def opened() -> StateStore:
        return store

    ttl = spec.get("ttl")
    return ResponseRun(
        agent=agent,
        conversation=conversation,
        obj=obj,
        keep=bool(spec["keep"]),
        kept=ResponseStore(opened, ttl),
        paused=PausedRuns(store, "responses", ttl),
        timeout=float(spec["timeout"]),
        tool_choice=choice,
    )


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) and not isinstance(exc, RunTimeoutError)


# ------------------------------------------------------------------------------ the events


class ResponseEvents:
    """The Responses stream events of one run, numbered in order."""

    __slots__ = ("_obj", "_open", "_output", "_sequence", "_started", "_texts", "response")

    def __init__(self, obj: dict[str, Any]) -> None:
        self._obj = obj
        self._sequence = 0
        self._started = False
        self._output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._texts: list[str] = []
        self.response: AgentResponse | None = None

    def frame(self, kind: str, **data: Any) -> bytes:
        """One event, with its type and sequence number."""
        body = {"type": kind, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return sse_frame(dump_json(body), event=kind)

    def resume(self, logged: Sequence[str]) -> None:
        """Go on after the frames a lost attempt logged: numbers and finished items carry on.

        The stream is not started again; a message the lost attempt left unfinished is left so,
        and the new attempt's next item takes its place in the output.
        """
        self._sequence = len(logged)
        self._started = bool(logged)
        for value in logged:
            _, data = frame_fields(value)
            if isinstance(data, dict) and data.get("type") == "response.output_item.done":
                self._output.append(data["item"])

    async def stream(self, run: ResponseRun, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The event sequence of ``run`` but its last, ``response.completed``.

        Its caller sends that one once what the run leaves is kept (``self.response``).
        """
        if not self._started:
            self._started = True
            yield self.frame("response.created", response=self._obj)
            yield self.frame("response.in_progress", response=self._obj)
        async for event in run.conversation.events(run.agent, run.run_id, token):
            if isinstance(event, TextDelta) and event.text:
                if self._open is None:
                    for frame in self._open_message():
                        yield frame
                self._texts.append(event.text)
                yield self.frame(
                    "response.output_text.delta", **self._where(), delta=event.text, logprobs=[]
                )
            elif isinstance(event, UsageEvent) and self._open is not None:
                for frame in self._close_message():  # a model call ended: so did its message
                    yield frame
            elif isinstance(event, Done):
                self.response = event.response
        if self._open is not None:
            for frame in self._close_message():
                yield frame
        if self.response is None:  # pragma: no cover - agent streams end with Done or raise
            raise RuntimeError("the run ended without a response")
        ending = (
            self._calls_for_client(self.response)
            if for_client(self.response)
            else self._answered(self.response)
        )
        for frame in ending:
            yield frame

    def _answered(self, response: AgentResponse) -> list[bytes]:
        """The end of a finished run: its answer, if not sent as text yet."""
        response.require_finished(NO_APPROVALS_HERE)
        answer = response.text
        frames: list[bytes] = []
        if not self._output or self._output[-1]["content"][0]["text"] != answer:
            # A structured answer comes through the output tool, not as text: send it too.
            frames += self._open_message()
            self._texts.append(answer)
            frames.append(
                self.frame("response.output_text.delta", **self._where(), delta=answer, logprobs=[])
            )
            frames += self._close_message()
        finish(self._obj, response, self._output)
        return frames

    def _calls_for_client(self, response: AgentResponse) -> list[bytes]:
        """The end of a run paused for client calls: one item per call."""
        frames = [frame for item in _call_items(response) for frame in self._function_call(item)]
        finish(self._obj, response, self._output)
        return frames

    def _function_call(self, item: dict[str, Any]) -> list[bytes]:
        """The events of one ``function_call`` item, its arguments in one delta."""
        index = len(self._output)
        where = {"item_id": item["id"], "output_index": index}
        arguments = item["arguments"]
        started = {**item, "arguments": "", "status": "in_progress"}
        frames = [
            self.frame("response.output_item.added", output_index=index, item=started),
            self.frame("response.function_call_arguments.delta", **where, delta=arguments),
            self.frame("response.function_call_arguments.done", **where, arguments=arguments),
            self.frame("response.output_item.done", output_index=index, item=item),
        ]
        self._output.append(item)
        return frames

    def _where(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self._output), "content_index": 0}

    def _open_message(self) -> list[bytes]:
        self._open = _message_item(f"msg_{uuid.uuid4().hex}", "", "in_progress")
        self._texts = []
        index = len(self._output)
        return [
            self.frame("response.output_item.added", output_index=index, item=self._open),
            self.frame("response.content_part.added", **self._where(), part=_text_part("")),
        ]

    def _close_message(self) -> list[bytes]:
        assert self._open is not None
        text = "".join(self._texts)
        where = self._where()
        item = _message_item(self._open["id"], text)
        frames = [
            self.frame("response.output_text.done", **where, text=text, logprobs=[]),
            self.frame("response.content_part.done", **where, part=_text_part(text)),
            self.frame("response.output_item.done", output_index=where["output_index"], item=item),
        ]
        self._output.append(item)
        self._open = None
        return frames
