"""JSON Schema from type hints (evaluated annotations; see test_decorator for string ones)."""

import datetime
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Annotated, Any, Literal, NewType, NotRequired, Optional, Required, TypedDict

import fastjsonschema
import pydantic
import pytest

from daimon.core.errors import BuilderError
from daimon.tools import _schema as schema_module
from daimon.tools import tool


def props(fn: Any) -> dict[str, Any]:
    """The schema of the single parameter of ``fn``."""
    built = tool(fn)
    (value,) = built.parameters_schema["properties"].values()
    return dict(value)


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Level(IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Point:
    """A point on the plane.

    Attributes:
        x: Horizontal position.
    """

    x: int
    y: int = 0
    """Vertical position."""
    tags: list[str] = field(default_factory=list)
    cached: int = field(default=0, init=False)


@dataclass
class Segment:
    start: Point
    end: Point


@dataclass
class Node:
    value: int
    children: "list[Node]" = field(default_factory=list)


class Movie(TypedDict):
    """A movie."""

    title: str
    year: NotRequired[int]


class Partial(TypedDict, total=False):
    name: str
    id: Required[int]


class Address(pydantic.BaseModel):
    city: str


class Person(pydantic.BaseModel):
    name: str
    address: Address
    age: int = 0


def test_top_level_object() -> None:
    @tool
    def f(a: str, b: int = 3) -> None:
        return None

    assert f.parameters_schema == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer", "default": 3}},
        "required": ["a"],
        "additionalProperties": False,
    }


def test_no_parameters() -> None:
    @tool
    def f() -> None:
        """A test tool: f."""
        return None

    assert f.parameters_schema == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (Any, {}),
        (datetime.datetime, {"type": "string", "format": "date-time"}),
        (datetime.date, {"type": "string", "format": "date"}),
        (uuid.UUID, {"type": "string", "format": "uuid"}),
        (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045
        (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (Sequence[str], {"type": "array", "items": {"type": "string"}}),
        (list, {"type": "array"}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {
                "type": "array",
                "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (
            tuple[int, int],
            {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        ),
        (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        (frozenset[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (Mapping[str, Any], {"type": "object"}),
        (dict, {"type": "object"}),
        (Literal["a", "b"], {"enum": ["a", "b"], "type": "string"}),
        (Literal[1, "a"], {"enum": [1, "a"]}),
        (Literal[Color.RED], {"enum": ["red"], "type": "string"}),
        (Color, {"enum": ["red", "green"], "type": "string"}),
        (Level, {"enum": [1, 2], "type": "integer"}),
        (Annotated[int, "How many."], {"type": "integer", "description": "How many."}),
        (NewType("UserId", int), {"type": "integer"}),
    ],
)
def test_hint_schemas(hint: Any, expected: dict[str, Any]) -> None:
    def f(x):  # type: ignore[no-untyped-def]
        return x

    f.__annotations__ = {"x": hint}
    assert props(f) == expected


def test_unannotated_parameter_accepts_anything() -> None:
    def f(x):  # type: ignore[no-untyped-def]
        """Take anything."""
        return x

    assert props(f) == {}


def test_optional_with_default_is_not_required() -> None:
    @tool
    def f(x: int | None = None) -> None:
        return None

    assert f.parameters_schema["properties"]["x"]["default"] is None
    assert "required" not in f.parameters_schema


def test_defaults_become_plain_json() -> None:
    @tool
    def f(
        color: Color = Color.GREEN,
        pair: tuple[int, int] = (1, 2),
        marker: object = object(),  # not JSON: no default in the schema
    ) -> None:
        return None

    properties = f.parameters_schema["properties"]
    assert properties["color"]["default"] == "green"
    assert properties["pair"]["default"] == [1, 2]
    assert "default" not in properties["marker"]
    assert "required" not in f.parameters_schema


def test_dataclass_goes_to_defs() -> None:
    @tool
    def f(point: Point) -> None:
        return None

    assert f.parameters_schema["properties"]["point"] == {"$ref": "#/$defs/Point"}
    assert f.parameters_schema["$defs"] == {
        "Point": {
            "type": "object",
            "properties": {
                "x": {"type": "integer", "description": "Horizontal position."},
                "y": {"type": "integer", "description": "Vertical position.", "default": 0},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["x"],
            "additionalProperties": False,
            "description": "A point on the plane.",
        }
    }


def test_shared_dataclass_is_defined_once() -> None:
    @tool
    def f(segment: Segment, origin: Point) -> None:
        return None

    defs = f.parameters_schema["$defs"]
    assert set(defs) == {"Segment", "Point"}
    assert defs["Segment"]["properties"]["start"] == {"$ref": "#/$defs/Point"}
    assert f.parameters_schema["properties"]["origin"] == {"$ref": "#/$defs/Point"}


def test_recursive_dataclass_refers_to_itself() -> None:
    @tool
    def f(tree: Node) -> None:
        return None

    node = f.parameters_schema["$defs"]["Node"]
    assert node["properties"]["children"] == {"type": "array", "items": {"$ref": "#/$defs/Node"}}
    validate = fastjsonschema.compile(f.parameters_schema)
    validate({"tree": {"value": 1, "children": [{"value": 2}]}})
    with pytest.raises(fastjsonschema.JsonSchemaValueException):
        validate({"tree": {"value": 1, "children": [{"value": "x"}]}})


def _another_point() -> type[Any]:
    @dataclass
    class Point:
        z: int

    return Point


def test_two_classes_with_one_name_get_distinct_defs() -> None:
    other = _another_point()

    @tool
    def f(a: Point, b: other) -> None:  # type: ignore[valid-type]
        return None

    defs = f.parameters_schema["$defs"]
    assert len(defs) == 2
    refs = {p["$ref"] for p in f.parameters_schema["properties"].values()}
    assert refs == {f"#/$defs/{name}" for name in defs}


def test_typeddict_required_and_optional_keys() -> None:
    @tool
    def f(movie: Movie, partial: Partial) -> None:
        return None

    defs = f.parameters_schema["$defs"]
    assert defs["Movie"] == {
        "type": "object",
        "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["title"],
        "additionalProperties": False,
        "description": "A movie.",
    }
    assert defs["Partial"]["required"] == ["id"]


def test_pydantic_model_uses_its_own_schema_with_hoisted_defs() -> None:
    @tool
    def f(person: Person) -> None:
        return None

    schema = f.parameters_schema
    assert schema["properties"]["person"] == {"$ref": "#/$defs/Person"}
    assert schema["$defs"]["Person"]["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert schema["$defs"]["Address"]["required"] == ["city"]
    assert "$defs" not in schema["$defs"]["Person"]
    fastjsonschema.compile(schema)({"person": {"name": "a", "address": {"city": "b"}}})


def test_annotated_description_wins_over_the_docstring() -> None:
    @tool
    def f(x: Annotated[int, "From Annotated."], y: int) -> None:
        """Do it.

        Args:
            x: From the docstring.
            y: Only the docstring.
        """

    properties = f.parameters_schema["properties"]
    assert properties["x"]["description"] == "From Annotated."
    assert properties["y"]["description"] == "Only the docstring."


def test_annotated_field_object_with_a_description() -> None:
    @tool
    def f(x: Annotated[int, pydantic.Field(description="A count.")]) -> None:
        return None

    assert f.parameters_schema["properties"]["x"]["description"] == "A count."


@pytest.mark.parametrize(
    ("hint", "shown"),
    [
        (bytes, "bytes"),
        (complex, "complex"),
        (list[bytes], "bytes"),
        (dict[int, str], "dict[int, str]"),
        (Literal[b"x"], "Literal"),
    ],
)
def test_unsupported_hint_names_the_parameter_and_the_type(hint: Any, shown: str) -> None:
    def f(payload):  # type: ignore[no-untyped-def]
        return payload

    f.__annotations__ = {"payload": hint}
    with pytest.raises(BuilderError) as caught:
        tool(f)
    assert "'payload'" in str(caught.value)
    assert shown in str(caught.value)


def test_every_schema_uses_only_keywords_both_drafts_know() -> None:
    allowed = {
        "type", "properties", "required", "additionalProperties", "items", "enum", "anyOf",
        "minItems", "maxItems", "uniqueItems", "description", "default", "format", "$ref",
        "$defs",
    }  # fmt: skip

    @tool
    def everything(
        a: str,
        b: int | None,
        c: list[Point],
        d: tuple[int, str],
        e: set[str],
        f: dict[str, Node],
        g: Literal["x"],
        h: Color,
        i: Movie,
        j: Annotated[float, "j"] = 1.0,
    ) -> None:
        return None

    def keywords(value: Any, inside_properties: bool = False) -> set[str]:
        found: set[str] = set()
        if isinstance(value, dict):
            for key, item in value.items():
                if not inside_properties:
                    found.add(key)
                found |= keywords(item, key in ("properties", "$defs") and not inside_properties)
        elif isinstance(value, list):
            for item in value:
                found |= keywords(item)
        return found

    schema = everything.parameters_schema
    assert keywords(schema) <= allowed
    json.dumps(schema)
    fastjsonschema.compile(schema)


def test_schema_is_built_once_at_decoration_not_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Any] = []
    original = schema_module.SchemaBuilder.schema

    def counting(self: Any, hint: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(hint)
        return original(self, hint, **kwargs)

    monkeypatch.setattr(schema_module.SchemaBuilder, "schema", counting)

    @tool
    def f(x: int, p: Point) -> int:
        return x

    built = len(calls)
    assert built > 0
    for _ in range(3):
        assert f(1, Point(x=1)) == 1
        f.spec  # noqa: B018
        f.parameters_schema  # noqa: B018
    assert len(calls) == built
