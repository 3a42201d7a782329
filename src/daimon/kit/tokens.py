"""Token estimates for messages, for anything that needs a budget without a tokenizer."""

from __future__ import annotations

import math
from collections.abc import Sequence

from daimon.core.errors import BuilderError
from daimon.core.messages import CachePoint, DocumentPart, Message, Role, TextPart
from daimon.core.protocols import TokenCounter
from daimon.kit.media import text_of

__all__ = ("CharacterTokenCounter", "message_tokens")

MESSAGE_OVERHEAD = 4
"""Tokens every message costs beyond its content (role and framing), whatever the tokenizer."""

IMAGE_TOKENS = 85
"""A floor for one image: what a low-detail image costs on OpenAI; real costs vary by provider."""


class CharacterTokenCounter:
    """Estimates tokens from text length: one token per ``chars_per_token`` characters.

    Needs no tokenizer and errs on the high side for English (about 4 characters a token).
    """

    __slots__ = ("_chars_per_token",)

    def __init__(self, chars_per_token: float = 4) -> None:
        if not chars_per_token > 0:
            raise BuilderError(f"chars_per_token must be positive, got {chars_per_token!r}")
        self._chars_per_token = chars_per_token

    @property
    def chars_per_token(self) -> float:
        """Characters counted as one token."""
        return self._chars_per_token

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is, rounded up."""
        return math.ceil(len(text) / self._chars_per_token)

    def __repr__(self) -> str:
        return f"CharacterTokenCounter(chars_per_token={self._chars_per_token!r})"


def message_tokens(message: Message, counter: TokenCounter) -> int:
    """Tokens one message costs: its text parts, images, tool-call names and arguments."""
    total = MESSAGE_OVERHEAD
    content = message.content
    if isinstance(content, str):
        total += counter.count_tokens(content)
    else:
        for part in content:
            if isinstance(part, TextPart):
                total += counter.count_tokens(part.text)
            elif isinstance(part, DocumentPart) and (text := text_of(part)) is not None:
                total += counter.count_tokens(text)
            elif not isinstance(part, CachePoint):  # an image, audio, a PDF: a rough fixed cost
                total += IMAGE_TOKENS
    for call in message.tool_calls:
        total += counter.count_tokens(call.name) + counter.count_tokens(call.arguments_json)
    return total


def token_window_start(messages: Sequence[Message], max_tokens: int, counter: TokenCounter) -> int:
    """Where the newest run of ``messages`` that fits ``max_tokens`` starts (for memories).

    The start is never a tool result, so the messages from it on hold no orphan result and no
    tool call without all its results: a group the budget cuts through is left out whole.
    """
    start = len(messages)
    total = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        total += message_tokens(message, counter)
        if total > max_tokens:
            break
        if message.role != Role.TOOL:
            start = index
    return start
