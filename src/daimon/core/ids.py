"""The one check every id passes before a backend stores or sends it.

Session, run and task ids name keys, files, subjects and rows in every backend. Each backend
calls :func:`check_id` at its boundary, so a bad id fails the same way everywhere, with an
:class:`~daimon.core.errors.InvalidIdError` naming the id, before anything is written.
"""

from __future__ import annotations

from typing import Literal

from daimon.core.errors import InvalidIdError

__all__ = ("IdKind", "MAX_ID_BYTES", "check_id")

IdKind = Literal["session", "run", "task"]
"""What an id names."""

MAX_ID_BYTES = 1024
"""The longest id, in UTF-8 bytes: every backend can hold one this long."""


def check_id(kind: IdKind, value: object) -> str:
    """``value`` if it can name a ``kind`` in any backend.

    An id is a non-empty string of valid Unicode text (no lone surrogate), without NUL, of at
    most :data:`MAX_ID_BYTES` bytes in UTF-8.

    Raises:
        InvalidIdError: It cannot; the message names the id and what is wrong with it.
    """
    # The common case, ASCII text, in one cheap test; anything else takes the slow checks.
    if (
        isinstance(value, str)
        and value.isascii()
        and 0 < len(value) <= MAX_ID_BYTES
        and "\0" not in value
    ):
        return value
    return _refuse(kind, value)


def _refuse(kind: IdKind, value: object) -> str:
    """``value`` when the slow checks pass (non-ASCII text); the error otherwise."""
    if not isinstance(value, str):
        raise InvalidIdError(kind, value, f"expected a string, got {type(value).__name__}")
    if not value:
        raise InvalidIdError(kind, value, "it is empty")
    if "\0" in value:
        raise InvalidIdError(kind, value, "it contains a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidIdError(
            kind, value, "it is not valid Unicode text (it holds a lone surrogate)"
        ) from None
    if size > MAX_ID_BYTES:
        raise InvalidIdError(kind, value, f"it is {size} bytes long; the limit is {MAX_ID_BYTES}")
    return value
