"""Arguments are converted back to the declared Python types before the call."""

import datetime
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Annotated, Any, NotRequired, TypedDict

import pydantic
import pytest

from daimon.tools import ModelRetry, RunContext, tool


class Size(Enum):
    SMALL = "s"
    LARGE = "l"


@dataclass(frozen=True)
class Item:
    name: str
    size: Size = Size.SMALL


@dataclass
class Cart:
    items: list[Item]
    note: str | None = None
    tags: set[str] = field(default_factory=set)


class Options(TypedDict):
    size: Size
    label: NotRequired[str]


class Customer(pydantic.BaseModel):
    name: str
    vip: bool = False


@dataclass
class Branch:
    label: str
    children: "list[Branch]" = field(default_factory=list)


async def call(fn: Any, arguments: dict[str, Any], ctx: RunContext[None]) -> Any:
    """Run ``fn`` as a tool and return what the function received."""
    received: list[Any] = []

    def capture(**kwargs: Any) -> None:
        received.append(kwargs)

    fn_tool = tool(fn)
    original = fn_tool._call
    fn_tool._call = lambda *a, **kw: capture(**kw) or original(*a, **kw)
    await fn_tool.execute(arguments, ctx)
    return received[0]


async def test_dataclass_argument(ctx: RunContext[None]) -> None:
    def f(item: Item) -> None:
        return None

    got = await call(f, {"item": {"name": "pen", "size": "l"}}, ctx)
    assert got["item"] == Item(name="pen", size=Size.LARGE)


async def test_nested_dataclasses_sets_and_optionals(ctx: RunContext[None]) -> None:
    def f(cart: Cart) -> None:
        return None

    got = await call(f, {"cart": {"items": [{"name": "a"}], "tags": ["x", "x"]}}, ctx)
    assert got["cart"] == Cart(items=[Item(name="a")], tags={"x"})


async def test_pydantic_argument(ctx: RunContext[None]) -> None:
    def f(customer: Customer, others: list[Customer]) -> None:
        return None

    got = await call(f, {"customer": {"name": "ann"}, "others": [{"name": "bo", "vip": True}]}, ctx)
    assert got["customer"] == Customer(name="ann")
    assert got["others"] == [Customer(name="bo", vip=True)]


async def test_typeddict_argument_converts_its_fields(ctx: RunContext[None]) -> None:
    def f(options: Options) -> None:
        return None

    got = await call(f, {"options": {"size": "s"}}, ctx)
    assert got["options"] == {"size": Size.SMALL}


async def test_enum_and_containers(ctx: RunContext[None]) -> None:
    def f(
        size: Size,
        pair: tuple[int, int],
        many: tuple[Size, ...],
        unique: set[int],
        frozen: frozenset[str],
        by_name: dict[str, Size],
        mixed: tuple[Size, str],
    ) -> None:
        return None

    got = await call(
        f,
        {
            "size": "l",
            "pair": [1, 2],
            "many": ["s", "l"],
            "unique": [1, 2, 1],
            "frozen": ["a"],
            "by_name": {"a": "s"},
            "mixed": ["l", "x"],
        },
        ctx,
    )
    assert got == {
        "size": Size.LARGE,
        "pair": (1, 2),
        "many": (Size.SMALL, Size.LARGE),
        "unique": {1, 2},
        "frozen": frozenset({"a"}),
        "by_name": {"a": Size.SMALL},
        "mixed": (Size.LARGE, "x"),
    }
    assert type(got["frozen"]) is frozenset


async def test_strings_to_dates_and_uuids(ctx: RunContext[None]) -> None:
    def f(when: datetime.datetime, day: datetime.date, key: uuid.UUID) -> None:
        return None

    key = uuid.uuid4()
    got = await call(
        f, {"when": "2024-05-01T10:00:00+00:00", "day": "2024-05-02", "key": str(key)}, ctx
    )
    assert got["when"] == datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.UTC)
    assert got["day"] == datetime.date(2024, 5, 2)
    assert got["key"] == key


async def test_optional_and_union_members(ctx: RunContext[None]) -> None:
    def f(maybe: Item | None, either: Size | str, annotated: Annotated[Size, "a size"]) -> None:
        return None

    got = await call(f, {"maybe": None, "either": "other", "annotated": "s"}, ctx)
    assert got == {"maybe": None, "either": "other", "annotated": Size.SMALL}
    got = await call(f, {"maybe": {"name": "n"}, "either": "l", "annotated": "l"}, ctx)
    assert got == {"maybe": Item(name="n"), "either": Size.LARGE, "annotated": Size.LARGE}


async def test_recursive_dataclass(ctx: RunContext[None]) -> None:
    def f(tree: Branch) -> None:
        return None

    got = await call(f, {"tree": {"label": "a", "children": [{"label": "b"}]}}, ctx)
    assert got["tree"] == Branch(label="a", children=[Branch(label="b")])


async def test_plain_arguments_are_passed_through_untouched(ctx: RunContext[None]) -> None:
    def f(names: list[str], counts: dict[str, int], anything: Any) -> None:
        return None

    names = ["a"]
    got = await call(f, {"names": names, "counts": {"a": 1}, "anything": {"k": [1]}}, ctx)
    assert got["names"] is names
    assert got == {"names": ["a"], "counts": {"a": 1}, "anything": {"k": [1]}}


async def test_arguments_dict_is_not_modified(ctx: RunContext[None]) -> None:
    def f(item: Item, ctx: RunContext[None]) -> None:
        return None

    arguments = {"item": {"name": "a"}}
    await call(f, arguments, ctx)
    assert arguments == {"item": {"name": "a"}}


async def test_a_value_the_type_rejects_asks_the_model_to_retry(ctx: RunContext[None]) -> None:
    @tool
    def f(size: Size, item: Item) -> None:
        return None

    with pytest.raises(ModelRetry, match="invalid value for argument 'size'"):
        await f.execute({"size": "huge", "item": {"name": "a"}}, ctx)
    with pytest.raises(ModelRetry, match="invalid value for argument 'item'"):
        await f.execute({"size": "s", "item": {"title": "a"}}, ctx)
    with pytest.raises(ModelRetry, match="expected an object for Item, got str"):
        await f.execute({"size": "s", "item": "a"}, ctx)
