"""A memory that compacts long conversations into a rolling summary instead of dropping them.

::

    from daimon.memory import SummarizingMemory
    from daimon.memory.sqlite import SQLiteMemory

    memory = SummarizingMemory(
        SQLiteMemory("chat.db"),   # the store: any Memory, it keeps every message
        model=summarizer_model,    # any Model; a small, cheap one is enough
        max_tokens=4000,           # the most history get_messages returns
        keep_last_tokens=1500,     # the newest messages, kept word for word
    )
    agent = Agent(model, memory=memory)
    ...
    memory.usage                   # what the summaries cost: not part of any run's usage

While a session fits ``max_tokens`` its messages come back untouched. Once it outgrows the budget,
the older part is condensed by ``model`` into one user message marked as a summary of the earlier
conversation, followed by the newest messages that fit ``keep_last_tokens``; the summary then
absorbs later messages only when the session outgrows the budget again, so the model is asked once
per compacted chunk, with the previous summary to fold the new messages into. The cut never
separates a tool call from its results.

Summaries are cached in process, per session (the :class:`~daimon.core.Memory` protocol has no
place for them besides the conversation itself): after a restart, or once a session falls out of
the cache, the next read summarizes that session once more. When the summarizer fails, the read
falls back to the newest messages that fit (as :class:`~daimon.memory.TokenWindowMemory` would)
and logs a warning: a run never fails because compaction did; the next read tries again.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from daimon.core.chat import ChatRequest, Usage
from daimon.core.errors import BuilderError
from daimon.core.ids import check_id
from daimon.core.messages import ImagePart, Message, Role
from daimon.core.protocols import Memory, Model, TokenCounter
from daimon.kit.checks import check_positive
from daimon.kit.memory_records import inner_sessions
from daimon.kit.tokens import CharacterTokenCounter, message_tokens, token_window_start

__all__ = ("DEFAULT_SUMMARY_INSTRUCTIONS", "SUMMARY_HEADER", "SummarizingMemory")

_log = logging.getLogger("daimon.memory.summary")

DEFAULT_SUMMARY_INSTRUCTIONS = (
    "You condense conversations between a user and an AI assistant. Write a summary the assistant "
    "can rely on instead of the original messages: keep the user's goals, the facts and "
    "preferences they gave, decisions made, tool results that still matter, and open questions "
    "or tasks; drop small talk and repetition. When a summary so far is given, merge the new "
    "messages into it and keep what still matters. Write terse prose or bullet points in the "
    "conversation's language, with no preamble."
)
"""The summarizer's default system prompt."""

SUMMARY_HEADER = "[Summary of the earlier conversation]"
"""The first line of the summary message, which marks it as a summary."""

_CLIP = 500
"""Characters of a tool result or of tool-call arguments the summarizer sees."""

_ANCHOR = 4
"""Messages after the summarized part kept to find its end again (one alone may repeat)."""


@dataclass(frozen=True, slots=True)
class _Summary:
    text: str
    covered: int
    """How many of the stored messages (as read when it was written) the summary stands for."""
    last: Message
    """The last message it stands for: finds its place again if the store dropped old messages."""
    following: tuple[Message, ...]
    """The first few messages after ``last`` as read then: a repeated ``last`` is not its place."""


def _clip(text: str, limit: int = _CLIP) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more chars]"


def _transcript(messages: Sequence[Message]) -> str:
    """Messages as plain text for a summarizer: ``role: text``, tool calls as ``name(args)``."""
    lines: list[str] = []
    for message in messages:
        if message.role is Role.TOOL:
            label = f"tool {message.name}" if message.name else "tool"
            failed = " (error)" if message.is_error else ""
            lines.append(f"{label} result{failed}: {_clip(message.text)}")
            continue
        text = message.text
        if not isinstance(message.content, str):
            images = sum(isinstance(part, ImagePart) for part in message.content)
            if images:
                text = f"{text} [{images} image{'s' if images > 1 else ''}]".lstrip()
        if text:
            lines.append(f"{message.role.value}: {text}")
        for call in message.tool_calls:
            lines.append(f"{message.role.value} called {call.name}({_clip(call.arguments_json)})")
    return "\n".join(lines)


def _locate(summary: _Summary, messages: Sequence[Message]) -> int | None:
    """Where the messages the summary does not cover start, or ``None`` when it fits no longer."""
    last, following = summary.last, summary.following
    # First where it was; then earlier: a store that keeps a window (a SlidingWindowMemory, say)
    # drops its oldest messages, moving the last covered message toward the start, never later.
    # The messages that followed it then are still there after it (newer ones are dropped last).
    for found in range(min(summary.covered - 1, len(messages) - 1 - len(following)), -1, -1):
        if messages[found] == last and all(
            messages[found + offset] == message for offset, message in enumerate(following, 1)
        ):
            return found + 1
    return None  # the store forgot every covered message, or the session was rewritten


class SummarizingMemory:
    """Wraps another memory and condenses what outgrows ``max_tokens`` into a summary.

    Args:
        inner: The memory that stores the messages; writes, ``clear`` and ``list_sessions``
            go to it. A store that keeps whole conversations (SQLite, Redis) suits it best.
        model: The summarizer, any :class:`~daimon.core.Model`.
        max_tokens: The most tokens :meth:`get_messages` returns, summary included.
        keep_last_tokens: Tokens of newest messages kept verbatim after a compaction; less than
            ``max_tokens``, and the gap between the two is how much a session grows before the
            summary is updated.
        summary_tokens: The summarizer's output limit (``max_tokens`` of its request).
        instructions: The summarizer's system prompt (default
            :data:`DEFAULT_SUMMARY_INSTRUCTIONS`).
        counter: Estimates tokens (default four characters a token), as for
            :class:`~daimon.memory.TokenWindowMemory`.
        cache_size: How many sessions' summaries are kept; the least recently read are dropped
            first (and re-summarized when read again).
    """

    __slots__ = (
        "_cache_size",
        "_counter",
        "_inner",
        "_instructions",
        "_keep_last_tokens",
        "_locks",
        "_max_tokens",
        "_model",
        "_summaries",
        "_summary_tokens",
        "_usage",
    )

    def __init__(
        self,
        inner: Memory,
        *,
        model: Model,
        max_tokens: int,
        keep_last_tokens: int,
        summary_tokens: int = 500,
        instructions: str | None = None,
        counter: TokenCounter | None = None,
        cache_size: int = 10_000,
    ) -> None:
        for name, value in (
            ("max_tokens", max_tokens),
            ("keep_last_tokens", keep_last_tokens),
            ("summary_tokens", summary_tokens),
            ("cache_size", cache_size),
        ):
            check_positive(name, value)
        if keep_last_tokens >= max_tokens:
            raise BuilderError(
                f"keep_last_tokens ({keep_last_tokens}) must be less than max_tokens "
                f"({max_tokens}): the summary needs room next to the kept messages"
            )
        if not callable(getattr(model, "generate", None)):
            raise BuilderError(f"model must be a Model with a generate() method, got {model!r}")
        if instructions is not None and (not isinstance(instructions, str) or not instructions):
            raise BuilderError(f"instructions must be a non-empty string, got {instructions!r}")
        if counter is None:
            counter = CharacterTokenCounter(chars_per_token=4)
        elif not isinstance(counter, TokenCounter):
            raise BuilderError(f"counter must have a count_tokens(text) method, got {counter!r}")
        self._inner = inner
        self._model = model
        self._max_tokens = max_tokens
        self._keep_last_tokens = keep_last_tokens
        self._summary_tokens = summary_tokens
        self._instructions = instructions or DEFAULT_SUMMARY_INSTRUCTIONS
        self._counter = counter
        self._cache_size = cache_size
        self._summaries: OrderedDict[str, _Summary] = OrderedDict()
        # A lock lives while a call holds or awaits it: no bookkeeping per session beyond that.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._usage = Usage()

    @property
    def inner(self) -> Memory:
        """The memory that stores the messages."""
        return self._inner

    @property
    def model(self) -> Model:
        """The summarizer."""
        return self._model

    @property
    def max_tokens(self) -> int:
        """The most tokens a read returns."""
        return self._max_tokens

    @property
    def keep_last_tokens(self) -> int:
        """Tokens of newest messages a compaction keeps verbatim."""
        return self._keep_last_tokens

    @property
    def usage(self) -> Usage:
        """Every summarizer call's usage so far; runs do not count it in their own usage."""
        return self._usage

    async def get_messages(self, session_id: str) -> list[Message]:
        """The session's history within ``max_tokens``: a summary first once it outgrew them."""
        check_id("session", session_id)
        async with self._lock(session_id):  # a second reader waits, then finds the new summary
            return await self._read(session_id)

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    async def _read(self, session_id: str) -> list[Message]:
        messages = await self._inner.get_messages(session_id)
        summary = self._summaries.get(session_id)
        start = 0
        if summary is not None:
            found = _locate(summary, messages)
            if found is None:
                del self._summaries[session_id]
                summary = None
            else:
                self._summaries.move_to_end(session_id)
                start = found
        head = [] if summary is None else [self._summary_message(summary.text)]
        if self._tokens(head) + self._tokens(messages[start:]) <= self._max_tokens:
            return self._fit(head, messages[start:])
        # Compact: everything before the newest keep_last_tokens joins the summary. The cut is a
        # window start, so it never lands between a tool call and its results.
        cut = start + token_window_start(messages[start:], self._keep_last_tokens, self._counter)
        if cut > start:
            previous = summary.text if summary is not None else None
            try:
                text = await self._summarize(previous, messages[start:cut])
            except Exception as exc:  # compaction is best effort: the run goes on without it
                _log.warning(
                    "summarizing session %r failed, keeping only its newest messages: %s: %s",
                    session_id,
                    type(exc).__name__,
                    exc,
                )
                return self._fit(head, messages[start:])
            following = tuple(messages[cut : cut + _ANCHOR])
            self._remember(session_id, _Summary(text, cut, messages[cut - 1], following))
            head = [self._summary_message(text)]
        return self._fit(head, messages[cut:])

    async def _summarize(self, previous: str | None, chunk: Sequence[Message]) -> str:
        sections = [] if previous is None else [f"Summary so far:\n{previous}"]
        sections.append(f"Conversation to summarize:\n{_transcript(chunk)}")
        request = ChatRequest(
            messages=(Message.system(self._instructions), Message.user("\n\n".join(sections))),
            max_tokens=self._summary_tokens,
        )
        response = await self._model.generate(request)
        self._usage = self._usage + response.usage
        text = response.text.strip()
        if not text:
            raise ValueError("the summarizer returned no text")
        return text

    def _remember(self, session_id: str, summary: _Summary) -> None:
        self._summaries[session_id] = summary
        self._summaries.move_to_end(session_id)
        while len(self._summaries) > self._cache_size:
            self._summaries.popitem(last=False)

    def _fit(self, head: list[Message], tail: Sequence[Message]) -> list[Message]:
        """``head`` and the newest of ``tail`` that fit ``max_tokens`` (no head if too big)."""
        budget = self._max_tokens - self._tokens(head)
        if budget < 0:  # a summary longer than the whole budget: better none than overflow
            head, budget = [], self._max_tokens
        return [*head, *tail[token_window_start(tail, budget, self._counter) :]]

    def _tokens(self, messages: Sequence[Message]) -> int:
        return sum(message_tokens(message, self._counter) for message in messages)

    @staticmethod
    def _summary_message(text: str) -> Message:
        # A user message, not a system one: some chat templates refuse a system message after the
        # first, and providers that hoist system messages would move it out of place.
        return Message.user(f"{SUMMARY_HEADER}\n{text}")

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages to the inner memory."""
        check_id("session", session_id)
        await self._inner.add_messages(session_id, messages)

    async def clear(self, session_id: str) -> None:
        """Forget the session in the inner memory, and its summary."""
        check_id("session", session_id)
        async with self._lock(session_id):  # not while a read may write the summary back
            self._summaries.pop(session_id, None)
            await self._inner.clear(session_id)

    async def list_sessions(self) -> list[str]:
        """The inner memory's sessions (``NotImplementedError`` when it cannot list them)."""
        return await inner_sessions(self._inner)

    def __repr__(self) -> str:
        return (
            f"SummarizingMemory({self._inner!r}, model={self._model!r}, "
            f"max_tokens={self._max_tokens}, keep_last_tokens={self._keep_last_tokens})"
        )
