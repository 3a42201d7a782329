"""What a tool function returns becomes a ToolOutput."""

import datetime
import json
import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pydantic
import pytest

from daimon.core.tools import ToolOutput
from daimon.tools import RunContext, tool
from daimon.tools._output import to_output, to_plain


class Mood(Enum):
    HAPPY = "happy"


@dataclass
class Reading:
    value: float
    mood: Mood
    at: datetime.date


class Profile(pydantic.BaseModel):
    name: str
    when: datetime.datetime


def test_text_none_and_tool_output() -> None:
    assert to_output("hi") == ToolOutput.text("hi")
    assert to_output(None) == ToolOutput.text("")
    custom = ToolOutput(content="x", data=[1])
    assert to_output(custom) is custom
    assert to_output(Mood.HAPPY) == ToolOutput.text("happy")


class Name(str):
    pass


def test_str_subclass_is_text() -> None:
    out = to_output(Name("bo"))
    assert out.content == "bo"
    assert type(out.content) is str


@pytest.mark.parametrize(
    ("value", "data"),
    [
        (3, 3),
        (1.5, 1.5),
        (True, True),
        ([1, "a"], [1, "a"]),
        ((1, 2), [1, 2]),
        ({"a": {1, 2}}, {"a": [1, 2]}),
        ({Mood.HAPPY: 1}, {"happy": 1}),
        (
            Reading(value=1.0, mood=Mood.HAPPY, at=datetime.date(2024, 1, 2)),
            {"value": 1.0, "mood": "happy", "at": "2024-01-02"},
        ),
        (
            [Profile(name="a", when=datetime.datetime(2024, 1, 2, 3))],
            [{"name": "a", "when": "2024-01-02T03:00:00"}],
        ),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
    ],
)
def test_everything_else_is_json(value: Any, data: Any) -> None:
    out = to_output(value)
    assert out.data == data
    assert json.loads(out.content) == data
    assert not out.is_error


def test_to_plain_leaves_unknown_objects_for_the_json_fallback() -> None:
    marker = object()
    assert to_plain(marker) is marker
    assert to_output(marker).content == json.dumps(str(marker))


async def test_function_results_are_converted(ctx: RunContext[None]) -> None:
    @tool
    async def reading() -> Reading:
        """A test tool: reading."""
        return Reading(value=2.0, mood=Mood.HAPPY, at=datetime.date(2024, 1, 1))

    @tool
    def nothing() -> None:
        """A test tool: nothing."""
        return None

    out = await reading.execute({}, ctx)
    assert out.data == {"value": 2.0, "mood": "happy", "at": "2024-01-01"}
    assert (await nothing.execute({}, ctx)).content == ""


def test_media_parts_become_a_result_with_media() -> None:
    from daimon.core.messages import AudioPart, DocumentPart, ImagePart, TextPart

    image = ImagePart(data=b"png")
    assert to_output(image) == ToolOutput(content="", media=(image,))
    doc = DocumentPart.from_text("x")
    mixed = to_output([TextPart(text="a"), image, TextPart(text="b"), doc])
    assert (mixed.content, mixed.media) == ("ab", (image, doc))
    assert ToolOutput.with_media(AudioPart(data=b"a"), text="t").media == (AudioPart(data=b"a"),)
    # A list with anything else in it is data, as before.
    assert to_output([1, 2]).content == "[1, 2]"
    with pytest.raises(TypeError, match="ToolOutput media must be"):
        ToolOutput(content="", media=("not a part",))  # type: ignore[arg-type]
