"""The official openai SDK's Responses client against /v1/responses of a live server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from daimon import Agent, ChatRequest, ChatResponse, ModelError, Role, Usage
from daimon.core.messages import Message
from daimon.models import FunctionModel

from .conftest import TOKEN, Calls, LiveServer, echo, obedient, sdk, sse_events
from .test_openai_compat import refund_agent, weather_agent

Live = Callable[..., LiveServer]


def thinker(calls: Calls, *, delay: float = 0.0, fail: bool = False) -> Agent:
    """Answers ``thought: <prompt> (<n> messages)`` with reasoning and cached tokens."""

    async def generate(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        if delay:
            await asyncio.sleep(delay)
        if fail:
            raise ModelError("the provider is down", provider="test")
        usage = Usage(
            input_tokens=40,
            output_tokens=20,
            cached_tokens=32,
            cache_write_tokens=5,
            reasoning_tokens=12,
            requests=1,
        )
        text = f"thought: {request.messages[-1].text} ({len(request.messages)} messages)"
        return ChatResponse.reply(text, usage=usage)

    return Agent(FunctionModel(generate, model_name="thinker"), name="thinker")


# ------------------------------------------------------------------------------ create


def test_a_response_runs_the_agents_tools_on_the_server(live: Live) -> None:
    calls = Calls()
    server = live(weather_agent(calls), token=TOKEN)
    response = sdk(server).responses.create(model="weather", input="Weather in Oslo?")
    assert calls.tool_args == [{"city": "Oslo"}]
    assert response.status == "completed"
    assert response.object == "response"
    assert response.model == "weather"
    assert [item.type for item in response.output] == ["message", "message"]
    texts = [item.content[0].text for item in response.output]  # type: ignore[union-attr]
    assert texts == ["Let me check.", "It is sunny in Oslo."]
    assert response.output_text == "Let me check.It is sunny in Oslo."
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (14, 6)
    assert response.usage.input_tokens_details.cached_tokens == 2
    assert response.id.startswith("resp_")


def test_usage_counts_reasoning_and_cached_tokens(live: Live) -> None:
    server = live(thinker(Calls()), token=TOKEN)
    response = sdk(server).responses.create(model="thinker", input="hi")
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 12
    assert response.usage.input_tokens_details.cached_tokens == 32
    assert response.usage.input_tokens_details.cache_write_tokens == 5
    assert response.usage.total_tokens == 60


def test_input_items_are_the_conversation(live: Live) -> None:
    calls = Calls()
    server = live(echo(calls), token=TOKEN)
    response = sdk(server).responses.create(
        model="echo",
        instructions="Answer in French.",
        input=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "input_text", "text": "What is 2+2?"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Let me add."}],
            },
            {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a":2}'},
            {"type": "function_call_output", "call_id": "c1", "output": "4"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "assistant", "content": "4."},
            {"role": "user", "content": "And 3+3?"},
        ],
    )
    sent = calls.requests[0].messages
    assert sent[0] == Message.system("Answer in French.\n\nBe brief.")
    assert [m.role for m in sent[1:]] == [
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
    ]
    assert sent[2].text == "Let me add."
    assert [c.id for c in sent[2].tool_calls] == ["c1"]
    assert response.output_text == "echo: And 3+3? (6 messages)"


def test_previous_response_id_continues_the_conversation(live: Live) -> None:
    calls = Calls()
    server = live(thinker(calls), token=TOKEN)
    client = sdk(server)
    first = client.responses.create(model="thinker", input="one", instructions="Be kind.")
    second = client.responses.create(model="thinker", input="two", previous_response_id=first.id)
    third = client.responses.create(model="thinker", input="three", previous_response_id=second.id)
    assert third.output_text == "thought: three (5 messages)"
    assert [m.text for m in calls.requests[2].messages] == [
        "one",
        first.output_text,
        "two",
        second.output_text,
        "three",
    ]
    assert calls.requests[0].messages[0].role is Role.SYSTEM
    assert third.previous_response_id == second.id
    again = client.responses.retrieve(first.id)
    assert again.output_text == first.output_text
    assert again.status == "completed"


def test_unknown_previous_response_id_is_a_400_naming_the_param(live: Live) -> None:
    server = live(thinker(Calls()), token=TOKEN)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(server).responses.create(model="thinker", input="x", previous_response_id="resp_nope")
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "previous_response_id"
    assert error["code"] == "previous_response_not_found"
    assert "resp_nope" in error["message"]


def test_unstored_responses_are_not_kept(live: Live) -> None:
    server = live(thinker(Calls()), token=TOKEN)
    client = sdk(server)
    response = client.responses.create(model="thinker", input="x", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="thinker", input="y", previous_response_id=response.id)


def test_delete_forgets_a_response(live: Live) -> None:
    server = live(thinker(Calls()), token=TOKEN)
    client = sdk(server)
    response = client.responses.create(model="thinker", input="x")
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(response.id)


def test_unknown_model_is_404(live: Live) -> None:
    server = live(thinker(Calls()), token=TOKEN)
    with pytest.raises(openai.NotFoundError, match="no agent named"):
        sdk(server).responses.create(model="nobody", input="x")


def test_a_failed_run_is_an_error_status(live: Live) -> None:
    server = live(thinker(Calls(), fail=True), token=TOKEN)
    with pytest.raises(openai.APIStatusError, match="the provider is down") as caught:
        sdk(server).responses.create(model="thinker", input="x")
    assert caught.value.status_code == 502


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"input": []}, "input", "empty_array"),
        ({"input": [{"role": "user"}]}, "input[0].content", "missing_required_parameter"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "invalid_value"),
        ({"input": [{"type": "telepathy"}]}, "input[0]", "invalid_value"),
        ({"input": "x", "stream": "yes"}, "stream", "invalid_type"),
        ({"input": [{"role": "assistant", "content": "x"}]}, "input[0]", None),
        (
            {
                "input": [
                    {"type": "function_call_output", "call_id": "c9", "output": "4"},
                    {"role": "user", "content": "x"},
                ]
            },
            "input[0].call_id",
            None,
        ),
        (
            {
                "input": [
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"role": "user", "content": "x"},
                ]
            },
            "input[0]",
            None,
        ),
        (
            {"input": "x", "tools": [{"type": "web_search"}]},
            "tools[0].type",
            "unsupported_value",
        ),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "a", "schema": {}}}},
            "text.format.type",
            "unsupported_value",
        ),
        ({"input": "x", "background": True, "store": False}, "store", None),
        ({"input": "x", "background": True, "stream": True}, "stream", None),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].image_url",
            "missing_required_parameter",
        ),
    ],
)
def test_bad_requests_are_400_naming_the_param(
    live: Live, body: dict[str, Any], param: str, code: str | None
) -> None:
    server = live(thinker(Calls()), token=TOKEN)
    answer = server.client(headers={"authorization": f"Bearer {TOKEN}"}).post(
        "/v1/responses", json={"model": "thinker", **body}
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["code"] == code
    assert error["message"]


# ------------------------------------------------------------------------------ streaming


def test_stream_events_follow_the_documented_sequence(live: Live) -> None:
    calls = Calls()
    server = live(weather_agent(calls), token=TOKEN)
    events = list(sdk(server).responses.create(model="weather", input="Oslo?", stream=True))
    kinds = [e.type for e in events]
    message = [
        "response.output_item.added",
        "response.content_part.added",
    ]
    closing = [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    first_deltas = ["response.output_text.delta"]
    second_deltas = ["response.output_text.delta"] * 3
    assert kinds == [
        "response.created",
        "response.in_progress",
        *message,
        *first_deltas,
        *closing,
        *message,
        *second_deltas,
        *closing,
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1]
    assert done.type == "response.completed"
    assert done.response.output_text == "Let me check.It is sunny in Oslo."
    assert done.response.usage is not None
    assert calls.tool_args == [{"city": "Oslo"}]
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [e.output_index for e in added] == [0, 1]


def test_the_sdks_stream_helper_assembles_the_answer(live: Live) -> None:
    server = live(weather_agent(Calls()), token=TOKEN)
    with sdk(server).responses.stream(model="weather", input="Oslo?") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Let me check.It is sunny in Oslo."
    assert final.output_text == "Let me check.It is sunny in Oslo."
    assert final.status == "completed"


def test_a_streamed_response_is_kept_for_follow_ups(live: Live) -> None:
    calls = Calls()
    server = live(thinker(calls), token=TOKEN)
    client = sdk(server)
    events = list(client.responses.create(model="thinker", input="one", stream=True))
    first = events[-1].response
    second = client.responses.create(model="thinker", input="two", previous_response_id=first.id)
    assert second.output_text == "thought: two (3 messages)"
    assert client.responses.retrieve(first.id).output_text == first.output_text


def test_a_failed_stream_ends_with_response_failed(live: Live) -> None:
    server = live(thinker(Calls(), fail=True), token=TOKEN)
    events = list(sdk(server).responses.create(model="thinker", input="x", stream=True))
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    failed = events[-1].response
    assert failed.status == "failed"
    assert failed.error is not None
    assert "the provider is down" in failed.error.message


def test_stream_frames_name_their_event(live: Live) -> None:
    server = live(thinker(Calls()), token=TOKEN)
    client = server.client(headers={"authorization": f"Bearer {TOKEN}"})
    with client.stream(
        "POST", "/v1/responses", json={"model": "thinker", "input": "x", "stream": True}
    ) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        frames = sse_events(list(answer.iter_lines()))
    assert frames[0][0] == "response.created"
    assert frames[-1][0] == "response.completed"


# ------------------------------------------------------------------------------ background


def _poll(client: openai.OpenAI, response_id: str, seconds: float = 5.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        response = client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress") or time.monotonic() > deadline:
            return response
        time.sleep(0.02)


def _tasks(server: LiveServer) -> list[str]:
    """What the tasks on the server's loop run (their coroutines' names)."""

    async def names() -> list[str]:
        return [task.get_coro().__qualname__ for task in asyncio.all_tasks()]  # type: ignore[union-attr]

    return server.call(names)


def test_a_background_response_is_polled_to_completion(live: Live) -> None:
    calls = Calls()
    server = live(thinker(calls, delay=0.2), token=TOKEN)
    client = sdk(server)
    started = client.responses.create(model="thinker", input="slow", background=True)
    assert started.status == "queued"
    assert started.background is True
    finished = _poll(client, started.id)
    assert finished.status == "completed"
    assert finished.output_text == "thought: slow (1 messages)"
    follow = client.responses.create(model="thinker", input="more", previous_response_id=started.id)
    assert follow.output_text == "thought: more (3 messages)"


def test_a_background_response_is_cancelled(live: Live) -> None:
    calls = Calls()
    server = live(thinker(calls, delay=30), token=TOKEN)
    client = sdk(server)
    started = client.responses.create(model="thinker", input="slow", background=True)
    deadline = time.monotonic() + 5
    while not calls.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    cancelled = client.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(started.id).status == "cancelled"
    assert client.responses.cancel(started.id).status == "cancelled"  # idempotent
    with pytest.raises(openai.BadRequestError):  # cannot continue what never finished
        client.responses.create(model="thinker", input="x", previous_response_id=started.id)
    deadline = time.monotonic() + 2
    while "RunLogs._produce" in _tasks(server) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "RunLogs._produce" not in _tasks(server)  # no run left behind


def test_a_failed_background_response_says_why(live: Live) -> None:
    server = live(thinker(Calls(), fail=True), token=TOKEN)
    client = sdk(server)
    started = client.responses.create(model="thinker", input="x", background=True)
    finished = _poll(client, started.id)
    assert finished.status == "failed"
    assert finished.error is not None
    assert finished.error.code == "ModelError"


def test_only_background_responses_cancel(live: Live) -> None:
    server = live(thinker(Calls()), token=TOKEN)
    client = sdk(server)
    response = client.responses.create(model="thinker", input="x")
    with pytest.raises(openai.BadRequestError, match="Only background"):
        client.responses.cancel(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nope")


# ------------------------------------------------------------------------------ the store


async def test_the_route_over_an_asgi_transport() -> None:
    from daimon.server import create_app

    app = create_app(thinker(Calls()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        client = openai.AsyncOpenAI(
            base_url="http://127.0.0.1:8000/v1", api_key="x", http_client=http, max_retries=0
        )
        response = await client.responses.create(model="thinker", input="hi")
    assert response.output_text == "thought: hi (1 messages)"


# ------------------------------------------------------------------------------ approvals


def test_a_run_that_pauses_for_approval_is_refused_every_way(live: Live) -> None:
    calls = Calls()
    server = live(refund_agent(calls), token=TOKEN)
    client = sdk(server)
    with pytest.raises(openai.ConflictError, match="refund need"):
        client.responses.create(model="refunds", input="Refund A")
    events = list(client.responses.create(model="refunds", input="Refund A", stream=True))
    assert events[-1].type == "response.failed"
    assert events[-1].response.error is not None
    assert events[-1].response.error.code == "approval_required"
    started = client.responses.create(model="refunds", input="Refund A", background=True)
    finished = _poll(client, started.id)
    assert finished.status == "failed"
    assert finished.error is not None
    assert finished.error.code == "approval_required"
    assert calls.tool_args == []  # the call that waits for approval never ran


# ------------------------------------------------------------------------------ tool_choice


def _respond(client: openai.OpenAI, mode: str, **options: Any) -> list[Any]:
    """The response objects a request gives: the one answer, or each a stream reports."""
    if mode == "whole":
        return [client.responses.create(model="weather", input="Oslo?", **options)]
    if mode == "background":
        started = client.responses.create(
            model="weather", input="Oslo?", background=True, **options
        )
        return [started, _poll(client, started.id)]
    events = client.responses.create(model="weather", input="Oslo?", stream=True, **options)
    return [e.response for e in events if hasattr(e, "response")]


def _reported(response: Any) -> Any:
    """A response's ``tool_choice`` as JSON (the SDK reads a named one into a model)."""
    choice = response.tool_choice
    return choice if isinstance(choice, str) else choice.model_dump()


@pytest.mark.parametrize("mode", ["whole", "streamed", "background"])
@pytest.mark.parametrize(
    ("choice", "seen", "answer"),
    [
        ("required", ["required", None], "It is sunny in Oslo."),
        ({"type": "function", "name": "weather"}, ["weather", None], "It is sunny in Oslo."),
        ("none", ["none"], "No tool called (tool_choice none)."),
    ],
    ids=["required", "named", "none"],
)
def test_tool_choice_is_the_runs_and_the_response_reports_it(
    live: Live, mode: str, choice: Any, seen: list[str | None], answer: str
) -> None:
    calls = Calls()
    server = live(obedient(calls), token=TOKEN)
    responses = _respond(sdk(server), mode, tool_choice=choice)
    assert [_reported(r) for r in responses] == [choice] * len(responses)
    assert [r.tool_choice for r in calls.requests] == seen
    assert responses[-1].status == "completed"
    assert responses[-1].output_text == answer


def test_without_tool_choice_a_response_reports_the_agents(live: Live) -> None:
    calls = Calls()
    server = live(
        {"weather": obedient(calls), "eager": obedient(calls).replace(tool_choice="required")}
    )
    client = sdk(server)
    assert client.responses.create(model="weather", input="Oslo?").tool_choice == "auto"
    eager = client.responses.create(model="eager", input="Oslo?")
    assert eager.tool_choice == "required"
    assert eager.output_text == "It is sunny in Oslo."
    assert [r.tool_choice for r in calls.requests] == [None, "required", None]


def test_a_tool_choice_the_run_cannot_honour_is_a_400_naming_it(live: Live) -> None:
    calls = Calls()
    server = live(obedient(calls), token=TOKEN)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(server).responses.create(
            model="weather", input="Oslo?", tool_choice={"type": "function", "name": "get_stock"}
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"]) == ("tool_choice", "invalid_value")
    assert (
        error["message"] == "tool_choice 'get_stock' names no tool of the run; its tools: weather"
    )
    assert calls.requests == []


# ------------------------------------------------------------------------------ both ways


async def test_daimons_provider_talks_to_daimons_server(live: Live) -> None:
    """The Responses provider, streamed and not, against this server's Responses route."""
    from daimon.core.events import Done, TextDelta
    from daimon.models import OpenAIResponsesModel

    server = live(weather_agent(Calls()), token=TOKEN)
    model = OpenAIResponsesModel("weather", api_key=TOKEN, base_url=f"{server.url}/v1")
    asker = Agent(model)
    answer = await asker.prompt("Oslo?")
    assert answer.text == "Let me check.It is sunny in Oslo."
    assert answer.usage.input_tokens == 14
    events = [e async for e in asker.prompt_stream("Oslo?")]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == answer.text
    assert isinstance(events[-1], Done)
    await model.aclose()
