"""The official a2a-sdk client against daimon's A2A server, and the server's defences."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)

from daimon.a2a import a2a_app, agent_card, serve_a2a
from daimon.core.errors import BuilderError

from .conftest import Gate, free_port, serving, streaming_agent

CARD_PATH = "/.well-known/agent-card.json"


def _message(text: str) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=message)


async def _events(client: Any, request: SendMessageRequest) -> list[Any]:
    return [event async for event in client.send_message(request)]


async def test_the_card_is_at_the_well_known_path() -> None:
    app = streaming_agent("echo")
    async with (
        serving(lambda port: a2a_app(app, port=port)) as base,
        httpx.AsyncClient() as http,
    ):
        card = (await http.get(base + CARD_PATH)).json()
    assert card["name"] == "echo"
    assert card["capabilities"]["streaming"] is True
    (interface,) = card["supportedInterfaces"]
    assert interface["url"] == f"{base}/"
    assert interface["protocolBinding"] == "JSONRPC"
    assert interface["protocolVersion"] == "1.0"
    assert card["defaultInputModes"] == ["text/plain"]


async def test_the_sdk_client_streams_gets_and_completes_tasks() -> None:
    agent = streaming_agent()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=True))
        try:
            events = await _events(client, _message("hi"))
            kinds = [e.WhichOneof("payload") for e in events]
            assert kinds[0] == "task" and kinds[-1] == "status_update"
            deltas = [
                e.status_update.status.message.parts[0].text
                for e in events
                if e.HasField("status_update")
                and e.status_update.status.state == TaskState.TASK_STATE_WORKING
                and e.status_update.status.HasField("message")
            ]
            assert deltas == ["Hello, ", "you said: hi"]  # the text, as it streamed
            (answer,) = [
                e.artifact_update.artifact for e in events if e.HasField("artifact_update")
            ]
            assert (answer.name, answer.parts[0].text) == ("answer", "Hello, you said: hi")
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED

            task = await client.get_task(GetTaskRequest(id=events[0].task.id))
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert task.artifacts[0].parts[0].text == "Hello, you said: hi"
        finally:
            await client.close()


async def test_the_sdk_client_without_streaming_gets_the_finished_task() -> None:
    agent = streaming_agent()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            (event,) = await _events(client, _message("blocking"))
            assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
            assert event.task.artifacts[0].parts[0].text == "Hello, you said: blocking"
        finally:
            await client.close()


async def test_a_failing_agent_fails_the_task_and_the_server_keeps_serving() -> None:
    agent = streaming_agent()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            (event,) = await _events(client, _message("fail now"))
            status = event.task.status
            assert status.state == TaskState.TASK_STATE_FAILED
            assert status.message.parts[0].text == "Error: the agent failed (ValueError)"
            (event,) = await _events(client, _message("again"))
            assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
        finally:
            await client.close()


async def test_cancel_task_cancels_the_running_agent(gate: Gate) -> None:
    agent = streaming_agent(gate=gate)
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            request = _message("wait for me")
            request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
            (event,) = await _events(client, request)
            await asyncio.wait_for(gate.entered.wait(), 10)
            cancelled = await client.cancel_task(CancelTaskRequest(id=event.task.id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            await asyncio.wait_for(gate.cancelled.wait(), 10)  # the model call was interrupted
            task = await client.get_task(GetTaskRequest(id=event.task.id))
            assert task.status.state == TaskState.TASK_STATE_CANCELED
        finally:
            await client.close()


async def test_malformed_json_rpc_gets_an_error_and_the_server_keeps_serving() -> None:
    agent = streaming_agent()
    async with (
        serving(lambda port: a2a_app(agent, port=port)) as base,
        httpx.AsyncClient() as http,
    ):
        headers = {"content-type": "application/json", "A2A-Version": "1.0"}
        broken = await http.post(f"{base}/", content=b"{not json", headers=headers)
        assert broken.json()["error"]["code"] == -32700
        unknown = await http.post(
            f"{base}/", json={"jsonrpc": "2.0", "id": 1, "method": "Nope"}, headers=headers
        )
        assert unknown.json()["error"]["code"] == -32601
        assert (await http.get(base + CARD_PATH)).status_code == 200


async def test_the_gate_checks_host_origin_and_token() -> None:
    agent = streaming_agent()
    async with (
        serving(lambda port: a2a_app(agent, port=port, token="a2a-secret")) as base,
        httpx.AsyncClient() as http,
    ):
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
        # the card is public: it tells clients how to authenticate
        card = (await http.get(base + CARD_PATH)).json()
        assert "bearer" in card["securitySchemes"]
        assert (await http.post(f"{base}/", json=body)).status_code == 401
        wrong = {"authorization": "Bearer nope"}
        assert (await http.post(f"{base}/", json=body, headers=wrong)).status_code == 401
        right = {"authorization": "Bearer a2a-secret"}
        assert (await http.post(f"{base}/", json=body, headers=right)).status_code == 200
        rebinding = {**right, "host": "attacker.example"}
        assert (await http.post(f"{base}/", json=body, headers=rebinding)).status_code == 403
        foreign = {**right, "origin": "https://attacker.example"}
        assert (await http.post(f"{base}/", json=body, headers=foreign)).status_code == 403
        assert (await http.get(base + CARD_PATH, headers={"host": "evil"})).status_code == 403


async def test_it_refuses_to_serve_off_loopback_without_a_token() -> None:
    agent = streaming_agent()
    with pytest.raises(BuilderError, match="without authentication"):
        a2a_app(agent, host="0.0.0.0")
    with pytest.raises(BuilderError, match="without authentication"):
        await serve_a2a(agent, host="10.1.2.3", port=free_port())
    with pytest.raises(BuilderError, match="url="):
        a2a_app(agent, host="0.0.0.0", token="t")
    assert a2a_app(agent, host="0.0.0.0", token="t", url="https://agents.example/") is not None
    card = agent_card(agent, url="https://agents.example/", bearer=True)
    assert card.supported_interfaces[0].url == "https://agents.example/"


async def test_serve_a2a_serves_loopback_until_cancelled() -> None:
    port = free_port()
    server = asyncio.create_task(serve_a2a(streaming_agent(), port=port))
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(200):
                try:
                    card = await http.get(f"http://127.0.0.1:{port}{CARD_PATH}")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            else:
                pytest.fail("serve_a2a never answered")
        assert card.json()["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{port}/"
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server
