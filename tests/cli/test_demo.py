"""The built-in calculator tool."""

from __future__ import annotations

import pytest

from daimon.cli.demo import calculator, evaluate


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("12.5 * 4 + 3", 53.0),
        ("(1 + 2) * 3", 9),
        ("-2 ** 2", -4),
        ("7 // 2 + 7 % 2", 4),
        ("2 ^ 10", 1024),
        ("6 \u00d7 7 \u00f7 2", 21.0),
        ("  1.5e3 / 3 ", 500.0),
    ],
)
def test_arithmetic(expression: str, value: float) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "empty"),
        ("__import__('os')", "only numbers"),
        ("x + 1", "only numbers"),
        ("True + 1", "only numbers"),
        ("'a' * 3", "only numbers"),
        ("1 +", "not an arithmetic expression"),
        ("1 / 0", "division by zero"),
        ("2 ** 10000", "exponents above"),
        ("(10 ** 300) ** 5", "too large"),
        ("1e308 * 10", "too large"),
        ("1" * 600, "longer than"),
    ],
)
def test_refuses_what_is_not_plain_arithmetic(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate(expression)


def test_it_is_a_tool() -> None:
    spec = calculator.spec
    assert spec.name == "calculator"
    assert spec.parameters["required"] == ["expression"]
    assert "12.5 * 4 + 3" in spec.parameters["properties"]["expression"]["description"]
    assert calculator("2 * 21") == 42


@pytest.mark.parametrize(
    ("expression", "value"),
    [("17 times 23", 391), ("144 Divided  by 12", 12.0), ("1000 minus 357", 643), ("2 plus 2", 4)],
)
def test_operators_may_be_words(expression: str, value: float) -> None:
    assert evaluate(expression) == value
