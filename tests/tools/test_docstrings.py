from dataclasses import dataclass
from typing import Any, TypedDict

import pytest

from daimon.tools import tool
from daimon.tools._docstrings import parse_class_doc, parse_doc


def google(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    Uses the national service.

    Args:
        city (str): The city to look up,
            in English.
        days: How many days ahead.

    Returns:
        The forecast.

    Raises:
        ValueError: Unknown city.
    """
    return city


def numpy(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    Uses the national service.

    Parameters
    ----------
    city : str
        The city to look up,
        in English.
    days : int, optional
        How many days ahead.

    Returns
    -------
    str
        The forecast.
    """
    return city


def rest(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    Uses the national service.

    :param city: The city to look up,
        in English.
    :param days: How many days ahead.
    :returns: The forecast.
    :raises ValueError: Unknown city.
    """
    return city


@pytest.mark.parametrize("function", [google, numpy, rest], ids=["google", "numpy", "rest"])
def test_all_three_styles_give_descriptions(function: Any) -> None:
    built = tool(function)
    assert built.description == "Get the weather forecast.\n\nUses the national service."
    properties = built.parameters_schema["properties"]
    assert properties["city"]["description"] == "The city to look up, in English."
    assert properties["days"]["description"] == "How many days ahead."


def test_summary_only() -> None:
    assert parse_doc("Just this.").description == "Just this."
    assert parse_doc("Just this.").params == {}


@pytest.mark.parametrize("text", [None, "", "   \n  "])
def test_missing_docstring(text: str | None) -> None:
    parsed = parse_doc(text)
    assert parsed.description == ""
    assert parsed.params == {}


def test_parameters_missing_from_the_docstring_have_no_description() -> None:
    @tool
    def f(a: int, b: int) -> int:
        """Add.

        Args:
            a: First.
        """
        return a + b

    assert "description" not in f.parameters_schema["properties"]["b"]


def test_class_docstring_attributes_and_attribute_docstrings() -> None:
    @dataclass
    class Order:
        """An order.

        Attributes:
            item: What was ordered.
        """

        item: str
        quantity: int = 1
        """How many."""

    parsed = parse_class_doc(Order)
    assert parsed.description == "An order."
    assert parsed.params == {"item": "What was ordered.", "quantity": "How many."}


def test_generated_dataclass_docstring_is_not_a_description() -> None:
    @dataclass
    class Bare:
        value: int

    assert parse_class_doc(Bare).description == ""


def test_class_without_source_falls_back_to_its_docstring() -> None:
    Dynamic = TypedDict("Dynamic", {"a": int})  # noqa: UP013 - no class statement, no source
    Dynamic.__doc__ = "Made at runtime."
    assert parse_class_doc(Dynamic).description == "Made at runtime."
