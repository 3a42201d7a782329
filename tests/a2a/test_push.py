"""Push notifications: webhooks set with the SDK's client, delivered with a token and retries."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import InvalidParamsError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daimon.a2a import a2a_app
from daimon.a2a._push import RetryingTransport
from daimon.testing.servers import serving as serving_app

from .conftest import free_port, serving, streaming_agent

WEBHOOK_TOKEN = "receiver-checks-this"


class Receiver:
    """A webhook: refuses a wrong token (401), fails its first ``flaky`` deliveries (503)."""

    def __init__(self, flaky: int = 0) -> None:
        self.flaky = flaky
        self.attempts = 0
        self.received: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.completed = asyncio.Event()

    async def hook(self, request: Request) -> Response:
        self.attempts += 1
        if request.headers.get("x-a2a-notification-token") != WEBHOOK_TOKEN:
            return Response("wrong token", status_code=401)
        if self.attempts <= self.flaky:
            return Response("try later", status_code=503)
        body = await request.json()
        self.received.append(body)
        self.authorizations.append(request.headers.get("authorization"))
        state = body.get("statusUpdate", body.get("task", {})).get("status", {}).get("state")
        if state == "TASK_STATE_COMPLETED":
            self.completed.set()
        return JSONResponse({"ok": True})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hook", self.hook, methods=["POST"])])


def _message(text: str) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=message)


async def test_a_task_update_reaches_the_webhook_with_its_token_after_retries() -> None:
    receiver = Receiver(flaky=2)  # two 503s, then it takes them
    agent = streaming_agent()
    async with (
        serving_app(receiver.app()) as hook_base,
        serving(lambda port: a2a_app(agent, port=port)) as base,
    ):
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            request = _message("notify me")
            config = TaskPushNotificationConfig(
                url=f"{hook_base}/hook",
                token=WEBHOOK_TOKEN,
                authentication=AuthenticationInfo(scheme="Bearer", credentials="hook-key"),
            )
            request.configuration.CopyFrom(
                SendMessageConfiguration(task_push_notification_config=config)
            )
            (event,) = [e async for e in client.send_message(request)]
            await asyncio.wait_for(receiver.completed.wait(), 30)
        finally:
            await client.close()
    assert receiver.attempts >= 3  # the two refused deliveries were sent again
    assert all(body for body in receiver.received)
    assert set(receiver.authorizations) == {"Bearer hook-key"}
    kinds = [next(iter(body)) for body in receiver.received]  # a StreamResponse each
    assert set(kinds) <= {"task", "statusUpdate", "artifactUpdate"}
    assert "artifactUpdate" in kinds and kinds[-1] == "statusUpdate"
    payloads = [body[kind] for body, kind in zip(receiver.received, kinds, strict=True)]
    assert {p.get("taskId") or p.get("id") for p in payloads} == {event.task.id}


async def test_push_configs_are_set_listed_read_and_deleted() -> None:
    agent = streaming_agent()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            (event,) = [e async for e in client.send_message(_message("hi"))]
            task_id = event.task.id
            made = await client.create_task_push_notification_config(
                TaskPushNotificationConfig(
                    task_id=task_id, id="hook-1", url="https://example.org/hook", token="t"
                )
            )
            assert (made.id, made.url) == ("hook-1", "https://example.org/hook")
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            assert [c.id for c in listed.configs] == ["hook-1"]
            got = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook-1")
            )
            assert got.token == "t"
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook-1")
            )
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            assert list(listed.configs) == []
        finally:
            await client.close()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://10.0.0.7/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "file:///etc/passwd",
    ],
)
async def test_an_exposed_server_refuses_webhooks_on_non_public_addresses(url: str) -> None:
    agent = streaming_agent()

    def exposed(port: int) -> Any:
        return a2a_app(agent, host="0.0.0.0", port=port, token="s", url=f"http://127.0.0.1:{port}/")

    async with (
        serving(exposed) as base,
        httpx.AsyncClient(headers={"authorization": "Bearer s"}) as http,
    ):
        client = await create_client(base, ClientConfig(streaming=False, httpx_client=http))
        try:
            (event,) = [e async for e in client.send_message(_message("hi"))]
            config = TaskPushNotificationConfig(task_id=event.task.id, url=url)
            with pytest.raises(InvalidParamsError, match="refused: this server is reachable"):
                await client.create_task_push_notification_config(config)
        finally:
            await client.close()


async def test_a_loopback_server_accepts_a_loopback_webhook() -> None:
    agent = streaming_agent()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            (event,) = [e async for e in client.send_message(_message("hi"))]
            config = TaskPushNotificationConfig(
                task_id=event.task.id, url="http://127.0.0.1:9/hook"
            )
            made = await client.create_task_push_notification_config(config)
            assert made.url == "http://127.0.0.1:9/hook"
        finally:
            await client.close()


async def test_the_retrying_transport_gives_up_after_its_retries() -> None:
    receiver = Receiver(flaky=100)  # always 503
    async with serving_app(receiver.app()) as hook_base:
        transport = RetryingTransport(retries=2, backoff=0.01)
        async with httpx.AsyncClient(transport=transport) as http:
            answer = await http.post(
                f"{hook_base}/hook", json={}, headers={"x-a2a-notification-token": WEBHOOK_TOKEN}
            )
            assert answer.status_code == 503
            assert receiver.attempts == 3
            wrong = await http.post(f"{hook_base}/hook", json={})
            assert wrong.status_code == 401  # final: not retried
            assert receiver.attempts == 4
    closed = free_port()  # nothing listens there
    transport = RetryingTransport(retries=1, backoff=0.01)
    async with httpx.AsyncClient(transport=transport) as http:
        with pytest.raises(httpx.ConnectError):
            await http.post(f"http://127.0.0.1:{closed}/hook", json={})
