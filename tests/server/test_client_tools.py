"""Client tools through every front end, driven by the official clients.

The agent has a server tool (``weather``); the client declares ``get_location``. The model calls
both in one turn: the server runs ``weather``, pauses for ``get_location``, hands the call to the
client, and the client's result continues the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.models import FunctionModel

from .conftest import Calls, LiveServer, sdk
from .test_agui import agui, final_state, run_input
from .test_flows import research

Live = Callable[..., LiveServer]

LOCATION_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_location",
        "description": "The user's location, from the browser.",
        "parameters": {"type": "object", "properties": {"precise": {"type": "boolean"}}},
    },
}


def trip_agent(calls: Calls) -> Agent:
    """Turn one: ``weather`` (server) and ``get_location`` (client); then the results joined."""

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        calls.tool_args.append({"city": city})
        return f"sunny in {city}"

    def model(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        results = [m for m in request.messages if m.role is Role.TOOL]
        if not results:
            return ChatResponse.tool_use(
                ToolCall(id="w1", name="weather", arguments={"city": "Oslo"}),
                ToolCall(id="loc1", name="get_location", arguments={"precise": True}),
                text="Checking.",
            )
        return ChatResponse.reply(" | ".join(m.text for m in results))

    return Agent(FunctionModel(model), name="trip", tools=[weather])


# ------------------------------------------------------------------------ /v1/chat/completions


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_hand_client_calls_back_and_continue(live: Live, stream: bool) -> None:
    calls = Calls()
    client = sdk(live(trip_agent(calls)))
    messages: list[Any] = [{"role": "user", "content": "Weather where I am?"}]
    first: Any
    if stream:
        with client.chat.completions.stream(
            model="trip", messages=messages, tools=[LOCATION_TOOL]
        ) as events:
            for _ in events:
                pass
            first = events.get_final_completion()
    else:
        first = client.chat.completions.create(
            model="trip", messages=messages, tools=[LOCATION_TOOL]
        )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    [call] = choice.message.tool_calls
    assert call.type == "function"
    assert (call.id, call.function.name) == ("loc1", "get_location")
    assert json.loads(call.function.arguments) == {"precise": True}
    assert calls.tool_args == [{"city": "Oslo"}]  # the server's own tool ran already
    assert [s.name for s in calls.requests[0].tools] == ["weather", "get_location"]

    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Bergen"},
    ]
    second = client.chat.completions.create(model="trip", messages=messages, tools=[LOCATION_TOOL])
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "sunny in Oslo | Bergen"
    assert calls.tool_args == [{"city": "Oslo"}]  # not run again

    # the same results again: that run is answered, nothing waits for the call any more
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="trip", messages=messages, tools=[LOCATION_TOOL])
    body = refused.value.body
    assert isinstance(body, dict)
    assert body["code"] == "tool_call_not_found"
    assert body["param"] == "messages[2].tool_call_id"
    assert "'loc1'" in body["message"]


def test_chat_completions_refuse_bad_client_tools(live: Live) -> None:
    client = sdk(live(trip_agent(Calls())))
    user: Any = [{"role": "user", "content": "hi"}]
    clash: Any = {
        "type": "function",
        "function": {"name": "weather", "parameters": {"type": "object"}},
    }
    with pytest.raises(openai.BadRequestError, match="clashes with agent 'trip'"):
        client.chat.completions.create(model="trip", messages=user, tools=[clash])
    with pytest.raises(openai.BadRequestError, match="clashes"):  # before a stream starts
        client.chat.completions.create(model="trip", messages=user, tools=[clash], stream=True)
    malformed: Any = {
        "type": "function",
        "function": {"name": "x", "parameters": {"type": "array"}},
    }
    with pytest.raises(openai.BadRequestError, match="type 'object'"):
        client.chat.completions.create(model="trip", messages=user, tools=[malformed])
    unknown: Any = [
        *user,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "nope", "type": "function", "function": {"name": "x", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "nope", "content": "42"},
    ]
    with pytest.raises(openai.BadRequestError, match="waits for tool call 'nope'"):
        client.chat.completions.create(model="trip", messages=unknown)


# ------------------------------------------------------------------------------- /v1/responses

RESPONSES_TOOL: Any = {
    "type": "function",
    "name": "get_location",
    "description": "The user's location, from the browser.",
    "parameters": {"type": "object", "properties": {"precise": {"type": "boolean"}}},
    "strict": False,
}


@pytest.mark.parametrize("stream", [False, True])
def test_responses_hand_function_calls_back_and_continue(live: Live, stream: bool) -> None:
    calls = Calls()
    client = sdk(live(trip_agent(calls)))
    first: Any
    if stream:
        with client.responses.stream(
            model="trip", input="Weather where I am?", tools=[RESPONSES_TOOL]
        ) as events:
            kinds = [event.type for event in events]
            first = events.get_final_response()
        assert "response.function_call_arguments.done" in kinds
    else:
        first = client.responses.create(
            model="trip", input="Weather where I am?", tools=[RESPONSES_TOOL]
        )
    assert first.status == "completed"
    [text, call] = first.output
    assert text.type == "message" and first.output_text == "Checking."
    assert call.type == "function_call"
    assert (call.call_id, call.name, json.loads(call.arguments)) == (
        "loc1",
        "get_location",
        {"precise": True},
    )
    assert calls.tool_args == [{"city": "Oslo"}]

    with pytest.raises(openai.BadRequestError, match="No tool output found for function call"):
        client.responses.create(model="trip", previous_response_id=first.id, input="go on")
    second = client.responses.create(
        model="trip",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Bergen"}],
        tools=[RESPONSES_TOOL],
    )
    assert second.output_text == "sunny in Oslo | Bergen"
    assert calls.tool_args == [{"city": "Oslo"}]
    # the conversation goes on from the continued response
    third = client.responses.create(model="trip", previous_response_id=second.id, input="thanks")
    assert third.status == "completed"
    history = calls.requests[-1].messages
    assert [m.role for m in history][:2] == [Role.USER, Role.ASSISTANT]

    with pytest.raises(openai.BadRequestError) as refused:  # answered already
        client.responses.create(
            model="trip",
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "loc1", "output": "again"}],
        )
    body = refused.value.body
    assert isinstance(body, dict)
    assert (body["code"], body["param"]) == ("tool_call_not_found", "input[0].call_id")


def test_responses_refuse_bad_client_tools(live: Live) -> None:
    client = sdk(live(trip_agent(Calls())))
    clash: Any = {"type": "function", "name": "weather", "parameters": {"type": "object"}}
    with pytest.raises(openai.BadRequestError, match="clashes with agent 'trip'"):
        client.responses.create(model="trip", input="hi", tools=[clash])
    malformed: Any = {
        "type": "function",
        "name": "x",
        "parameters": {"type": "object", "required": 1},
    }
    with pytest.raises(openai.BadRequestError, match="no valid schema"):
        client.responses.create(model="trip", input="hi", tools=[malformed])
    with pytest.raises(openai.BadRequestError, match="waits for tool call 'nope'"):
        client.responses.create(
            model="trip", input=[{"type": "function_call_output", "call_id": "nope", "output": "1"}]
        )


# ------------------------------------------------------------------------------------ AG-UI

AGUI_TOOL = {
    "name": "get_location",
    "description": "The user's location, from the browser.",
    "parameters": {"type": "object", "properties": {"precise": {"type": "boolean"}}},
}


def test_agui_front_end_tools_end_the_run_and_the_tool_message_continues_it(live: Live) -> None:
    calls = Calls()
    server = live({"trip": trip_agent(calls)})
    first = agui(server, run_input("Weather here?", thread="t-trip", tools=[AGUI_TOOL]))
    starts = {e["toolCallId"]: e["toolCallName"] for e in first if e["type"] == "TOOL_CALL_START"}
    assert starts == {"w1": "weather", "loc1": "get_location"}
    args = "".join(
        e["delta"] for e in first if e["type"] == "TOOL_CALL_ARGS" and e["toolCallId"] == "loc1"
    )
    assert json.loads(args) == {"precise": True}
    assert any(e["type"] == "TOOL_CALL_END" and e["toolCallId"] == "loc1" for e in first)
    results = [e["toolCallId"] for e in first if e["type"] == "TOOL_CALL_RESULT"]
    assert results == ["w1"]  # the server's tool ran; the front end's waits for the client
    assert first[-1]["type"] == "RUN_FINISHED" and first[-1]["outcome"] == {"type": "success"}
    assert final_state(first)["daimon"]["status"] == "paused"
    assert calls.tool_args == [{"city": "Oslo"}]

    messages = [
        {"id": "m1", "role": "user", "content": "Weather here?"},
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "loc1",
                    "type": "function",
                    "function": {"name": "get_location", "arguments": args},
                }
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": "loc1", "content": "Bergen"},
    ]
    body = run_input(None, thread="t-trip", tools=[AGUI_TOOL], messages=messages)
    second = agui(server, body)
    text = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "sunny in Oslo | Bergen"
    replayed = [e["toolCallId"] for e in second if e["type"] == "TOOL_CALL_RESULT"]
    assert replayed == ["loc1"]  # w1's result was sent by the first run, not again
    assert second[-1]["outcome"] == {"type": "success"}
    assert final_state(second)["daimon"]["status"] == "finished"
    assert calls.tool_args == [{"city": "Oslo"}]

    # answered: the thread waits for nothing now
    again = server.client().post("/agui", json=body)
    assert again.status_code == 422 and "no run waiting" in again.json()["error"]["message"]


def test_agui_refuses_a_result_for_a_call_the_run_does_not_wait_for(live: Live) -> None:
    server = live({"trip": trip_agent(Calls())})
    agui(server, run_input("Weather here?", thread="t-bad", tools=[AGUI_TOOL]))
    wrong = [
        {"id": "m1", "role": "user", "content": "Weather here?"},
        {"id": "t1", "role": "tool", "toolCallId": "nope", "content": "Bergen"},
    ]
    body = run_input(None, thread="t-bad", tools=[AGUI_TOOL], messages=wrong)
    reply = server.client().post("/agui", json=body)
    assert reply.status_code == 422
    assert "'nope' is not a call the paused run waits for" in reply.json()["error"]["message"]
    clash = run_input("hi", thread="t-clash", tools=[{**AGUI_TOOL, "name": "weather"}])
    reply = server.client().post("/agui", json=clash)
    assert reply.status_code == 422 and "clashes" in reply.json()["error"]["message"]


def test_a_flow_takes_no_client_tools(live: Live) -> None:
    server = live({"research": research()})
    user: Any = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError, match="not an agent"):
        sdk(server).chat.completions.create(model="research", messages=user, tools=[LOCATION_TOOL])
    with pytest.raises(openai.BadRequestError, match="not an agent"):
        sdk(server).responses.create(model="research", input="hi", tools=[RESPONSES_TOOL])
    reply = server.client().post("/agui/research", json=run_input("hi", tools=[AGUI_TOOL]))
    assert reply.status_code == 422 and "not an agent" in reply.json()["error"]["message"]
