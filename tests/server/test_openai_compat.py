"""The official openai SDK against /v1: the agent's tools run on the server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest

from daimon import Agent, ChatRequest, ChatResponse, ModelError, Role, ToolCall, Usage, tool
from daimon.core.events import StreamEvent, TextDelta, ToolCallEnd
from daimon.models import FunctionModel

from .conftest import TOKEN, Calls, LiveServer, calculator, echo, obedient, sdk, sse_events
from .test_flows import fragile_dag

Live = Callable[..., LiveServer]


def weather_agent(calls: Calls) -> Agent:
    """Says a sentence, calls ``weather``, then answers with its result (usage on each call)."""

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        calls.tool_args.append({"city": city})
        return f"sunny in {city}"

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        calls.requests.append(request)
        last = request.messages[-1]
        if last.role is Role.TOOL:
            for piece in ("It is ", last.text, "."):
                yield TextDelta(text=piece)
        else:
            yield TextDelta(text="Let me check.")
            yield ToolCallEnd(call=ToolCall(id="w1", name="weather", arguments={"city": "Oslo"}))

    def generate(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        usage = Usage(
            input_tokens=7, output_tokens=3, cached_tokens=1, cache_write_tokens=4, requests=1
        )
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return ChatResponse.reply(f"It is {last.text}.", usage=usage)
        call = ToolCall(id="w1", name="weather", arguments={"city": "Oslo"})
        return ChatResponse.tool_use(call, text="Let me check.", usage=usage)

    model = FunctionModel(generate, stream_function=stream, model_name="fake-weather")
    return Agent(model, name="weather", tools=[weather], system_prompt="You report weather.")


def test_a_completion_runs_the_agents_tool_on_the_server(live: Live) -> None:
    calls = Calls()
    server = live(weather_agent(calls), token=TOKEN)
    completion = sdk(server).chat.completions.create(
        model="weather", messages=[{"role": "user", "content": "Weather in Oslo?"}]
    )
    assert calls.tool_args == [{"city": "Oslo"}]
    assert completion.object == "chat.completion"
    assert completion.model == "weather"
    assert completion.id.startswith("chatcmpl-")
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content == "It is sunny in Oslo."
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 14
    assert completion.usage.completion_tokens == 6
    assert completion.usage.total_tokens == 20
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 2
    assert completion.usage.prompt_tokens_details.cache_write_tokens == 8


def test_a_streamed_completion_sends_chunks_usage_and_done(live: Live) -> None:
    calls = Calls()
    server = live(weather_agent(calls), token=TOKEN)
    stream = sdk(server).chat.completions.create(
        model="weather",
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert calls.tool_args == [{"city": "Oslo"}]
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me check.\n\nIt is sunny in Oslo."
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert all(f is None for f in finishes[:-1])
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None


def test_the_raw_stream_ends_with_done_marker(live: Live) -> None:
    server = live(echo(Calls()))
    body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with server.client() as client, client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        frames = sse_events(list(r.iter_lines()))
    assert frames[-1] == ("", "[DONE]")


def test_the_messages_become_instructions_history_and_prompt(live: Live) -> None:
    calls = Calls()
    agent = echo(calls)
    agent.system_prompt = "You echo."
    server = live(agent, token=TOKEN)
    completion = sdk(server).chat.completions.create(
        model="echo",
        messages=[
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "premier"},
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "second"}]},
        ],
    )
    assert completion.choices[0].message.content == "echo: second (4 messages)"
    seen = calls.requests[-1].messages
    assert [(m.role, m.text) for m in seen] == [
        (Role.SYSTEM, "You echo.\n\nAnswer in French.\n\nBe brief."),
        (Role.USER, "first"),
        (Role.ASSISTANT, "premier"),
        (Role.USER, "second"),
    ]
    # The agent itself is untouched: a plain prompt sees its own instructions only.
    plain = sdk(server).chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "alone"}]
    )
    assert plain.choices[0].message.content == "echo: alone (2 messages)"
    assert [m.text for m in calls.requests[-1].messages] == ["You echo.", "alone"]


def test_models_list_one_model_per_agent(live: Live) -> None:
    calls = Calls()
    server = live({"calc": calculator(calls), "echo": echo(calls)}, token=TOKEN)
    client = sdk(server)
    models = client.models.list()
    assert [m.id for m in models.data] == ["calc", "echo"]
    assert {m.object for m in models.data} == {"model"}
    assert {m.owned_by for m in models.data} == {"daimon"}
    assert client.models.retrieve("echo").id == "echo"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nobody")


def test_sdk_errors_for_bad_requests_and_auth(live: Live) -> None:
    server = live(echo(Calls()), token=TOKEN)
    client = sdk(server)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "x"}])
    assert "no agent named 'nobody'" in missing.value.message
    with pytest.raises(openai.BadRequestError) as last:
        client.chat.completions.create(
            model="echo", messages=[{"role": "assistant", "content": "x"}]
        )
    assert "the last message must be the user's" in last.value.message
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="echo",
            messages=[
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "t",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "user", "content": "x"},
            ],
        )
    with pytest.raises(openai.BadRequestError) as empty:  # as OpenAI answers it: 400, not 422
        client.chat.completions.create(model="echo", messages=[])
    assert (empty.value.param, empty.value.code) == ("messages", "empty_array")
    with pytest.raises(openai.AuthenticationError):
        sdk(server, token="wrong").models.list()


def test_a_failure_mid_stream_raises_in_the_sdk(live: Live) -> None:
    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta(text="partial ")
        raise ModelError("provider fell over")

    server = live(Agent(FunctionModel(stream_function=stream), name="flaky"), token=TOKEN)
    chunks = sdk(server).chat.completions.create(
        model="flaky", messages=[{"role": "user", "content": "x"}], stream=True
    )
    with pytest.raises(openai.APIError, match="provider fell over"):
        for _ in chunks:
            pass


def test_tool_turns_in_the_history_are_kept(live: Live) -> None:
    calls = Calls()
    server = live(echo(calls), token=TOKEN)
    sdk(server).chat.completions.create(
        model="echo",
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "thanks"},
        ],
    )
    seen = calls.requests[-1].messages
    assert [m.role for m in seen] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
    ]
    assert seen[1].tool_calls[0].arguments == {"city": "Oslo"}
    assert seen[2].tool_call_id == "t1"


async def test_the_async_sdk_streams_too(live: Live) -> None:
    calls = Calls()
    server = live(weather_agent(calls), token=TOKEN)
    client = openai.AsyncOpenAI(
        base_url=f"{server.url}/v1",
        api_key=TOKEN,
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(verify=False),
    )
    async with client:
        stream = await client.chat.completions.create(
            model="weather", messages=[{"role": "user", "content": "Oslo?"}], stream=True
        )
        pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(pieces).endswith("It is sunny in Oslo.")
    await asyncio.sleep(0)


def refund_agent(calls: Calls) -> Agent:
    """Asks for a refund, a tool that waits for a person's approval."""

    @tool(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        calls.tool_args.append({"order": order})
        return "refunded"

    def model(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        return ChatResponse.tool_use(ToolCall(id="r1", name="refund", arguments={"order": "A"}))

    return Agent(FunctionModel(model), name="refunds", tools=[refund])


def test_a_run_that_pauses_for_approval_is_a_409_naming_the_tool(live: Live) -> None:
    calls = Calls()
    server = live(refund_agent(calls))
    body = {"model": "refunds", "messages": [{"role": "user", "content": "Refund A"}]}
    with server.client() as client:
        answer = client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 409, answer.text
        error = answer.json()["error"]
        assert error["type"] == "approval_required"
        assert error["message"].startswith("the run paused: refund need(s) a person's approval")
        assert "use POST /prompt" in error["message"]
        with client.stream(
            "POST", "/v1/chat/completions", json={**body, "stream": True}
        ) as streamed:
            frames = sse_events(list(streamed.iter_lines()))
    assert any("approval_required" in data for _, data in frames), frames
    assert calls.tool_args == []  # the call that waits for approval never ran


# ------------------------------------------------------------------------------- tool_choice

WEATHER: Any = {"role": "user", "content": "Weather in Oslo?"}
NAMED_WEATHER: Any = {"type": "function", "function": {"name": "weather"}}


def _answer(client: openai.OpenAI, stream: bool, **options: Any) -> tuple[str, str | None]:
    """The completion's text and finish reason, streamed or not."""
    if not stream:
        choice = client.chat.completions.create(model="weather", messages=[WEATHER], **options)
        return choice.choices[0].message.content or "", choice.choices[0].finish_reason
    chunks = list(
        client.chat.completions.create(model="weather", messages=[WEATHER], stream=True, **options)
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks[-1].choices[0].finish_reason


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("choice", "seen", "answer"),
    [
        ("required", ["required", None], "It is sunny in Oslo."),
        (NAMED_WEATHER, ["weather", None], "It is sunny in Oslo."),
        ("none", ["none"], "No tool called (tool_choice none)."),
        ("auto", ["auto"], "No tool called (tool_choice auto)."),
    ],
    ids=["required", "named", "none", "auto"],
)
def test_tool_choice_reaches_the_model_until_it_calls_a_tool(
    live: Live, stream: bool, choice: Any, seen: list[str | None], answer: str
) -> None:
    calls = Calls()
    server = live(obedient(calls), token=TOKEN)
    text, finish = _answer(sdk(server), stream, tool_choice=choice)
    assert [r.tool_choice for r in calls.requests] == seen  # then the model chooses again
    assert (text.split("\n\n")[-1], finish) == (answer, "stop")


def test_without_tool_choice_the_model_gets_the_providers_default(live: Live) -> None:
    calls = Calls()
    server = live(obedient(calls), token=TOKEN)
    text, _ = _answer(sdk(server), False)
    assert [r.tool_choice for r in calls.requests] == [None]
    assert text == "No tool called (tool_choice None)."


def test_a_tool_choice_naming_a_client_tool_hands_its_call_back(live: Live) -> None:
    calls = Calls()
    server = live(obedient(calls), token=TOKEN)
    locate: Any = {
        "type": "function",
        "function": {"name": "get_location", "parameters": {"type": "object", "properties": {}}},
    }
    completion = sdk(server).chat.completions.create(
        model="weather",
        messages=[WEATHER],
        tools=[locate],
        tool_choice={"type": "function", "function": {"name": "get_location"}},
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    assert [c.function.name for c in choice.message.tool_calls] == ["get_location"]  # type: ignore[union-attr]
    assert [r.tool_choice for r in calls.requests] == ["get_location"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_choice_the_run_cannot_honour_is_a_400_naming_it(live: Live, stream: bool) -> None:
    calls = Calls()
    server = live({"weather": obedient(calls), "pipeline": fragile_dag(fail=False)}, token=TOKEN)
    client = sdk(server)
    unknown: Any = {"type": "function", "function": {"name": "get_stock"}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="weather", messages=[WEATHER], tool_choice=unknown, stream=stream
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"]) == ("tool_choice", "invalid_value")
    assert (
        error["message"] == "tool_choice 'get_stock' names no tool of the run; its tools: weather"
    )
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="pipeline", messages=[WEATHER], tool_choice="required", stream=stream
        )
    assert "is not an agent (a flow or a team): tool_choice can only be 'auto'" in str(caught.value)
    assert calls.requests == []  # nothing ran
    flow = client.chat.completions.create(model="pipeline", messages=[WEATHER], tool_choice="auto")
    assert flow.choices[0].finish_reason == "stop"
