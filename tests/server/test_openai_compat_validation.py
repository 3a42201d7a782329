"""/v1/chat/completions validates requests as strictly as OpenAI: 400, OpenAI's error shape.

What each role's message must hold follows the ``openai`` package's request types (user,
system and developer messages need ``content``; an assistant message ``content`` or
``tool_calls``; a tool message ``content`` and ``tool_call_id``), and booleans must be JSON
booleans. Payloads the official client can send go through it; the rest through raw HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from .conftest import TOKEN, Calls, LiveServer, echo

USER = {"role": "user", "content": "hi"}
CALL = {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.fixture(scope="module")
def calls() -> Calls:
    return Calls()


@pytest.fixture(scope="module")
def server(calls: Calls) -> Iterator[LiveServer]:
    with LiveServer(echo(calls), token=TOKEN) as served:
        yield served


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0) as sdk:
        yield sdk


def _refused(
    client: openai.OpenAI, messages: list[Any], extra: dict[str, Any] | None = None
) -> openai.BadRequestError:
    """What the official client raises for ``messages`` (``extra`` sent over the body)."""
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="echo", messages=messages, extra_body=extra)
    return refused.value


def _openai_shaped(body: object) -> dict[str, Any]:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}, error
    assert error["type"] == "invalid_request_error"
    return error


@pytest.mark.parametrize(
    ("messages", "param", "code"),
    [
        ([{"role": "user"}], "messages[0].content", "missing_required_parameter"),
        ([{"role": "user", "content": None}], "messages[0].content", "invalid_type"),
        ([{"role": "system"}, USER], "messages[0].content", "missing_required_parameter"),
        ([{"role": "developer"}, USER], "messages[0].content", "missing_required_parameter"),
        ([{"role": "assistant"}, USER], "messages[0].content", "missing_required_parameter"),
        (
            [{"role": "assistant", "content": None, "tool_calls": [CALL]}, {"role": "tool"}, USER],
            "messages[1].content",
            "missing_required_parameter",
        ),
        (
            [
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "content": "ok"},
                USER,
            ],
            "messages[1].tool_call_id",
            "missing_required_parameter",
        ),
        ([{"role": "user", "content": []}], "messages[0].content", "empty_array"),
        (
            [{"role": "user", "content": [{"type": "text"}]}],
            "messages[0].content[0].text",
            "missing_required_parameter",
        ),
        ([{"role": "robot", "content": "x"}], "messages[0].role", "invalid_value"),
        ([{"content": "x"}], "messages[0].role", "missing_required_parameter"),
    ],
)
def test_a_message_missing_what_its_role_needs_is_a_400_naming_it(
    client: openai.OpenAI, calls: Calls, messages: list[Any], param: str, code: str
) -> None:
    before = len(calls.requests)
    refused = _refused(client, messages)
    assert (refused.status_code, refused.param, refused.code) == (400, param, code)
    error = _openai_shaped(refused.response.json())
    assert param in error["message"]
    assert len(calls.requests) == before  # the agent never ran


@pytest.mark.parametrize("stream", ["yes", "1", 1, 0, "true"])
def test_stream_must_be_a_json_boolean(client: openai.OpenAI, stream: object) -> None:
    refused = _refused(client, [USER], {"stream": stream})
    assert (refused.status_code, refused.param, refused.code) == (400, "stream", "invalid_type")
    assert "expected a boolean" in refused.message


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        (
            {"stream_options": {"include_usage": "yes"}},
            "stream_options.include_usage",
            "invalid_type",
        ),
        ({"n": "1"}, "n", "invalid_type"),
        ({"n": 2}, "n", "integer_above_max_value"),
        ({"messages": []}, "messages", "empty_array"),
        ({"model": 5}, "model", "invalid_type"),
    ],
)
def test_other_fields_are_typed_strictly(
    client: openai.OpenAI, extra: dict[str, Any], param: str, code: str
) -> None:
    refused = _refused(client, [USER], extra)
    assert (refused.status_code, refused.param, refused.code) == (400, param, code)


def test_a_conversation_the_agent_cannot_run_names_the_message_at_fault(
    client: openai.OpenAI,
) -> None:
    last = _refused(client, [{"role": "assistant", "content": "x"}])
    assert (last.param, last.type, last.code) == ("messages[0].role", "invalid_request_error", None)
    assert "the last message must be the user's" in last.message
    stray = _refused(client, [{"role": "tool", "tool_call_id": "nope", "content": "x"}, USER])
    assert stray.param == "messages[0].tool_call_id"
    unanswered = _refused(
        client, [{"role": "assistant", "content": None, "tool_calls": [CALL]}, USER]
    )
    assert unanswered.param == "messages[1]"


def test_raw_bodies_the_client_cannot_send_get_openais_error_shape(server: LiveServer) -> None:
    http = server.client(headers={"Authorization": f"Bearer {TOKEN}"})
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, None),
        ({"content": b"\xff\xfe{", "headers": {"content-type": "application/json"}}, None),
        ({"json": [USER]}, None),
        ({"json": {"model": "echo", "messages": [{"role": "user"}]}}, "messages[0].content"),
        ({"json": {"model": "echo", "messages": [USER], "stream": 1}}, "stream"),
        ({"json": {"model": "echo", "messages": ["hi"]}}, "messages[0]"),
    ]
    for request, param in cases:
        answer = http.post("/v1/chat/completions", **request)
        assert answer.status_code == 400, (request, answer.text)
        error = _openai_shaped(answer.json())
        assert error["param"] == param, (request, error)
        assert error["message"], request


def test_what_openai_accepts_still_runs(client: openai.OpenAI, calls: Calls) -> None:
    for stream in (False, None):
        done = client.chat.completions.create(
            model="echo", messages=[USER], extra_body={"stream": stream}
        )
        assert done.choices[0].message.content == "echo: hi (1 messages)"
    history = [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
        {"role": "assistant", "content": "", "name": "bot"},
        {"role": "user", "content": ""},
        USER,
    ]
    done = client.chat.completions.create(model="echo", messages=history)  # type: ignore[arg-type]
    assert done.choices[0].message.content == "echo: hi (6 messages)"


def test_the_document_says_what_each_role_needs(server: LiveServer) -> None:
    document = server.client(headers={"Authorization": f"Bearer {TOKEN}"}).get("/openapi.json")
    schemas = document.json()["components"]["schemas"]
    assert "content" in schemas["UserMessage"]["required"]
    assert {"content", "tool_call_id"} <= set(schemas["ToolMessage"]["required"])
    operation = document.json()["paths"]["/v1/chat/completions"]["post"]
    shape = operation["responses"]["400"]["content"]["application/json"]["schema"]
    assert shape == {"$ref": "#/components/schemas/OpenAIErrorResponse"}
    assert "422" not in operation["responses"]
