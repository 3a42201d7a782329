"""A model's reasoning on Converse: ``reasoningContent`` blocks, kept and sent back as they came.

With extended thinking on, Claude's assistant turn that calls a tool must come back with its
``reasoningContent`` blocks (the text with its signature, or the redacted content) unchanged and
ahead of its ``toolUse`` blocks. They ride on
:attr:`Message.reasoning <daimon.core.messages.Message.reasoning>`, whose ``data`` is the
``reasoningContent`` member with the redacted bytes as base64 text (``data`` holds JSON only).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from daimon.core.events import ReasoningEvent
from daimon.core.messages import Message, Reasoning
from daimon.kit.media import b64

__all__ = ("PROVIDER_FORMAT", "ReasoningStream", "reasoning_from_block", "to_wire")

PROVIDER_FORMAT = "bedrock"
"""What :attr:`Reasoning.provider` says for Converse ``reasoningContent`` blocks."""

_REDACTED = "redactedContent"


def reasoning_from_block(content: Mapping[str, Any]) -> Reasoning:
    """A ``reasoningContent`` member as botocore gives it (redacted content as bytes)."""
    if _REDACTED in content:
        return Reasoning(provider=PROVIDER_FORMAT, data={_REDACTED: b64(content[_REDACTED])})
    text = dict(content.get("reasoningText") or {})
    return Reasoning(
        provider=PROVIDER_FORMAT, text=text.get("text") or "", data={"reasoningText": text}
    )


def to_wire(message: Message) -> list[dict[str, Any]]:
    """The ``reasoningContent`` blocks to send ahead of an assistant message's text and calls."""
    return [
        {"reasoningContent": _content(r.data)}
        for r in message.reasoning
        if r.provider == PROVIDER_FORMAT
    ]


def _content(data: Mapping[str, Any]) -> dict[str, Any]:
    if _REDACTED in data:
        return {_REDACTED: base64.b64decode(data[_REDACTED])}
    return {"reasoningText": dict(data["reasoningText"])}


class ReasoningStream:
    """Reasoning blocks of a ConverseStream, gathered from their deltas until the block stops."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[int, dict[str, Any]] = {}

    def add(self, index: int, delta: Mapping[str, Any]) -> None:
        """A ``reasoningContent`` delta: a piece of text, the signature or redacted content."""
        block = self._open.setdefault(index, {})
        if _REDACTED in delta:
            block[_REDACTED] = block.get(_REDACTED, b"") + delta[_REDACTED]
            return
        text = block.setdefault("reasoningText", {})
        if delta.get("text"):
            text["text"] = text.get("text", "") + delta["text"]
        if delta.get("signature"):
            text["signature"] = delta["signature"]

    def stop(self, index: int) -> ReasoningEvent | None:
        """The finished block at ``contentBlockStop``, if ``index`` is a reasoning block."""
        block = self._open.pop(index, None)
        return None if block is None else ReasoningEvent(reasoning=reasoning_from_block(block))
