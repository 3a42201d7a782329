"""Session and run ids are checked before a run starts, the same way on every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daimon import Agent, ChatRequest, ChatResponse
from daimon.checkpoint import FileCheckpoint
from daimon.core import InvalidIdError, Memory
from daimon.memory.redis import RedisMemory
from daimon.memory.sqlite import SQLiteMemory
from daimon.models import FunctionModel

BAD_IDS = ["", "\ud800", "a\0b", "x" * 1025]


@pytest.fixture
async def sqlite_memory(tmp_path: Path) -> AsyncIterator[Memory]:
    async with SQLiteMemory(tmp_path / "chat.db") as memory:
        yield memory


@pytest.fixture
async def redis_memory(redis_url: str, redis_prefix: str) -> AsyncIterator[Memory]:
    async with RedisMemory.from_url(redis_url, prefix=redis_prefix) as memory:
        yield memory


@pytest.fixture(
    params=[
        pytest.param("sqlite_memory", id="sqlite"),
        pytest.param("redis_memory", id="redis", marks=pytest.mark.service("redis")),
    ]
)
def memory(request: pytest.FixtureRequest) -> Memory:
    chosen: Memory = request.getfixturevalue(request.param)
    return chosen


def counting_agent(calls: list[ChatRequest], **options: object) -> Agent:
    def reply(request: ChatRequest) -> ChatResponse:
        calls.append(request)
        return ChatResponse.reply("hi")

    return Agent(FunctionModel(reply), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("session_id", BAD_IDS)
async def test_a_session_id_no_backend_can_store_fails_before_the_model_is_called(
    memory: Memory, session_id: str
) -> None:
    calls: list[ChatRequest] = []
    with pytest.raises(InvalidIdError, match="invalid session id") as raised:
        await counting_agent(calls, memory=memory).prompt("hi", session_id=session_id)
    assert raised.value.value == session_id and raised.value.id_kind == "session"
    assert calls == []
    assert await memory.list_sessions() == []


@pytest.mark.parametrize("run_id", BAD_IDS)
async def test_a_bad_run_id_fails_before_the_model_is_called(tmp_path: Path, run_id: str) -> None:
    calls: list[ChatRequest] = []
    agent = counting_agent(calls, checkpoint=FileCheckpoint(tmp_path / "runs"))
    with pytest.raises(InvalidIdError, match="invalid run id"):
        await agent.prompt("hi", run_id=run_id)
    assert calls == []
    with pytest.raises(InvalidIdError, match="invalid run id"):  # with no checkpoint store too
        await counting_agent(calls).prompt("hi", run_id=run_id)
    assert calls == []
