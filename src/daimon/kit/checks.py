"""Settings checks every component shares, so that a bad setting reads the same everywhere.

A setting is checked when its object is built: a wrong one raises :class:`BuilderError` naming
it. ``bool`` is refused where an ``int`` is expected (``True`` is an ``int`` to Python, not to a
user who wrote ``max_iterations=True``).
"""

from __future__ import annotations

import math

from daimon.core.errors import BuilderError

__all__ = ("check_non_negative", "check_positive", "check_seconds")


def check_positive(name: str, value: object, alternative: str = "") -> int:
    """``value`` if it is a positive int, else :class:`BuilderError` naming the setting ``name``.

    ``alternative`` completes the message when something else is accepted too (``"or None"``).
    """
    if type(value) is not int or value < 1:
        expected = f"a positive integer {alternative}".rstrip()
        raise BuilderError(f"{name} must be {expected}, got {value!r}")
    return value


def check_non_negative(name: str, value: object) -> int:
    """``value`` if it is an int of at least 0, else :class:`BuilderError` naming ``name``."""
    if type(value) is not int or value < 0:
        raise BuilderError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def check_seconds(name: str, value: object) -> float:
    """``value`` as seconds if it is a positive, finite number, else :class:`BuilderError`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise BuilderError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)
