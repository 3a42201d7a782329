"""RemoteA2AAgent: a remote A2A agent, usable as a tool or wherever an agent is prompted."""

from __future__ import annotations

from daimon.a2a import _sdk  # noqa: F401  # isort: skip - first: names the extra

import asyncio
import contextlib
import importlib.util
import json
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import urljoin, urlsplit

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AgentCard,
    AgentInterface,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol

from daimon.a2a._convert import is_text_delta, message_text, parts_text, tool_name
from daimon.core.cancel import CancelToken
from daimon.core.errors import AgentRunError, BuilderError, RunCancelled
from daimon.core.errors import TimeoutError as DaimonTimeoutError
from daimon.core.events import Done, StreamEvent, TextDelta
from daimon.core.messages import Message as ChatMessage
from daimon.core.optional import require
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput
from daimon.kit.lifecycle import AsyncClosing
from daimon.telemetry._propagation import inject_trace_context
from daimon.tools import RunContext

if TYPE_CHECKING:
    from daimon.multiagent import SessionId

__all__ = ("RemoteA2AAgent",)

MAX_CARD_BYTES = 1024 * 1024
_POLL_SECONDS = 0.5
_CANCEL_SECONDS = 5.0
_TLS_SCHEMES = frozenset({"grpcs", "https"})  # a card's gRPC URL behind TLS
_TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
        TaskState.TASK_STATE_INPUT_REQUIRED,
        TaskState.TASK_STATE_AUTH_REQUIRED,
    }
)
_STOPPED = object()  # queued when the caller's cancel token fires


class RemoteA2AAgent(AsyncClosing):
    """An agent on another server, spoken to over A2A: JSON-RPC, HTTP+JSON or gRPC, 1.0 or 0.3.

    It is a daimon tool (``Agent(model, tools=[remote])``: the model asks it with a ``prompt``
    argument and reads its answer; any failure is an error result) and it answers ``prompt`` and
    ``prompt_stream`` like an :class:`~daimon.Agent`, so it can stand wherever an agent is
    prompted (a chain or graph step, :class:`~daimon.multiagent.AgentTool`-style delegation)::

        async with RemoteA2AAgent("http://127.0.0.1:9999") as remote:
            answer = await remote.prompt("What is new in the report?")
            agent = Agent(model, tools=[remote])

    The agent card is read on :meth:`connect` (or on first use): only ``http(s)`` URLs, no
    redirects followed, at most 1 MiB. The card decides how to speak: the first of its
    interfaces whose binding this client speaks, at the best protocol version the card offers for
    that binding (1.0, else 0.3; a 0.3 card, with ``url`` and ``preferredTransport``, is read as
    0.3). :attr:`interface` says which was chosen; :attr:`client` is the SDK's client, for the
    operations beyond prompting (get, list, cancel and resubscribe to tasks, push-notification
    configs, the extended card). The token is sent only to the card URL's origin, never to
    another host a card might name.

    Every request carries the sending run's W3C trace context (``traceparent``, ``tracestate``,
    ``baggage`` headers) when OpenTelemetry is tracing, so a daimon A2A server's run joins the
    caller's trace; trace headers given in ``headers`` are sent as they are.

    Args:
        url: The remote agent's base URL (its card is at ``/.well-known/agent-card.json``).
        name: The name the model calls it by (the card's name, made tool-safe, by default).
        description: What the model is told it does (the card's description by default).
        token: A bearer token for the remote server.
        headers: More HTTP headers for every request.
        timeout: Seconds one prompt may take, end to end.
        streaming: Stream when the card says the agent can.
        bindings: The protocol bindings to use, in order of preference (``"JSONRPC"``,
            ``"HTTP+JSON"``, ``"GRPC"``). By default the first interface of the card that this
            client speaks (gRPC only when ``grpcio`` is installed).
        versions: The A2A protocol versions to speak (``"1.0"``, ``"0.3"``), in order of
            preference; by default the best the card offers (1.0, else 0.3).
        session_id: As a tool, keep one conversation with the remote agent across calls: a
            fixed id, or a function of the calling run's context returning one (or ``None``),
            sent as the A2A contextId (a daimon server keeps the context's turns in the
            agent's memory). By default each tool call is a new conversation. ``prompt`` and
            ``prompt_stream`` take their own ``session_id``.

    Raises:
        BuilderError: A bad URL, timeout or ``session_id``.
    """

    __slots__ = (
        "_client",
        "_description",
        "_http",
        "_lock",
        "_name",
        "_session_id",
        "bindings",
        "card",
        "headers",
        "interface",
        "streaming",
        "timeout",
        "token",
        "url",
        "versions",
    )

    def __init__(
        self,
        url: str,
        *,
        name: str | None = None,
        description: str | None = None,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        streaming: bool = True,
        session_id: SessionId = None,
        bindings: Sequence[str] | None = None,
        versions: Sequence[str] | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BuilderError(f"an A2A agent URL must be http:// or https://, got {url!r}")
        if parts.username or parts.password:
            raise BuilderError("put credentials in token= or headers=, never in the URL")
        if not (isinstance(timeout, int | float) and timeout > 0):
            raise BuilderError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if session_id is not None and not (isinstance(session_id, str) or callable(session_id)):
            raise BuilderError("session_id must be a string or a function of the run's context")
        self.url = url
        self.token = token
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        self.streaming = streaming
        self.card: AgentCard | None = None
        """The remote agent's card, once connected."""
        self.bindings = tuple(bindings) if bindings is not None else None
        self.versions = tuple(versions) if versions is not None else None
        self.interface: AgentInterface | None = None
        """The interface spoken to (binding, URL, protocol version), once connected."""
        self._name = tool_name(name) if name is not None else None
        self._description = description
        self._session_id = session_id
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"RemoteA2AAgent({self.url!r})"

    @property
    def client(self) -> Client:
        """The official SDK's client for the remote agent, once connected.

        Raises:
            BuilderError: Not connected yet.
        """
        if self._client is None:
            raise BuilderError(f"RemoteA2AAgent({self.url!r}) is not connected: connect() first")
        return self._client

    # ------------------------------------------------------------------------ the Tool protocol

    @property
    def name(self) -> str:
        """The tool name: as given, or the card's name once connected.

        Raises:
            BuilderError: Neither a name was given nor the card read yet.
        """
        if self._name is not None:
            return self._name
        if self.card is not None:
            return tool_name(self.card.name)
        raise BuilderError(
            f"RemoteA2AAgent({self.url!r}) has no name yet: pass name=, or connect() first so "
            "the name comes from its agent card"
        )

    @property
    def description(self) -> str:
        """What the model is told the remote agent does."""
        if self._description is not None:
            return self._description
        if self.card is not None and self.card.description:
            return f"{self.card.description} (a remote agent: ask it in plain language)"
        return "A remote agent: ask it in plain language."

    @property
    def parameters_schema(self) -> Mapping[str, Any]:
        """One ``prompt`` string."""
        return {
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "What to ask the agent."}},
            "required": ["prompt"],
            "additionalProperties": False,
        }

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """Ask the remote agent; its answer, or what went wrong, is the result."""
        session = self._session_id
        if callable(session):
            session = session(ctx)
        try:
            response = await self.prompt(
                str(arguments.get("prompt", "")), session_id=session, cancel=ctx.cancel
            )
        except RunCancelled:
            if ctx.cancel.cancelled:
                raise
            return ToolOutput.error(f"Error: remote agent {self.name!r} cancelled the task")
        except Exception as exc:  # the model reads what went wrong and carries on
            return ToolOutput.error(f"Error: remote agent {self.name!r} failed: {exc}")
        return ToolOutput(content=response.text)

    # ------------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def connect(self) -> AgentCard:
        """Read the agent card and set up the client (done once; later calls reuse it).

        Raises:
            AgentRunError: The card could not be fetched or read.
        """
        async with self._lock:
            if self._client is not None and self.card is not None:
                return self.card
            http = httpx.AsyncClient(
                headers=self.headers,
                auth=_OriginBearer(self.token, self.url) if self.token is not None else None,
                timeout=httpx.Timeout(30.0, read=self.timeout),
                follow_redirects=False,
                event_hooks={"request": [_send_trace_context]},
            )
            try:
                card = await _fetch_card(http, self.url)
                chosen = choose_interface(card, self.bindings, self.versions)
                config = ClientConfig(
                    streaming=self.streaming,
                    httpx_client=http,
                    supported_protocol_bindings=[chosen.protocol_binding],
                    grpc_channel_factory=_channels(self.url, self.token, self.headers),
                )
                self._client = ClientFactory(config).create(card)
                self.interface = chosen
            except BaseException:
                await http.aclose()
                raise
            self._http, self.card = http, card
            return card

    async def aclose(self) -> None:
        """Close the HTTP connections; calling it again does nothing."""
        client, http = self._client, self._http
        self._client = self._http = None
        if client is not None:
            await client.close()
        if http is not None:
            await http.aclose()

    # ------------------------------------------------------------------------ prompting

    async def prompt(
        self,
        input: str | ChatMessage,
        /,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse:
        """Ask the remote agent and wait for its answer.

        ``session_id`` is sent as the A2A context id (the remote decides what it keeps);
        ``run_id`` and ``deps`` are accepted for compatibility with :class:`~daimon.Agent`.

        Raises:
            AgentRunError: The remote agent failed, rejected the task, needs input, or could
                not be reached.
            RunCancelled: ``cancel`` was cancelled (the remote task is cancelled too), or the
                remote agent cancelled the task.
            daimon.TimeoutError: No answer within ``timeout`` (the remote task is cancelled).
        """
        response: AgentResponse | None = None
        async for event in self.prompt_stream(
            input, session_id=session_id, run_id=run_id, deps=deps, cancel=cancel
        ):
            if type(event) is Done:
                response = event.response
        if response is None:  # pragma: no cover - the stream always ends with Done or raises
            raise AgentRunError(f"remote agent {self.url!r} gave no answer")
        return response

    async def prompt_stream(
        self,
        input: str | ChatMessage,
        /,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Ask the remote agent, streaming its text; the last event is ``Done`` with the answer.

        The text streamed is the answer's: messages and artifacts (chunk by chunk when the
        remote streams them), and a daimon server's streamed status text. Other ``working``
        status messages are the remote's progress notes, not answer, and are not streamed.

        Raises:
            AgentRunError: As :meth:`prompt`.
            RunCancelled: As :meth:`prompt`.
            daimon.TimeoutError: As :meth:`prompt`.
        """
        text = input if isinstance(input, str) else input.text
        if cancel is not None:
            cancel.raise_if_cancelled()
        client = await self._connected()
        message = Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
            context_id=session_id or "",
        )
        exchange = _Exchange()
        queue: asyncio.Queue[object] = asyncio.Queue()
        said = False  # whether any text was streamed
        pumping = asyncio.ensure_future(_pump(client, message, queue))
        detach = cancel.on_cancel(lambda: queue.put_nowait(_STOPPED)) if cancel else None
        # A deadline checked around each wait, never around a yield: the consumer's own time
        # between events must not be cancelled by this generator's timeout.
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            while (item := await self._next_item(queue, deadline, cancel)) is not None:
                for delta in exchange.absorb(item):
                    said = True
                    yield TextDelta(text=delta)
            async with asyncio.timeout_at(deadline):
                await self._finish(client, exchange)
        except TimeoutError as exc:
            raise DaimonTimeoutError(self.timeout, f"remote agent {self.url!r}") from exc
        finally:
            if detach is not None:
                detach()
            pumping.cancel()
            await asyncio.wait({pumping})
            if not exchange.over:  # cancelled, timed out or abandoned: stop the remote work too
                await asyncio.shield(self._cancel_remote(exchange.task_id))
        answer = exchange.answer()
        if answer and not said:  # not streamed (a blocking call): the answer in one piece
            yield TextDelta(text=answer)
        yield Done(
            response=AgentResponse(
                text=answer,
                messages=(ChatMessage.user(text), ChatMessage.assistant(answer)),
                run_id=exchange.task_id or run_id or "",
                session_id=exchange.context_id or session_id,
            )
        )

    async def _next_item(
        self, queue: asyncio.Queue[object], deadline: float, cancel: CancelToken | None
    ) -> StreamResponse | None:
        """The remote's next streamed item (``None`` at the end); its failure or a cancel raises."""
        async with asyncio.timeout_at(deadline):
            item = await queue.get()
        if item is None:
            return None
        if item is _STOPPED:
            raise RunCancelled(cancel.reason if cancel else None)
        if isinstance(item, Exception):
            raise self._failure(item) from item
        assert isinstance(item, StreamResponse)
        return item

    async def _connected(self) -> Client:
        if self._client is None:
            await self.connect()
        assert self._client is not None
        return self._client

    async def _finish(self, client: Client, exchange: _Exchange) -> None:
        """Wait for a terminal state (polling if the stream ended early); raise on failure."""
        while exchange.state is not None and exchange.state not in _TERMINAL:
            if exchange.task_id is None:
                break
            await asyncio.sleep(_POLL_SECONDS)
            try:
                task = await client.get_task(GetTaskRequest(id=exchange.task_id))
            except Exception as exc:
                raise self._failure(exc) from exc
            exchange.take_task(task)
        state, detail = exchange.state, exchange.status_text
        who = f"remote agent {self.url!r}"
        if state == TaskState.TASK_STATE_CANCELED:
            raise RunCancelled(f"{who} cancelled the task")
        if state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED):
            verb = "failed" if state == TaskState.TASK_STATE_FAILED else "rejected the task"
            raise AgentRunError(f"{who} {verb}" + (f": {detail}" if detail else ""))
        if state in (TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED):
            need = "input" if state == TaskState.TASK_STATE_INPUT_REQUIRED else "authorization"
            raise AgentRunError(f"{who} needs more {need}" + (f": {detail}" if detail else ""))
        if state is None and exchange.reply is None:
            raise AgentRunError(f"{who} answered with neither a task nor a message")

    async def _cancel_remote(self, task_id: str | None) -> None:
        client = self._client
        if task_id is None or client is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                client.cancel_task(CancelTaskRequest(id=task_id)), _CANCEL_SECONDS
            )

    def _failure(self, exc: BaseException) -> AgentRunError:
        return AgentRunError(f"remote agent {self.url!r} failed: {type(exc).__name__}: {exc}")


@dataclass(slots=True)
class _Exchange:
    """What one message exchange has told so far: task, state, artifacts, direct reply.

    Answer text is what messages and artifacts hold. A ``working`` status message is progress
    ("Looking it up..."), kept out of the answer, unless it is a daimon server's piece of
    streamed answer (``is_text_delta``).
    """

    task_id: str | None = None
    context_id: str | None = None
    state: TaskState | None = None
    status_text: str = ""
    """The message of the last final or interrupted state (why it failed, what it needs)."""
    reply: Message | None = None
    streamed: bool = False
    """Whether text came as daimon's streamed status messages (then artifacts are not streamed)."""
    artifacts: dict[str, Artifact] = field(default_factory=dict)

    def absorb(self, item: StreamResponse) -> Generator[str]:
        """Take one streamed item in; yields new answer text to stream on."""
        kind = item.WhichOneof("payload")
        if kind == "task":
            self.take_task(item.task)
        elif kind == "message":
            self.reply = item.message
            self.context_id = item.message.context_id or self.context_id
            text = message_text(item.message)
            if text and not self.streamed:
                yield text
        elif kind == "status_update":
            event = item.status_update
            self.task_id, self.context_id = event.task_id, event.context_id
            message = self._take_state(event.status)
            text = message_text(message) if message is not None and is_text_delta(message) else ""
            if text:
                self.streamed = True
                yield text
        elif kind == "artifact_update":
            yield from self._take_artifact(item.artifact_update)

    def _take_state(self, status: TaskStatus) -> Message | None:
        """Record the state (and why, if it is final); a ``working`` status's message, if any."""
        self.state = status.state
        message = status.message if status.HasField("message") else None
        if self.state == TaskState.TASK_STATE_WORKING:
            return message
        self.status_text = message_text(message) if message is not None else ""
        return None

    def _take_artifact(self, update: TaskArtifactUpdateEvent) -> Generator[str]:
        self.task_id = update.task_id or self.task_id
        artifact_id = update.artifact.artifact_id
        known = self.artifacts.get(artifact_id)
        before = parts_text(known.parts) if known is not None else ""
        if update.append and known is not None:
            known.parts.extend(update.artifact.parts)
        else:  # a new artifact, or one replacing the chunks sent before (a daimon server's)
            copy = Artifact()
            copy.CopyFrom(update.artifact)
            self.artifacts[artifact_id] = copy
        if self.streamed:  # an older daimon server: the text came as status messages
            return
        after = parts_text(self.artifacts[artifact_id].parts)
        # Only text not streamed yet: a replacement that repeats the chunks adds nothing.
        new = after[len(before) :] if after.startswith(before) else after
        if new:
            yield new

    def take_task(self, task: Task) -> None:
        """A full task snapshot replaces what was known."""
        self.task_id, self.context_id = task.id, task.context_id
        self._take_state(task.status)
        if task.artifacts:
            self.artifacts = {a.artifact_id: a for a in task.artifacts}

    @property
    def over(self) -> bool:
        """Whether the remote side has finished (answered, or reached a final state)."""
        return self.reply is not None or self.state in _TERMINAL

    def answer(self) -> str:
        """The answer: a direct reply, else the artifacts, else the last status message."""
        if self.reply is not None:
            return message_text(self.reply)
        text = "\n\n".join(t for t in (parts_text(a.parts) for a in self.artifacts.values()) if t)
        return text or self.status_text


class _OriginBearer(httpx.Auth):
    """``Authorization: Bearer`` on requests to one origin only, never to hosts a card names."""

    def __init__(self, token: str, url: str) -> None:
        self._value = f"Bearer {token}"
        self._origin = _origin(url)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if _origin(str(request.url)) == self._origin:
            request.headers["Authorization"] = self._value
        yield request


def _grpc_available() -> bool:
    return importlib.util.find_spec("grpc") is not None


def choose_interface(
    card: AgentCard,
    bindings: Sequence[str] | None = None,
    versions: Sequence[str] | None = None,
) -> AgentInterface:
    """The interface of ``card`` to speak to: binding, then the best protocol version of it.

    With ``bindings``, the first of them the card offers; otherwise the first binding in the
    card's own order that this client speaks. Of that binding's interfaces, 1.0 is preferred,
    then the newest 0.x from 0.3, then one naming no version; with ``versions``, only those
    (``"0.3"`` matches ``0.3.0``), in their order.

    Raises:
        AgentRunError: The card offers no binding this client speaks (or none asked for).
    """
    spoken = [TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value]
    if _grpc_available():
        spoken.append(TransportProtocol.GRPC.value)
    offered = [i.protocol_binding for i in card.supported_interfaces]
    wanted = [b for b in bindings if b in spoken] if bindings is not None else spoken
    order = (
        list(wanted) if bindings is not None else [b for b in dict.fromkeys(offered) if b in wanted]
    )
    for binding in order:
        candidates = [i for i in card.supported_interfaces if i.protocol_binding == binding]
        if versions is not None:
            ranked = [i for v in versions for i in candidates if _same_version(i, v)]
            candidates = ranked[:1]
        if candidates:
            return max(candidates, key=_version_rank)
    shown = sorted(
        {f"{i.protocol_binding} {i.protocol_version}" for i in card.supported_interfaces}
    )
    raise AgentRunError(
        f"the agent card of {card.name!r} offers {shown or 'no interface'}; "
        f"this client speaks {wanted or 'none of the bindings asked for'}"
        + (f" at {list(versions)}" if versions is not None else "")
        + ("" if _grpc_available() else " (gRPC needs the grpc extra)")
    )


def _same_version(interface: AgentInterface, version: str) -> bool:
    """Whether ``interface`` speaks ``version`` (major and minor; ``0.3`` is ``0.3.0``)."""
    return interface.protocol_version.split(".")[:2] == version.split(".")[:2]


def _version_rank(interface: AgentInterface) -> tuple[int, int, int]:
    """1.0 first, then newer 0.x versions from 0.3, then no version, then others."""
    try:
        major, minor, *_ = (int(p) for p in (interface.protocol_version or "x").split("."))
    except ValueError:
        return (1, 0, 0) if not interface.protocol_version else (0, 0, 0)
    if (major, minor) == (1, 0):
        return (3, 0, 0)
    if major == 0 and minor >= 3:
        return (2, minor, 0)
    return (0, major, minor)


def _channels(url: str, token: str | None, headers: Mapping[str, str]) -> Callable[[str], Any]:
    """Makes the gRPC channel for a card's gRPC URL (``grpc://host:port``, or a bare address).

    A bare ``host:port`` is what older servers name. TLS when the URL is ``grpcs://`` or
    ``https://`` (a bare address: when the card URL is https). The token goes to a gRPC endpoint
    on the card URL's host only (as over HTTP, never to another host a card names).
    """

    def channel(target: str) -> Any:
        grpc = require("grpc", extra="grpc")
        aio = require("grpc.aio", extra="grpc")

        given = urlsplit(target if "://" in target else f"//{target}")
        where = given.netloc
        own_host = given.hostname == urlsplit(url).hostname
        metadata = [(k.lower(), v) for k, v in headers.items()]
        if token is not None and own_host:
            metadata.append(("authorization", f"Bearer {token}"))
        interceptors = _grpc_metadata(metadata)
        if (given.scheme or urlsplit(url).scheme) in _TLS_SCHEMES:
            credentials = grpc.ssl_channel_credentials()
            return aio.secure_channel(where, credentials, interceptors=interceptors)
        return aio.insecure_channel(where, interceptors=interceptors)

    return channel


def _grpc_metadata(metadata: list[tuple[str, str]]) -> list[Any]:
    """grpc.aio client interceptors adding ``metadata`` and the trace context to every call.

    The trace context is the current W3C one (``traceparent``, ``tracestate``, ``baggage``),
    read per call, when tracing. Two objects: grpc.aio files each interceptor under one kind
    of call only.
    """
    aio = require("grpc.aio", extra="grpc")

    def with_metadata(details: Any) -> Any:
        given = [*(details.metadata or ()), *metadata]
        keys = {str(k).lower() for k, _ in given}
        # the sending run's trace context, read per call (the channel lives across runs)
        traced = inject_trace_context({})
        own = "traceparent" not in keys  # a caller's traceparent goes with its own tracestate
        given += [(k, v) for k, v in traced.items() if k not in keys and (own or k == "baggage")]
        return details._replace(metadata=given)

    unary: Any = aio.UnaryUnaryClientInterceptor  # grpc has no type hints
    stream: Any = aio.UnaryStreamClientInterceptor

    class _Unary(unary):  # type: ignore[misc]
        async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            return await continuation(with_metadata(details), request)

    class _Stream(stream):  # type: ignore[misc]
        async def intercept_unary_stream(
            self, continuation: Any, details: Any, request: Any
        ) -> Any:
            return await continuation(with_metadata(details), request)

    return [_Unary(), _Stream()]


async def _send_trace_context(request: httpx.Request) -> None:
    """Put the current trace context on ``request`` (an httpx request hook).

    The client lives across runs, so the context is read per request: the hook runs in the task
    sending it (streaming too), which carries the run's span. A ``traceparent`` set by the caller
    is kept with its own ``tracestate``; so is a caller's ``baggage``.
    """
    carrier = inject_trace_context({})
    if not carrier:
        return
    given = request.headers
    for key, value in carrier.items():
        own = "traceparent" if key == "tracestate" else key
        if own not in given and key not in given:
            given[key] = value


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


async def _fetch_card(http: httpx.AsyncClient, url: str) -> AgentCard:
    """The agent card at ``url``'s well-known path, size-capped, redirects refused."""
    card_url = urljoin(url if url.endswith("/") else url + "/", AGENT_CARD_WELL_KNOWN_PATH[1:])
    try:
        async with http.stream("GET", card_url) as answer:
            if answer.is_redirect:
                raise AgentRunError(
                    f"the agent card at {card_url} redirects to "
                    f"{answer.headers.get('location')!r}; redirects are not followed"
                )
            if answer.status_code != 200:
                raise AgentRunError(f"the agent card at {card_url} answered {answer.status_code}")
            body = bytearray()
            async for chunk in answer.aiter_bytes():
                body += chunk
                if len(body) > MAX_CARD_BYTES:
                    raise AgentRunError(f"the agent card at {card_url} is larger than 1 MiB")
        data = json.loads(body)
        if not isinstance(data, dict):
            raise AgentRunError(f"the agent card at {card_url} is not a JSON object")
        return parse_agent_card(data)
    except AgentRunError:
        raise
    except Exception as exc:
        raise AgentRunError(
            f"could not read the agent card at {card_url}: {type(exc).__name__}: {exc}"
        ) from exc


async def _pump(client: Client, message: Message, queue: asyncio.Queue[object]) -> None:
    """Move the remote's stream into ``queue``: each item, a failure, then ``None``."""
    try:
        async for item in client.send_message(SendMessageRequest(message=message)):
            queue.put_nowait(item)
    except Exception as exc:
        queue.put_nowait(exc)
    queue.put_nowait(None)
