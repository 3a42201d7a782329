"""Messages, content parts and tool calls."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given

from daimon.core import (
    AudioPart,
    CachePoint,
    DocumentPart,
    ImagePart,
    Message,
    Role,
    TextPart,
    ToolCall,
)
from daimon.core.messages import media_from_file

from . import strategies as s


def test_constructors_set_the_role() -> None:
    assert Message.system("be brief") == Message(role=Role.SYSTEM, content="be brief")
    assert Message.user("hi").role is Role.USER
    call = ToolCall(id="c1", name="add", arguments={"a": 1})
    assistant = Message.assistant("thinking", [call])
    assert assistant.role is Role.ASSISTANT
    assert assistant.tool_calls == (call,)
    tool = Message.tool("c1", "3", name="add", is_error=True)
    assert (tool.role, tool.tool_call_id, tool.name, tool.is_error) == (
        Role.TOOL,
        "c1",
        "add",
        True,
    )


def test_user_parts_become_a_tuple_and_text_skips_images() -> None:
    message = Message.user(
        [TextPart(text="look "), ImagePart(url="https://x/y.png"), TextPart(text="here")]
    )
    assert isinstance(message.content, tuple)
    assert message.text == "look here"
    assert Message.user("plain").text == "plain"


def test_messages_are_frozen_and_keyword_only() -> None:
    message = Message.user("hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.content = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Message(Role.USER, "hi")  # type: ignore[misc]
    assert not hasattr(message, "__dict__")  # slotted


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"url": "https://x", "data": b"x"}],
    ids=["neither", "both"],
)
def test_image_part_needs_exactly_one_source(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="exactly one of url or data"):
        ImagePart(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "arguments"),
    [
        ('{"a": 1, "b": [true, null]}', {"a": 1, "b": [True, None]}),
        ("", {}),
        ("   ", {}),
        ('{"a": 1', '{"a": 1'),  # invalid JSON stays raw, so the model can be told what was wrong
        ("[1, 2]", "[1, 2]"),  # valid JSON but not an object
        ('"text"', '"text"'),
        ("null", "null"),
    ],
)
def test_tool_call_from_json(raw: str, arguments: object) -> None:
    call = ToolCall.from_json("c1", "f", raw)
    assert call.arguments == arguments
    assert (call.id, call.name) == ("c1", "f")


def test_arguments_json() -> None:
    assert ToolCall(id="c", name="f", arguments={"a": "é"}).arguments_json == '{"a":"é"}'
    assert ToolCall(id="c", name="f", arguments="{broken").arguments_json == "{broken"
    assert ToolCall(id="c", name="f").arguments_json == "{}"


@s.PROPERTY_SETTINGS
@given(call=s.tool_calls)
def test_arguments_json_parses_back(call: ToolCall) -> None:
    back = ToolCall.from_json(call.id, call.name, call.arguments_json)
    if isinstance(call.arguments, dict):
        assert back == call
    elif not call.arguments.strip():
        assert back.arguments == {}
    else:
        try:
            parsed = json.loads(call.arguments)
        except ValueError:
            parsed = None
        assert back.arguments == (parsed if isinstance(parsed, dict) else call.arguments)


@pytest.mark.parametrize("raw", ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}'])
def test_non_json_constants_keep_arguments_raw(raw: str) -> None:
    # Python's json accepts NaN and Infinity; JSON does not, and the codec could not store them.
    assert ToolCall.from_json("c", "f", raw).arguments == raw


def test_reasoning_rides_on_the_assistant_message_and_persists() -> None:
    from daimon.core import Reasoning
    from daimon.core.codec import dumps, loads

    reasoning = Reasoning(provider="openai-responses", data={"encrypted_content": "gAAA"})
    message = Message.assistant("", [ToolCall(id="c", name="t")], reasoning=[reasoning])
    assert message.reasoning == (reasoning,)
    assert Message.assistant("x").reasoning == ()
    assert loads(dumps(message), Message) == message
    # Messages written before reasoning existed read back without it.
    old = '{"daimon":1,"data":{"role":"assistant","content":"x","kind":"message"}}'
    assert loads(old, Message) == Message.assistant("x")


def test_signed_and_redacted_thinking_persist_unchanged_and_in_order() -> None:
    from daimon.core import Reasoning
    from daimon.core.codec import dumps, loads

    thinking = Reasoning(
        provider="anthropic",
        text="Weather first.",
        data={"type": "thinking", "thinking": "Weather first.", "signature": "EqQBCgIYAhIM"},
    )
    redacted = Reasoning(
        provider="anthropic", data={"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}
    )
    message = Message.assistant(
        "", [ToolCall(id="toolu_1", name="weather")], reasoning=[thinking, redacted]
    )
    back = loads(dumps(message), Message)
    assert back == message
    assert [r.data for r in back.reasoning] == [thinking.data, redacted.data]


@pytest.mark.parametrize("cls", [AudioPart, DocumentPart])
@pytest.mark.parametrize("kwargs", [{}, {"url": "https://x/a", "data": b"a"}])
def test_media_parts_need_exactly_one_source(cls: type, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="exactly one of url or data"):
        cls(**kwargs)


def test_media_and_text_of_a_message() -> None:
    image, doc = ImagePart(data=b"i"), DocumentPart.from_text("notes", name="n.txt")
    message = Message.user([TextPart(text="a"), image, CachePoint(), doc, TextPart(text="b")])
    assert message.text == "ab"
    assert message.media == (image, doc)
    assert doc.is_text and doc.data == b"notes" and doc.media_type == "text/plain"
    assert Message.user("x").media == ()
    tool = Message.tool("c1", [TextPart(text="see"), image], name="snap")
    assert tool.text == "see" and tool.media == (image,) and tool.role is Role.TOOL


@pytest.mark.parametrize(
    ("name", "cls", "media_type"),
    [
        ("cat.png", ImagePart, "image/png"),
        ("photo.JPG", ImagePart, "image/jpeg"),
        ("voice.wav", AudioPart, "audio/wav"),
        ("song.mp3", AudioPart, "audio/mpeg"),
        ("paper.pdf", DocumentPart, "application/pdf"),
        ("notes.txt", DocumentPart, "text/plain"),
        ("readme.md", DocumentPart, "text/markdown"),
    ],
)
def test_media_from_file(tmp_path: Path, name: str, cls: type, media_type: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"bytes")
    part = media_from_file(path)
    assert type(part) is cls
    assert (part.data, part.media_type) == (b"bytes", media_type)
    if isinstance(part, DocumentPart):
        assert part.name == name


def test_media_from_file_refuses_unknown_types(tmp_path: Path) -> None:
    path = tmp_path / "archive.zip"
    path.write_bytes(b"PK")
    with pytest.raises(ValueError, match=r"archive\.zip: cannot tell what kind of file"):
        media_from_file(path)
    assert media_from_file(path, media_type="text/plain").media_type == "text/plain"
    with pytest.raises(OSError):
        media_from_file(tmp_path / "missing.png")
