"""In-process conversation windows: the last N messages, or the newest that fit a token budget.

Both windows cut only where a provider will accept the history that is left: never on a tool
result. A window therefore never starts with orphan ``Role.TOOL`` messages, and never holds an
assistant message's tool calls without their results: when the cut lands inside such a group the
whole group is left out, so a window may be shorter than its limit.
"""

from __future__ import annotations

from collections.abc import Sequence

from daimon.core.errors import BuilderError
from daimon.core.ids import check_id
from daimon.core.messages import Message, Role
from daimon.core.protocols import Memory, TokenCounter
from daimon.kit.checks import check_positive
from daimon.kit.memory_records import inner_sessions
from daimon.kit.tokens import CharacterTokenCounter, token_window_start

__all__ = ("SlidingWindowMemory", "TokenWindowMemory")


def _count_window_start(messages: Sequence[Message], max_messages: int) -> int:
    """Where the newest window of at most ``max_messages`` messages starts."""
    # A tool result always directly follows its call or a sibling result, so the first non-tool
    # message at or after the cut begins a window holding every group whole.
    end = len(messages)
    start = max(end - max_messages, 0)
    while start < end and messages[start].role == Role.TOOL:
        start += 1
    return start


class SlidingWindowMemory:
    """Keeps each session's most recent ``max_messages`` messages in process memory.

    Nothing persists across restarts. Storage per session stays bounded: older messages are
    dropped as new ones arrive.
    """

    __slots__ = ("_max_messages", "_sessions")

    def __init__(self, max_messages: int = 50) -> None:
        self._max_messages = check_positive("max_messages", max_messages)
        self._sessions: dict[str, list[Message]] = {}

    @property
    def max_messages(self) -> int:
        """The most messages a window holds."""
        return self._max_messages

    # No method awaits between reading and writing a session, so concurrent tasks on one event
    # loop cannot interleave inside an update: no lock is needed.

    async def get_messages(self, session_id: str) -> list[Message]:
        """The session's newest messages, oldest first: at most ``max_messages`` of them."""
        check_id("session", session_id)
        stored = self._sessions.get(session_id)
        if not stored:
            return []
        return stored[_count_window_start(stored, self._max_messages) :]

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages to the session, atomically."""
        check_id("session", session_id)
        if not messages:
            return
        stored = self._sessions.setdefault(session_id, [])
        stored.extend(messages)
        if len(stored) > self._max_messages:
            # Whatever lies before today's window can never re-enter a later one: later windows
            # start no earlier, and the messages skipped at the cut are tool results.
            del stored[: _count_window_start(stored, self._max_messages)]

    async def clear(self, session_id: str) -> None:
        """Forget the session."""
        check_id("session", session_id)
        self._sessions.pop(session_id, None)

    async def list_sessions(self) -> list[str]:
        """Ids of the sessions that hold messages, sorted."""
        return sorted(key for key, stored in self._sessions.items() if stored)

    def __repr__(self) -> str:
        return f"SlidingWindowMemory(max_messages={self._max_messages})"


class TokenWindowMemory:
    """Wraps another memory and returns the newest messages that fit ``max_tokens``.

    Tokens are estimated with ``counter`` (by default four characters a token) plus a small
    overhead per message; text parts, tool-call names and argument JSON all count. Writes go to
    the inner memory untouched.
    """

    __slots__ = ("_counter", "_inner", "_max_tokens")

    def __init__(self, inner: Memory, max_tokens: int, counter: TokenCounter | None = None) -> None:
        self._inner = inner
        self._max_tokens = check_positive("max_tokens", max_tokens)
        if counter is None:
            counter = CharacterTokenCounter(chars_per_token=4)
        elif not isinstance(counter, TokenCounter):
            raise BuilderError(f"counter must have a count_tokens(text) method, got {counter!r}")
        self._counter = counter

    @property
    def inner(self) -> Memory:
        """The memory that stores the messages."""
        return self._inner

    @property
    def max_tokens(self) -> int:
        """The token budget of a window."""
        return self._max_tokens

    async def get_messages(self, session_id: str) -> list[Message]:
        """The session's newest messages that fit the budget, oldest first."""
        check_id("session", session_id)
        messages = await self._inner.get_messages(session_id)
        return messages[token_window_start(messages, self._max_tokens, self._counter) :]

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages to the inner memory."""
        check_id("session", session_id)
        await self._inner.add_messages(session_id, messages)

    async def clear(self, session_id: str) -> None:
        """Forget the session in the inner memory."""
        check_id("session", session_id)
        await self._inner.clear(session_id)

    async def list_sessions(self) -> list[str]:
        """The inner memory's sessions (``NotImplementedError`` when it cannot list them)."""
        return await inner_sessions(self._inner)

    def __repr__(self) -> str:
        return (
            f"TokenWindowMemory({self._inner!r}, max_tokens={self._max_tokens}, "
            f"counter={self._counter!r})"
        )
