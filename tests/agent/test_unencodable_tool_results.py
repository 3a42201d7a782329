"""A tool result JSON cannot carry is made storable once, the same with or without a checkpoint.

Issue 17, item 2: with a checkpoint, a custom object, a NaN or a lone surrogate in a tool's result
used to fail the run after the tool ran, and every retry of the run id ran the tool again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.checkpoint import FileCheckpoint
from daimon.checkpoint.redis import RedisCheckpoint
from daimon.core import Checkpoint, ToolOutput, codec
from daimon.models import FunctionModel


class Opaque:
    """A tool result JSON knows nothing about: the model reads its ``str()``."""

    def __str__(self) -> str:
        return "<Opaque order 7>"


RESULTS: dict[str, Any] = {
    "custom-object": Opaque(),
    "nan": float("nan"),
    "infinity": float("-inf"),
    "lone-surrogate": "caf\udce9 au lait",  # what os.fsdecode makes of b"caf\xe9"
    "nested": {"order": Opaque(), "total": float("nan"), "note": ["\ud800"]},
}


def run_agent(checkpoint: Checkpoint | None, result: Any) -> tuple[Agent, Counter[str], list[str]]:
    """An agent whose tool returns ``result``; counts its runs and records what the model read."""
    runs: Counter[str] = Counter()
    read: list[str] = []

    @tool
    def fetch() -> Any:
        """Fetch the thing."""
        runs["fetch"] += 1
        return result

    def model(request: ChatRequest) -> ChatResponse:
        tool_texts = [m.text for m in request.messages if m.role is Role.TOOL]
        if not tool_texts:
            return ChatResponse.tool_use(ToolCall(id="c1", name="fetch", arguments={}))
        read.extend(tool_texts)
        return ChatResponse.reply("read: " + tool_texts[0])

    agent = Agent(FunctionModel(model), tools=[fetch], checkpoint=checkpoint)
    return agent, runs, read


async def without_checkpoint(result: Any) -> list[str]:
    """What the model reads of ``result`` when nothing is persisted."""
    agent, runs, read = run_agent(None, result)
    await agent.prompt("go")
    assert runs["fetch"] == 1
    return read


async def check_once_and_same_text(checkpoint: Checkpoint, result: Any) -> None:
    expected = await without_checkpoint(result)
    agent, runs, read = run_agent(checkpoint, result)
    response = await agent.prompt("go", run_id="run-1")
    assert runs["fetch"] == 1
    assert read == expected
    assert response.text == "read: " + expected[0]
    expected[0].encode("utf-8")  # text any store (and any provider) can take
    # The same run id answers from its checkpoint: the tool never runs twice.
    again = await agent.prompt("go", run_id="run-1")
    assert again.text == response.text and runs["fetch"] == 1


@pytest.fixture(params=sorted(RESULTS))
def result(request: pytest.FixtureRequest) -> Any:
    return RESULTS[request.param]


async def test_file_checkpoint_stores_any_tool_result(tmp_path: Path, result: Any) -> None:
    await check_once_and_same_text(FileCheckpoint(tmp_path), result)


@pytest.fixture
async def redis_checkpoint(redis_url: str, redis_prefix: str) -> AsyncIterator[RedisCheckpoint]:
    async with RedisCheckpoint.from_url(redis_url, prefix=redis_prefix) as store:
        yield store


@pytest.mark.service("redis")
async def test_redis_checkpoint_stores_any_tool_result(
    redis_checkpoint: RedisCheckpoint, result: Any
) -> None:
    await check_once_and_same_text(redis_checkpoint, result)


@pytest.mark.parametrize(
    ("result", "text"),
    [
        (Opaque(), json.dumps("<Opaque order 7>")),
        (float("nan"), '"nan"'),
        ({"total": float("inf"), "items": (1, 2)}, '{"total": "inf", "items": [1, 2]}'),
        ("caf\udce9", "caf\ufffd"),
        (["\ud83d"], '["\ufffd"]'),
    ],
    ids=["custom-object", "nan", "infinity-in-a-dict", "lone-surrogate", "surrogate-in-data"],
)
async def test_what_the_model_reads_of_an_unencodable_result(result: Any, text: str) -> None:
    assert await without_checkpoint(result) == [text]


class Level(IntEnum):
    HIGH = 3


class Label(str):
    def __str__(self) -> str:
        return "not the text"


surrogates = st.sampled_from(["\ud800", "\udfff", "a\udce9b", "\ud83d\ude00"])
hostile_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities included
    | st.text(max_size=6)
    | surrogates
    | st.builds(Opaque)
    | st.binary(max_size=4)
    | st.just(Level.HIGH)
    | st.builds(Label, st.text(max_size=4))
)
hostile_keys = st.text(max_size=6) | surrogates | st.integers() | st.none() | st.floats()
hostile_values: st.SearchStrategy[Any] = st.recursive(
    hostile_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(hostile_keys, inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(deadline=None, max_examples=150)
@given(value=hostile_values, text=st.text(max_size=6) | surrogates)
def test_every_tool_output_holds_only_what_any_store_can_take(value: Any, text: str) -> None:
    for output in (ToolOutput.json(value), ToolOutput(content=text, data=value)):
        output.content.encode("utf-8")
        assert codec.loads(codec.dumps(output), ToolOutput) == output  # what a checkpoint does
    output = ToolOutput.json(value)
    assert json.loads(output.content) == output.data  # the model reads exactly the data


def test_a_result_reads_as_json_reads_it() -> None:
    assert ToolOutput.json(Level.HIGH) == ToolOutput(content="3", data=3)
    assert ToolOutput.json(Label("ok")).content == '"ok"'  # a str subclass is its text
    assert ToolOutput.json({1: "a", None: "b", False: "c", 1.5: "d"}).data == {
        "1": "a",
        "null": "b",
        "false": "c",
        "1.5": "d",
    }
    assert ToolOutput.json(b"\x00").data == "b'\\x00'"
    assert type(ToolOutput(content=Label("x")).content) is str


def test_content_must_be_text() -> None:
    with pytest.raises(TypeError, match="content must be a str, got int"):
        ToolOutput(content=5)  # type: ignore[arg-type]


async def test_a_result_that_contains_itself_is_an_error_the_model_reads() -> None:
    looped: list[Any] = []
    looped.append(looped)
    read = await without_checkpoint(looped)
    assert read == [
        "Error: SerializationError: cannot encode the tool result: "
        "it is nested too deeply, or contains itself"
    ]
