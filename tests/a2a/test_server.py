"""The official a2a-sdk client against daimon's A2A server, and the server's defences."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_data_parts, new_data_part
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import InvalidParamsError
from starlette.applications import Starlette

from daimon import Agent, ChatRequest, ChatResponse, ToolCall, tool
from daimon import Role as ChatRole
from daimon.a2a import DaimonAgentExecutor, a2a_app, agent_card, serve_a2a
from daimon.core.errors import BuilderError
from daimon.kit.media import DEFAULT_FILE_TYPES
from daimon.models import FunctionModel
from daimon.multiagent import HandoffNetwork
from daimon.orchestration import WorkflowBuilder, workflow_node

from .conftest import Gate, counting_agent, free_port, serving, streaming_agent

CARD_PATH = "/.well-known/agent-card.json"


def _message(text: str, context_id: str = "", task_id: str = "") -> SendMessageRequest:
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        context_id=context_id,
        task_id=task_id,
    )
    return SendMessageRequest(message=message)


async def _events(client: Any, request: SendMessageRequest) -> list[Any]:
    return [event async for event in client.send_message(request)]


async def _ask(client: Any, text: str, context_id: str = "") -> tuple[str, str]:
    """Send ``text`` (streaming or not); the answer and the context id the task is in."""
    events = await _events(client, _message(text, context_id))
    assert events[0].HasField("task")
    answers = [
        *(e.artifact_update.artifact for e in events if e.HasField("artifact_update")),
        *(a for e in events if e.HasField("task") for a in e.task.artifacts),
    ]
    return answers[-1].parts[0].text, events[0].task.context_id


# A space, too long by one, a leading dash, a path, a non-ASCII letter, a newline.
MALFORMED_CONTEXT_IDS = ["has space", "x" * 253, "-dash", "../etc", "café", "a\nb"]


async def test_the_card_is_at_the_well_known_path() -> None:
    app = streaming_agent("echo")
    async with (
        serving(lambda port: a2a_app(app, port=port)) as base,
        httpx.AsyncClient() as http,
    ):
        card = (await http.get(base + CARD_PATH)).json()
    assert card["name"] == "echo"
    assert card["capabilities"]["streaming"] is True
    offered = [
        (i["url"], i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]
    ]
    assert offered == [
        (f"{base}/", "JSONRPC", "1.0"),
        (f"{base}/", "HTTP+JSON", "1.0"),
        (f"{base}/", "JSONRPC", "0.3"),
        (f"{base}/", "HTTP+JSON", "0.3"),
    ]
    # no token: no extended card (the spec has it require authentication)
    assert card["capabilities"].get("extendedAgentCard", False) is False
    assert card["defaultInputModes"] == ["text/plain", *DEFAULT_FILE_TYPES]


async def test_the_sdk_client_streams_gets_and_completes_tasks() -> None:
    agent = streaming_agent()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=True))
        try:
            events = await _events(client, _message("hi"))
            kinds = [e.WhichOneof("payload") for e in events]
            assert kinds[0] == "task" and kinds[-1] == "status_update"
            chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
            # the text as it streamed, then the whole answer replacing the pieces
            assert [(c.artifact.parts[0].text, c.append) for c in chunks] == [
                ("Hello, ", False),
                ("you said: hi", True),
                ("Hello, you said: hi", False),
            ]
            assert {c.artifact.name for c in chunks} == {"answer"}
            assert len({c.artifact.artifact_id for c in chunks}) == 1
            assert chunks[-1].last_chunk and not chunks[0].last_chunk
            working = [
                e.status_update.status
                for e in events
                if e.HasField("status_update")
                and e.status_update.status.state == TaskState.TASK_STATE_WORKING
            ]
            assert not any(status.HasField("message") for status in working)
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED

            task = await client.get_task(GetTaskRequest(id=events[0].task.id))
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            (answer,) = task.artifacts
            assert [p.text for p in answer.parts] == ["Hello, you said: hi"]
            assert [m.parts[0].text for m in task.history] == ["hi"]  # whole messages only
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


@pytest.mark.parametrize("streaming", [True, False])
async def test_messages_in_one_context_are_one_conversation(streaming: bool) -> None:
    agent = counting_agent()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=streaming))
        try:
            answer, context = await _ask(client, "my name is Ada")  # no contextId: a new one
            assert answer == "1: my name is Ada"
            uuid.UUID(context)  # made by the server and returned on the task
            answer, same = await _ask(client, "what is my name?", context)
            assert (answer, same) == ("2: my name is Ada | what is my name?", context)
            answer, _ = await _ask(client, "and now?", context)
            assert answer == "3: my name is Ada | what is my name? | and now?"
        finally:
            await client.close()
    assert len(await agent.memory.get_messages(f"a2a:{context}")) == 6


async def test_contexts_stay_apart_and_client_chosen_ids_are_kept() -> None:
    agent = counting_agent()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=True))
        try:
            assert await _ask(client, "a1", "ctx-a") == ("1: a1", "ctx-a")
            assert await _ask(client, "b1", "ctx-b") == ("1: b1", "ctx-b")
            assert await _ask(client, "a2", "ctx-a") == ("2: a1 | a2", "ctx-a")
            assert await _ask(client, "b2", "ctx-b") == ("2: b1 | b2", "ctx-b")
            first, one = await _ask(client, "alone")
            second, other = await _ask(client, "alone too")
            assert (first, second) == ("1: alone", "1: alone too")  # each a new conversation
            assert one != other
            longest = "L" * 252
            assert await _ask(client, "edge", longest) == ("1: edge", longest)
        finally:
            await client.close()


async def test_a_context_cannot_reach_a_session_made_elsewhere() -> None:
    agent = counting_agent()
    await agent.prompt("the code is 1234", session_id="shared")  # e.g. over daimon's HTTP API
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            assert await _ask(client, "what was said?", "shared") == ("1: what was said?", "shared")
        finally:
            await client.close()
    assert len(await agent.memory.get_messages("shared")) == 2  # untouched
    texts = [m.text for m in await agent.memory.get_messages("a2a:shared")]
    assert texts == ["what was said?", "1: what was said?"]


@pytest.mark.parametrize("streaming", [True, False])
async def test_a_malformed_context_id_is_refused_before_any_task(streaming: bool) -> None:
    agent = counting_agent()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=streaming))
        try:
            for bad in MALFORMED_CONTEXT_IDS:
                with pytest.raises(InvalidParamsError, match=r"contextId .* is not accepted"):
                    await _events(client, _message("hi", bad))
            listed = await client.list_tasks(ListTasksRequest())
            assert list(listed.tasks) == []  # refused, not run under a new id
            assert await _ask(client, "still here", "ok") == ("1: still here", "ok")
        finally:
            await client.close()
    assert await agent.memory.get_messages("a2a:has space") == []


async def test_a_malformed_context_id_is_a_json_rpc_invalid_params_error() -> None:
    agent = counting_agent()
    async with (
        serving(lambda port: a2a_app(agent, port=port)) as base,
        httpx.AsyncClient() as http,
    ):
        message = {
            "messageId": "m1",
            "role": "ROLE_USER",
            "parts": [{"text": "hi"}],
            "contextId": "x" * 5000,
        }
        body = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": message}}
        answer = await http.post(f"{base}/", json=body, headers={"A2A-Version": "1.0"})
        error = answer.json()["error"]
        assert error["code"] == -32602
        assert "(5000 characters) is not accepted" in error["message"]
        assert len(error["message"]) < 300  # the id is not echoed whole


async def test_a_message_to_an_input_required_task_continues_its_context() -> None:
    agent = counting_agent()
    store = InMemoryTaskStore()
    async with serving(lambda port: a2a_app(agent, port=port, task_store=store)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            assert await _ask(client, "book a table", "dinner") == ("1: book a table", "dinner")
            # A task of that context waiting for the user (as a human-in-the-loop step leaves it)
            waiting = Task(
                id="task-waiting",
                context_id="dinner",
                status=TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED),
            )
            await store.save(waiting, ServerCallContext())
            # The reply names the task only: the context is the task's, not a new one.
            (event,) = await _events(client, _message("for two", task_id="task-waiting"))
            task = event.task
            assert (task.id, task.context_id) == ("task-waiting", "dinner")
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert task.artifacts[0].parts[0].text == "2: book a table | for two"
        finally:
            await client.close()


async def test_the_executor_with_a_handler_of_your_own_rejects_a_malformed_context_id() -> None:
    agent = counting_agent()

    def app(port: int) -> Starlette:
        card = agent_card(agent, url=f"http://127.0.0.1:{port}/")
        handler = DefaultRequestHandler(DaimonAgentExecutor(agent), InMemoryTaskStore(), card)
        routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
        return Starlette(routes=routes)

    async with serving(app) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            (event,) = await _events(client, _message("hi", "has space"))
            status = event.task.status
            assert status.state == TaskState.TASK_STATE_REJECTED
            assert status.message.parts[0].text.startswith("Error: contextId 'has space'")
            assert await _ask(client, "fine", "ok") == ("1: fine", "ok")
        finally:
            await client.close()


# ------------------------------------------------------------------------------ promptables


def _refunder(checkpoint: Any = None) -> Agent:
    """Calls ``refund`` (it needs a person's approval), then answers with its result."""

    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund money."""
        return f"refunded {amount}"

    def model(request: ChatRequest) -> ChatResponse:
        last = request.messages[-1]
        if last.role is ChatRole.TOOL:
            return ChatResponse.reply(f"done: {last.text}")
        return ChatResponse.tool_use(ToolCall(id="r1", name="refund", arguments={"amount": 5}))

    return Agent(FunctionModel(model), name="refunder", tools=[refund], checkpoint=checkpoint)


def _reply(task_id: str, *parts: Part) -> SendMessageRequest:
    message = Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=parts, task_id=task_id
    )
    return SendMessageRequest(message=message)


async def test_a_paused_run_asks_for_input_and_resumes_when_the_user_approves() -> None:
    agent = _refunder()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            (event,) = await _events(client, _message("refund me"))
            task = event.task
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            asked = task.status.message.parts
            assert 'refund({"amount": 5}) [id r1]' in asked[0].text
            assert get_data_parts(asked) == [
                {"approvals": [{"id": "r1", "tool": "refund", "arguments": {"amount": 5.0}}]}
            ]
            assert not task.artifacts  # nothing ran yet

            (event,) = await _events(client, _reply(task.id, Part(text="approve")))
            assert event.task.id == task.id
            assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
            assert event.task.artifacts[-1].parts[0].text == "done: refunded 5"
        finally:
            await client.close()


async def test_a_streamed_paused_run_is_rejected_by_text_or_decided_by_a_data_part() -> None:
    agent = _refunder()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=True))
        try:
            events = await _events(client, _message("refund me"))
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            task_id = events[0].task.id
            events = await _events(client, _reply(task_id, Part(text="no, not today")))
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
            (answer,) = [
                e.artifact_update.artifact for e in events if e.HasField("artifact_update")
            ]
            assert answer.parts[0].text.startswith("done: ")
            assert "no, not today" in answer.parts[0].text  # the model was told why

            events = await _events(client, _message("refund me again"))
            task_id = events[0].task.id
            decided = new_data_part({"approvals": {"r1": True}})
            events = await _events(client, _reply(task_id, decided))
            (answer,) = [
                e.artifact_update.artifact for e in events if e.HasField("artifact_update")
            ]
            assert answer.parts[0].text == "done: refunded 5"
        finally:
            await client.close()


async def test_a_network_and_a_workflow_are_served_and_a_pause_they_cannot_resume_fails() -> None:
    def billing_model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply(f"billing: {request.messages[-1].text[:10]}")

    def triage_model(request: ChatRequest) -> ChatResponse:
        call = ToolCall(id="h1", name="transfer_to_billing", arguments={"reason": "money"})
        return ChatResponse.tool_use(call)

    network = HandoffNetwork(
        {
            "triage": Agent(FunctionModel(triage_model), name="triage"),
            "billing": Agent(FunctionModel(billing_model), name="billing"),
        },
        start="triage",
        name="desk",
    )

    @workflow_node(output="loud")
    def shout(text: str) -> str:
        return text.upper() + "!"

    workflow = WorkflowBuilder("shout", inputs={"text": str}).add(shout).build()
    pausing = HandoffNetwork({"refunder": _refunder()}, start="refunder", name="refunds")
    for served, expected in [(network, "billing: [handoff] "), (workflow, "HEY!")]:
        async with serving(lambda port, served=served: a2a_app(served, port=port)) as base:
            client = await create_client(base, ClientConfig(streaming=True))
            try:
                assert (await _ask(client, "hey"))[0] == expected
            finally:
                await client.close()
    async with serving(lambda port: a2a_app(pausing, port=port)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            (event,) = await _events(client, _message("refund me"))
            status = event.task.status
            assert status.state == TaskState.TASK_STATE_FAILED
            assert status.message.parts[0].text.startswith(
                "Error: the run paused: refund need(s) a person's approval, which agent "
                "'refunder' of a HandoffNetwork cannot ask for"
            )
        finally:
            await client.close()


async def test_a_paused_run_survives_a_restart_with_a_database_task_store_and_a_checkpoint(
    tmp_path: Path,
) -> None:
    from a2a.server.tasks import DatabaseTaskStore
    from sqlalchemy.ext.asyncio import create_async_engine

    from daimon.checkpoint.file import FileCheckpoint

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'tasks.db'}")
    try:
        # the first server: the run pauses, the task waits for the user
        before = _refunder(FileCheckpoint(tmp_path / "runs"))
        store = DatabaseTaskStore(engine)
        async with serving(lambda port: a2a_app(before, port=port, task_store=store)) as base:
            client = await create_client(base, ClientConfig(streaming=False))
            try:
                (event,) = await _events(client, _message("refund me"))
            finally:
                await client.close()
        task_id = event.task.id
        assert event.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        # a new process: new agent object, new executor, the same database and checkpoints
        after = _refunder(FileCheckpoint(tmp_path / "runs"))
        again = DatabaseTaskStore(engine)
        async with serving(lambda port: a2a_app(after, port=port, task_store=again)) as base:
            client = await create_client(base, ClientConfig(streaming=False))
            try:
                (event,) = await _events(client, _reply(task_id, Part(text="approve")))
            finally:
                await client.close()
        assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert event.task.artifacts[-1].parts[0].text == "done: refunded 5"
        asked, answer = (
            [m for m in event.task.history if m.role == Role.ROLE_AGENT],
            [m for m in event.task.history if m.role == Role.ROLE_USER],
        )
        assert [m.parts[0].text for m in answer] == ["refund me", "approve"]
        assert len(asked) == 1 and asked[0].parts[0].text.startswith("Approval needed")
    finally:
        await engine.dispose()


@pytest.mark.parametrize("checkpointed", [True, False])
async def test_paused_runs_kept_are_bounded(tmp_path: Path, checkpointed: bool) -> None:
    from daimon.checkpoint.file import FileCheckpoint

    agent = _refunder(FileCheckpoint(tmp_path) if checkpointed else None)
    async with serving(lambda port: a2a_app(agent, port=port, max_paused=1)) as base:
        client = await create_client(base, ClientConfig(streaming=False))
        try:
            (first,) = await _events(client, _message("refund me"))
            (second,) = await _events(client, _message("refund me too"))  # the first is forgotten
            (event,) = await _events(client, _reply(first.task.id, Part(text="approve")))
            if checkpointed:  # resumed from the agent's checkpoint
                assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
                assert event.task.artifacts[-1].parts[0].text == "done: refunded 5"
            else:  # failed, saying why: nothing runs unapproved, nothing runs twice
                assert event.task.status.state == TaskState.TASK_STATE_FAILED
                assert "is no longer kept" in event.task.status.message.parts[0].text
            (event,) = await _events(client, _reply(second.task.id, Part(text="approve")))
            assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
        finally:
            await client.close()
    with pytest.raises(BuilderError, match="max_paused"):
        a2a_app(agent, max_paused=-1)


@pytest.mark.parametrize(
    "message",
    [
        {"messageId": "m", "role": "ROLE_USER", "parts": []},  # no parts
        {"role": "ROLE_USER", "parts": [{"text": "x"}]},  # no id
        {"messageId": "m", "role": "ROLE_NOPE", "parts": [{"text": "x"}]},  # no such role
        "hello",  # not a message at all
    ],
)
async def test_a_malformed_message_is_invalid_params_and_no_task_is_made(message: Any) -> None:
    agent = counting_agent()
    async with (
        serving(lambda port: a2a_app(agent, port=port)) as base,
        httpx.AsyncClient(headers={"A2A-Version": "1.0"}) as http,
    ):
        body = {"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {"message": message}}
        assert (await http.post(f"{base}/", json=body)).json()["error"]["code"] == -32602
        rest = await http.post(f"{base}/message:send", json={"message": message})
        assert rest.status_code == 400
        assert rest.json()["error"]["status"] == "INVALID_ARGUMENT"
        listed = await http.get(f"{base}/tasks")
        assert listed.json().get("tasks", []) == []


async def test_the_extended_card_lists_the_tools_that_need_approval() -> None:
    from a2a.types import GetExtendedAgentCardRequest

    agent = _refunder()
    async with (
        serving(lambda port: a2a_app(agent, port=port, token="card-secret")) as base,
        httpx.AsyncClient(headers={"authorization": "Bearer card-secret"}) as http,
    ):
        public = (await http.get(base + CARD_PATH)).json()
        client = await create_client(base, ClientConfig(httpx_client=http))
        try:
            extended = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
        finally:
            await client.close()
        anonymous = await http.get(f"{base}/extendedAgentCard", headers={"authorization": ""})
    assert [s["id"] for s in public["skills"]] == ["refunder"]  # the public card leaves it out
    assert [s.id for s in extended.skills] == ["refunder", "tool:refund"]
    assert anonymous.status_code == 401  # behind the gate: only callers with the token
