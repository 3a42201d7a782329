"""Claude's thinking blocks: kept on the assistant message, sent back as they came.

With extended thinking on, an assistant turn that calls a tool must come back with its
``thinking`` blocks (signature included) and ``redacted_thinking`` blocks, unchanged and ahead
of its ``tool_use`` blocks: the API checks the signatures and refuses a history without them.
They ride on :attr:`Message.reasoning <daimon.core.messages.Message.reasoning>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daimon.core.events import ReasoningEvent
from daimon.core.messages import Message, Reasoning

__all__ = ("PROVIDER_FORMAT", "ThinkingStream", "is_thinking", "reasoning_from_block", "to_wire")

PROVIDER_FORMAT = "anthropic"
"""What :attr:`Reasoning.provider` says for thinking blocks of the Messages API."""

_FIELDS = {"thinking": ("type", "thinking", "signature"), "redacted_thinking": ("type", "data")}
"""The fields of each thinking block type that go back to the API."""


def is_thinking(block: Mapping[str, Any]) -> bool:
    """Whether a content block is a thinking or redacted thinking block."""
    return block.get("type") in _FIELDS


def reasoning_from_block(block: Mapping[str, Any]) -> Reasoning:
    """A thinking or redacted thinking block as a :class:`Reasoning`."""
    data = {key: block[key] for key in _FIELDS[block["type"]] if block.get(key) is not None}
    return Reasoning(provider=PROVIDER_FORMAT, text=block.get("thinking") or "", data=data)


def to_wire(message: Message) -> list[dict[str, Any]]:
    """The thinking blocks to send back ahead of an assistant message's text and tool calls."""
    return [dict(r.data) for r in message.reasoning if r.provider == PROVIDER_FORMAT]


class ThinkingStream:
    """Thinking blocks of a stream, gathered from their start, deltas and stop events."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[int, dict[str, Any]] = {}

    def start(self, index: int, block: Mapping[str, Any]) -> None:
        """A ``content_block_start`` of a thinking block (a redacted one arrives whole)."""
        self._open[index] = dict(block)

    def add(self, index: int, delta: Mapping[str, Any]) -> None:
        """A ``thinking_delta`` or ``signature_delta`` of an open block."""
        block = self._open.get(index)
        if block is None:
            return
        if delta.get("type") == "thinking_delta":
            block["thinking"] = (block.get("thinking") or "") + (delta.get("thinking") or "")
        elif delta.get("type") == "signature_delta":
            block["signature"] = delta.get("signature") or ""

    def stop(self, index: int) -> ReasoningEvent | None:
        """The finished block at ``content_block_stop``, if ``index`` is a thinking block."""
        block = self._open.pop(index, None)
        return None if block is None else ReasoningEvent(reasoning=reasoning_from_block(block))
