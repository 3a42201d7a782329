"""GET /sessions: the conversations an agent's memory holds, over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from daimon import Message
from daimon.core import InvalidIdError, RunLeasedError
from daimon.memory import TokenWindowMemory
from daimon.memory.sqlite import SQLiteMemory
from daimon.server._errors import describe_failure

from .conftest import TOKEN, Calls, LiveServer, echo

Live = Callable[..., LiveServer]


def test_sessions_are_listed_once_prompted_and_unlisted_once_deleted(live: Live) -> None:
    calls = Calls()
    server = live({"echo": echo(calls), "other": echo(calls, name="other")})
    with server.client() as client:
        assert client.get("/sessions").json() == {
            "agent": "echo",
            "sessions": [],
            "truncated": False,
        }
        for session_id in ("zeta", "alpha", "mid:1", "alpha"):
            client.post("/prompt", json={"input": "hi", "session_id": session_id})
        client.post("/prompt", json={"input": "no session"})  # kept nowhere
        client.post("/prompt", json={"input": "hi", "session_id": "elsewhere", "agent": "other"})

        listed = client.get("/sessions")
        assert listed.status_code == 200
        assert listed.headers["content-type"] == "application/json"
        assert listed.json() == {
            "agent": "echo",
            "sessions": [{"session_id": "alpha"}, {"session_id": "mid:1"}, {"session_id": "zeta"}],
            "truncated": False,
        }
        other = client.get("/sessions", params={"agent": "other"}).json()
        assert other["agent"] == "other"
        assert other["sessions"] == [{"session_id": "elsewhere"}]

        assert client.delete("/sessions/mid:1").status_code == 204
        ids = [s["session_id"] for s in client.get("/sessions").json()["sessions"]]
        assert ids == ["alpha", "zeta"]


def test_limit_cuts_the_sorted_list_and_says_so(live: Live) -> None:
    server = live(echo(Calls()))
    with server.client() as client:
        for n in range(5):
            client.post("/prompt", json={"input": "hi", "session_id": f"s{n}"})
        first = client.get("/sessions", params={"limit": 2}).json()
        assert first["sessions"] == [{"session_id": "s0"}, {"session_id": "s1"}]
        assert first["truncated"] is True
        exact = client.get("/sessions", params={"limit": 5}).json()
        assert len(exact["sessions"]) == 5
        assert exact["truncated"] is False


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"limit": "0"}, "query.limit: Input should be greater than or equal to 1"),
        ({"limit": "1001"}, "query.limit: Input should be less than or equal to 1000"),
        ({"limit": "many"}, "query.limit: Input should be a valid integer"),
        ({"agnet": "echo"}, "query.agnet: Unknown query parameter"),
    ],
)
def test_bad_queries_are_422_saying_what_was_wrong(
    live: Live, params: dict[str, str], says: str
) -> None:
    server = live(echo(Calls()))
    reply = server.client().get("/sessions", params=params)
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["type"] == "invalid_request"
    assert says in reply.json()["error"]["message"]


def test_an_unknown_agent_is_404(live: Live) -> None:
    server = live(echo(Calls()))
    reply = server.client().get("/sessions", params={"agent": "nobody"})
    assert reply.status_code == 404
    assert reply.json()["error"]["type"] == "not_found"
    assert "no agent named 'nobody'; served: echo" in reply.json()["error"]["message"]


def test_the_token_is_required_when_the_server_has_one(live: Live) -> None:
    server = live(echo(Calls()), token=TOKEN)
    client = server.client()
    for headers in ({}, {"authorization": "Bearer wrong"}):
        refused = client.get("/sessions", headers=headers)
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "unauthorized"
    auth = {"authorization": f"Bearer {TOKEN}"}
    client.post("/prompt", json={"input": "hi", "session_id": "s"}, headers=auth)
    listed = client.get("/sessions", headers=auth)
    assert listed.status_code == 200
    assert listed.json()["sessions"] == [{"session_id": "s"}]


def test_sessions_written_by_another_process_are_listed(live: Live, tmp_path: Path) -> None:
    path = tmp_path / "memory.db"

    async def write_elsewhere() -> None:
        async with SQLiteMemory(path) as other:
            await other.add_messages("from-a-worker", [Message.user("hi"), Message.assistant("yo")])

    asyncio.run(write_elsewhere())
    agent = echo(Calls()).replace(memory=SQLiteMemory(path))
    server = live(agent)
    with server.client() as client:
        client.post("/prompt", json={"input": "hi", "session_id": "from-the-api"})
        ids = [s["session_id"] for s in client.get("/sessions").json()["sessions"]]
        assert ids == ["from-a-worker", "from-the-api"]
        messages = client.get("/sessions/from-a-worker").json()["messages"]
        assert [m["content"] for m in messages] == ["hi", "yo"]
    server.call(agent.memory.aclose)  # type: ignore[attr-defined]


class OlderMemory:
    """A memory written before the protocol gained ``list_sessions``."""

    def __init__(self) -> None:
        self.sessions: dict[str, list[Message]] = {}

    async def get_messages(self, session_id: str) -> list[Message]:
        return list(self.sessions.get(session_id, []))

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        self.sessions.setdefault(session_id, []).extend(messages)

    async def clear(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)


def test_a_memory_that_cannot_list_is_501_naming_it(live: Live) -> None:
    agent = echo(Calls()).replace(memory=OlderMemory())
    server = live(agent)
    with server.client() as client:
        assert client.post("/prompt", json={"input": "hi", "session_id": "s"}).status_code == 200
        reply = client.get("/sessions")
        assert reply.status_code == 501
        assert reply.json()["error"] == {
            "type": "not_implemented",
            "message": "OlderMemory cannot list its sessions",
        }


def test_a_window_over_a_memory_that_cannot_list_is_501_too(live: Live) -> None:
    # The usual way to bound an older store: the wrapper has list_sessions, its store does not.
    agent = echo(Calls()).replace(memory=TokenWindowMemory(OlderMemory(), max_tokens=1000))
    server = live(agent)
    with server.client() as client:
        assert client.post("/prompt", json={"input": "hi", "session_id": "s"}).status_code == 200
        reply = client.get("/sessions")
        assert reply.status_code == 501
        assert reply.json()["error"] == {
            "type": "not_implemented",
            "message": "OlderMemory cannot list its sessions",
        }


def test_a_session_id_no_backend_can_store_is_refused_naming_the_field(live: Live) -> None:
    calls = Calls()
    server = live(echo(calls))
    with server.client() as client:
        answer = client.post("/prompt", json={"input": "hi", "session_id": "a\0b"})
        assert answer.status_code == 422, answer.text  # the body's own pattern refuses it
        assert answer.json()["error"]["details"][0]["loc"] == ["body", "session_id"]
        for method in ("GET", "DELETE"):
            refused = client.request(method, "/sessions/a%00b")
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["details"][0]["loc"] == ["path", "session_id"]
        assert client.get("/sessions").json()["sessions"] == []
    assert calls.requests == []


def test_a_run_refused_for_its_id_is_the_callers_mistake() -> None:
    status, kind, message = describe_failure(InvalidIdError("run", "", "it is empty"))
    assert (status, kind, message) == (400, "InvalidIdError", "invalid run id '': it is empty")


def test_a_run_leased_elsewhere_is_a_conflict() -> None:
    refused = RunLeasedError("order-1", owner="worker-a:12", expires_at=1_800_000_000_000)
    status, kind, message = describe_failure(refused)
    assert (status, kind) == (409, "RunLeasedError")
    assert "leased by worker-a:12" in message
