"""The versioned JSON codec: every core type round-trips, and bad input never becomes an object."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daimon.core import (
    AgentResponse,
    AgentTask,
    ChatRequest,
    ChatResponse,
    CheckpointState,
    Document,
    Done,
    ImagePart,
    Message,
    Reasoning,
    ResponseFormat,
    Role,
    ScoredDocument,
    SerializationError,
    StopReason,
    StreamEvent,
    TaskResult,
    TaskState,
    TaskStatus,
    TextDelta,
    TextPart,
    ToolCall,
    ToolOutput,
    ToolSpec,
    Usage,
    UsageEvent,
)
from daimon.core.codec import CODEC_VERSION, dumps, from_data, loads, to_data

from . import strategies as s

ROUND_TRIPS: list[tuple[str, st.SearchStrategy[Any], Any]] = [
    ("Message", s.messages, Message),
    ("ToolCall", s.tool_calls, ToolCall),
    ("TextPart", s.text_parts, TextPart),
    ("ImagePart", s.image_parts, ImagePart),
    ("ChatRequest", s.chat_requests, ChatRequest),
    ("ChatResponse", s.chat_responses, ChatResponse),
    ("Usage", s.usages, Usage),
    ("ResponseFormat", s.response_formats, ResponseFormat),
    ("ToolSpec", s.tool_specs, ToolSpec),
    ("ToolOutput", s.tool_outputs, ToolOutput),
    ("Document", s.documents, Document),
    ("ScoredDocument", s.scored_documents, ScoredDocument),
    ("StreamEvent", s.stream_events, StreamEvent),
    ("AgentTask", s.agent_tasks, AgentTask),
    ("TaskResult", s.task_results, TaskResult),
    ("TaskStatus", s.task_statuses, TaskStatus),
    ("CheckpointState", s.checkpoint_states, CheckpointState),
    ("AgentResponse", s.agent_responses, AgentResponse),
]


def _ids(cases: list[tuple[str, Any, Any]]) -> list[str]:
    return [name for name, _, _ in cases]


@pytest.mark.parametrize(("name", "strategy", "cls"), ROUND_TRIPS, ids=_ids(ROUND_TRIPS))
@s.PROPERTY_SETTINGS
@given(data=st.data())
def test_round_trip(name: str, strategy: Any, cls: Any, data: st.DataObject) -> None:
    value = data.draw(strategy, label=name)
    # dumps/loads: the versioned envelope.
    text = dumps(value)
    back = loads(text, cls)
    assert back == value
    assert type(back) is type(value)
    assert dumps(back) == text  # encoding is deterministic
    # to_data/from_data: the bare value, plain JSON types only (no enums, tuples or bytes), so any
    # JSON library can write it.
    plain = to_data(value)
    _assert_plain(plain)
    assert json.loads(json.dumps(plain, allow_nan=False)) == plain
    assert from_data(cls, plain) == value


def _assert_plain(value: Any) -> None:
    if isinstance(value, list):
        for item in value:
            _assert_plain(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str
            _assert_plain(item)
    else:
        assert value is None or type(value) in (str, int, float, bool), type(value)


def test_envelope_and_kind_are_written() -> None:
    text = dumps(Message.user("hi"))
    assert json.loads(text) == {
        "daimon": CODEC_VERSION,
        "data": {
            "role": "user",
            "content": "hi",
            "tool_calls": [],
            "tool_call_id": None,
            "name": None,
            "is_error": False,
            "kind": "message",
        },
    }


def test_an_added_field_is_written_only_when_used_so_older_readers_read_the_record() -> None:
    """A rolling upgrade: a release before reasoning existed reads what this one writes."""

    @dataclass(frozen=True, kw_only=True)
    class OlderUsage:  # Usage as the release before reasoning tokens declared it
        input_tokens: int = 0
        output_tokens: int = 0
        cached_tokens: int = 0
        requests: int = 0
        kind: Literal["usage"] = field(default="usage", init=False, repr=False)

    plain = Usage(input_tokens=3, output_tokens=2, requests=1)
    assert "reasoning_tokens" not in to_data(plain)
    assert loads(dumps(plain), OlderUsage) == OlderUsage(
        input_tokens=3, output_tokens=2, requests=1
    )
    reasoned = Usage(output_tokens=9, reasoning_tokens=4)
    assert to_data(reasoned)["reasoning_tokens"] == 4
    with pytest.raises(SerializationError, match=r"unknown field.*reasoning_tokens"):
        loads(dumps(reasoned), OlderUsage)  # a record that uses it is refused, never misread
    assert loads(dumps(reasoned), Usage) == reasoned
    thought = Message.assistant("hi", reasoning=[Reasoning(provider="openai", text="s")])
    assert to_data(thought)["reasoning"][0]["text"] == "s"
    assert loads(dumps(thought), Message) == thought


def test_image_bytes_travel_as_base64() -> None:
    message = Message.user([TextPart(text="look"), ImagePart(data=b"\x89PNG\x00\xff")])
    data = to_data(message)
    assert data["content"][1]["data"] == "iVBORwD/"
    assert loads(dumps(message), Message) == message


def test_raw_string_arguments_stay_a_string() -> None:
    call = ToolCall(id="c1", name="f", arguments='{"a": 1')  # the model's broken JSON
    back = loads(dumps(call), ToolCall)
    assert back.arguments == '{"a": 1'
    assert loads(dumps(ToolCall(id="c1", name="f", arguments='{"a": 1}')), ToolCall).arguments == (
        '{"a": 1}'
    )


def test_kind_may_be_left_out() -> None:
    assert from_data(TextPart, {"text": "x"}) == TextPart(text="x")


def test_stream_events_decode_through_the_union() -> None:
    for event in (
        TextDelta(text="a"),
        UsageEvent(usage=Usage(input_tokens=1)),
        Done(stop_reason=StopReason.TOOL_USE, model="m"),
    ):
        back = loads(dumps(event), StreamEvent)
        assert back == event
        assert type(back) is type(event)


def test_defaults_fill_missing_optional_fields() -> None:
    status = from_data(TaskStatus, {"state": "completed"})
    assert status == TaskStatus(state=TaskState.COMPLETED)


# ------------------------------------------------------------------------------------ bad input


def _envelope(data: Any) -> str:
    return json.dumps({"daimon": CODEC_VERSION, "data": data})


def _message(**changes: Any) -> dict[str, Any]:
    data = to_data(Message.assistant("hi", [ToolCall(id="c1", name="f", arguments={"x": 1})]))
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "not valid JSON"),
        ("{", "not valid JSON"),
        ("not json", "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
        ('{"daimon": 1, "data": NaN}', "not valid JSON"),
        ('{"daimon": 1, "data": Infinity}', "not valid JSON"),
        ('{"daimon": 1, "data": 1e999}', "not valid JSON"),
        ("[]", "not a daimon payload"),
        ('"text"', "not a daimon payload"),
        ('{"data": {}}', "not a daimon payload"),
        ('{"daimon": 1}', "not a daimon payload"),
        ('{"version": 1, "data": {}}', "not a daimon payload"),
        ('{"daimon": 1, "data": {}, "extra": 1}', "unexpected envelope field"),
        ('{"daimon": 2, "data": {}}', "unsupported payload version 2"),
        ('{"daimon": 0, "data": {}}', "unsupported payload version 0"),
        ('{"daimon": "1", "data": {}}', "unsupported payload version '1'"),
        ('{"daimon": true, "data": {}}', "unsupported payload version True"),
        ('{"daimon": 1.0, "data": {}}', "unsupported payload version 1.0"),
        ('{"daimon": null, "data": {}}', "unsupported payload version None"),
    ],
)
def test_bad_text_or_envelope(text: str | bytes, match: str) -> None:
    with pytest.raises(SerializationError, match=match):
        loads(text, Usage)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (_message(surprise=1), r"at \$: unknown field\(s\) for Message: surprise"),
        ({"content": "x"}, r"at \$: missing field\(s\) for Message: role"),
        (_message(role="robot"), r"at \$\.role: 'robot' is not one of"),
        (_message(role=1), r"at \$\.role: expected one of .*got int"),
        (_message(kind="document"), r"at \$: expected kind 'message', got 'document'"),
        (_message(is_error="no"), r"at \$\.is_error: expected a boolean, got str"),
        (_message(tool_calls={}), r"at \$\.tool_calls: expected a list, got dict"),
        (
            _message(tool_calls=[{"id": "c1", "name": 5}]),
            r"at \$\.tool_calls\[0\]\.name: expected a string, got int",
        ),
        (
            _message(tool_calls=[{"id": "c1", "name": "f", "arguments": 5}]),
            r"at \$\.tool_calls\[0\]\.arguments: expected a string or an object, got int",
        ),
        (
            _message(tool_calls=[{"id": "c1", "name": "f", "arguments": {"a": {"__class__": 1}}}]),
            r"at \$\.tool_calls\[0\]\.arguments\.a: refusing a code-reviving marker '__class__'",
        ),
        (
            _message(content=[{"kind": "text", "text": 1}]),
            r"at \$\.content\[0\]\.text: expected a string, got int",
        ),
        (
            _message(content=[{"kind": "video", "url": "x"}]),
            r"at \$\.content\[0\]: unknown kind 'video'; expected one of audio, cache_point, "
            r"document, image, text",
        ),
        (
            _message(content=[{"text": "no kind"}]),
            r"at \$\.content\[0\]: missing field 'kind'; expected one of audio, cache_point, "
            r"document, image, text",
        ),
        (
            _message(content=[{"kind": "image"}]),
            r"at \$\.content\[0\]: invalid ImagePart: .*exactly one of url or data",
        ),
        (
            _message(content=[{"kind": "image", "data": "not base64!"}]),
            r"at \$\.content\[0\]\.data: invalid base64",
        ),
        (_message(content=5), r"at \$\.content: expected a string or a list, got int"),
        (_message(content=None), r"at \$\.content: expected a string or a list, got null"),
        (_message(tool_call_id=3), r"at \$\.tool_call_id: expected null or a string, got int"),
        ("message", r"at \$: expected a Message object, got str"),
        (None, r"at \$: expected a Message object, got null"),
    ],
)
def test_bad_message_data_says_where(data: Any, match: str) -> None:
    with pytest.raises(SerializationError, match=match):
        from_data(Message, data)
    with pytest.raises(SerializationError, match=match):
        loads(_envelope(data), Message)


@pytest.mark.parametrize(
    ("cls", "data", "match"),
    [
        (Usage, {"input_tokens": 1.5}, r"at \$\.input_tokens: expected an integer, got float"),
        (Usage, {"input_tokens": True}, r"at \$\.input_tokens: expected an integer, got bool"),
        (Usage, {"input_tokens": "1"}, r"at \$\.input_tokens: expected an integer, got str"),
        (
            Usage,
            {"kind": "usage", "total_tokens": 3},
            r"unknown field\(s\) for Usage: total_tokens",
        ),
        (ScoredDocument, {"document": {"content": "x"}, "score": "high"}, r"\$\.score: expected a"),
        (ScoredDocument, {"document": {"content": "x"}, "score": True}, r"\$\.score: expected a"),
        (ScoredDocument, {"document": {"content": "x"}, "score": 10**400}, r"out of range"),
        (ScoredDocument, {"document": {"content": "x"}, "score": float("nan")}, r"finite"),
        (ScoredDocument, {"document": {"content": "x"}}, r"missing field\(s\) for ScoredDocument"),
        (
            ScoredDocument,
            {
                "document": {"content": "x", "metadata": {"a": [{"py/object": "os.system"}]}},
                "score": 1,
            },
            r"at \$\.document\.metadata\.a\[0\]: refusing a code-reviving marker 'py/object'",
        ),
        (Document, {"content": "x", "metadata": {1: "int key"}}, r"keys must be strings"),
        (Document, {"content": "x", "metadata": {"a": float("inf")}}, r"\$\.metadata\.a: .*finite"),
        (Document, {"content": "x", "metadata": {"a": {1, 2}}}, r"not a JSON value: set"),
        (ToolOutput, {"content": "x", "data": {"__reduce__": ["os.system", ["id"]]}}, "__reduce__"),
        (ToolOutput, {"content": "x", "__class__": "os.system"}, r"at \$: refusing .*__class__"),
        (AgentResponse, {"text": "x", "output": [[{"$type": "System.IO"}]]}, r"output\[0\]\[0\]"),
        (
            CheckpointState,
            {"run_id": "r", "custom": {"deep": {"deeper": {"__reduce_ex__": 2}}}},
            r"at \$\.custom\.deep\.deeper: refusing a code-reviving marker '__reduce_ex__'",
        ),
        (
            CheckpointState,
            {"run_id": "r", "completed_tool_results": {"c1": {"content": 1}}},
            r"at \$\.completed_tool_results\.c1\.content: expected a string, got int",
        ),
        (TaskStatus, {"state": "lost"}, r"at \$\.state: 'lost' is not one of"),
        (TaskStatus, {"state": "completed", "result": {"task_id": 1}}, r"\$\.result\.task_id"),
        (
            AgentTask,
            {"task_id": "t", "input": "x", "attempt": "2"},
            r"\$\.attempt: expected an int",
        ),
        (ChatRequest, {"messages": [{"role": "user"}], "tools": [{}]}, r"\$\.tools\[0\]: missing"),
        (ChatResponse, {"message": {"role": "assistant"}, "stop_reason": "bored"}, "stop_reason"),
    ],
)
def test_bad_data_is_refused(cls: Any, data: Any, match: str) -> None:
    with pytest.raises(SerializationError, match=match):
        from_data(cls, data)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (
            {"kind": "bogus"},
            r"at \$: unknown kind 'bogus'; "
            r"expected one of done, error, rate_limit_wait, reasoning, text_delta",
        ),
        ({"text": "no kind"}, r"at \$: missing field 'kind'"),
        ({"kind": 3}, r"at \$: unknown kind 3"),
        ({"kind": ["text_delta"]}, r"at \$: unknown kind \['text_delta'\]"),
        ([{"kind": "text_delta", "text": "x"}], r"at \$: expected an object, got list"),
        ({"kind": "text_delta", "text": 1}, r"at \$\.text: expected a string, got int"),
        ({"kind": "done", "response": {"text": 1}}, r"at \$\.response\.text: expected a string"),
        ({"kind": "tool_call_end", "call": {"id": "c", "name": "n", "arguments": 1}}, "arguments"),
    ],
)
def test_unknown_or_bad_stream_event(data: Any, match: str) -> None:
    with pytest.raises(SerializationError, match=match):
        from_data(StreamEvent, data)
    with pytest.raises(SerializationError, match=match):
        loads(_envelope(data), StreamEvent)


MARKERS = [
    "__class__",
    "py/object",
    "__reduce__",
    "__reduce_ex__",
    "py/reduce",
    "__module__",
    "$type",
    "!!python/object/apply:os.system",
    "py/id",
]


@pytest.mark.parametrize("marker", MARKERS)
@settings(s.PROPERTY_SETTINGS, max_examples=20)
@given(payload=s.json_values, depth=st.integers(min_value=0, max_value=4))
def test_code_reviving_markers_are_refused_at_any_depth(
    marker: str, payload: Any, depth: int
) -> None:
    nested: Any = {marker: "os.system", "args": payload}
    for level in range(depth):
        nested = [nested] if level % 2 else {"k": nested}
    for cls, data in (
        (ToolOutput, {"content": "x", "data": nested}),
        (Document, {"content": "x", "metadata": {"m": nested}}),
        (AgentTask, {"task_id": "t", "input": "i", "metadata": {"m": nested}}),
        (ToolCall, {"id": "c", "name": "n", "arguments": {"a": nested}}),
        (ToolSpec, {"name": "n", "description": "d", "parameters": {"p": nested}}),
        (CheckpointState, {"run_id": "r", "custom": {"c": nested}}),
        (AgentResponse, {"text": "t", "output": nested}),
        (ChatRequest, {"messages": [], "settings": {"s": nested}}),
    ):
        with pytest.raises(SerializationError, match="code-reviving marker"):
            from_data(cls, data)
        with pytest.raises(SerializationError, match="code-reviving marker"):
            loads(_envelope(data), cls)


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    deep: Any = "leaf"
    for _ in range(20_000):
        deep = [deep]
    with pytest.raises(SerializationError, match="nested too deeply"):
        from_data(ToolOutput, {"content": "x", "data": deep})
    with pytest.raises(SerializationError, match="nested too deeply"):
        dumps(ToolOutput(content="x", data=deep))


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (Document(content="x", metadata={"s": {1, 2}}), "cannot encode a value of type set"),
        (Document(content="x", metadata={1: "a"}), "cannot encode a mapping key of type int"),
        (AgentResponse(text="x", output=float("nan")), "cannot encode as JSON"),
        (ScoredDocument(document=Document(content="x"), score=float("inf")), "cannot encode"),
        (object(), "cannot encode a value of type object"),
    ],
)
def test_unencodable_values(value: Any, match: str) -> None:
    with pytest.raises(SerializationError, match=match):
        dumps(value)


@pytest.mark.parametrize("cls", [set[int], tuple[int, str], tuple[int, int, int], complex])
def test_the_codec_refuses_types_it_cannot_decode(cls: Any) -> None:
    with pytest.raises(SerializationError, match="cannot decode"):
        from_data(cls, [1, "a"])


def test_homogeneous_containers() -> None:
    assert from_data(tuple[int, ...], [1, 2]) == (1, 2)
    assert from_data(list[str], ["a"]) == ["a"]
    assert from_data(dict[str, float], {"a": 1}) == {"a": 1.0}


def test_decoding_never_builds_another_class() -> None:
    # A payload for a different class with the same field names is refused by its kind.
    data = to_data(TextDelta(text="hi"))
    with pytest.raises(SerializationError, match="expected kind 'text'"):
        from_data(TextPart, data)
    assert type(from_data(StreamEvent, data)) is TextDelta


def test_literal_and_enum_compare_types() -> None:
    # In Python ``True == 1``; JSON's true must not pass for a number or a string enum.
    with pytest.raises(SerializationError):
        from_data(Role, True)
    with pytest.raises(SerializationError):
        from_data(StopReason, ["end_turn"])
    with pytest.raises(SerializationError):
        from_data(TextPart, {"text": "x", "kind": ["text"]})


def test_encoding_refuses_what_decoding_would_refuse() -> None:
    """The codec is symmetric: nothing it writes is data it will later refuse to read."""
    with pytest.raises(SerializationError, match="UTF-8"):
        dumps(Message.user("lone \ud800 surrogate"))


def test_marker_keys_in_data_are_written_escaped_and_read_back() -> None:
    # Before escaping, these were refused on encode: the memory write failed after the tool ran.
    message = Message.assistant(
        tool_calls=[ToolCall(id="1", name="t", arguments={"__class__": 1, "$type": "Order"})]
    )
    text = dumps(message)
    assert '"~__class__": 1' in text and '"~$type": "Order"' in text
    assert loads(text, Message) == message


def test_records_written_before_media_and_cache_writes_read_back_unchanged() -> None:
    """A message, usage and tool output as daimon wrote them before audio, documents, cache
    points and cache-write tokens existed still read back, the new fields at their defaults."""
    message = (
        '{"daimon":1,"data":{"role":"user","content":[{"text":"hi","kind":"text"},'
        '{"url":null,"data":"aGk=","media_type":"image/png","kind":"image"}],"tool_calls":[],'
        '"tool_call_id":null,"name":null,"is_error":false,"reasoning":[],"kind":"message"}}'
    )
    assert loads(message, Message) == Message.user(
        [TextPart(text="hi"), ImagePart(data=b"hi", media_type="image/png")]
    )
    usage = (
        '{"daimon":1,"data":{"input_tokens":5,"output_tokens":2,"cached_tokens":1,'
        '"requests":1,"reasoning_tokens":0,"kind":"usage"}}'
    )
    assert loads(usage, Usage) == Usage(
        input_tokens=5, output_tokens=2, cached_tokens=1, requests=1
    )
    output = (
        '{"daimon":1,"data":{"content":"ok","data":null,"is_error":false,"kind":"tool_output"}}'
    )
    assert loads(output, ToolOutput) == ToolOutput(content="ok")


def test_new_parts_are_written_with_their_kind() -> None:
    from daimon.core import AudioPart, CachePoint, DocumentPart

    message = Message.user(
        [
            AudioPart(data=b"a", media_type="audio/wav"),
            DocumentPart(data=b"%PDF", name="r.pdf"),
            CachePoint(),
        ]
    )
    data = to_data(message)
    assert [p["kind"] for p in data["content"]] == ["audio", "document", "cache_point"]
    assert data["content"][1] == {
        "data": "JVBERg==",
        "url": None,
        "media_type": "application/pdf",
        "name": "r.pdf",
        "kind": "document",
    }
    assert loads(dumps(message), Message) == message
