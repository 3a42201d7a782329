"""The built-in demo tool: a calculator, ``daimon run --tool daimon.cli.demo:calculator``.

It evaluates arithmetic safely: the expression is parsed, never ``eval``-ed, and only numbers,
the four operations (as symbols or the words plus, minus, times,
multiplied by, divided by), ``//``, ``%``, ``**`` (small exponents) and parentheses are accepted.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

from daimon.tools import tool

__all__ = ("calculator", "evaluate")

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_WORD_OPERATORS = {
    "plus": "+",
    "minus": "-",
    "times": "*",
    "multiplied by": "*",
    "divided by": "/",
}
"""Operators written as words, as a small model copies them from the question."""
_WORDS = re.compile(r"\b(?:plus|minus|times|multiplied\s+by|divided\s+by)\b", re.IGNORECASE)
_MAX_EXPONENT = 1000
_MAX_LENGTH = 500
_MAX_BITS = 1024


def evaluate(expression: str) -> float:
    """The value of an arithmetic expression such as ``"12.5 * 4 + 3"``.

    Raises:
        ValueError: The expression is not plain arithmetic, or cannot be computed.
    """
    text = expression.strip().replace("\u00d7", "*").replace("\u00f7", "/").replace("^", "**")
    text = _WORDS.sub(lambda match: _WORD_OPERATORS[" ".join(match[0].lower().split())], text)
    if not text:
        raise ValueError("the expression is empty")
    if len(text) > _MAX_LENGTH:
        raise ValueError(f"the expression is longer than {_MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    except OverflowError:
        raise ValueError("the result is too large") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("the result is too large")
    return value


def _eval(node: ast.expr) -> float:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ValueError(f"exponents above {_MAX_EXPONENT} are not allowed")
        value = _BINARY[type(node.op)](left, right)
        if isinstance(value, int) and value.bit_length() > _MAX_BITS:
            raise OverflowError
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ValueError(f"only numbers and + - * / // % ** ( ) are allowed, not {ast.unparse(node)!r}")


@tool
def calculator(expression: str) -> float:
    """Evaluate an arithmetic expression and return the number.

    Args:
        expression: The arithmetic to compute, written with numbers and + - * / ** ( ),
            e.g. "12.5 * 4 + 3".
    """
    return evaluate(expression)
