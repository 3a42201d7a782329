"""POST /prompt, sessions, agents, health and readiness, over real HTTP."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import httpx
import pytest

from daimon import Agent, ChatRequest, ChatResponse, ModelError, ToolCall, Usage, tool
from daimon.core import codec
from daimon.core.messages import Message
from daimon.models import FunctionModel
from daimon.server import ServerSettings, create_app

from .conftest import Calls, LiveServer, calculator, echo

Live = Callable[..., LiveServer]


def test_prompt_answers_with_text_usage_cost_iterations_and_ids(live: Live) -> None:
    calls = Calls()

    def model(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        usage = Usage(
            input_tokens=10, output_tokens=4, cached_tokens=2, cache_write_tokens=3, requests=1
        )
        if len(calls.requests) == 1:
            return ChatResponse.tool_use(
                ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}), usage=usage
            )
        return ChatResponse.reply("The answer is 5.", usage=usage)

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        calls.tool_args.append({"a": a, "b": b})
        return a + b

    server = live(Agent(FunctionModel(model), name="calc", tools=[add]))
    reply = server.client().post("/prompt", json={"input": "2 + 3?", "session_id": "s-1"})
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert body["text"] == "The answer is 5."
    assert body["agent"] == "calc"
    assert body["session_id"] == "s-1"
    assert len(body["run_id"]) == 32
    assert body["iterations"] == 2
    assert body["usage"] == {
        "input_tokens": 20,
        "output_tokens": 8,
        "cached_tokens": 4,
        "cache_write_tokens": 6,
        "requests": 2,
        "total_tokens": 28,
    }
    assert body["cost"] == 0.0
    assert body["output"] == body["text"]  # a text agent's output is its text
    assert body["pending_approvals"] == []
    assert calls.tool_args == [{"a": 2, "b": 3}]


def test_a_session_keeps_the_conversation_and_can_be_read_and_forgotten(live: Live) -> None:
    calls = Calls()
    server = live(echo(calls))
    with server.client() as client:
        first = client.post("/prompt", json={"input": "one", "session_id": "chat-1"}).json()
        second = client.post("/prompt", json={"input": "two", "session_id": "chat-1"}).json()
        other = client.post("/prompt", json={"input": "solo"}).json()
        assert first["text"] == "echo: one (1 messages)"
        assert second["text"] == "echo: two (3 messages)"  # the first exchange came back
        assert other["text"] == "echo: solo (1 messages)"
        assert other["session_id"] is None

        session = client.get("/sessions/chat-1").json()
        assert session["session_id"] == "chat-1"
        assert session["agent"] == "echo"
        messages = [codec.from_data(Message, m) for m in session["messages"]]
        assert [m.text for m in messages] == [
            "one",
            "echo: one (1 messages)",
            "two",
            "echo: two (3 messages)",
        ]

        deleted = client.delete("/sessions/chat-1")
        assert deleted.status_code == 204
        assert deleted.content == b""
        assert client.get("/sessions/chat-1").json()["messages"] == []
        again = client.post("/prompt", json={"input": "three", "session_id": "chat-1"}).json()
        assert again["text"] == "echo: three (1 messages)"


def test_several_agents_by_name_with_the_first_as_default(live: Live) -> None:
    calls = Calls()
    server = live({"calc": calculator(calls), "echo": echo(calls)})
    with server.client() as client:
        assert client.post("/prompt", json={"input": "x"}).json()["agent"] == "calc"
        named = client.post("/prompt", json={"input": "x", "agent": "echo"}).json()
        assert named["text"].startswith("echo: x")
        # Sessions are per agent: each agent has its own memory.
        client.post("/prompt", json={"input": "hello", "agent": "echo", "session_id": "s"})
        assert client.get("/sessions/s").json()["messages"] == []
        assert len(client.get("/sessions/s", params={"agent": "echo"}).json()["messages"]) == 2

        missing = client.post("/prompt", json={"input": "x", "agent": "nobody"})
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "not_found"
        assert "calc, echo" in missing.json()["error"]["message"]
        assert client.get("/sessions/s", params={"agent": "nobody"}).status_code == 404

        agents = client.get("/agents").json()
        assert agents == {
            "default": "calc",
            "agents": [
                {"name": "calc", "model": "function", "tools": ["add"]},
                {"name": "echo", "model": "function", "tools": []},
            ],
        }


def test_health_and_readiness(live: Live) -> None:
    calls = Calls()
    server = live({"a": echo(calls), "b": echo(calls)})
    client = server.client()
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/ready").json() == {"status": "ready", "agents": ["a", "b"]}


@pytest.mark.service("redis")
def test_readiness_reports_the_task_broker(live: Live, redis_url: str) -> None:
    up = live(echo(Calls()), broker=redis_url, queue="ready-probe", store=redis_url)
    assert up.client().get("/ready").json() == {"status": "ready", "agents": ["echo"]}
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    down = live(
        echo(Calls()), broker=f"redis://127.0.0.1:{port}/0", queue="ready-probe", store=redis_url
    )
    reply = down.client().get("/ready")
    assert reply.status_code == 503
    assert reply.json()["error"]["type"] == "not_ready"
    assert "the task broker cannot be reached" in reply.json()["error"]["message"]


def test_readiness_is_off_outside_the_lifespan() -> None:
    app = create_app(echo(Calls()), settings=ServerSettings())

    async def probe() -> tuple[int, dict[str, object]]:
        transport = httpx.ASGITransport(app=app)
        base = "http://127.0.0.1:8000"
        async with httpx.AsyncClient(transport=transport, base_url=base, verify=False) as c:
            reply = await c.get("/ready")
        return reply.status_code, reply.json()

    status, body = asyncio.run(probe())  # ASGITransport sends no lifespan events
    assert status == 503
    assert body == {"error": {"type": "not_ready", "message": body["error"]["message"]}}  # type: ignore[index]


@pytest.mark.parametrize(
    ("content", "status", "kind", "says"),
    [
        (b'{"input": "x",', 400, "invalid_json", "not valid JSON"),
        (b'{"inpt": "x"}', 422, "invalid_request", "body.input: Field required"),
        (b'{"input": "x", "extra": 1}', 422, "invalid_request", "body.extra: Extra inputs"),
        (b'{"input": 3}', 422, "invalid_request", "body.input: Input should be a valid string"),
        (b'{"input": ""}', 422, "invalid_request", "body.input: String should have at least"),
        (b'{"input": "x", "session_id": "a/b"}', 422, "invalid_request", "body.session_id"),
        (b"[1, 2]", 422, "invalid_request", "body"),
    ],
)
def test_bad_input_is_a_4xx_that_says_what_was_wrong(
    live: Live, content: bytes, status: int, kind: str, says: str
) -> None:
    server = live(echo(Calls()))
    reply = server.client().post(
        "/prompt", content=content, headers={"content-type": "application/json"}
    )
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["type"] == kind
    assert says in error["message"]


def test_unknown_routes_and_methods_answer_json_errors(live: Live) -> None:
    server = live(echo(Calls()))
    client = server.client()
    missing = client.get("/nowhere")
    assert (missing.status_code, missing.json()["error"]["type"]) == (404, "not_found")
    wrong = client.put("/prompt")
    assert (wrong.status_code, wrong.json()["error"]["type"]) == (405, "method_not_allowed")
    assert client.put("/sessions/s").headers["allow"] == "DELETE, GET"  # every route's methods
    assert client.get("/").status_code == 404  # the web UI's place, empty for now


def test_run_failures_map_to_statuses_and_typed_errors(live: Live) -> None:
    def failing(request: ChatRequest) -> ChatResponse:
        raise ModelError("upstream said no", status_code=503, provider="fake")

    def looping(request: ChatRequest) -> ChatResponse:
        return ChatResponse.tool_use(ToolCall(id="x", name="missing", arguments={}))

    def crashing(request: ChatRequest) -> ChatResponse:
        raise RuntimeError("secret internals")

    server = live(
        {
            "failing": Agent(FunctionModel(failing), name="failing"),
            "looping": Agent(FunctionModel(looping), name="looping", max_iterations=2),
            "crashing": Agent(FunctionModel(crashing), name="crashing"),
        }
    )
    with server.client() as client:
        reply = client.post("/prompt", json={"input": "x", "agent": "failing"})
        assert reply.status_code == 502
        assert reply.json() == {"error": {"type": "ModelError", "message": "upstream said no"}}
        reply = client.post("/prompt", json={"input": "x", "agent": "looping"})
        assert reply.status_code == 500
        assert reply.json()["error"]["type"] == "MaxIterationsError"
        reply = client.post("/prompt", json={"input": "x", "agent": "crashing"})
        assert reply.status_code == 500
        assert reply.json() == {
            "error": {"type": "internal_error", "message": "internal server error"}
        }


def test_a_run_past_the_request_timeout_is_cancelled_with_504(live: Live) -> None:
    events: list[str] = []

    @tool
    async def slow() -> str:
        """Take long."""
        events.append("start")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise
        return "done"

    def model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.tool_use(ToolCall(id="s", name="slow", arguments={}))

    server = live(Agent(FunctionModel(model), tools=[slow]), request_timeout=0.3)
    reply = server.client().post("/prompt", json={"input": "x"})
    assert reply.status_code == 504
    assert reply.json()["error"]["type"] == "TimeoutError"
    assert events == ["start", "cancelled"]


def test_structured_output_is_in_the_answer(live: Live) -> None:
    from dataclasses import dataclass

    @dataclass
    class Answer:
        value: int

    def model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply('{"value": 42}')

    agent = Agent(FunctionModel(model, supports_json_schema=True), name="typed", output_type=Answer)
    server = live(agent)
    body = server.client().post("/prompt", json={"input": "x"}).json()
    assert body["output"] == {"value": 42}
