from __future__ import annotations

from dataclasses import replace

from daimon import (
    Agent,
    ChatRequest,
    ChatResponse,
    Message,
    Middleware,
    RunState,
    ShortCircuit,
    ToolCall,
    ToolOutput,
    tool,
)
from daimon.models import ScriptedModel


@tool
def secret() -> str:
    """Return a secret."""
    return "the real secret"


class Cache(Middleware):
    async def on_request(self, request: ChatRequest, state: RunState) -> ShortCircuit | None:
        if request.messages[-1].text == "cached?":
            return ShortCircuit(ChatResponse.reply("from cache"))
        return None


class Prefix(Middleware):
    async def on_request(self, request: ChatRequest, state: RunState) -> ChatRequest:
        return replace(request, messages=(Message.system("injected"), *request.messages))

    async def on_response(self, response: ChatResponse, state: RunState) -> ChatResponse:
        return ChatResponse.reply("[checked] " + response.text)


class Deny(Middleware):
    async def on_tool_call(self, call: ToolCall, state: RunState) -> ToolOutput:
        return ToolOutput.error(f"{call.name} is not allowed")


async def test_short_circuit_skips_the_model() -> None:
    model = ScriptedModel([])
    response = await Agent(model, middleware=[Cache()]).prompt("cached?")
    assert response.text == "from cache"
    assert model.requests == []


async def test_middleware_rewrites_requests_and_responses_in_order() -> None:
    model = ScriptedModel(["answer"])
    response = await Agent(model, middleware=[Prefix()]).prompt("q")
    assert model.requests[0].messages[0].text == "injected"
    assert response.text == "[checked] answer"


async def test_tool_call_middleware_can_replace_the_tool_result() -> None:
    model = ScriptedModel([ChatResponse.tool_use(ToolCall(id="1", name="secret")), "ok"])
    await Agent(model, tools=[secret], middleware=[Deny()]).prompt("q")
    tool_message = model.requests[1].messages[-1]
    assert tool_message.is_error and tool_message.text == "secret is not allowed"
