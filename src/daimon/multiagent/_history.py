"""History filters: what of the conversation so far an agent sees when it takes over."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

from daimon.core import BuilderError, Message, Role

__all__ = ("HistoryFilter", "keep_all", "last_n", "text_only")

HistoryFilter: TypeAlias = Callable[[Sequence[Message]], Sequence[Message]]
"""Takes the conversation so far (oldest first) and returns what the next agent should see."""


def text_only(messages: Sequence[Message]) -> list[Message]:
    """User and assistant text only: tool calls, tool results and system messages are dropped.

    The default filter. An assistant message that called tools keeps its text (if any) without
    the calls, so the history stays valid for any provider and the next agent is not shown calls
    to tools it does not have.
    """
    kept: list[Message] = []
    for message in messages:
        if message.role is Role.USER:
            kept.append(message)
        elif message.role is Role.ASSISTANT:
            if message.tool_calls:
                if message.text:
                    kept.append(Message.assistant(message.text))
            elif message.content:
                kept.append(message)
    return kept


def keep_all(messages: Sequence[Message]) -> list[Message]:
    """Everything, tool calls and results included (the next agent sees calls to others' tools)."""
    return list(messages)


def last_n(n: int) -> HistoryFilter:
    """A filter keeping the last ``n`` messages of :func:`text_only`'s view.

    Raises:
        BuilderError: ``n`` is not a non-negative integer.
    """
    if type(n) is not int or n < 0:
        raise BuilderError(f"last_n needs a non-negative integer, got {n!r}")

    def last(messages: Sequence[Message]) -> list[Message]:
        kept = text_only(messages)
        return kept[-n:] if n else []

    last.__name__ = last.__qualname__ = f"last_n({n})"
    return last
