"""What every memory backend stores: one message as versioned JSON text, and back.

Part of the backend kit (:mod:`daimon.kit`), so that the backends share one encoding and one set of
checks: a message that could be written but never read back is refused before anything is written.
"""

from __future__ import annotations

from typing import Any

from daimon.core import codec
from daimon.core.errors import SerializationError
from daimon.core.messages import Message

__all__ = ("decode_message", "encode_message", "inner_sessions")


def encode_message(message: Message) -> str:
    """The message as JSON text that any UTF-8 store can hold and the codec reads back.

    Raises:
        SerializationError: It holds a value JSON cannot carry, text UTF-8 cannot (a lone
            surrogate), or something the codec refuses to read (see :mod:`daimon.core.codec`).
    """
    text = codec.dumps(message)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate cannot be stored as UTF-8
        raise SerializationError(f"cannot store the message as UTF-8: {exc.reason}") from exc
    codec.loads(text, Message)  # refuse what could be written but never read back (see codec)
    return text


def decode_message(session_id: str, index: int, payload: str | bytes) -> Message:
    """A stored message back; a :class:`SerializationError` names its session and position."""
    try:
        return codec.loads(payload, Message)
    except SerializationError as exc:
        raise SerializationError(f"session {session_id!r}, message {index}: {exc}") from exc


async def inner_sessions(inner: Any) -> list[str]:
    """The sessions of the memory a wrapping memory stores in.

    Raises:
        NotImplementedError: ``inner`` predates ``list_sessions`` (the server answers 501).
    """
    lister = getattr(inner, "list_sessions", None)
    if lister is None:
        raise NotImplementedError(f"{type(inner).__name__} cannot list its sessions")
    sessions: list[str] = await lister()
    return sessions
