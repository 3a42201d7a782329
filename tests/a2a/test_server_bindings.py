"""Every operation over every binding and both protocol versions, with the official SDK's client.

One daimon server (``serve_a2a`` with a gRPC port) speaks JSON-RPC, HTTP+JSON and gRPC, each at
A2A 1.0 and 0.3. The SDK's client is made for one binding and one version by giving it the card
with only that interface: at 0.3 it uses the SDK's 0.3 transports (the compatibility layer),
which speak 0.3's wire format (``message/send``, ``/v1/...`` paths, the ``a2a.v1`` gRPC service).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

pytest.importorskip("grpc", reason="needs the grpc extra")

import grpc.aio
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
    a2a_pb2_grpc,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from daimon import Agent, ChatRequest, ChatResponse
from daimon.a2a import serve_a2a
from daimon.core.errors import BuilderError
from daimon.core.messages import ImagePart, TextPart
from daimon.models import FunctionModel

from .conftest import Gate, free_port, streaming_agent

CARD_PATH = "/.well-known/agent-card.json"
BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]
VERSIONS = ["1.0", "0.3"]
COMBINATIONS = [(b, v) for b in BINDINGS for v in VERSIONS]
TOKEN = "binding-secret"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))  # every byte value, so a mangled one shows


@contextlib.asynccontextmanager
async def everywhere(
    agent: Any, token: str | None = TOKEN, **options: Any
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """``serve_a2a`` on free loopback ports, HTTP and gRPC; yields the base URL and the card."""
    port, grpc_port = free_port(), free_port()
    server = asyncio.create_task(
        serve_a2a(agent, port=port, grpc_port=grpc_port, token=token, **options)
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(400):
                if server.done():
                    server.result()
                try:
                    card = (await http.get(base + CARD_PATH)).json()
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            else:
                pytest.fail("serve_a2a never answered")
        yield base, card
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


def _address(url: str) -> str:
    """The ``host:port`` of a card's gRPC URL, read as any URL is (as the A2A TCK does)."""
    parts = urlsplit(url)
    assert parts.scheme == "grpc", f"not a plaintext gRPC URL: {url!r}"
    return f"{parts.hostname}:{parts.port}"


def _channel(url: str, token: str | None = TOKEN) -> grpc.aio.Channel:
    """A channel to a card's gRPC URL, sending ``token`` (grpc.aio files an interceptor under
    one kind only)."""
    metadata = (("authorization", f"Bearer {token}"),) if token is not None else ()

    class _Unary(grpc.aio.UnaryUnaryClientInterceptor):
        async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            return await continuation(details._replace(metadata=metadata), request)

    class _Stream(grpc.aio.UnaryStreamClientInterceptor):
        async def intercept_unary_stream(
            self, continuation: Any, details: Any, request: Any
        ) -> Any:
            return await continuation(details._replace(metadata=metadata), request)

    return grpc.aio.insecure_channel(_address(url), interceptors=[_Unary(), _Stream()])


@contextlib.asynccontextmanager
async def sdk_client(
    card: dict[str, Any], binding: str, version: str, *, streaming: bool, token: str | None = TOKEN
) -> AsyncIterator[Any]:
    """The SDK's client for one binding at one version of the card, sending ``token``."""
    parsed: AgentCard = parse_agent_card(dict(card))
    keep = [
        i
        for i in parsed.supported_interfaces
        if i.protocol_binding == binding and i.protocol_version == version
    ]
    assert keep, f"the card offers no {binding} at {version}"
    del parsed.supported_interfaces[:]
    parsed.supported_interfaces.extend(keep)
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        config = ClientConfig(
            streaming=streaming,
            httpx_client=http,
            supported_protocol_bindings=[binding],
            grpc_channel_factory=functools.partial(_channel, token=token),
        )
        client = ClientFactory(config).create(parsed)
        try:
            yield client
        finally:
            await client.close()


def _message(text: str, task_id: str = "", *parts: Part) -> SendMessageRequest:
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=list(parts) or [Part(text=text)],
        task_id=task_id,
    )
    return SendMessageRequest(message=message)


async def _events(client: Any, request: SendMessageRequest) -> list[Any]:
    return [event async for event in client.send_message(request)]


def _final_task(events: list[Any]) -> Any:
    tasks = [e.task for e in events if e.HasField("task")]
    return tasks[-1]


async def test_the_card_names_every_binding_at_both_versions() -> None:
    async with everywhere(streaming_agent()) as (base, card):
        offered = [
            (i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]
        ]
        assert offered == [
            ("JSONRPC", "1.0"),
            ("HTTP+JSON", "1.0"),
            ("GRPC", "1.0"),
            ("JSONRPC", "0.3"),
            ("HTTP+JSON", "0.3"),
            ("GRPC", "0.3"),
        ]
        # the 0.3 fields a 0.3 client reads: its primary interface and the others
        assert (card["url"], card["preferredTransport"]) == (f"{base}/", "JSONRPC")
        assert card["protocolVersion"] == "0.3"
        assert [i["transport"] for i in card["additionalInterfaces"]] == ["HTTP+JSON", "GRPC"]
        assert card["capabilities"]["pushNotifications"] is True
        assert "bearer" in card["securitySchemes"]


async def test_the_card_names_grpc_by_an_absolute_url_the_sdk_client_reaches() -> None:
    """A2A 1.0 asks for an absolute URL: ``grpc://host:port``, read by any URL parser (the
    TCK's included), and all the SDK's client needs besides its channel factory."""
    async with everywhere(streaming_agent()) as (base, card):
        grpc_urls = {
            i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"
        }
        assert len(grpc_urls) == 1
        (grpc_url,) = grpc_urls
        parts = urlsplit(grpc_url)
        assert (parts.scheme, parts.hostname) == ("grpc", "127.0.0.1")
        assert parts.port is not None and parts.port != urlsplit(base).port
        assert card["additionalInterfaces"][-1]["url"] == grpc_url  # 0.3's field too
        async with sdk_client(card, "GRPC", "1.0", streaming=False) as client:
            (event,) = await _events(client, _message("over grpc"))
        assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert event.task.artifacts[0].parts[0].text == "Hello, you said: over grpc"


async def test_grpc_url_is_what_the_card_names_and_must_be_absolute() -> None:
    async with everywhere(streaming_agent(), grpc_url="grpcs://agents.example.com:443") as (
        _,
        card,
    ):
        named = {i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"}
        assert named == {"grpcs://agents.example.com:443"}
    for bare in ("127.0.0.1:50051", "localhost:50051"):
        with pytest.raises(BuilderError, match="absolute URL such as 'grpc://host:port'"):
            await serve_a2a(streaming_agent(), grpc_port=free_port(), grpc_url=bare)
    with pytest.raises(BuilderError, match="serve it with grpc_port="):
        await serve_a2a(streaming_agent(), grpc_url="grpc://127.0.0.1:50051")


@pytest.mark.parametrize(("binding", "version"), COMBINATIONS)
async def test_send_stream_and_get_keep_whole_messages(binding: str, version: str) -> None:
    async with everywhere(streaming_agent()) as (_, card):
        for streaming in (True, False):
            async with sdk_client(card, binding, version, streaming=streaming) as client:
                events = await _events(client, _message("one two three four five"))
                last = events[-1]
                if streaming:
                    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
                    # the pieces as they came, then the whole answer replacing them
                    assert [c.artifact.parts[0].text for c in chunks] == [
                        "Hello, ",
                        "you said: one two three four five",
                        "Hello, you said: one two three four five",
                    ]
                    assert [c.append for c in chunks] == [False, True, False]
                    assert chunks[-1].last_chunk
                    assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
                    task_id = last.status_update.task_id
                else:
                    assert last.task.status.state == TaskState.TASK_STATE_COMPLETED
                    task_id = last.task.id
                task = await client.get_task(GetTaskRequest(id=task_id))
                assert task.status.state == TaskState.TASK_STATE_COMPLETED
                (answer,) = task.artifacts
                assert [p.text for p in answer.parts] == [
                    "Hello, you said: one two three four five"
                ]
                # whole messages only: the user's, not one entry per streamed piece
                assert [(m.role, m.parts[0].text) for m in task.history] == [
                    (Role.ROLE_USER, "one two three four five")
                ]


async def _rest_03_error(http: httpx.AsyncClient, method: str, url: str, **kw: Any) -> Any:
    answer = await http.request(method, url, headers={"A2A-Version": "0.3"}, **kw)
    error = answer.json()["error"]
    assert "details" in error, error
    details = error["details"]
    reasons = [d["reason"] for d in details if d["@type"].endswith("google.rpc.ErrorInfo")]
    return answer.status_code, reasons[0]


async def test_http_json_0_3_errors_carry_the_spec_status_and_reason() -> None:
    """A2A 0.3 over HTTP+JSON names errors by HTTP status. (The SDK's own 0.3 REST client reads
    only a 0.3-era ``type`` field the SDK's server does not send, so the wire is checked here.)"""
    async with (
        everywhere(streaming_agent()) as (base, card),
        httpx.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}) as http,
    ):
        v1 = f"{base}/v1"
        assert await _rest_03_error(http, "GET", f"{v1}/tasks/nope") == (404, "TASK_NOT_FOUND")
        cancel = await _rest_03_error(http, "POST", f"{v1}/tasks/nope:cancel")
        assert cancel == (404, "TASK_NOT_FOUND")
        async with sdk_client(card, "HTTP+JSON", "0.3", streaming=False) as client:
            (event,) = await _events(client, _message("done"))
        done = event.task.id
        not_cancelable = await _rest_03_error(http, "POST", f"{v1}/tasks/{done}:cancel")
        assert not_cancelable == (400, "TASK_NOT_CANCELABLE")
        # 0.3's HTTP+JSON bodies are its protobuf in JSON: "content", "ROLE_USER", "fileWithBytes"
        # a file by URI: a2a-sdk 1.3.0's 0.3 conversion mangles a file's bytes (a 500)
        film = {"file": {"fileWithUri": "https://example.org/a.mp4", "mimeType": "video/mp4"}}
        message = {"messageId": "m1", "role": "ROLE_USER", "content": [film]}
        refused = await _rest_03_error(
            http, "POST", f"{v1}/message:send", json={"message": message}
        )
        assert refused == (400, "CONTENT_TYPE_NOT_SUPPORTED")


@pytest.mark.parametrize(
    ("binding", "version"), [c for c in COMBINATIONS if c != ("HTTP+JSON", "0.3")]
)
async def test_errors_carry_the_spec_codes(binding: str, version: str) -> None:
    async with (
        everywhere(streaming_agent()) as (_, card),
        sdk_client(card, binding, version, streaming=True) as client,
    ):
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(CancelTaskRequest(id="no-such-task"))
        events = await _events(client, _message("done soon"))
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        finished = events[-1].status_update.task_id
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=finished))
        with pytest.raises(UnsupportedOperationError):  # a finished task has no stream
            async for _ in client.subscribe(SubscribeToTaskRequest(id=finished)):
                pass
        archive = Part(raw=b"PK\x03\x04", media_type="application/zip", filename="a.zip")
        with pytest.raises(ContentTypeNotSupportedError):
            await _events(client, _message("", "", archive))


@pytest.mark.parametrize(("binding", "version"), COMBINATIONS)
async def test_an_image_reaches_the_model_over_each_binding_and_version(
    binding: str, version: str
) -> None:
    seen: list[Any] = []

    def look(request: ChatRequest) -> ChatResponse:
        seen.append(request.messages[-1].content)
        return ChatResponse.reply("seen")

    picture = Part(raw=PNG, media_type="image/png", filename="a.png")
    async with (
        everywhere(Agent(FunctionModel(look), name="looker")) as (_, card),
        sdk_client(card, binding, version, streaming=False) as client,
    ):
        events = await _events(client, _message("", "", Part(text="what is it?"), picture))
    assert events[-1].task.status.state == TaskState.TASK_STATE_COMPLETED
    assert seen == [(TextPart(text="what is it?"), ImagePart(data=PNG, media_type="image/png"))]


@pytest.mark.parametrize(("binding", "version"), COMBINATIONS)
async def test_resubscribe_to_a_running_task(binding: str, version: str) -> None:
    gate = Gate()
    async with (
        everywhere(streaming_agent(gate=gate)) as (_, card),
        sdk_client(card, binding, version, streaming=False) as sender,
        sdk_client(card, binding, version, streaming=True) as client,
    ):
        request = _message("held")
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        (first,) = await _events(sender, request)  # the task, still running
        task_id = first.task.id
        await asyncio.wait_for(gate.entered.wait(), 10)
        events: list[Any] = []
        async with asyncio.timeout(30):
            async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                events.append(event)
                gate.go.set()  # subscribed (the task came first): let the run go on
        assert events[0].task.status.state == TaskState.TASK_STATE_WORKING
        texts = [
            e.artifact_update.artifact.parts[0].text
            for e in events
            if e.HasField("artifact_update")
        ]
        assert texts == ["Hello, ", "you said: held", "Hello, you said: held"]
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


@pytest.mark.parametrize(("binding", "version"), COMBINATIONS)
async def test_cancel_a_running_task(binding: str, version: str) -> None:
    gate = Gate()
    async with (
        everywhere(streaming_agent(gate=gate)) as (_, card),
        sdk_client(card, binding, version, streaming=False) as client,
    ):
        request = _message("wait for me")
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        (event,) = await _events(client, request)
        await asyncio.wait_for(gate.entered.wait(), 10)
        cancelled = await client.cancel_task(CancelTaskRequest(id=event.task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        await asyncio.wait_for(gate.cancelled.wait(), 10)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_tasks_and_the_extended_card(binding: str) -> None:
    async with (
        everywhere(streaming_agent()) as (_, card),
        sdk_client(card, binding, "1.0", streaming=False) as client,
    ):
        ids = {(await _events(client, _message(f"n{i}")))[0].task.id for i in range(3)}
        listed = await client.list_tasks(ListTasksRequest())
        assert {t.id for t in listed.tasks} == ids
        extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        assert extended.name == "echo"


@pytest.mark.parametrize(("binding", "version"), COMBINATIONS)
async def test_daimon_to_daimon_over_each_binding_and_version(binding: str, version: str) -> None:
    from daimon.a2a import RemoteA2AAgent

    async with (
        everywhere(streaming_agent()) as (base, _),
        RemoteA2AAgent(base, token=TOKEN, bindings=[binding], versions=[version]) as remote,
    ):
        assert remote.interface is not None
        assert (remote.interface.protocol_binding, remote.interface.protocol_version) == (
            binding,
            version,
        )
        answer = await remote.prompt("hi")
        assert answer.text == "Hello, you said: hi"
        deltas = [e.text async for e in remote.prompt_stream("again") if hasattr(e, "text")]
        assert deltas == ["Hello, ", "you said: again"]


@pytest.mark.parametrize(("binding", "version"), COMBINATIONS)
async def test_push_configs_and_the_extended_card(binding: str, version: str) -> None:
    from a2a.types import (
        DeleteTaskPushNotificationConfigRequest,
        GetTaskPushNotificationConfigRequest,
        ListTaskPushNotificationConfigsRequest,
        TaskPushNotificationConfig,
    )

    async with (
        everywhere(streaming_agent()) as (_, card),
        sdk_client(card, binding, version, streaming=False) as client,
    ):
        (event,) = await _events(client, _message("hi"))
        task_id = event.task.id
        config = TaskPushNotificationConfig(
            task_id=task_id, id="hook-1", url="https://example.org/hook", token="t"
        )
        made = await client.create_task_push_notification_config(config)
        assert (made.id, made.url) == ("hook-1", "https://example.org/hook")
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook-1")
        )
        assert got.token == "t"
        # the SDK's 0.3 REST client has neither list nor delete
        can_list = (binding, version) != ("HTTP+JSON", "0.3")
        if can_list:
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            assert [c.id for c in listed.configs] == ["hook-1"]
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook-1")
            )
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            assert list(listed.configs) == []
        extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        assert extended.name == "echo"


def _claiming_the_extended_card(card: dict[str, Any]) -> dict[str, Any]:
    """``card`` as a client that asks for the extended card regardless of the card reads it."""
    claimed = {**card, "capabilities": {**card["capabilities"], "extendedAgentCard": True}}
    return {**claimed, "supportsAuthenticatedExtendedCard": True}


async def test_without_a_token_the_extended_card_is_neither_declared_nor_served() -> None:
    """The spec has the extended card require authentication: with no token there is none."""
    async with everywhere(streaming_agent(), token=None) as (base, card):
        assert card["capabilities"].get("extendedAgentCard", False) is False
        assert card.get("supportsAuthenticatedExtendedCard", False) is False  # the 0.3 field
        asking = _claiming_the_extended_card(card)
        for binding, version in COMBINATIONS:
            if (binding, version) == ("HTTP+JSON", "0.3"):
                continue  # the SDK's 0.3 REST client misreads errors: the wire is checked below
            async with sdk_client(asking, binding, version, streaming=False, token=None) as client:
                with pytest.raises(UnsupportedOperationError, match="extended"):
                    await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        async with httpx.AsyncClient() as http:
            refused = await _rest_03_error(http, "GET", f"{base}/v1/card")
        assert refused[1] == "UNSUPPORTED_OPERATION"


async def test_with_a_token_the_extended_card_is_declared_and_needs_the_token() -> None:
    async with everywhere(streaming_agent()) as (base, card):
        assert card["capabilities"]["extendedAgentCard"] is True
        for binding in BINDINGS:
            async with sdk_client(card, binding, "1.0", streaming=False) as client:
                extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
            assert extended.name == "echo"
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{base}/extendedAgentCard")).status_code == 401
        async with grpc.aio.insecure_channel(_address(_grpc_url(card))) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.GetExtendedAgentCard(GetExtendedAgentCardRequest())
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _grpc_url(card: dict[str, Any]) -> str:
    return next(i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC")


SERVED_MODULE = """
from daimon import Agent, ChatResponse
from daimon.models import FunctionModel

agent = Agent(FunctionModel(lambda request: ChatResponse.reply("pong")), name="pinger")
"""


def _a2a_serve(tmp_path: Path, *options: str) -> subprocess.Popen[str]:
    """``daimon a2a serve served:agent <options>``, in ``tmp_path`` (where ``served.py`` is)."""
    (tmp_path / "served.py").write_text(SERVED_MODULE)
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.Popen(
        [sys.executable, "-m", "daimon.cli", "a2a", "serve", "served:agent", *options],
        env={**os.environ, "PYTHONPATH": path},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_a2a_serve_grpc_url_is_what_the_card_names(tmp_path: Path) -> None:
    port, grpc_port = free_port(), free_port()
    grpc_url = f"grpc://localhost:{grpc_port}"
    process = _a2a_serve(
        tmp_path, "--port", str(port), "--grpc-port", str(grpc_port), "--grpc-url", grpc_url
    )
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(600):
                assert process.poll() is None, process.communicate()[1]
                try:
                    card = (await http.get(f"http://127.0.0.1:{port}{CARD_PATH}")).json()
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            else:
                pytest.fail("daimon a2a serve never answered")
        assert card.get("name") == "pinger", card
        assert {
            i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"
        } == {grpc_url}
        async with sdk_client(card, "GRPC", "1.0", streaming=False, token=None) as client:
            (event,) = await _events(client, _message("ping"))
        assert event.task.artifacts[0].parts[0].text == "pong"
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.mark.parametrize(
    ("options", "why"),
    [
        (["--grpc-port", "50051", "--grpc-url", "localhost:50051"], "absolute URL"),
        (["--grpc-url", "grpc://localhost:50051"], "grpc_port"),
    ],
    ids=["bare-host-port", "without-grpc-port"],
)
def test_a2a_serve_refuses_an_unusable_grpc_url(
    tmp_path: Path, options: list[str], why: str
) -> None:
    process = _a2a_serve(tmp_path, *options)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 2
    assert why in err and "Traceback" not in err
